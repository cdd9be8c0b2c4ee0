#!/usr/bin/env python3
"""What a drained checkpoint costs (bench/README.md, "The drain"): a
torchrun job of RANKS ranks, one a GPU (tests/gpu/drain_job.py, the
PyTorch drain client, NCCL over NVLink) holding HOLD MiB a rank, taken
through `suspend --drain` and `resume` (drain + lock + checkpoint, then
restore + unlock + rebuild), against a plain `suspend` and `resume` of
RANKS processes of the project's GPU target holding the same HOLD MiB, one
per GPU. Run on a host with RANKS GPUs (two by default), as root:

    python3 bench/drain.py --bin-dir DIR [--ranks 2] [--hold-mib 2048] [--rounds 5] [--json FILE]

DIR holds the release `cudackpt` and `cudackpt-gpu-target`. Prints a
table of medians; --json writes every round. A benchmark, not a test.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from harness import cudackpt, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "..", "tests", "gpu", "drain_job.py")


def footprint_mib(binary, *selector):
    _, doc = cudackpt(binary, "ps", *selector)
    return [p.get("gpu_memory_bytes", 0) >> 20 for p in doc["processes"]]


def drained_rounds(binary, ranks, hold, rounds):
    work = tempfile.mkdtemp(prefix="cudackpt-bench-drain-")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", HOLD_MIB=str(hold))
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port", "29701", JOB, work],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    status = lambda r: json.load(open(os.path.join(work, f"rank{r}.json")))
    try:
        wait_for(lambda: all(os.path.exists(os.path.join(work, f"rank{r}.json")) and status(r)["steps"] > 5 for r in range(ranks)), "the job")
        footprint = footprint_mib(binary, "--tree", job.pid)
        out = []
        for n in range(rounds):
            down_s, down = cudackpt(binary, "suspend", "--drain", "--tree", job.pid)
            up_s, up = cudackpt(binary, "resume", "--tree", job.pid)
            wait_for(lambda: all(status(r)["drains"] == n + 1 for r in range(ranks)), "the rebuild")
            out.append({
                "suspend_s": round(down_s, 3),
                "resume_s": round(up_s, 3),
                # The ranks' figures; torchrun's agent, checkpointed too,
                # has nothing to drain (its outcome is not_needed).
                "acknowledged_ms": [p["drain"]["acknowledged_ms"] for p in down["processes"] if "acknowledged_ms" in p.get("drain", {})],
                "rebuilt_ms": [p["drain"]["rebuilt_ms"] for p in up["processes"] if "rebuilt_ms" in p.get("drain", {})],
            })
        return footprint, out
    finally:
        open(os.path.join(work, "stop"), "w").close()
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.wait()


def plain_rounds(binary, target, ranks, hold, rounds):
    targets = []
    for device in range(ranks):
        p = subprocess.Popen([target, "--size-mib", str(hold), "--device", str(device)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if not p.stdout.readline().startswith("READY"):
            raise SystemExit("the GPU target did not start")
        targets.append(p)
    pids = [p.pid for p in targets]
    try:
        footprint = footprint_mib(binary, *[a for pid in pids for a in ("--tree", pid)])
        out = []
        for _ in range(rounds):
            down_s, _ = cudackpt(binary, "suspend", *pids)
            up_s, _ = cudackpt(binary, "resume", *pids)
            out.append({"suspend_s": round(down_s, 3), "resume_s": round(up_s, 3)})
        return footprint, out
    finally:
        for p in targets:
            p.kill()
            p.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the job, one a GPU (the host needs as many GPUs)")
    parser.add_argument("--hold-mib", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.bin_dir), "cudackpt")
    target = os.path.join(os.path.abspath(args.bin_dir), "cudackpt-gpu-target")
    job_footprint, drained = drained_rounds(binary, args.ranks, args.hold_mib, args.rounds)
    plain_footprint, plain = plain_rounds(binary, target, args.ranks, args.hold_mib, args.rounds)
    median = lambda rows, key: statistics.median(r[key] for r in rows)
    print(f"{'':<26}{'suspend (s)':>12}{'resume (s)':>12}  GPU MiB a process")
    for name, rows, footprint in ((f"drained {args.ranks}-rank job", drained, job_footprint), ("plain, same held memory", plain, plain_footprint)):
        print(f"{name:<26}{median(rows, 'suspend_s'):>12.3f}{median(rows, 'resume_s'):>12.3f}  {footprint}")
    ack = statistics.median(max(r["acknowledged_ms"]) for r in drained)
    rebuilt = statistics.median(max(r["rebuilt_ms"]) for r in drained)
    print(f"drain acknowledged in {ack:.0f} ms, rebuilt in {rebuilt:.0f} ms (medians of the slower rank)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": args.ranks, "hold_mib": args.hold_mib, "rounds": args.rounds, "drained": {"footprint_mib": job_footprint, "rounds": drained},
                       "plain": {"footprint_mib": plain_footprint, "rounds": plain}}, f, indent=1)


if __name__ == "__main__":
    main()
