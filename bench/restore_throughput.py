#!/usr/bin/env python3
"""How fast an undump reads its images back, against the disk and against
plain CRIU, on one host.

A held GPU target (`cudackpt-gpu-target --size-mib N --hold`: N MiB of
device memory, `OK <hash>` every second) is dumped with `cudackpt dump`.
Then, each from a dropped page cache:

- the disk: every image file read once, sequentially, 16 MiB at a time;
- `cudackpt undump` of the images;
- plain `criu restore` of the same images, with cudackpt as its action
  script (what a hand-written recipe runs), its options taken from the
  manifest.

Each restore must bring the target back with its data (`OK <hash>` as
before the dump) before the next one runs; the target's log is cut back
to its size at the dump before each (CRIU restores an open file only at
that size). Reports GB/s as the images'
size over each one's wall time. `--cpu-mib` holds host memory instead of a
GPU's (a Python process, for a host without a GPU). Timings are a
benchmark, never a pass/fail test.

    sudo python3 bench/restore_throughput.py --cudackpt target/release/cudackpt \\
        --target target/release/cudackpt-gpu-target --criu /path/to/criu \\
        [--criu-libs DIR] [--size-mib 16384] [--runs 3] [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

from harness import cudackpt, wait_for

# A stand-in for the GPU target on a host without one: the same protocol.
CPU_HOLDER = r"""
import hashlib, os, sys, time
data = os.urandom(int(sys.argv[1]) << 20)
digest = lambda: hashlib.blake2b(data, digest_size=8).hexdigest()
print("READY", os.getpid(), digest(), flush=True)
while True:
    time.sleep(1)
    print("OK", digest(), flush=True)
"""


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def lines(path):
    with open(path) as f:
        return f.read().splitlines()


def next_ok(log_path, after, timeout=300):
    """The first `OK`/`MISMATCH` line after line `after`."""
    found = {}

    def seen():
        fresh = [l for l in lines(log_path)[after:] if l.startswith(("OK", "MISMATCH"))]
        found["line"] = fresh[0] if fresh else None
        return bool(fresh)

    wait_for(seen, f"an OK line in {log_path}", timeout=timeout, every=0.1)
    return found["line"]


def read_sequentially(images):
    """Reads every file under `images` once: bytes read."""
    total = 0
    for name in sorted(os.listdir(images)):
        path = os.path.join(images, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(16 << 20):
                total += len(chunk)
    return total


def plain_criu_restore(args, images, manifest, env):
    """`criu restore` as a recipe runs it, cudackpt as its action script."""
    options = [a for o in manifest["criu_options"] for a in o["option"].split(" ")]
    # An empty plugin directory: no installed plugin acts behind the action
    # script (CRIU refuses a --libdir that does not exist); beside the images,
    # which undump wants to hold CRIU's files only.
    no_plugins = os.path.join(os.path.dirname(images), "no-plugins")
    os.makedirs(no_plugins, exist_ok=True)
    command = [args.criu, "restore", "-D", images, "--restore-detached", "--action-script", os.path.abspath(args.cudackpt),
               "--libdir", no_plugins, "-o", "plain-restore.log", *options]
    out = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, **env), timeout=600)
    if out.returncode != 0:
        with open(os.path.join(images, "plain-restore.log")) as log:
            errors = [line for line in log.read().splitlines() if "Error" in line]
        raise SystemExit(f"criu restore exited {out.returncode}: " + "\n".join(errors[-8:]))


def kill_restored(pid):
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "the restored target to be gone", timeout=60)


def run(args):
    work = tempfile.mkdtemp(prefix="cudackpt-throughput-")
    log_path = os.path.join(work, "target.log")
    criu_env = {"LD_LIBRARY_PATH": args.criu_libs} if args.criu_libs else {}
    command = (["python3", "-c", CPU_HOLDER, str(args.cpu_mib)] if args.cpu_mib
               else [args.target, "--size-mib", str(args.size_mib), "--hold"])
    target = None
    try:
        with open(log_path, "w") as log:
            target = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: any(l.startswith("READY") for l in lines(log_path)), "the target to be ready", timeout=300)
        expected = "OK " + next(l for l in lines(log_path) if l.startswith("READY")).split()[2]
        images = os.path.join(work, "images")
        reaper = threading.Thread(target=target.wait, daemon=True)
        reaper.start()
        dump_s, dumped = cudackpt(args.cudackpt, "dump", "--to", images, "--criu", args.criu, target.pid, env=criu_env)
        reaper.join(timeout=60)
        # CRIU restores an open file only at the size it had at the dump:
        # the log goes back to that size before each restore.
        log_size = os.path.getsize(log_path)
        manifest = dumped["manifest"]
        size = manifest["image_bytes"]
        times = {"disk": [], "undump": [], "criu restore": []}
        for _ in range(args.runs):
            drop_caches()
            started = time.monotonic()
            read = read_sequentially(images)
            times["disk"].append(time.monotonic() - started)
            for way in ("undump", "criu restore"):
                os.truncate(log_path, log_size)
                drop_caches()
                seen = len(lines(log_path))
                started = time.monotonic()
                if way == "undump":
                    cudackpt(args.cudackpt, "undump", images, "--criu", args.criu, env=criu_env)
                else:
                    plain_criu_restore(args, images, manifest, criu_env)
                times[way].append(time.monotonic() - started)
                line = next_ok(log_path, seen)
                if line != expected:
                    raise SystemExit(f"after {way} the target says {line!r}, not {expected!r}")
                kill_restored(target.pid)
        what = f"{args.cpu_mib} MiB of host memory" if args.cpu_mib else f"{args.size_mib} MiB of GPU memory"
        print(f"images of a target holding {what}: {size / 1e9:.2f} GB ({read / 1e9:.2f} GB read back), dump {dump_s:.2f} s; "
              f"medians of {args.runs}, page cache dropped before each")
        print("| read | seconds | GB/s |\n| --- | --- | --- |")
        rows = []
        for way, samples in times.items():
            median = statistics.median(samples)
            rows.append({"way": way, "seconds": samples, "median_s": round(median, 3), "gb_per_s": round(size / median / 1e9, 2)})
            print(f"| {way} | {median:.2f} | {size / median / 1e9:.2f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"image_bytes": size, "read_bytes": read, "dump": dumped, "rows": rows}, f, indent=1)
    finally:
        if target and target.poll() is None:
            os.killpg(target.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cudackpt", required=True)
    parser.add_argument("--target", help="cudackpt-gpu-target (unless --cpu-mib)")
    parser.add_argument("--criu", required=True)
    parser.add_argument("--criu-libs", help="LD_LIBRARY_PATH for a carried CRIU")
    parser.add_argument("--size-mib", type=int, default=16384)
    parser.add_argument("--cpu-mib", type=int, help="hold this much host memory instead (no GPU)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not args.cpu_mib and not args.target:
        parser.error("--target is needed unless --cpu-mib is given")
    run(args)


if __name__ == "__main__":
    main()
