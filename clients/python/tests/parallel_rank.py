"""One rank of a small training job that tests/test_groups.py drives on CPU
(gloo), and the GPU suite on GPUs (DEVICE=cuda: NCCL, one GPU a rank): a
model trained deterministically, wrapped as MODE says (``ddp``:
DistributedDataParallel over the world; ``fsdp2``: FSDP2's fully_shard on
a 1-D DeviceMesh; ``fsdp2_hsdp``: on a 2-D mesh, replicated across one
dimension and sharded across the other; ``tp``: DTensor tensor
parallelism, column- then row-wise, on a 1-D mesh; ``pp``: pipeline
parallelism, one stage a rank, GPipe), with the drain point
between steps and no ``on_rebuild`` code. Every group starts through
``cudackpt_drain.init_process_group``; with INSTALL=1 through torch's own
``init_process_group`` after ``cudackpt_drain.install()`` (as a framework
calls it); with PLAIN=1 torch's own groups, the old way (rebuilt by the
client as a new default group).

Arguments: MODE STEPS LOG. It logs each step's loss (float.hex) and how
long the step took (``took=STEP SECONDS``: the first step after a resume
pays for the rebuilt communicators' first use), what it drained, the TCP sockets it held before and after each release (gloo's
pairs: the proof that the old communicators are gone), whether every group
the model holds is the object it had at the start, and whether each is
registered with torch."""

import os
import sys
import time

import torch
import torch.distributed as dist

import cudackpt_drain
from ranks import tcp_sockets


DEVICE = os.environ.get("DEVICE", "cpu")


def device_of(rank):
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def model_for(mode, rank, world):
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).to(device_of(rank))
    if mode == "ddp":
        wrapped = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
        return wrapped, [wrapped.process_group]
    if mode in ("fsdp2", "fsdp2_hsdp"):
        from torch.distributed.fsdp import fully_shard

        if mode == "fsdp2":
            mesh = init_device_mesh(DEVICE, (world,), mesh_dim_names=("shard",))
        else:
            mesh = init_device_mesh(DEVICE, (2, world // 2), mesh_dim_names=("replicate", "shard"))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, [mesh.get_group(name) for name in mesh.mesh_dim_names]
    if mode == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(DEVICE, (world,), mesh_dim_names=("tp",))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        return model, [mesh.get_group("tp")]
    if mode == "pp":
        pipeline = Pipeline(rank, world)
        return pipeline, [pipeline.group()]
    raise SystemExit(f"unknown mode {mode}")


class Pipeline:
    """Pipeline parallelism (torch.distributed.pipelining, GPipe): one
    stage a rank, four microbatches a step, point-to-point sends between
    neighbours. Its "loss" is the loss on the last stage and a sum of the
    stage's parameters elsewhere, so every rank's drift shows."""

    def __init__(self, rank, world):
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        torch.manual_seed(0)
        widths = [32] + [64] * (world - 1) + [8]
        layers = [torch.nn.Linear(widths[i], widths[i + 1]) for i in range(world)]
        part = layers[rank] if rank == world - 1 else torch.nn.Sequential(layers[rank], torch.nn.ReLU())
        self.module = part.to(device_of(rank))
        self.first, self.last = rank == 0, rank == world - 1
        self.stage = PipelineStage(self.module, rank, world, device_of(rank))
        self.schedule = ScheduleGPipe(self.stage, n_microbatches=4, loss_fn=lambda out, target: (out**2).mean())

    def parameters(self):
        return self.module.parameters()

    def group(self):
        """The group the stage sends on (None: the default group, as it is
        now)."""
        return self.stage.group or dist.distributed_c10d._get_default_group()

    def train_step(self, x, optimizer):
        optimizer.zero_grad()
        losses = []
        if self.first:
            self.schedule.step(x)
        elif self.last:
            self.schedule.step(target=torch.zeros(16, 8, device=x.device), losses=losses)
        else:
            self.schedule.step()
        optimizer.step()
        if self.last:
            return sum(loss.item() for loss in losses)
        return sum(p.detach().sum() for p in self.module.parameters()).item()


def main():
    # `{RANK}` in the path: one command line for every rank (torchrun).
    mode, steps = sys.argv[1], int(sys.argv[2])
    log_path = sys.argv[3].replace("{RANK}", os.environ.get("RANK", "0"))
    backend = "nccl" if DEVICE == "cuda" else "gloo"
    if DEVICE == "cuda":
        torch.use_deterministic_algorithms(True)
    if os.environ.get("PLAIN") == "1":
        dist.init_process_group(backend)
    elif os.environ.get("INSTALL") == "1":
        # As a framework would: torch's own call, after install().
        cudackpt_drain.install()
        dist.init_process_group(backend=backend)
    else:
        cudackpt_drain.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model, held = model_for(mode, rank, world)
    # foreach=False: on CUDA the fused list ops meet plain and DTensor
    # gradients together (torch 2.11), which DTensor refuses.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
    sockets = []

    class Counted(cudackpt_drain.Drain):
        def release_cache(self):
            sockets.append(tcp_sockets())

    drain = Counted()
    before = tcp_sockets()
    # Tensor parallelism takes the same batch on every rank.
    data = torch.Generator().manual_seed(1000 + (0 if mode == "tp" else rank))
    device = device_of(rank)
    with open(log_path, "a", buffering=1) as log:
        log.write(f"pid={os.getpid()}\n")
        log.write(f"sockets_at_start={before}\n")
        for step in range(steps):
            started = time.perf_counter()
            x = torch.randn(16, 32, generator=data).to(device)
            if mode == "pp":
                value = model.train_step(x, optimizer)
            else:
                loss = (model(x) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                value = loss.item()  # waits for the step on a GPU
            log.write(f"took={step} {time.perf_counter() - started:.6f}\n")
            log.write(f"step={step} loss={value.hex()}\n")
            if drain.point():
                log.write(f"drained_at={step}\n")
            time.sleep(float(os.environ.get("STEP_SECONDS", "0.005")))
        log.write(f"drains={drain.drains}\n")
        # After a release, gloo's connections are gone (only the store's
        # remain): sockets counted at the first cache release of each drain.
        log.write(f"sockets_after_release={','.join(map(str, sockets[::2]))}\n")
        same = all(g is h for g, h in zip(held, model_for_groups(model, mode, held)))
        log.write(f"same_groups={same}\n")
        names = [getattr(g, "group_name", "") for g in held]
        registered = all(dist.distributed_c10d._resolve_process_group(n) is g for n, g in zip(names, held))
        log.write(f"registered={registered}\n")
    dist.destroy_process_group()


def model_for_groups(model, mode, held):
    """The groups the wrapped model holds now."""
    if mode == "ddp":
        return [model.process_group]
    if mode == "pp":
        return [model.group()]
    if mode == "tp":
        # The mesh the first layer's weight is sharded on.
        mesh = model[0].weight.device_mesh
        return [mesh.get_group("tp")]
    # The first layer's parameter group (the root holds no parameters).
    mesh = model[0]._get_fsdp_state()._fsdp_param_group.mesh_info.mesh
    return [mesh.get_group(name) for name in mesh.mesh_dim_names]


if __name__ == "__main__":
    main()
