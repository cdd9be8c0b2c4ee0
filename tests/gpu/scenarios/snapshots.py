"""Snapshots a job survives (SPEC section 17): `dump --leave-running` of a
torchrun NCCL job while it runs, and its images brought back after the job
ended and at once after a crash, bit-exact."""

import os
import shutil
import subprocess
import tempfile
import time

from harness.procs import kill_and_reap
from harness.registry import RAW, expect, scenario
from scenarios.disk import ddp_at_step, ddp_done, ddp_loader, ddp_losses, disk


def final_losses(text):
    """Each step's loss, the last line of a step winning (a restored run
    appends again from its snapshot's step)."""
    found = {}
    for line in text.splitlines():
        step, _, loss = line.partition(" ")
        found[int(step)] = loss
    return found


def longest_pause(work, started, ended):
    """The longest gap between two steps of rank 0 that spans any of
    [started, ended] (wall clock): what the job waited for a snapshot."""
    path = os.path.join(work, "times-0.txt")
    stamps = sorted(float(line.split()[1]) for line in open(path) if len(line.split()) == 2)
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b >= started and a <= ended]
    return max(gaps, default=0.0)


def gone(pids, timeout):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if not any(os.path.exists(f"/proc/{p}") for p in pids):
            return True
        time.sleep(0.05)
    return False


@scenario("snapshots a job survives: a torchrun job of two NCCL ranks with DDP and fork DataLoader workers, its output in a file, snapshotted twice with dump --drain --leave-running while it runs (it finishes bit-exact); the second snapshot undumped after the job ended, then again at once after a kill -9 of the whole job, each time finishing bit-exact", gpus=2)
def snapshot_torchrun(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-snapshots-")
    steps = 60
    reference = os.path.join(base, "reference")
    p = ddp_loader(reference, steps, 0)
    try:
        expect(ddp_done(reference, 240), f"the reference run finished: {open(os.path.join(reference, 'job.log')).read()[-1500:]}")
    finally:
        kill_and_reap(p)
    expected = [final_losses(t) for t in ddp_losses(reference)]
    work = os.path.join(base, "job")
    p = ddp_loader(work, steps, 0.3)
    said = {}
    try:
        step = lambda: len(ddp_losses(work)[0].splitlines())  # noqa: E731
        ddp_at_step(work, 6, 420)
        first_at = time.time()
        first, first_s = disk(tools, "dump", "--drain", "--leave-running", "--to", os.path.join(base, "first"), p.pid)
        ddp_at_step(work, step() + 4, 120)
        first_pause = longest_pause(work, first_at, first_at + first_s)
        second_dir = os.path.join(base, "second")
        at_second = step()
        second_at = time.time()
        second, second_s = disk(tools, "dump", "--drain", "--leave-running", "--to", second_dir, p.pid)
        ddp_at_step(work, step() + 2, 120)
        second_pause = longest_pause(work, second_at, second_at + second_s)
        expect(ddp_done(work, 300), f"the job finished after two snapshots: {open(os.path.join(work, 'job.log')).read()[-1500:]}")
        p.wait(timeout=60)
        finished = [final_losses(t) for t in ddp_losses(work)]
        expect(finished == expected, "the job snapshotted twice finished bit-exact")
        pids = [q["pid"] for q in second["manifest"]["processes"]]
        expect(gone(pids, 30), "the ended job's processes are gone")
        # After it ended.
        for r in range(2):
            os.remove(os.path.join(work, f"done-{r}"))
        ended, ended_s = disk(tools, "undump", second_dir)
        ddp_at_step(work, step() + 3, 120)
        # At once after a crash.
        subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
        crashed_at = time.monotonic()
        expect(gone(pids, 30), "the crashed job's processes are gone")
        waited = time.monotonic() - crashed_at
        crashed, crashed_s = disk(tools, "undump", second_dir)
        expect(ddp_done(work, 300), f"the job restored after its crash finished: {open(os.path.join(work, 'job.log')).read()[-1500:]}")
        finished = [final_losses(t) for t in ddp_losses(work)]
        said = {"first": first, "second": second, "after_end": ended, "after_crash": crashed, "pauses_s": [first_pause, second_pause]}
        expect(finished == expected, "restored after it ended, then at once after a crash: finished bit-exact")
        warnings = lambda doc: [w.split(":")[0] for w in doc.get("warnings", [])]  # noqa: E731
        return (f"snapshots at steps 6 and {at_second} ({first_s:.1f} s, {second_s:.1f} s; {second['manifest']['image_bytes'] / 1e9:.2f} GB; the job's longest step gap across each, "
                f"its pause: {first_pause:.1f} s, {second_pause:.1f} s, against 0.3 s a step), the job finished bit-exact; "
                f"undump after it ended {ended_s:.1f} s ({warnings(ended)}), at once after a crash ({waited:.1f} s for its processes to go) {crashed_s:.1f} s ({warnings(crashed)}); "
                f"{steps} losses a rank bit-exact")
    finally:
        RAW["snapshot_torchrun"] = said
        subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
        kill_and_reap(p)
        shutil.rmtree(base, ignore_errors=True)
