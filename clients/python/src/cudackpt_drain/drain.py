"""The drain itself: :class:`Drain`, what a training loop calls at every
step boundary, and what a rank does when asked (agree with the other
ranks, release its process groups and cached memory, acknowledge, wait,
rebuild and prove each group)."""

from __future__ import annotations

import os
import signal as signals
import sys
import time
import warnings
from typing import Callable, List, Optional

from . import groups
from . import forks
from .marker import _Marker
from .protocol import _POLL_SECONDS, _signal_from_env, dump_notice_signal

class Drain:
    """Answers cudackpt's drain requests at the points the loop chooses.

    Construct it in the main thread (Python installs signal handlers only
    there), after ``torch.distributed.init_process_group`` when the job has
    one. ``on_release`` callbacks run after the process groups are
    destroyed and the caching allocator emptied: drop there what the job
    can build again (a KV cache, CUDA tensors shared with other processes,
    an optimizer's scratch), and the allocator is emptied once more so
    that those bytes are not checkpointed either. ``on_rebuild`` callbacks
    run once the default group is back (wrap the model in DDP again, make
    subgroups again, allocate the KV cache again). ``every`` checks for a
    request at one point in that many: the check is one all-reduce of a
    single number, and every rank must call :meth:`point` the same number
    of times. ``dumpable_forks`` (on unless False) makes children
    forked from then on drop what they inherit from the GPU
    (:func:`~cudackpt_drain.forks.keep_forks_dumpable`), so that CRIU can dump the job; every
    drain that serves a dump also shuts down ``torch.compile``'s compile
    workers (:func:`~cudackpt_drain.forks.release_compile_workers`) for the same reason: cudackpt
    says so with the dump notice (:func:`dump_notice_signal`) before its
    request, and :attr:`for_dump` is then true for the ``on_release``
    hooks. A suspend keeps the pool (shutting it down and starting it
    again costs seconds). A job that already handles the notice's signal
    keeps its handler, and the pool is then shut down at every drain.
    """

    def __init__(
        self,
        signal: Optional[int] = None,
        on_release: Optional[List[Callable[[], None]]] = None,
        on_rebuild: Optional[List[Callable[[], None]]] = None,
        every: int = 1,
        dumpable_forks: bool = True,
    ) -> None:
        if every < 1:
            raise ValueError("every must be 1 or more")
        if dumpable_forks:
            forks.keep_forks_dumpable()
        self.signal = _signal_from_env() if signal is None else int(signal)
        self.on_release = list(on_release or [])
        self.on_rebuild = list(on_rebuild or [])
        self.every = every
        #: How many drains this process went through.
        self.drains = 0
        self._requests = 0
        self._baseline = 0
        self._points = 0
        self._previous = signals.signal(self.signal, self._on_request)
        #: Whether the drain under way serves a dump (the notice came).
        self.for_dump = False
        self._notice = dump_notice_signal(self.signal)
        # Another handler of that signal is the job's own: it stays.
        self._notice_caught = signals.getsignal(self._notice) == signals.SIG_DFL
        if self._notice_caught:
            signals.signal(self._notice, self._on_notice)

    # The handlers only count and note: everything else happens at a point.
    def _on_request(self, signum, frame) -> None:  # noqa: ARG002
        self._requests += 1

    def _on_notice(self, signum, frame) -> None:  # noqa: ARG002
        self.for_dump = True

    def requested(self) -> bool:
        """Whether a drain is asked for and not called off since the last."""
        return (self._requests - self._baseline) % 2 == 1

    def close(self) -> None:
        """Puts back the handlers the signals had before."""
        signals.signal(self.signal, self._previous)
        if self._notice_caught:
            signals.signal(self._notice, signals.SIG_DFL)
            self._notice_caught = False

    def __enter__(self) -> "Drain":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def point(self) -> bool:
        """A safe point: drains here if every rank was asked. Returns True
        when it drained (and is rebuilt again), False otherwise."""
        self._points += 1
        if self._points % self.every:
            return False
        if not self._agreed():
            return False
        self._drain()
        return True

    def _agreed(self) -> bool:
        """Whether every rank was asked: the minimum of the ranks' requests,
        so that a rank asked alone (or one that called it off) drains none."""
        asked = self.requested()
        dist = _distributed()
        if dist is None or dist.get_world_size() == 1:
            return asked
        import torch

        device = torch.device("cpu")
        if dist.get_backend() == "nccl" or groups.needs_cuda_for_collectives():
            device = torch.device("cuda", torch.cuda.current_device())
        flag = torch.tensor([1 if asked else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def release_cache(self) -> None:
        """Returns the caching allocator's free blocks to the driver (after
        the GPU work is done), and the CUDA IPC handles others let go of:
        the driver checkpoints what the process reserved, not what it uses.
        Called at every drain, before and after the ``on_release`` hooks."""
        torch = _cuda_torch()
        if torch is None:
            return
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.ipc_collect()

    def _drain(self) -> None:
        # Reconfigurable groups (cudackpt_drain.init_process_group) stay the
        # same objects: only their communicators go. Plain ones are
        # destroyed and the default one made anew.
        reconfigurable = bool(groups.live_groups())
        group = None
        if reconfigurable:
            groups.release_all()
        elif _distributed() is not None:
            group = _Group.capture()
            group.release()
        self.release_cache()
        if self.for_dump or not self._notice_caught:
            forks.release_compile_workers()
        if self.on_release:
            for release in self.on_release:
                release()
            self.release_cache()
        _advise_allocator()
        acknowledged = self._requests
        marker = None
        if (acknowledged - self._baseline) % 2 == 1:  # not called off meanwhile
            marker = _Marker()
            marker.show()
            while self._requests == acknowledged:  # checkpointed in here
                time.sleep(_POLL_SECONDS)
        self.drains += 1
        _Marker.withdraw_error()
        try:
            # Every rebuilt group proves itself with a collective before the
            # marker goes; a rebuild that fails says so instead.
            if reconfigurable:
                groups.rebuild_all()
            elif group is not None:
                group.rebuild(self.drains)
            for rebuild in self.on_rebuild:
                rebuild()
        except BaseException as error:
            self._baseline = self._requests
            self.for_dump = False
            _Marker.state_error(error)
            if marker is not None:
                marker.fail()
            else:
                _Marker.failed_now()
            raise
        self._baseline = self._requests
        self.for_dump = False
        if marker is not None:
            marker.hide()


def _cuda_torch():
    """torch, when this process has initialised CUDA through it; else None
    (the client never initialises CUDA itself)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch


#: Reserved bytes beyond this share of the allocated ones, after emptying
#: the cache, are worth a word: the checkpoint copies them all.
_SLACK = 1.25
_advised = False


def _advise_allocator() -> None:
    """Says once, as a warning, when emptying the cache left much more
    reserved than allocated: PyTorch's default allocator keeps a free block
    inside a segment that still holds a live tensor, and only expandable
    segments give such memory back (measured on an H100, torch 2.11: the
    checkpoint of a training job 1.55x its live tensors with the default
    allocator, 1.25x with expandable segments)."""
    global _advised
    torch = _cuda_torch()
    if torch is None or _advised:
        return
    allocated = torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    if reserved <= _SLACK * allocated + (64 << 20):
        return
    if "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower():
        return
    _advised = True
    warnings.warn(
        f"cudackpt drain: {(reserved - allocated) / 2**30:.1f} GiB of the "
        f"{reserved / 2**30:.1f} GiB this process reserved is free but held in "
        "segments that also hold live tensors, and the checkpoint copies it; "
        "start the job with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to checkpoint only what is allocated",
        RuntimeWarning,
        stacklevel=3,
    )


def _distributed():
    """torch.distributed when the program has a process group, else None.

    A program that never imported torch has none, and this client does not
    import it for them (nor needs it: a plain process drains on its own)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


class _Group:
    """The default process group: what it takes to build it again."""

    def __init__(self, backend, store, rank, world_size) -> None:
        self.backend = backend
        self.store = store
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def capture(cls) -> "_Group":
        from . import _torch_private

        _torch_private.check()
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        # The job's store (torchrun's, or the one init_process_group made),
        # held here so that it outlives the group.
        store = distributed_c10d._get_default_store()
        return cls(dist.get_backend(), store, dist.get_rank(), dist.get_world_size())

    def release(self) -> None:
        import torch.distributed as dist

        # Every group goes, subgroups included, with their NCCL
        # communicators and PyTorch's pt_nccl_* threads. ncclCommSuspend
        # (NCCL 2.29.7) would keep the groups but also those threads, which
        # cudackpt's evidence check refuses: destroy is what it can prove.
        dist.destroy_process_group()

    def rebuild(self, generation: int) -> None:
        import torch
        import torch.distributed as dist

        store = dist.PrefixStore(f"cudackpt-drain/{generation}/", self.store)
        options = {}
        if self.backend == "nccl" and torch.cuda.is_available():
            options["device_id"] = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group(
            self.backend,
            store=store,
            rank=self.rank,
            world_size=self.world_size,
            **options,
        )
        # Proved before the marker goes: one all-reduce of ones.
        device = options.get("device_id", torch.device("cpu"))
        probe = torch.ones(1, device=device)
        dist.all_reduce(probe)
        if probe.item() != self.world_size:
            raise RuntimeError(f"cudackpt: the rebuilt default group summed {probe.item()} instead of {self.world_size}")
