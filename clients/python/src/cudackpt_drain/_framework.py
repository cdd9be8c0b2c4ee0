"""What the framework callbacks share: the check that the job's groups are
ones a drain keeps, and the drain made once the framework has started
them."""

from __future__ import annotations

from typing import Optional

from . import groups


def check_groups_kept(framework: str, place: str) -> None:
    """Raises when the job's default process group was started before
    :func:`cudackpt_drain.install` (torch's own group, which a drain would
    destroy under the framework's wrapped model), saying where to import
    the callback instead. Nothing to check in a job without one."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return
    if groups.live_groups():
        return
    raise RuntimeError(
        f"cudackpt_drain: the job's process group was started before cudackpt_drain was installed, so a drain "
        f"would replace it under {framework}'s model; import cudackpt_drain.{place} (or call "
        "cudackpt_drain.install()) before the framework starts its process group"
    )


class Points:
    """A :class:`cudackpt_drain.Drain` made at the start of training (the
    process group is up by then), and its points."""

    def __init__(self, framework: str, place: str, options: dict) -> None:
        self._framework = framework
        self._place = place
        self._options = dict(options)
        self.drain: Optional[object] = None

    def start(self) -> None:
        check_groups_kept(self._framework, self._place)
        if self.drain is None:
            from . import Drain

            self.drain = Drain(**self._options)

    def point(self) -> bool:
        if self.drain is None:
            self.start()
        return self.drain.point()
