"""Fork hygiene: what a child forked after CUDA started (a ``DataLoader``
worker under the default ``fork``) drops so that CRIU can dump the tree
(the device nodes' mappings and descriptors, the sockets it inherited), and
the compile-worker pool a dump must not meet."""

from __future__ import annotations

import ctypes
import os
import socket
import sys

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
