"""What the Python benchmarks (bench/drain.py, bench/shrink.py and others)
share: run cudackpt for its JSON document, wait for a condition, and list
a process's children. A run that fails
stops the benchmark (SystemExit): a benchmark reports no numbers for it."""

import json
import os
import subprocess
import time


def cudackpt(binary, *args, env=None):
    """`binary --json ARGS`: (wall seconds, its document), or SystemExit
    when it exits non-zero. `env` adds to this process's environment."""
    started = time.monotonic()
    out = subprocess.run([binary, "--json", *map(str, args)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **(env or {})))
    wall = time.monotonic() - started
    doc = json.loads(out.stdout)
    if out.returncode != 0:
        raise SystemExit(f"cudackpt {' '.join(map(str, args))} exited {out.returncode}: {doc}")
    return wall, doc


def wait_for(condition, what, timeout=300, every=0.1):
    """Polls `condition` every `every` seconds; SystemExit after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def children(pid):
    """`pid`'s children, from its tasks' `children` files; none once it
    has gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return kids
