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

The filter only refuses ``io_uring_setup``; it needs no privilege (it sets
``no_new_privs``, so set-user-ID programs run without their privilege under
it), and CRIU dumps and restores it with the process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

#: io_uring_setup, on x86-64 and on arm64 alike (asm-generic numbering).
IO_URING_SETUP = 425
_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
# BPF opcodes: load a word of seccomp_data, jump if equal, return.
_LD_ABS_W = 0x20
_JEQ_K = 0x15
_RET_K = 0x06


def _program() -> bytes:
    """The filter: on x86-64 and arm64, io_uring_setup gets ENOSYS; every
    other call, and every other architecture, goes through."""
    instructions = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 2, 0, _AUDIT_ARCH_X86_64),
        (_JEQ_K, 1, 0, _AUDIT_ARCH_AARCH64),
        (_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
        (_JEQ_K, 0, 1, IO_URING_SETUP),
        (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.ENOSYS),
        (_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
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
