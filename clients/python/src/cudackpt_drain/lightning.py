"""PyTorch Lightning: ``DrainCallback`` drains the job at step boundaries.

::

    from cudackpt_drain.lightning import DrainCallback   # before the Trainer
    trainer = Trainer(strategy="ddp", callbacks=[DrainCallback()])

Importing this module installs the client (:func:`cudackpt_drain.install`),
so the groups Lightning starts are kept through a drain: the model's DDP,
FSDP or ModelParallel wrapper goes on with no ``on_rebuild`` code. The
callback makes its :class:`cudackpt_drain.Drain` when training starts (its
options are the Drain's) and calls :meth:`~cudackpt_drain.Drain.point`
after every training batch, on every rank alike. It derives from the
``Callback`` of whichever of ``lightning`` and ``pytorch_lightning`` is
installed (both, when both are), so either Trainer takes it."""

from __future__ import annotations

from . import install
from ._framework import Points


def _callback_bases() -> tuple:
    bases = []
    try:
        from lightning.pytorch import Callback

        bases.append(Callback)
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback

        if Callback not in bases:
            bases.append(Callback)
    except ImportError:
        pass
    if not bases:
        raise ImportError("cudackpt_drain.lightning needs lightning or pytorch_lightning installed")
    return tuple(bases)


install()


class DrainCallback(*_callback_bases()):
    """Calls the drain's point after every training batch."""

    def __init__(self, **drain_options) -> None:
        super().__init__()
        self._points = Points("Lightning", "lightning", drain_options)

    @property
    def drain(self):
        """The :class:`cudackpt_drain.Drain`, once training started."""
        return self._points.drain

    def on_train_start(self, trainer, pl_module) -> None:  # noqa: ARG002 (Lightning's signature)
        self._points.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ARG002
        self._points.point()
