#!/usr/bin/env python3
"""Where a cudackpt invocation's own time goes, without the driver's: the
whole process (spawn to exit) of invocations that stop before any driver
call, against /bin/true, so the start-up of each grammar (clap's parser in
the native one, the hand-written one of NVIDIA's) and the lock file show
apart from the driver. A benchmark, not a test; run anywhere:

    python3 bench/startup.py --cudackpt target/release/cudackpt [--runs 300] [--pid PID] [--json FILE]

With --pid (a running CUDA process; root), it also times `lock` + `unlock`
with and without the per-process lock file (`--no-lock`) and in NVIDIA's
grammar. Variants are interleaved, one run each in turn; medians in ms.
"""

import argparse
import json
import os
import statistics
import subprocess
import time


def once(argv):
    started = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudackpt", required=True)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--pid", type=int)
    parser.add_argument("--json")
    args = parser.parse_args()
    tool = os.path.abspath(args.cudackpt)
    # A PID that cannot exist (above the kernel's PID_MAX_LIMIT).
    missing = "4194305"
    variants = {
        "true": [["/bin/true"]],
        "native: --version": [[tool, "--version"]],
        "native: lock of no process": [[tool, "lock", missing]],
        "nvidia grammar: lock of no process": [[tool, "--action", "lock", "--pid", missing]],
    }
    if args.pid:
        p = str(args.pid)
        variants["native: lock + unlock"] = [[tool, "lock", p], [tool, "unlock", p]]
        variants["native: lock + unlock --no-lock"] = [[tool, "lock", "--no-lock", p], [tool, "unlock", "--no-lock", p]]
        variants["nvidia grammar: lock + unlock"] = [[tool, "--action", "lock", "--pid", p], [tool, "--action", "unlock", "--pid", p]]
        variants["native: state"] = [[tool, "state", p]]
        variants["nvidia grammar: get-state"] = [[tool, "--get-state", "--pid", p]]
    samples = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(args.runs + 5):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            took = sum(once(argv) for argv in variants[name])
            if round_ >= 5:  # warm-up rounds
                samples[name].append(took)
    medians = {name: round(statistics.median(v), 3) for name, v in samples.items()}
    width = max(map(len, names))
    for name in names:
        per = len(variants[name])
        print(f"{name:<{width}}  {medians[name] / per:7.3f} ms a command" + (f" ({per} commands)" if per > 1 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "median_ms_per_variant": medians, "commands_per_variant": {n: len(v) for n, v in variants.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
