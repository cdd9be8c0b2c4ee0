#!/usr/bin/env python3
"""A deterministic PyTorch training job for the GPU suite and the shrink
benchmark: a transformers Llama model built from a config with random
weights (nothing downloaded), AdamW, bf16 autocast, synthetic tokens made
from each sample's index (so DataLoader workers and any rerun make the same
batches), and the drain client's point() after every step.

    python3 tests/gpu/train.py WORK [--size small|bench] [--steps N]
        [--workers N] [--pause S] [--hold] [--no-client]
        [--no-dumpable-forks] [--floor-bytes N]

It appends `STEP LOSS` (LOSS as float.hex(), for bit-exact comparisons) to
WORK/losses.txt and rewrites WORK/status.json after every step: its PID,
the step, reserved and allocated bytes, drains. With --hold it stays after
the last step, still at a safe point every 50 ms, and makes one more step
(timed, in status "extra_steps") each time WORK/step appears, until
WORK/stop appears. --floor-bytes N holds N bytes of live tensors and
nothing else (the benchmark's floor). Under torchrun (WORLD_SIZE set) it
joins a gloo process group and all-reduces its loss.
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


def write_status(work, status):
    path = os.path.join(work, "status.json")
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
    args = parser.parse_args()
    work = args.work
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    status = {"pid": os.getpid(), "step": 0, "drains": 0, "extra_steps": []}

    dist = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    drain = None if args.no_client else cudackpt_drain.Drain(dumpable_forks=not args.no_dumpable_forks)

    def point():
        if drain is not None and drain.point():
            status["drains"] = drain.drains
            status.update(memory())
            write_status(work, status)

    if args.floor_bytes:
        held = torch.ones(args.floor_bytes // 4, device=DEVICE)
        status.update(memory(), held=True)
        write_status(work, status)
        while not os.path.exists(os.path.join(work, "stop")):
            point()
            time.sleep(0.05)
        status["sum_ok"] = held.sum().item() == float(held.numel())
        write_status(work, status)
        return

    s = SIZES[args.size]
    model = model_for(args.size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(
        Tokens((args.steps + 1000) * s["batch"], s["seq"], s["vocab"]),
        batch_size=s["batch"],
        num_workers=args.workers,
        multiprocessing_context="fork" if args.workers else None,
    )
    batches = iter(loader)
    losses = open(os.path.join(work, "losses.txt"), "a")

    def train_step():
        tokens = next(batches).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = loss.detach().float()
        if dist is not None:
            dist.all_reduce(value)
        return value.item()

    for step in range(1, args.steps + 1):
        loss = train_step()
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
