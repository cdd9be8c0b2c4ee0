"""The marker thread: the thread whose name acknowledges a drain
(:data:`~cudackpt_drain.protocol.MARKER`), and says a rebuild failed
(:data:`~cudackpt_drain.protocol.FAIL_MARKER`) with its error in a memfd's
name (:data:`~cudackpt_drain.protocol.ERROR_MEMFD`)."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional

from .protocol import _MEMFD_NAME_BYTES, _PR_SET_NAME, ERROR_MEMFD, FAIL_MARKER, MARKER

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
