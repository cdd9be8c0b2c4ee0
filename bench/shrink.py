#!/usr/bin/env python3
"""What the drain's shrink saves (bench/README.md, "The shrink"): a real
PyTorch training job (tests/gpu/train.py --size bench: a transformers
Llama, 12 layers, hidden 1024, batch 8 x 1024, AdamW, bf16 autocast,
random weights) after 20 steps, taken through `suspend`/`resume` with and
without `--drain`, with PyTorch's default allocator and with expandable
segments, against the floor: a process holding only as many bytes of live
tensors as the job has allocated. Also the first training step after each
resume (the cache grows back), and CRIU with cudackpt as its action script,
with and without CUDACKPT_DRAIN=1 (dump time, image size, restore time).
Run on a host with a GPU, as root:

    python3 bench/shrink.py --bin-dir DIR [--rounds 2] [--criu-dir C] [--json FILE]
    python3 bench/shrink.py --bin-dir DIR --ranks 2 [--rounds 2] [--json FILE]

With --ranks N, the job is a DDP job of N ranks over NCCL (torchrun, one
rank a GPU): a plain suspend of it is refused, so each allocator's drained
suspend is set against N floor processes, one per GPU.

DIR holds the release `cudackpt`; C a carried CRIU (as the GPU suite
takes it). Prints one table; --json writes every measurement. A benchmark,
not a test.
"""

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import harness
from harness import cudackpt

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "tests", "gpu", "train.py")
CLIENT = os.path.join(HERE, "..", "clients", "python", "src")
GIB = 1 << 30


# A training job's steps take a while to start; steps are polled closely.
wait_for = functools.partial(harness.wait_for, timeout=600, every=0.05)


class Job:
    """train.py in a session of its own, with --hold: it waits at a safe
    point and makes one timed step each time WORK/step appears."""

    def __init__(self, *args, env=None):
        self.work = tempfile.mkdtemp(prefix="cudackpt-shrink-")
        self.log = open(os.path.join(self.work, "job.log"), "w")
        self.p = subprocess.Popen([sys.executable, TRAIN, self.work, "--hold", *map(str, args)], stdin=subprocess.DEVNULL,
                                  stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=dict(os.environ, PYTHONPATH=CLIENT, **(env or {})))
        wait_for(lambda: self.status().get("done") or self.status().get("held") or self.p.poll() is not None, "the job's steps")
        if self.p.poll() is not None:
            raise SystemExit(f"the job exited {self.p.returncode}: {open(os.path.join(self.work, 'job.log')).read()[-2000:]}")
        self.pid = self.status()["pid"]

    def status(self):
        try:
            return json.load(open(os.path.join(self.work, "status.json")))
        except (OSError, ValueError):
            return {}

    def step(self):
        """One more training step, timed inside the job (seconds)."""
        before = len(self.status()["extra_steps"])
        open(os.path.join(self.work, "step"), "w").close()
        wait_for(lambda: len(self.status().get("extra_steps", [])) > before, "a step")
        return self.status()["extra_steps"][-1]

    def close(self):
        open(os.path.join(self.work, "stop"), "w").close()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for pid in [self.p.pid, self.pid]:
            try:
                os.killpg(pid, 9)
            except OSError:
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def process(doc):
    return doc["processes"][0]


def round_trip(binary, job, drain):
    """suspend (--drain) and resume, then the first step after: one row."""
    status = job.status()
    row = {"reserved": status["reserved"], "allocated": status["allocated"]}
    args = ("--drain",) if drain else ()
    _, down = cudackpt(binary, "suspend", *args, job.pid)
    q = process(down)
    row["suspend_s"] = q["duration_ms"] / 1000
    row["moved_bytes"] = q.get("gpu_memory_moved_bytes")
    if drain:
        row["released_bytes"] = q["drain"].get("released_bytes")
        row["footprint_bytes"] = q["drain"].get("footprint_bytes")
    _, up = cudackpt(binary, "resume", job.pid)
    row["resume_s"] = process(up)["duration_ms"] / 1000
    row["first_step_s"] = job.step()
    row["second_step_s"] = job.step()
    row["raw"] = {"suspend": down, "resume": up}
    return row


def criu_round_trip(binary, criu, job, drain, work):
    """criu dump (cudackpt as action script) and restore of the job's tree."""
    binary_criu, criu_env = criu
    images = os.path.join(work, "images")
    no_plugins = os.path.join(work, "no-plugins")
    os.makedirs(images)
    os.makedirs(no_plugins, exist_ok=True)
    env = dict(os.environ, **criu_env, **({"CUDACKPT_DRAIN": "1"} if drain else {}))
    started = time.monotonic()
    dump = subprocess.run([binary_criu, "dump", "-t", str(job.pid), "-D", images, "--libdir", no_plugins, "--action-script", binary,
                           "-o", "dump.log"], env=env, capture_output=True, text=True)
    row = {"dump_s": time.monotonic() - started}
    if dump.returncode != 0:
        raise SystemExit(f"criu dump exited {dump.returncode}: {open(os.path.join(images, 'dump.log')).read()[-1500:]}")
    row["image_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(images) for f in files)
    if job.p.poll() is None:
        job.p.wait(timeout=60)
    wait_for(lambda: not os.path.exists(f"/proc/{job.pid}"), "the dumped job to be reaped", timeout=60)
    started = time.monotonic()
    restore = subprocess.run([binary_criu, "restore", "-D", images, "--libdir", no_plugins, "--action-script", binary, "-d",
                              "-o", "restore.log"], env=dict(os.environ, **criu_env), capture_output=True, text=True)
    row["restore_s"] = time.monotonic() - started
    if restore.returncode != 0:
        raise SystemExit(f"criu restore exited {restore.returncode}: {open(os.path.join(images, 'restore.log')).read()[-1500:]}")
    row["first_step_s"] = job.step()
    shutil.rmtree(images)
    return row


class RankJob:
    """train.py under torchrun: RANKS ranks of a DDP job over NCCL, one per
    GPU, with a pause after each step so that a drain lands between steps."""

    def __init__(self, ranks, steps, pause, env=None):
        self.work = tempfile.mkdtemp(prefix="cudackpt-shrink-ranks-")
        self.ranks = ranks
        self.log = open(os.path.join(self.work, "job.log"), "w")
        self.p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                                   TRAIN, self.work, "--size", "bench", "--steps", str(steps), "--pause", str(pause),
                                   "--backend", "nccl", "--ddp"], stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  env=dict(os.environ, PYTHONPATH=CLIENT, NCCL_NVLS_ENABLE="0", **(env or {})))

    def status(self, rank):
        try:
            return json.load(open(os.path.join(self.work, f"status-{rank}.json")))
        except (OSError, ValueError):
            return {}

    def wait_step(self, step):
        wait_for(lambda: all(self.status(r).get("step", 0) >= step for r in range(self.ranks)) or self.p.poll() is not None,
                 f"step {step}")
        if self.p.poll() is not None:
            raise SystemExit(f"the job exited {self.p.returncode}: {open(os.path.join(self.work, 'job.log')).read()[-2000:]}")

    def close(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait(timeout=60)
        shutil.rmtree(self.work, ignore_errors=True)


def ranks_round_trip(binary, job, at_step):
    """suspend --drain --tree and resume --tree of the job at a step; the
    step after the resume, timed in rank 0."""
    job.wait_step(at_step)
    before = [job.status(r) for r in range(job.ranks)]
    _, down = cudackpt(binary, "suspend", "--drain", "--tree", job.p.pid)
    ranks = [q for q in down["processes"] if (q.get("drain") or {}).get("outcome") == "drained"]
    drained_at = job.status(0)["step"]
    _, up = cudackpt(binary, "resume", "--tree", job.p.pid)
    job.wait_step(drained_at + 2)
    steps = job.status(0)["step_s"]
    return {
        "reserved": [b["reserved"] for b in before],
        "allocated": [b["allocated"] for b in before],
        "released_bytes": [q["drain"].get("released_bytes") for q in ranks],
        "footprint_bytes": [q["drain"].get("footprint_bytes") for q in ranks],
        "suspend_s": down["duration_ms"] / 1000,
        "resume_s": up["duration_ms"] / 1000,
        "step_before_s": steps[drained_at - 1],
        "first_step_s": steps[drained_at],
        "raw": {"suspend": down, "resume": up},
    }


def two_ranks(binary, ranks, rounds):
    """The shrink of a DDP job over NCCL on RANKS GPUs (a plain suspend of
    it is refused: only a drained one can be checkpointed), with each
    allocator, against RANKS floor processes, one per GPU."""
    results = {"ranks": ranks, "jobs": {}}
    for name, env in [("default allocator", {}), ("expandable segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]:
        job = RankJob(ranks, steps=20 + 8 * rounds, pause=0.5, env=env)
        try:
            results["jobs"][name] = [ranks_round_trip(binary, job, 20 + 8 * i) for i in range(rounds)]
        finally:
            job.close()
    allocated = max(results["jobs"]["default allocator"][0]["allocated"])
    floors = []
    for gpu in range(ranks):
        floors.append(Job("--floor-bytes", allocated, env={"CUDA_VISIBLE_DEVICES": str(gpu)}))
    try:
        pids = [f.pid for f in floors]
        rows = []
        for _ in range(rounds):
            _, down = cudackpt(binary, "suspend", *pids)
            _, up = cudackpt(binary, "resume", *pids)
            rows.append({"suspend_s": down["duration_ms"] / 1000, "resume_s": up["duration_ms"] / 1000,
                         "moved_bytes": [q.get("gpu_memory_moved_bytes") for q in down["processes"]]})
        results["floor"] = rows
    finally:
        for f in floors:
            f.close()
    floor_s = median(rows, "suspend_s")
    print(f"\nshrink benchmark on {ranks} ranks (DDP over NCCL), medians of {rounds}; each rank's bytes")
    print(f"{'job':<36} {'alloc GiB':>10} {'resv GiB':>10} {'copied GiB':>10} {'suspend s':>9} {'x floor':>7} {'resume s':>8} {'step s':>7} {'1st step s':>10}")
    for name, rows_ in results["jobs"].items():
        r = rows_[0]
        print(f"{name + ', suspend --drain':<36} {max(r['allocated']) / GIB:>10.2f} {max(r['reserved']) / GIB:>10.2f} "
              f"{max(r['footprint_bytes']) / GIB:>10.2f} {median(rows_, 'suspend_s'):>9.2f} {median(rows_, 'suspend_s') / floor_s:>7.2f} "
              f"{median(rows_, 'resume_s'):>8.2f} {median(rows_, 'step_before_s'):>7.3f} {median(rows_, 'first_step_s'):>10.3f}")
    moved = max(results["floor"][0]["moved_bytes"] or [0])
    print(f"{'floor: only the live tensors':<36} {allocated / GIB:>10.2f} {allocated / GIB:>10.2f} {moved / GIB:>10.2f} "
          f"{floor_s:>9.2f} {1:>7.2f} {median(results['floor'], 'resume_s'):>8.2f}")
    return results


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--criu-dir", help="a carried CRIU: criu and lib/")
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--ranks", type=int, default=1, help="2 or more: a DDP job of that many ranks over NCCL, one per GPU")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.bin_dir), "cudackpt")
    if args.ranks > 1:
        results = two_ranks(binary, args.ranks, args.rounds)
        results["date"] = time.strftime("%Y-%m-%d")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        return
    criu = None
    if args.criu_dir:
        d = os.path.abspath(args.criu_dir)
        criu = (os.path.join(d, "criu"), {"LD_LIBRARY_PATH": os.path.join(d, "lib")})
    results = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "jobs": {}}

    for name, env in [("default allocator", {}), ("expandable segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]:
        job = Job("--size", "bench", "--steps", 20, env=env)
        try:
            steady = [job.step() for _ in range(2)]
            rows = {"plain": [], "drain": []}
            for _ in range(args.rounds):
                rows["plain"].append(round_trip(binary, job, drain=False))
                rows["drain"].append(round_trip(binary, job, drain=True))
            results["jobs"][name] = {"steady_step_s": statistics.median(steady), **rows}
            if criu and name == "default allocator":
                work = tempfile.mkdtemp(prefix="cudackpt-shrink-criu-")
                results["jobs"][name]["criu"] = {
                    "plain": criu_round_trip(binary, criu, job, False, work),
                    "drain": criu_round_trip(binary, criu, job, True, work),
                }
                shutil.rmtree(work, ignore_errors=True)
        finally:
            job.close()
    allocated = results["jobs"]["default allocator"]["plain"][0]["allocated"]
    floor = Job("--floor-bytes", allocated)
    try:
        rows = []
        for _ in range(args.rounds):
            _, down = cudackpt(binary, "suspend", floor.pid)
            _, up = cudackpt(binary, "resume", floor.pid)
            rows.append({"allocated": allocated, "reserved": floor.status()["reserved"], "suspend_s": process(down)["duration_ms"] / 1000,
                         "resume_s": process(up)["duration_ms"] / 1000, "moved_bytes": process(down).get("gpu_memory_moved_bytes")})
        results["floor"] = rows
    finally:
        floor.close()

    floor_s = median(results["floor"], "suspend_s")
    print(f"\nshrink benchmark, medians of {args.rounds} (suspend/resume as cudackpt reports them; steps timed in the job)")
    print(f"{'process':<44} {'alloc GiB':>9} {'resv GiB':>9} {'copied GiB':>10} {'suspend s':>9} {'x floor':>7} {'resume s':>8} {'1st step s':>10}")
    for name, job in results["jobs"].items():
        for mode in ["plain", "drain"]:
            rows = job[mode]
            copied = median(rows, "footprint_bytes" if mode == "drain" else "moved_bytes")
            print(f"{name + (', suspend --drain' if mode == 'drain' else ', suspend'):<44} {median(rows, 'allocated') / GIB:>9.2f} "
                  f"{median(rows, 'reserved') / GIB:>9.2f} {(copied or 0) / GIB:>10.2f} {median(rows, 'suspend_s'):>9.2f} "
                  f"{median(rows, 'suspend_s') / floor_s:>7.2f} {median(rows, 'resume_s'):>8.2f} {median(rows, 'first_step_s'):>10.3f}")
        print(f"{name + ', a step with nothing checkpointed':<44} {'':>9} {'':>9} {'':>10} {'':>9} {'':>7} {'':>8} {job['steady_step_s']:>10.3f}")
    print(f"{'floor: only the live tensors':<44} {median(results['floor'], 'allocated') / GIB:>9.2f} {median(results['floor'], 'reserved') / GIB:>9.2f} "
          f"{(median(results['floor'], 'moved_bytes') or 0) / GIB:>10.2f} {floor_s:>9.2f} {1:>7.2f} {median(results['floor'], 'resume_s'):>8.2f}")
    c = results["jobs"]["default allocator"].get("criu")
    if c:
        print(f"\nCRIU with cudackpt as action script (default allocator): dump s, images GB, restore s, first step s")
        for mode in ["plain", "drain"]:
            r = c[mode]
            label = "CUDACKPT_DRAIN=1" if mode == "drain" else "no drain"
            print(f"  {label:<18} {r['dump_s']:>7.2f} {r['image_bytes'] / 1e9:>8.2f} {r['restore_s']:>8.2f} {r['first_step_s']:>8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
