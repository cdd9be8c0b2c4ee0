"""cudackpt under a real Slurm (issue 60; docs/guide/slurm.md): Debian's
Slurm and munge, carried beside the binaries (BIN_DIR/slurm) since the GPU
host has neither, one node with the host's GPUs as gres, and the node's
service; `harness/slurm.sh` does the work, this checks what it said."""

import os
import re
import subprocess
import sys
import tempfile

from harness.registry import RAW, Skipped, expect, scenario

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "harness", "slurm.sh")
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


@scenario("Slurm: a user's (nobody's) one-rank NCCL torchrun job with DataLoader workers under `cudackpt slurm run`, preempted by a job wanting both GPUs, written to disk by the node's service, requeued, and brought back on the other GPU (a blocker holds the first), bit-exact", gpus=2)
def slurm_preempted(tools):
    carry = os.path.dirname(os.path.abspath(tools.cudackpt))
    for needed in ("slurm", os.path.join("criu", "criu")):
        if not os.path.exists(os.path.join(carry, needed)):
            raise Skipped(f"{needed} is not beside the binaries (Debian 12's Slurm and munge in BIN_DIR/slurm, CRIU in BIN_DIR/criu: see harness/slurm.sh)")
    out = os.path.join(tempfile.mkdtemp(prefix="cudackpt-slurm-"), "run")
    done = subprocess.run(["bash", SCRIPT, out], cwd=REPO, capture_output=True, text=True, timeout=480,
                          env=dict(os.environ, CARRY=carry, PYTHON=sys.executable))
    steps = open(os.path.join(out, "steps.txt")).read() if os.path.exists(os.path.join(out, "steps.txt")) else done.stdout[-3000:]
    RAW["slurm_preempted"] = {"steps": steps, "exit": done.returncode}
    expect("RESULT bit-exact" in steps, f"the job finished bit-exact: {steps[-2500:]}")
    expect("was written to disk at" in steps, f"the job was written to disk at its preemption: {steps[-2500:]}")
    moved = re.search(r"came back on (\S+) at \S+ from its snapshot .*in ([0-9.]+) s, onto the GPUs Slurm gave it \((GPU-[^=]+)=(GPU-[^),]+)\)", steps)
    expect(moved is not None, f"the job came back, saying onto which GPU: {steps[-2500:]}")
    expect(moved.group(3) != moved.group(4), f"the restart moved to the other GPU: {moved.group(0)}")
    dumped = re.search(r"written to disk at \S+ on \S+, ([0-9.]+) GB in ([0-9.]+) s", steps)
    return (f"preempted, written to disk ({dumped.group(1)} GB in {dumped.group(2)} s), requeued, "
            f"back on the other GPU in {moved.group(2)} s ({moved.group(3)[:12]}... to {moved.group(4)[:12]}...), bit-exact")
