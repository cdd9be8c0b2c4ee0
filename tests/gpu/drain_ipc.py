#!/usr/bin/env python3
"""A CUDA IPC pair that speaks the drain protocol, for the GPU suite: the
parent shares a CUDA tensor with its child through torch.multiprocessing
(cudaIpcGetMemHandle/OpenMemHandle underneath). On a drain each drops what
it shares (the child its view, then torch.cuda.ipc_collect(); the parent
its tensor); on the rebuild the parent shares a new tensor and the child
takes it.

    python3 tests/gpu/drain_ipc.py STATUS_DIR [single]

With `single`, one process and no child: a single-GPU PyTorch process with
the client and no process group. With SHRINK_LIVE_MIB and SHRINK_FREED_MIB
set, that process holds a live tensor of the first size and has freed
scratch tensors of the second into PyTorch's cache (reserved, not
allocated): what a drain releases. Its status then gives
`reserved`/`allocated` bytes too. The first line on stdout is
`PIDS <parent> [<child>]`. Each process writes
STATUS_DIR/<pid>.json after every step (its sum right or not, drains done)
and stops when STATUS_DIR/stop exists.
"""

import gc
import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))
import cudackpt_drain  # noqa: E402

EXPECTED = 1024 * 1024 * 7.0


def fresh():
    return torch.full((1024, 1024), 7.0, device="cuda")


def report(status_dir, state):
    path = os.path.join(status_dir, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def loop(status_dir, holder, drain):
    state = {"pid": os.getpid(), "ok": True, "steps": 0, "drains": 0}
    stop = os.path.join(status_dir, "stop")
    expected = holder.get("expected", EXPECTED)
    while not os.path.exists(stop):
        total = holder["tensor"].sum().item()
        state["ok"] &= total == expected
        state["reserved"] = torch.cuda.memory_reserved()
        state["allocated"] = torch.cuda.memory_allocated()
        state["steps"] += 1
        if drain.point():
            state["drains"] = drain.drains
        report(status_dir, state)
        time.sleep(0.05)


def child(queue, status_dir):
    holder = {"tensor": queue.get()}

    def drop():
        holder["tensor"] = None
        gc.collect()
        torch.cuda.ipc_collect()

    def take():
        holder["tensor"] = queue.get()

    loop(status_dir, holder, cudackpt_drain.Drain(on_release=[drop], on_rebuild=[take]))


def main():
    status_dir = sys.argv[1]
    if sys.argv[2:] == ["single"]:
        holder = {"tensor": fresh()}
        live_mib = int(os.environ.get("SHRINK_LIVE_MIB", "0"))
        if live_mib:
            elements = live_mib * 1024 * 1024 // 4
            holder = {"tensor": torch.full((elements,), 1.0, device="cuda"), "expected": float(elements)}
            scratch = [torch.empty(256 * 1024 * 1024 // 4, device="cuda") for _ in range(int(os.environ["SHRINK_FREED_MIB"]) // 256)]
            del scratch  # freed into the cache: reserved, not allocated
        print(f"PIDS {os.getpid()}", flush=True)
        loop(status_dir, holder, cudackpt_drain.Drain())
        return
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    holder = {"tensor": fresh()}
    kid = ctx.Process(target=child, args=(queue, status_dir), daemon=True)
    kid.start()
    queue.put(holder["tensor"])
    print(f"PIDS {os.getpid()} {kid.pid}", flush=True)

    def drop():
        holder["tensor"] = None
        gc.collect()
        torch.cuda.ipc_collect()

    def reshare():
        holder["tensor"] = fresh()
        queue.put(holder["tensor"])

    loop(status_dir, holder, cudackpt_drain.Drain(on_release=[drop], on_rebuild=[reshare]))
    kid.join(timeout=30)


if __name__ == "__main__":
    main()
