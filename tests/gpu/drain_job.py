#!/usr/bin/env python3
"""A torchrun job for the GPU suite's drain scenarios: every rank holds a
seeded tensor on its GPU, all-reduces at every step, and calls the drain
client's point() between steps (clients/python). Run it as

    torchrun --nproc-per-node 2 tests/gpu/drain_job.py STATUS_DIR

Environment: HOLD_MIB (the tensor each rank holds, default 1024),
STEP_SECONDS (default 0.05), STALL_RANK and STALL_SECONDS (that rank's
drain takes that long: a rank that does not acknowledge in time), STALL_AT
(release: before its tear-down, the default; acknowledge: after it;
rebuild: its rebuild takes that long, its marker up all the while),
NO_DRAIN=1 (no client: a job that does not speak the protocol),
DRAIN_BACKEND=gloo (both ranks on GPU 0, all-reduces on the CPU: the
torchrun store and the client on a host with one GPU),
BANDWIDTH_MIB (the all-reduce measured at the start and after every drain,
default 256).

Each rank writes STATUS_DIR/rank<N>.json after every step: its PID, the
steps done, the drains done, whether every all-reduce was right, and the
all-reduce bus bandwidth measured before and after each drain. It stops
when STATUS_DIR/stop exists, checks its held tensor against the seed, and
exits 0 only if everything was right.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def bus_bandwidth(mib, world, device):
    """The bus bandwidth of an all-reduce of `mib` MiB, in GB/s."""
    x = torch.ones(mib * 1024 * 1024 // 4, device=device)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    runs = 10
    started = time.perf_counter()
    for _ in range(runs):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / runs
    del x
    return round(2 * (world - 1) / world * mib * 1024 * 1024 / seconds / 1e9, 1)


def main():
    status_dir = sys.argv[1]
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    backend = os.environ.get("DRAIN_BACKEND", "nccl")
    local = int(os.environ.get("LOCAL_RANK", "0")) if backend == "nccl" else 0
    torch.cuda.set_device(local)
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group(backend)
    # Where the all-reduces happen: the GPU for NCCL, the CPU for gloo.
    device = "cuda" if backend == "nccl" else "cpu"
    rank, world = dist.get_rank(), dist.get_world_size()
    hold_mib = int(os.environ.get("HOLD_MIB", "1024"))
    step_seconds = float(os.environ.get("STEP_SECONDS", "0.05"))
    bw_mib = int(os.environ.get("BANDWIDTH_MIB", "256"))
    generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
    held = torch.randint(0, 1 << 30, (hold_mib * 1024 * 1024 // 8,), dtype=torch.int64, device="cuda", generator=generator)
    expected = int(held.sum().item())

    state = {"pid": os.getpid(), "rank": rank, "steps": 0, "drains": 0, "sums_ok": True, "bandwidth_gbps": [bus_bandwidth(bw_mib, world, device)]}

    drain = None
    if os.environ.get("NO_DRAIN") != "1":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))
        import cudackpt_drain

        stall, slow_rebuild = [], []
        if os.environ.get("STALL_RANK") == str(rank):
            pause = lambda: time.sleep(float(os.environ.get("STALL_SECONDS", "10")))
            if os.environ.get("STALL_AT", "release") == "release":
                stall.append(pause)
            elif os.environ.get("STALL_AT") == "rebuild":
                slow_rebuild.append(pause)
            else:
                # After the groups are gone, before the acknowledgement: a
                # rank slow to finish its own part of the drain.
                release = cudackpt_drain._Group.release
                cudackpt_drain._Group.release = lambda group: (release(group), pause())
        drain = cudackpt_drain.Drain(on_release=stall, on_rebuild=slow_rebuild)

    def write():
        path = os.path.join(status_dir, f"rank{rank}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)

    write()
    stop = os.path.join(status_dir, "stop")
    while True:
        # The stop rides on the step's all-reduce, so every rank stops at
        # the same step (one that stopped alone would hang the other).
        value = torch.full((1024,), float(rank + 1), device=device)
        value[0] = 1.0 if os.path.exists(stop) else 0.0
        dist.all_reduce(value)
        if value[0].item() > 0:
            break
        state["sums_ok"] &= bool(torch.all(value[1:] == world * (world + 1) / 2).item())
        state["steps"] += 1
        if drain is not None and drain.point():
            state["drains"] = drain.drains
            state["bandwidth_gbps"].append(bus_bandwidth(bw_mib, world, device))
        write()
        time.sleep(step_seconds)
    state["held_ok"] = int(held.sum().item()) == expected
    write()
    dist.destroy_process_group()
    sys.exit(0 if state["sums_ok"] and state["held_ok"] else 1)


if __name__ == "__main__":
    main()
