#!/usr/bin/env python3
"""A deterministic PyTorch training job for the GPU suite and the shrink
benchmark: a transformers Llama model built from a config with random
weights (nothing downloaded), AdamW, bf16 autocast, synthetic tokens made
from each sample's index (so DataLoader workers and any rerun make the same
batches), and the drain client's point() after every step.

    python3 tests/gpu/train.py WORK [--size small|bench] [--steps N]
        [--workers N] [--pause S] [--hold] [--no-client]
        [--no-dumpable-forks] [--floor-bytes N] [--backend gloo|nccl] [--ddp]

It appends `STEP LOSS` (LOSS as float.hex(), for bit-exact comparisons) to
WORK/losses.txt and rewrites WORK/status.json after every step: its PID,
the step, each step's time (`step_s`), reserved and allocated bytes,
drains. With --hold it stays after
the last step, still at a safe point every 50 ms, and makes one more step
(timed, in status "extra_steps") each time WORK/step appears, until
WORK/stop appears. --floor-bytes N holds N bytes of live tensors and
nothing else (the benchmark's floor). Under torchrun it joins a process
group (gloo, or NCCL with --backend nccl, each rank on GPU LOCAL_RANK) and
all-reduces its loss; with --ddp the model is wrapped in
DistributedDataParallel (wrapped again after a drain's rebuild) and each
rank takes every WORLD_SIZE-th batch. With more than one rank, each writes
losses-RANK.txt and status-RANK.json.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

#: cuda; cpu only to try the script where there is no GPU.
DEVICE = os.environ.get("TRAIN_DEVICE", "cuda")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))
import cudackpt_drain  # noqa: E402

SIZES = {
    # A quick job for the suite's scenarios.
    "small": dict(vocab=1024, hidden=256, intermediate=688, layers=4, heads=4, batch=8, seq=128),
    # The job: 12 layers, hidden 1024, batch 8 x 1024.
    "bench": dict(vocab=32000, hidden=1024, intermediate=2752, layers=12, heads=16, batch=8, seq=1024),
}


class Tokens(torch.utils.data.Dataset):
    """Sample i is the same tokens in any process, any run."""

    def __init__(self, count, seq, vocab):
        self.count, self.seq, self.vocab = count, seq, vocab

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return torch.randint(0, self.vocab, (self.seq,), generator=generator)


#: "" for one process; "-RANK" for each rank of a job of several.
SUFFIX = ""


def write_status(work, status):
    path = os.path.join(work, f"status{SUFFIX}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(status, f)
    os.replace(path + ".tmp", path)


def model_for(size):
    from transformers import LlamaConfig, LlamaForCausalLM

    s = SIZES[size]
    config = LlamaConfig(
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["heads"],
        max_position_embeddings=s["seq"],
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(DEVICE)


def memory():
    """reserved and allocated bytes, as PyTorch's allocator counts them."""
    if DEVICE != "cuda":
        return {"reserved": 0, "allocated": 0}
    return {"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("work")
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--no-client", action="store_true")
    parser.add_argument("--no-dumpable-forks", action="store_true")
    parser.add_argument("--floor-bytes", type=int, default=0)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--ddp", action="store_true")
    args = parser.parse_args()
    global SUFFIX
    work = args.work
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    status = {"pid": os.getpid(), "step": 0, "drains": 0, "extra_steps": []}

    dist = None
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        import torch.distributed as dist

        if args.backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(args.backend)
    if world > 1:
        SUFFIX = f"-{rank}"
    # The model as the loop calls it; a DDP wrapper holds the process
    # group, so the rebuild wraps the module again.
    held = {}

    def rewrap():
        if "module" in held:
            from torch.nn.parallel import DistributedDataParallel

            devices = [torch.cuda.current_device()] if DEVICE == "cuda" else None
            held["model"] = DistributedDataParallel(held["module"], device_ids=devices)

    drain = None if args.no_client else cudackpt_drain.Drain(
        dumpable_forks=not args.no_dumpable_forks, on_rebuild=[rewrap]
    )

    def point():
        if drain is not None and drain.point():
            status["drains"] = drain.drains
            status.update(memory())
            write_status(work, status)

    if args.floor_bytes:
        live = torch.ones(args.floor_bytes // 4, device=DEVICE)
        status.update(memory(), held=True)
        write_status(work, status)
        while not os.path.exists(os.path.join(work, "stop")):
            point()
            time.sleep(0.05)
        status["sum_ok"] = live.sum().item() == float(live.numel())
        write_status(work, status)
        return

    s = SIZES[args.size]
    model = model_for(args.size)
    held["model"] = model
    if args.ddp:
        held["module"] = model
        rewrap()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = Tokens((args.steps + 1000) * s["batch"] * world, s["seq"], s["vocab"])
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=s["batch"],
        num_workers=args.workers,
        multiprocessing_context="fork" if args.workers else None,
        sampler=torch.utils.data.DistributedSampler(data, world, rank, shuffle=False) if world > 1 else None,
    )
    batches = iter(loader)
    losses = open(os.path.join(work, f"losses{SUFFIX}.txt"), "a")

    def train_step():
        tokens = next(batches).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = held["model"](input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = loss.detach().float()
        if dist is not None:
            dist.all_reduce(value)
        return value.item()

    status["step_s"] = []
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        loss = train_step()
        status["step_s"].append(time.perf_counter() - started)
        losses.write(f"{step} {loss.hex()}\n")
        losses.flush()
        status.update(memory(), step=step)
        write_status(work, status)
        point()
        if args.pause:
            time.sleep(args.pause)
    status["done"] = True
    write_status(work, status)
    if not args.hold:
        return
    step_file, stop = os.path.join(work, "step"), os.path.join(work, "stop")
    while not os.path.exists(stop):
        if os.path.exists(step_file):
            started = time.perf_counter()
            train_step()
            status["extra_steps"].append(time.perf_counter() - started)
            os.unlink(step_file)
            status.update(memory())
            write_status(work, status)
        point()
        time.sleep(0.05)


if __name__ == "__main__":
    main()
