"""The transformers ``Trainer``: ``DrainCallback`` drains the job at step
boundaries.

::

    from cudackpt_drain.transformers import DrainCallback   # before TrainingArguments
    trainer = Trainer(model, args, callbacks=[DrainCallback()], ...)

Importing this module installs the client (:func:`cudackpt_drain.install`),
so the groups that ``TrainingArguments`` starts (through accelerate) are
kept through a drain: import it before ``TrainingArguments(...)``, which
starts the process group. The callback makes its
:class:`cudackpt_drain.Drain` when training begins (its options are the
Drain's) and calls :meth:`~cudackpt_drain.Drain.point` at the end of every
optimizer step, on every rank alike."""

from __future__ import annotations

from transformers import TrainerCallback

from . import install
from ._framework import Points

install()


class DrainCallback(TrainerCallback):
    """Calls the drain's point at the end of every step."""

    def __init__(self, **drain_options) -> None:
        self._points = Points("the transformers Trainer", "transformers", drain_options)

    @property
    def drain(self):
        """The :class:`cudackpt_drain.Drain`, once training began."""
        return self._points.drain

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ARG002 (the Trainer's signature)
        self._points.start()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ARG002
        self._points.point()
