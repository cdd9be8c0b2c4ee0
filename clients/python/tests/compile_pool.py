"""A process with torch.compile's compile-worker pool, for test_drain.py:
it starts the pool, and reports (one JSON line on stdout) what
`release_compile_workers`, a suspend's drain and a dump's did to it. Run with
TORCHINDUCTOR_COMPILE_THREADS=2 (a pool on any host)."""

import json
import os
import signal
import sys
import threading
import time

from torch._inductor.async_compile import AsyncCompile

import cudackpt_drain as cd
from ranks import shows_marker


def compile_workers():
    """This process's children that are inductor's compile-worker pool."""
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    found = []
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"_inductor/compile_worker" in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def pool_started():
    AsyncCompile.warm_pool()
    deadline = time.monotonic() + 60
    while not compile_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    return compile_workers()


def main():
    report = {}
    report["pool"] = bool(pool_started())
    report["released"] = cd.release_compile_workers()
    report["after_release"] = compile_workers()
    report["released_again"] = cd.release_compile_workers()
    # The pool comes back when inductor next wants it, and compiles.
    report["pool_again"] = bool(pool_started())
    # (A job through it: a compile on CPU would take most of a minute.)
    report["served_again"] = AsyncCompile.process_pool().submit(sum, [1, 2, 3]).result(timeout=60)
    # A suspend's drain keeps it; a dump's (the notice first) shuts it
    # down before the acknowledgement.
    report["pool_before_drain"] = bool(compile_workers())
    seen = {}

    def cudackpt(for_dump):
        if for_dump:
            os.kill(os.getpid(), cd.dump_notice_signal(cd.DEFAULT_SIGNAL))
        os.kill(os.getpid(), cd.DEFAULT_SIGNAL)
        deadline = time.monotonic() + 60
        while not shows_marker(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen[for_dump] = compile_workers()
        os.kill(os.getpid(), cd.DEFAULT_SIGNAL)

    with cd.Drain() as drain:
        for for_dump in (False, True):
            helper = threading.Thread(target=cudackpt, args=(for_dump,))
            helper.start()
            while not drain.requested():
                time.sleep(0.01)
            report["drained"] = drain.point()
            helper.join()
    report["at_a_suspend_s_marker"] = seen.get(False)
    report["at_the_marker"] = seen.get(True)
    print(json.dumps(report))


if __name__ == "__main__":
    signal.signal(cd.DEFAULT_SIGNAL, signal.SIG_IGN)
    sys.exit(main())
