"""Jobs kept whole through the drain, no on_rebuild code: DDP, FSDP2,
DTensor, pipeline parallelism and the frameworks on two GPUs, four ranks
on four, and torchrun "nodes"; each drained twice, moved, bit-exact."""

import os
import tempfile

from harness.jobs import FRAMEWORK_RANK, ParallelJob, TrainJob, kept_across_nodes, kept_through_two_drains
from harness.procs import gpu_of
from harness.registry import RAW, expect, scenario


@scenario("groups kept: DDP (and DDP started by torch's own init_process_group after install()), FSDP2 (1-D mesh) and DTensor tensor parallelism on two GPUs over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the same group objects, losses bit-exact against two untouched runs that agree", gpus=2)
def groups_kept(tools):
    result = {}
    RAW["groups_kept"] = result
    said = []
    steps = 40
    for name, mode, env in (("fsdp2", "fsdp2", None), ("tp", "tp", None), ("ddp", "ddp", None), ("ddp_install", "ddp", {"INSTALL": "1"})):
        result[name], line = kept_through_two_drains(tools, name, steps, lambda pause: ParallelJob(mode, steps, pause, env=env))
        said.append(line)
    return "; ".join(said)


@scenario("two nodes: torchrun as two nodes on one host (--nnodes 2, static rendezvous), two ranks each on GPUs of its own, DDP and FSDP2 on a 2 x 2 HSDP mesh over NCCL, started through the client: one cudackpt per node drains and resumes its node, both at once, then the second 4 s after the first; the ranks agree among themselves, keep their groups and finish bit-exact against two untouched runs that agree", gpus=4)
def two_nodes_kept(tools):
    result = {}
    RAW["two_nodes_kept"] = result
    said = []
    # Long enough that the staggered round (at step 15, the second node
    # asked 4 s after the first, 0.15 s a step) lands before the last step.
    steps = 80
    for mode in ("ddp", "fsdp2_hsdp"):
        result[mode], line = kept_across_nodes(
            tools, mode, steps, lambda pause: ParallelJob(mode, steps, pause, ranks=4, nodes=2), ranks=4)
        said.append(line)
    return "; ".join(said)


@scenario("frameworks kept: a PyTorch Lightning Trainer (DDP strategy) and a transformers Trainer (accelerate's DDP) on two GPUs over NCCL, the client's callback the only cudackpt code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the DDP's group the same registered default group, losses bit-exact against two untouched runs that agree", gpus=2)
def frameworks_kept(tools):
    result = {}
    RAW["frameworks_kept"] = result
    said = []
    steps = 40
    for mode in ("lightning", "transformers"):
        result[mode], line = kept_through_two_drains(
            tools, mode, steps, lambda pause: ParallelJob(mode, steps, pause, script=FRAMEWORK_RANK))
        said.append(line)
    return "; ".join(said)


@scenario("pipeline kept: pipeline parallelism (torch.distributed.pipelining, GPipe, one stage a GPU) over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the same group objects, losses bit-exact against two untouched runs that agree", gpus=2)
def pipeline_kept(tools):
    steps = 40
    RAW["pipeline_kept"], line = kept_through_two_drains(tools, "pp", steps, lambda pause: ParallelJob("pp", steps, pause))
    return line


@scenario("four GPUs kept: DDP, FSDP2 (1-D mesh and a 2 x 2 HSDP mesh) and DTensor tensor parallelism, 4 ranks over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map moving every rank to the next GPU (0->1, 1->2, 2->3, 3->0); the same group objects, losses bit-exact against two untouched runs that agree", gpus=4)
def four_gpus_kept(tools):
    result = {}
    RAW["four_gpus_kept"] = result
    said = []
    steps = 40
    for mode in ("fsdp2", "ddp", "tp", "fsdp2_hsdp"):
        result[mode], line = kept_through_two_drains(
            tools, mode, steps, lambda pause: ParallelJob(mode, steps, pause, ranks=4), ranks=4)
        said.append(line)
    return "; ".join(said)


@scenario("a DDP training job (torchrun, 2 ranks, NCCL on NVLink, transformers Llama): two untouched runs agree; suspend --drain --tree and resume, then suspend --drain and resume --map onto the swapped GPUs: the job rebuilds on the new devices and finishes with the same losses, bit for bit", gpus=2)
def ddp_drain_and_migrate(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-ddp-")
    result = {}
    RAW["ddp_drain_and_migrate"] = result
    steps = 30
    args = ("--steps", steps, "--backend", "nccl", "--ddp")
    runs = []
    for name in ("reference-1", "reference-2"):
        with TrainJob(os.path.join(base, name), *args, torchrun=True, nproc=2) as job:
            job.wait_done(timeout=300)
            runs.append((job.losses(0), job.losses(1)))
    expected = runs[0][0]
    expect(len([l for l in expected if l]) == steps, f"the reference made {len(expected)} steps")
    expect(runs[0] == runs[1], f"two untouched runs differ: {[(a, b) for a, b in zip(runs[0][0], runs[1][0]) if a != b][:3]}")
    expect(runs[0][0] == runs[0][1], "both ranks log the same all-reduced loss")
    with TrainJob(os.path.join(base, "moved"), *args, "--pause", "0.3", torchrun=True, nproc=2) as job:
        job.wait_step(6, timeout=240)
        ranks = [job.status(r)["pid"] for r in range(2)]
        result["gpus_before"] = {pid: gpu_of(pid) for pid in ranks}
        down = tools.json("suspend", "--drain", "--tree", job.p.pid)
        drained = {q["pid"]: q["drain"] for q in down["processes"] if q["pid"] in ranks}
        expect(all(d["outcome"] == "drained" for d in drained.values()), f"{down}")
        result["suspend"] = down
        up = tools.json("resume", "--tree", job.p.pid)
        result["resume"] = up
        expect(all((q.get("drain") or {}).get("outcome") == "rebuilt" for q in up["processes"] if q["pid"] in ranks), f"{up}")
        job.wait_step(14, timeout=240)
        down2 = tools.json("suspend", "--drain", "--tree", job.p.pid)
        result["suspend_2"] = down2
        gpus = [g["uuid"] for g in tools.json("devices")["gpus"]]
        moved = tools.json("resume", "--tree", job.p.pid, "--map", f"{gpus[0]}={gpus[1]}")
        result["resume_moved"] = moved
        result["gpus_after"] = {pid: gpu_of(pid) for pid in ranks}
        expect(all(result["gpus_after"][pid] != result["gpus_before"][pid] for pid in ranks),
               f"each rank should run on the other GPU: before {result['gpus_before']}, after {result['gpus_after']}")
        job.wait_done(timeout=300)
        result["losses_equal"] = job.losses(0) == expected
        expect(job.losses(0) == expected and job.losses(1) == expected,
               f"losses differ from the untouched runs: {[(a, b) for a, b in zip(job.losses(0), expected) if a != b][:3]}")
        rank_rows = lambda doc: [q for q in doc["processes"] if q["pid"] in ranks]
        released = [q["drain"].get("released_bytes", 0) >> 20 for q in rank_rows(down)]
        return (f"two untouched runs agree ({steps} losses); suspend --drain {down['duration_ms'] / 1000:.2f} s (released {released} MiB a rank), "
                f"resume {up['duration_ms'] / 1000:.2f} s; again, then resume --map {moved['duration_ms'] / 1000:.2f} s: ranks moved "
                f"{result['gpus_before']} -> {result['gpus_after']}; finished with the same losses, bit for bit")
