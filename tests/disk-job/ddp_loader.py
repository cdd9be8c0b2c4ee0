"""A torchrun training job for `dump`/`undump` tests: DDP over gloo on CPU
(or, with DDP_BACKEND=nccl, over NCCL with each rank on GPU LOCAL_RANK),
groups started with cudackpt_drain.init_process_group, a Drain point after
every step, and a DataLoader with two forked workers yielding 16 x 128 x
1024 float32 batches (8 MiB, handed over in unlinked /dev/shm files).
Arguments: WORK STEPS [PAUSE]. Each rank appends `STEP LOSS` (LOSS as
float.hex(), for bit-exact comparisons) to WORK/losses-RANK.txt, and
writes WORK/done-RANK once it finished every step. With DDP_COMPILE=1 the
DDP module is torch.compile'd (inductor's compile-worker pool runs beside
the ranks, as in a compiled job), and each drain's `for_dump` is appended
to WORK/drains-RANK.txt."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import cudackpt_drain


class Batches(Dataset):
    """Sample i is the same 128 x 1024 floats in any process, any run."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, index):
        return torch.randn(128, 1024, generator=torch.Generator().manual_seed(index))


def main():
    work, steps = sys.argv[1], int(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    backend = os.environ.get("DDP_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        torch.backends.cudnn.deterministic = True
    cudackpt_drain.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1024, 1).to(device))
    if os.environ.get("DDP_COMPILE") == "1":
        model = torch.compile(model)
        # The pool a larger compiled model starts (this one may compile
        # without it).
        from torch._inductor.async_compile import AsyncCompile

        AsyncCompile.warm_pool()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    drains = open(os.path.join(work, f"drains-{rank}.txt"), "a", buffering=1)
    drain = cudackpt_drain.Drain(on_release=[lambda: drains.write(f"{drain.for_dump}\n")])
    world = dist.get_world_size()
    loader = DataLoader(Batches(), batch_size=16, num_workers=2, sampler=range(rank, 1 << 20, world))
    with open(os.path.join(work, f"losses-{rank}.txt"), "a", buffering=1) as losses:
        for step, batch in enumerate(loader):
            if step == steps:
                break
            loss = model(batch.to(device)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.write(f"{step} {loss.item().hex()}\n")
            drain.point()
            time.sleep(pause)
    open(os.path.join(work, f"done-{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
