#!/usr/bin/env python3
"""What a planted process costs a root cudackpt's scan of the host: N
processes (default 8), each mapping one file with a ~3,800-character path
32,000 times (its /proc/PID/maps is then ~120 MB), as an unprivileged user
could. Times `ps` and `suspend --all --yes --dry-run` with and without them,
for each binary given, side by side in one run (interleaved rounds,
medians in seconds). A benchmark, not a test; runs anywhere, against the
fake libcuda (no GPU needed):

    cargo build --release -p cudackpt -p fake-libcuda
    python3 bench/planted.py --cudackpt target/release/cudackpt \\
        --fake target/release/libfake_libcuda.so [--baseline OLD_BINARY] \\
        [--processes 8] [--mappings 32000] [--runs 10] [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# One process: a long path, mapped again and again with alternating
# protections so that the kernel merges no two neighbours.
# libc's mmap, not Python's (which keeps a descriptor per mapping).
PLANT = r"""
import ctypes, mmap, os, sys, time
base, count = sys.argv[1], int(sys.argv[2])
deep = base
while len(deep) < 3800:
    deep += "/" + "d" * 200
os.makedirs(deep, exist_ok=True)
fd = os.open(deep + "/f", os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, mmap.PAGESIZE)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
for i in range(count):
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if i % 2 else 0)
    if libc.mmap(None, mmap.PAGESIZE, prot, mmap.MAP_SHARED, fd, 0) in (None, ctypes.c_void_p(-1).value):
        raise SystemExit(os.strerror(ctypes.get_errno()))
print("ready", flush=True)
time.sleep(3600)
"""


def once(argv, env):
    started = time.perf_counter()
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env)
    took = time.perf_counter() - started
    if out.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.decode(errors='replace')}")
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudackpt", required=True)
    parser.add_argument("--baseline", help="another cudackpt binary to time beside it")
    parser.add_argument("--fake", required=True, help="the fake libcuda (libfake_libcuda.so)")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--mappings", type=int, default=32000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cudackpt-planted-")
    env = dict(os.environ, CUDACKPT_LIBCUDA=os.path.abspath(args.fake), FAKE_CUDA_STATE_DIR=work,
               CUDACKPT_RECORD_DIR=os.path.join(work, "rec"), CUDACKPT_LOCK_DIR=os.path.join(work, "locks"))
    # One fake CUDA process, so that the scans find something.
    cuda = subprocess.Popen(["sleep", "3600"], env=dict(env, LD_PRELOAD=os.path.abspath(args.fake)))
    binaries = {"cudackpt": os.path.abspath(args.cudackpt)}
    if args.baseline:
        binaries["baseline"] = os.path.abspath(args.baseline)
    commands = {"ps": ["ps"], "suspend --all --yes --dry-run": ["suspend", "--all", "--yes", "--dry-run"]}
    planted = []
    results = {}
    try:
        for phase in ("none planted", f"{args.processes} planted"):
            if phase != "none planted":
                for n in range(args.processes):
                    p = subprocess.Popen([sys.executable, "-c", PLANT, os.path.join(work, f"p{n}"), str(args.mappings)],
                                         stdout=subprocess.PIPE, text=True)
                    planted.append(p)
                for p in planted:
                    if p.stdout.readline().strip() != "ready":
                        raise SystemExit("a planted process did not start")
                sizes = [len(open(f"/proc/{p.pid}/maps", "rb").read()) for p in planted[:1]]
                print(f"each planted /proc/PID/maps: {sizes[0] / 1e6:.0f} MB", file=sys.stderr)
            variants = [(b, c) for b in binaries for c in commands]
            samples = {v: [] for v in variants}
            for round_ in range(args.runs + 1):
                order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
                for binary, command in order:
                    took = once([binaries[binary], *commands[command]], env)
                    if round_ > 0:  # one warm-up round
                        samples[(binary, command)].append(took)
            for (binary, command), values in samples.items():
                results.setdefault(phase, {}).setdefault(binary, {})[command] = round(statistics.median(values), 4)
    finally:
        for p in planted + [cuda]:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    names = list(commands)
    print("| phase | binary | " + " | ".join(f"{n} (s)" for n in names) + " |")
    print("| --- | --- |" + " --- |" * len(names))
    for phase, by_binary in results.items():
        for binary, by_command in by_binary.items():
            print(f"| {phase} | {binary} | " + " | ".join(f"{by_command[n]:.4f}" for n in names) + " |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"processes": args.processes, "mappings": args.mappings, "runs": args.runs,
                       "medians_s": results}, out, indent=2)


if __name__ == "__main__":
    main()
