"""The cudackpt drain client for PyTorch (drain protocol, version 1).

A training loop calls :meth:`Drain.point` at every step boundary::

    import cudackpt_drain

    drain = cudackpt_drain.Drain()          # after init_process_group
    for batch in loader:
        train_step(batch)
        drain.point()                       # cudackpt suspend --drain

When ``cudackpt suspend --drain`` (or ``toggle``, ``lock``) asks, every rank
agrees at the same step, takes down every process group's communicators
(NCCL communicators over P2P or shared memory cannot be restored by the
driver), empties
PyTorch's caching allocator and runs the ``on_release`` hooks (the driver
checkpoints every byte reserved, so what is released is not copied), names
one thread ``cudackpt-drain1`` to acknowledge, and waits. cudackpt then
checkpoints it; after ``cudackpt resume`` it asks again, and each rank
builds its communicators again on the job's store under a fresh prefix,
proves each group with an all-reduce, and returns.

A job that starts its groups with :func:`init_process_group` (or calls
:func:`install` before its framework does) keeps every group object
through a drain (:mod:`cudackpt_drain.groups`): DDP with its buckets,
FSDP2, DeviceMesh and DTensor go on with no code in ``on_rebuild``. A job
that uses ``torch.distributed.init_process_group`` directly gets a new
default group instead, and what held the old one must be rebuilt in
``on_rebuild``.

Nothing here needs more than torch and the standard library.
"""

from __future__ import annotations

from . import groups
# _Group and _fork_hooks are the tests' (a GPU job pauses a release; a test
# reads which prefixes the fork hook drops).
from .drain import Drain, _Group  # noqa: F401
from .forks import (
    DEVICE_PREFIX,
    _fork_hooks,  # noqa: F401
    drop_inherited_gpu,
    drop_inherited_sockets,
    keep_forks_dumpable,
    release_compile_workers,
)
from ._torch_private import TorchMissing, require_torch
from .groups import init_process_group, install
from .protocol import (
    DEFAULT_SIGNAL,
    ERROR_MEMFD,
    FAIL_MARKER,
    MARKER,
    VERSION,
    dump_notice_signal,
    parse_signal,
)

__all__ = [
    "Drain",
    "init_process_group",
    "install",
    "groups",
    "MARKER",
    "FAIL_MARKER",
    "ERROR_MEMFD",
    "DEFAULT_SIGNAL",
    "VERSION",
    "DEVICE_PREFIX",
    "parse_signal",
    "dump_notice_signal",
    "keep_forks_dumpable",
    "drop_inherited_gpu",
    "drop_inherited_sockets",
    "release_compile_workers",
    "require_torch",
    "TorchMissing",
]
