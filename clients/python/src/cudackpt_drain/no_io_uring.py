"""Runs a command in which no process can set up an io_uring, so that CRIU
can dump it::

    python3 -m cudackpt_drain.no_io_uring torchrun --nproc-per-node 2 train.py

CRIU 4.2 cannot dump an io_uring ring ("Unknown shit 600
(anon_inode:[io_uring])"). torchrun's agent holds one: its TCPStore runs on
libuv, which sets up an io_uring to batch its epoll calls whatever
``UV_USE_IO_URING`` says (libuv 1.50 and later). Here ``io_uring_setup``
fails with ENOSYS for the command and every process it starts (a seccomp
filter, inherited across fork and exec), and libuv falls back to plain
epoll, as on a kernel without io_uring.

The filter refuses ``io_uring_setup``, and every call of a foreign ABI (a
64-bit process on x86-64 can still enter the kernel as i386, through ``int
$0x80``, where io_uring_setup is 425 too; x32 numbers carry bit 30): all
get ENOSYS. It needs no privilege (it sets ``no_new_privs``, so set-user-ID
programs run without their privilege under it), and CRIU dumps and
restores it with the process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

#: io_uring_setup, on x86-64 and on arm64 alike (asm-generic numbering).
IO_URING_SETUP = 425
#: The native ABI of each machine this runs on (linux/audit.h).
_NATIVE_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: x86-64's x32 ABI: the native arch, with this bit in the call's number.
_X32_SYSCALL_BIT = 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
# BPF opcodes: load a word of seccomp_data, jump if equal or greater or
# equal, return.
_LD_ABS_W = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06


def _program(machine: str | None = None) -> bytes:
    """The filter for this machine (``platform.machine()``): io_uring_setup
    gets ENOSYS, and so does every call of another ABI (i386 on x86-64 or
    32-bit ARM on arm64, and x32); every other call goes through. Raises
    OSError on a machine it does not know."""
    machine = machine or platform.machine()
    native = _NATIVE_ARCH.get(machine)
    if native is None:
        raise OSError(errno.ENOTSUP, f"no filter for this machine ({machine})")
    deny = (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.ENOSYS)
    instructions = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, native),
        deny,  # a foreign ABI, whatever the call
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
        (_JGE_K, 2, 0, _X32_SYSCALL_BIT),  # x32 (bit 30 and above): denied
        (_JEQ_K, 1, 0, IO_URING_SETUP),
        (_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        deny,
    ]
    return b"".join(struct.pack("HBBI", *i) for i in instructions)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def refuse_io_uring() -> None:
    """Installs the filter in this process; every process it then starts
    inherits it. Raises OSError where the kernel refuses the filter."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong)
    program = _program()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) with a filter refusing io_uring_setup")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv else 2
    try:
        refuse_io_uring()
    except OSError as error:
        print(f"cudackpt_drain.no_io_uring: {error}", file=sys.stderr)
        return 1
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        print(f"cudackpt_drain.no_io_uring: cannot run {argv[0]!r}: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
