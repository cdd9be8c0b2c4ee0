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

import ctypes
import os
import socket
import warnings
import signal as signals
import sys
import threading
import time
from typing import Callable, List, Optional

from . import groups
from .groups import init_process_group, install

__all__ = [
    "Drain",
    "init_process_group",
    "install",
    "groups",
    "MARKER",
    "FAIL_MARKER",
    "DEFAULT_SIGNAL",
    "VERSION",
    "DEVICE_PREFIX",
    "parse_signal",
    "dump_notice_signal",
    "keep_forks_dumpable",
    "drop_inherited_gpu",
    "release_compile_workers",
]

#: The protocol version; the marker names it.
VERSION = 1
#: The name of the thread that acknowledges a drain.
MARKER = "cudackpt-drain1"
#: The name the marker thread takes, and keeps, when the rebuild failed:
#: cudackpt then reports the process ``rebuild_failed``, never ``rebuilt``.
FAIL_MARKER = "cudackpt-fail1"
#: A process whose rebuild failed says why in the name of a memfd it keeps
#: open until the next rebuild: ``cudackpt-error:`` and the error, which
#: cudackpt quotes (the first 200 characters) in its report.
ERROR_MEMFD = "cudackpt-error:"
#: The most bytes a memfd's name holds (the kernel's MFD_NAME_MAX_LEN).
_MEMFD_NAME_BYTES = 249
#: Real-time signal 40 (SIGRTMIN+6 under glibc): cudackpt's default.
DEFAULT_SIGNAL = 40
#: glibc's first real-time signal, for RTMIN+N (cudackpt reads it the same).
_GLIBC_RTMIN = 34
_PR_SET_NAME = 15
#: How often a drained rank looks for the rebuild request.
_POLL_SECONDS = 0.01


#: The last real-time signal (SIGRTMAX).
_RTMAX = 64


def parse_signal(text: str) -> int:
    """A drain signal as cudackpt's ``--drain-signal`` reads it: a real-time
    signal, ``40``, ``RTMIN+6``, ``RTMAX-2``. cudackpt refuses any other
    (SIGTERM, SIGINT, SIGUSR1... mean "stop" or a batch system's warning),
    and so does the client, in cudackpt's own words (a test runs both on
    the same texts)."""
    # ASCII letters only, as cudackpt: "ß".upper() is "SS".
    name = "".join(c.upper() if "a" <= c <= "z" else c for c in text.strip())
    name = name[3:] if name.startswith("SIG") else name
    number = _parse_i32(name)
    if number is None:
        for base, prefix in ((_GLIBC_RTMIN, "RTMIN"), (_RTMAX, "RTMAX")):
            if name.startswith(prefix):
                offset = name[len(prefix):]
                step = _parse_i32(offset) if offset else 0
                if step is None:
                    raise ValueError(f"{_quoted(text)}: write the offset as RTMIN+N or RTMAX-N")
                number = base + step
                break
        else:
            raise ValueError(
                f"{_quoted(text)} is not a real-time signal: the drain signal must be one of "
                f"SIGRTMIN..SIGRTMAX ({_GLIBC_RTMIN}..{_RTMAX}, e.g. 40 or RTMIN+6), "
                "which no program reads as stop or interrupt"
            )
    if _GLIBC_RTMIN <= number <= _RTMAX:
        return number
    if number in (32, 33):
        why = (
            "signals 32 and 33 are glibc's own; the drain signal must be one of "
            f"SIGRTMIN..SIGRTMAX ({_GLIBC_RTMIN}..{_RTMAX})"
        )
    else:
        why = (
            f"signal {number} is not a real-time signal: the drain signal must be one of "
            f"SIGRTMIN..SIGRTMAX ({_GLIBC_RTMIN}..{_RTMAX}), which no program reads as stop or interrupt"
        )
    raise ValueError(f"{_quoted(text)}: {why}")


def _parse_i32(text: str) -> Optional[int]:
    """A 32-bit integer written as cudackpt reads one: an optional sign,
    then ASCII digits only."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    number = int(text)
    return number if -(2**31) <= number < 2**31 else None


def _quoted(text: str) -> str:
    """``text`` quoted as cudackpt quotes what it was given."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
    out = []
    for c in text:
        if c in escapes:
            out.append(escapes[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def dump_notice_signal(drain_signal: int) -> int:
    """The dump notice that goes with a drain signal: the real-time signal
    above it (below it for SIGRTMAX), as cudackpt sends it before a drain
    that serves a dump, to a process that catches it."""
    return drain_signal + 1 if drain_signal < _RTMAX else drain_signal - 1


def _signal_from_env() -> int:
    text = os.environ.get("CUDACKPT_DRAIN_SIGNAL", "")
    return parse_signal(text) if text else DEFAULT_SIGNAL


def _name_this_thread(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_NAME, {name!r})")


class _Marker:
    """A thread named :data:`MARKER` while it lives: the acknowledgement.

    A thread of its own, so the process keeps its name in ``ps``."""

    def __init__(self) -> None:
        self._named = threading.Event()
        self._done = threading.Event()
        self._unnamed = threading.Event()
        self._error: Optional[BaseException] = None
        self._failed = False
        self._thread = threading.Thread(target=self._run, name=MARKER, daemon=True)

    def _run(self) -> None:
        try:
            _name_this_thread(MARKER)
        except BaseException as error:  # reported by show()
            self._error = error
        self._named.set()
        self._done.wait()
        # Renamed before it ends: a thread's /proc entry outlives join() for
        # a moment, and the marker must be gone when hide() returns.
        try:
            _name_this_thread(FAIL_MARKER if self._failed else "drain-rebuilt")
        finally:
            self._unnamed.set()
        if self._failed:
            # Kept, named, for as long as the process lives: cudackpt reads
            # the name after the marker goes.
            threading.Event().wait()

    @staticmethod
    def state_error(error: Optional[BaseException]) -> None:
        """Says why the rebuild failed, for cudackpt to quote: a memfd named
        :data:`ERROR_MEMFD` and the error, kept open until the next rebuild.
        Before the marker is renamed, so the reason is there when cudackpt
        sees the failure."""
        _Marker.withdraw_error()
        if error is None or not hasattr(os, "memfd_create"):
            return
        text = f"{type(error).__name__}: {error}".replace("\0", " ")
        name = (ERROR_MEMFD + text).encode("utf-8", "replace")[:_MEMFD_NAME_BYTES]
        try:
            _Marker._error_fd = os.memfd_create(name.decode("utf-8", "ignore"))
        except OSError:
            pass  # the failure is still said by the marker's name

    @staticmethod
    def withdraw_error() -> None:
        """Closes the error memfd of an earlier failed rebuild, if any."""
        if _Marker._error_fd is not None:
            os.close(_Marker._error_fd)
            _Marker._error_fd = None

    _error_fd: Optional[int] = None

    @classmethod
    def failed_now(cls) -> None:
        """A failed rebuild with no marker up (a drain called off before
        it acknowledged): the failure is said all the same."""
        marker = cls()
        marker.show()
        marker.fail()

    def show(self) -> None:
        self._thread.start()
        self._named.wait()
        if self._error is not None:
            raise self._error

    def hide(self) -> None:
        self._done.set()
        self._unnamed.wait()
        self._thread.join()

    def fail(self) -> None:
        """Renames the marker :data:`FAIL_MARKER` and keeps it: the rebuild
        failed."""
        self._failed = True
        self._done.set()
        self._unnamed.wait()


#: The files through which a process reaches the GPU: the driver's device
#: nodes (``/dev/nvidiactl``, ``/dev/nvidia0``, ``/dev/nvidia-uvm``...).
DEVICE_PREFIX = "/dev/nvidia"
#: The prefixes whose forked children already drop what they inherit.
_fork_hooks = set()


def drop_inherited_gpu(prefix: str = DEVICE_PREFIX):
    """Unmaps every mapping of a file whose path starts with ``prefix``, and
    closes every descriptor of one, in this process. Returns how many
    mappings and descriptors went.

    For a child forked after its parent started CUDA (a ``DataLoader``
    worker under the default ``fork``): it inherits some of the parent's
    device mappings and descriptors, but no CUDA state, and cannot use CUDA
    at all (the CUDA runtime refuses in a forked child). CRIU cannot dump a
    device mapping that no CUDA checkpoint released ("Can't handle
    non-regular mapping"), so while the child keeps them the whole tree
    cannot be dumped. Nothing the child can use goes: do not call it in a
    process that uses CUDA."""
    unmapped = 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    for start, end in _mappings_of(prefix):
        if libc.munmap(start, end - start) == 0:
            unmapped += 1
    closed = 0
    for fd, target in _descriptors():
        if target.startswith(prefix):
            try:
                os.close(fd)
                closed += 1
            except OSError:
                pass  # gone already
    return unmapped, closed


def _descriptors():
    """Each descriptor of this process with what it leads to
    (``/proc/self/fd``), listed whole before any is closed; one gone
    meanwhile (the listing's own) is left out."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    found = []
    for name in names:
        try:
            found.append((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except (OSError, ValueError):
            pass
    return found


def drop_inherited_sockets() -> int:
    """Closes every TCP or UDP socket (IPv4 or IPv6) this process holds;
    returns how many. For a forked child, as :func:`drop_inherited_gpu`
    is: the copies it inherits of its parent's network sockets (the process
    group's and the store's connections, NCCL's bootstrap and RAS
    listeners) are never its own to use, and the parent keeps its own
    descriptors. CRIU could not restore them shared: on two GPUs, a
    DataLoader worker failed to bind its copy of a rank's socket ("inet:
    Can't bind inet socket: Address already in use") and the whole restore
    with it. Unix sockets and pipes, through which a worker talks to its
    parent, are left alone."""
    closed = 0
    for fd, target in _descriptors():
        if not target.startswith("socket:"):
            continue
        try:
            held = socket.socket(fileno=fd)
            family = held.family
            held.detach()
            if family in (socket.AF_INET, socket.AF_INET6):
                os.close(fd)
                closed += 1
        except OSError:
            pass  # gone already
    return closed


def _mappings_of(prefix: str):
    """The (start, end) of each mapping of a ``prefix*`` file in
    ``/proc/self/maps``, read whole before any is unmapped."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    found = []
    wanted = prefix.encode()
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith(wanted):
            start, end = fields[0].split(b"-")
            found.append((int(start, 16), int(end, 16)))
    return found


def keep_forks_dumpable(prefix: str = DEVICE_PREFIX) -> None:
    """Makes every child this process forks from now on drop the GPU
    mappings and descriptors it inherits (:func:`drop_inherited_gpu`, in an
    ``os.register_at_fork`` hook), and its copies of the parent's network
    sockets (:func:`drop_inherited_sockets`), so that CRIU can dump and
    restore a job whose ``DataLoader`` forks workers. :class:`Drain` calls it; call it yourself
    in a program that is checkpointed through CRIU without a drain. Once per
    prefix; a child that execs loses the mappings anyway."""
    if prefix in _fork_hooks:
        return
    if not _fork_hooks:
        # Once, whatever the prefix: the network sockets too.
        os.register_at_fork(after_in_child=drop_inherited_sockets)
    _fork_hooks.add(prefix)
    os.register_at_fork(after_in_child=lambda: drop_inherited_gpu(prefix))


def release_compile_workers() -> bool:
    """Shuts down ``torch.compile``'s compile-worker pool, if this process
    started one; returns whether it did. Inductor starts the pool again the
    next time it compiles.

    The pool is a process of the job (``torch/_inductor/compile_worker``)
    that reads the GPUs' properties (so starts CUDA) and then forks its
    workers, which inherit its GPU mappings and hold no CUDA state: CRIU
    cannot dump them, and cudackpt refuses such a tree before any change.
    :class:`Drain` calls this at every drain; a server dumped without a
    drain calls it once warm (or runs with
    ``TORCHINDUCTOR_COMPILE_THREADS=1``, which starts no pool). Inductor is
    not imported here: a process that never compiled has no pool."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    # A torch without it (older or newer than those tested, 2.9 to 2.11)
    # keeps its pool: the pre-dump then says so, naming the pool.
    shutdown = getattr(async_compile, "shutdown_compile_workers", None)
    if shutdown is None:
        return False
    had = bool(getattr(async_compile, "_pool_set", None))
    shutdown()
    return had


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
    (:func:`keep_forks_dumpable`), so that CRIU can dump the job; every
    drain that serves a dump also shuts down ``torch.compile``'s compile
    workers (:func:`release_compile_workers`) for the same reason: cudackpt
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
            keep_forks_dumpable()
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
            release_compile_workers()
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
