#!/usr/bin/env python3
"""What a busy host costs a command that finds a tree: `suspend --tree ROOT
--dry-run` of a tree of `--targets` fake CUDA processes, timed with
`--idle` other processes on the host (a Kubernetes node runs thousands),
for each binary given, side by side in one run. Variants are interleaved,
one run each in turn; medians in ms. A benchmark, not a test; no GPU (the
fake driver stands in: discovery does not depend on it):

    python3 bench/busy_host.py --fake target/release/libfake_libcuda.so \\
        --cudackpt before=OLD/cudackpt --cudackpt after=target/release/cudackpt \\
        [--idle 0,3000] [--targets 16] [--runs 9] [--json FILE]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

from harness import children, wait_for


def session(command, env=None):
    """A shell leading a session of its own, running `command`."""
    return subprocess.Popen(["setsid", "sh", "-c", command], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def end(shell):
    os.killpg(shell.pid, signal.SIGKILL)
    shell.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudackpt", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--fake", required=True, help="the fake libcuda")
    parser.add_argument("--idle", default="0,3000")
    parser.add_argument("--targets", type=int, default=16)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json")
    args = parser.parse_args()
    binaries = dict(item.split("=", 1) for item in args.cudackpt)
    fake = os.path.abspath(args.fake)
    rows = []
    with tempfile.TemporaryDirectory(prefix="busy-host-") as state:
        env = dict(os.environ, CUDACKPT_LIBCUDA=fake, FAKE_CUDA_AS_DRIVER="1", FAKE_CUDA_STATE_DIR=state)
        targets = session(" ".join(f"LD_PRELOAD={fake} FAKE_CUDA_IDENTITY=busy{i}-$$ sleep 100000 &"
                                   for i in range(args.targets)) + " wait", env)
        try:
            wait_for(lambda: len(children(targets.pid)) == args.targets, "the targets to start", timeout=60)
            for idle in (int(n) for n in args.idle.split(",")):
                crowd = session(f"i=0; while [ $i -lt {idle} ]; do sleep 100000 & i=$((i+1)); done; wait")
                try:
                    wait_for(lambda: len(children(crowd.pid)) == idle, f"{idle} idle processes", timeout=300)
                    times = {name: [] for name in binaries}
                    for _ in range(args.runs):
                        for name, binary in binaries.items():
                            started = time.perf_counter()
                            out = subprocess.run([binary, "suspend", "--tree", str(targets.pid), "--dry-run", "--json"],
                                                 capture_output=True, text=True, env=env, timeout=120)
                            took = (time.perf_counter() - started) * 1000
                            found = len(json.loads(out.stdout)["processes"])
                            if out.returncode != 0 or found != args.targets:
                                raise SystemExit(f"{name}: exit {out.returncode}, {found} processes: {out.stdout[:500]}")
                            times[name].append(took)
                    for name, runs in times.items():
                        rows.append({"binary": name, "idle_processes": idle, "targets": args.targets,
                                     "median_ms": statistics.median(runs), "runs_ms": runs})
                finally:
                    end(crowd)
        finally:
            end(targets)
    print("| binary | other processes on the host | `suspend --tree --dry-run` of %d, median ms |" % args.targets)
    print("|---|---|---|")
    for row in rows:
        print(f"| {row['binary']} | {row['idle_processes']} | {row['median_ms']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "busy_host", "runs": args.runs, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
