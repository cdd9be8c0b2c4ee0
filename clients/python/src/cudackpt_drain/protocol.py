"""The drain protocol as the client speaks it (cudackpt(1), DRAIN
PROTOCOL): its version, the thread names that answer, the error memfd,
the signals. The copy of cudackpt's own source (``src/drain/protocol.rs``)
that ``tests/cli/protocol_copies.rs`` holds to it, value by value."""

from __future__ import annotations

import os
from typing import Optional

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
