#!/usr/bin/env python3
"""PyTorch targets for the GPU suite.

    torch_target.py single STATUS_DIR      one process with a CUDA tensor
    torch_target.py ipc STATUS_DIR         a parent and a child sharing one
                                            CUDA tensor (torch.multiprocessing,
                                            CUDA IPC underneath)
    torch_target.py nccl STATUS_DIR        a two-rank torch.distributed job
                                            (NCCL, one GPU per rank) doing an
                                            all-reduce every second; NCCL's
                                            transports follow the environment

Every process writes `STATUS_DIR/<pid>` once a second: `ok <sum>` while its
tensor reads back as filled, `bad <sum>` otherwise. A checkpointed process
writes nothing (its CUDA calls wait). The first line on stdout is
`PIDS <pid> [<pid>]`.
"""

import os
import sys
import time

import torch
import torch.multiprocessing as mp

EXPECTED = 1024 * 1024 * 7.0


def report_forever(tensor, status_dir):
    path = os.path.join(status_dir, str(os.getpid()))
    while True:
        total = tensor.sum().item()
        word = "ok" if total == EXPECTED else "bad"
        with open(path + ".tmp", "w") as f:
            f.write(f"{word} {total} {time.time()}\n")
        os.replace(path + ".tmp", path)
        time.sleep(1)


def child(tensor, status_dir):
    report_forever(tensor, status_dir)


def rank(index, status_dir):
    import torch.distributed as dist

    torch.cuda.set_device(index)
    dist.init_process_group("nccl", rank=index, world_size=2)
    path = os.path.join(status_dir, str(os.getpid()))
    while True:
        value = torch.ones(1024, device="cuda")
        dist.all_reduce(value)
        total = value.sum().item()
        word = "ok" if total == 2048.0 else "bad"
        with open(path + ".tmp", "w") as f:
            f.write(f"{word} {total} {time.time()}\n")
        os.replace(path + ".tmp", path)
        time.sleep(1)


def main():
    mode, status_dir = sys.argv[1], sys.argv[2]
    if mode == "nccl":
        os.environ.setdefault("MASTER_PORT", "29531")
        os.environ.update(MASTER_ADDR="127.0.0.1", WORLD_SIZE="2", NCCL_NVLS_ENABLE="0")
        ctx = mp.get_context("spawn")
        ranks = [ctx.Process(target=rank, args=(i, status_dir), daemon=True) for i in range(2)]
        for r in ranks:
            r.start()
        print(f"PIDS {ranks[0].pid} {ranks[1].pid}", flush=True)
        for r in ranks:
            r.join()
        return
    tensor = torch.full((1024, 1024), 7.0, device="cuda")
    if mode == "single":
        print(f"PIDS {os.getpid()}", flush=True)
        report_forever(tensor, status_dir)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=child, args=(tensor, status_dir), daemon=True)
    p.start()
    print(f"PIDS {os.getpid()} {p.pid}", flush=True)
    report_forever(tensor, status_dir)


if __name__ == "__main__":
    main()
