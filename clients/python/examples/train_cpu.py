"""A two-rank training job on CPU that cudackpt can drain: the client's
first example, which needs no GPU (gloo, CPU tensors).

    pip install ./clients/python      # into an environment with torch
    torchrun --nproc-per-node 2 clients/python/examples/train_cpu.py

Each rank prints its loss at every step. ``cudackpt suspend --drain --tree
PID`` (PID: torchrun's) asks both ranks to drain at their next safe point;
``cudackpt resume --tree PID`` brings them back, they build their group
again and go on with the losses a run never drained has.

Arguments, all optional: STEPS (100), PAUSE between steps in seconds
(0.1), and LOSSES_DIR, where each rank also writes ``STEP LOSS`` lines
(LOSS as ``float.hex()``, to compare runs bit for bit) to
``losses-RANK.txt``.
"""

import os
import sys
import time

import cudackpt_drain

# Where torch is missing, say so and how to get it (a bare `import torch`
# would say only "No module named 'torch'").
cudackpt_drain.require_torch()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    losses_dir = sys.argv[3] if len(sys.argv) > 3 else None

    # Instead of torch.distributed.init_process_group: the same arguments,
    # and the group stays the same object through every drain.
    cudackpt_drain.init_process_group("gloo")
    drain = cudackpt_drain.Drain()
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    losses = None
    if losses_dir:
        losses = open(os.path.join(losses_dir, f"losses-{rank}.txt"), "w", buffering=1)

    for step in range(steps):
        loss = model(torch.randn(32, 64, generator=data)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
        if losses:
            losses.write(f"{step} {loss.item().hex()}\n")
        # A safe point: here the rank drains when asked, and comes back.
        if drain.point():
            print(f"rank {rank} drained and rebuilt after step {step}", flush=True)
        time.sleep(pause)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
