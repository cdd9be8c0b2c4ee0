"""PyTorch processes cudackpt must refuse (a CUDA IPC pair, NCCL over
P2P/SHM), the harm --force does to them, and the ones it takes as they are."""

import json
import time

from harness.jobs import TorchTargets
from harness.registry import expect, scenario


@scenario("CUDA IPC pair (torch.multiprocessing): suspend refused before any change (exit 8); data intact")
def ipc_pair_refused(tools):
    with TorchTargets("ipc") as pair:
        expect(pair.all_ok_since(0), "the pair never reported its data")
        maps = [open(f"/proc/{pid}/maps").read() for pid in pair.pids]
        expect(all("/dev/shm/cuda.shm." in m for m in maps), "both should map the driver's IPC file")
        checked = tools.json("check", *pair.pids, expect_code=8)
        doc = tools.json("suspend", *pair.pids, expect_code=8)
        kinds = sorted(p["error"]["kind"] for p in doc["processes"])
        expect("unrestorable" in kinds, f"kinds {kinds}")
        refused_by = lambda d: sorted(p["pid"] for p in d["processes"] if (p.get("error") or {}).get("kind") == "unrestorable")
        expect(refused_by(checked) == refused_by(doc), f"check refused {refused_by(checked)}, suspend {refused_by(doc)}")
        for pid in pair.pids:
            expect(tools.state(pid) == "running", f"PID {pid} must still run")
        expect(pair.all_ok_since(time.time()), "the pair stopped reporting good data after the refusal")
        message = next(p["error"]["message"] for p in doc["processes"] if p["error"]["kind"] == "unrestorable")
        return message[:160]


@scenario("the harm the refusal prevents: the same pair suspended with --force cannot be resumed")
def ipc_pair_forced(tools):
    with TorchTargets("ipc") as pair:
        expect(pair.all_ok_since(0), "the pair never reported its data")
        down = tools.json("suspend", "--force", *pair.pids)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"suspend --force: {down}")
        code, out, _ = tools.run("--json", "resume", *pair.pids)
        up = json.loads(out)
        expect(code != 0, f"the resume was expected to fail on this driver: {up}")
        states = {p["pid"]: tools.state(p["pid"]) for p in up["processes"]}
        errors = [p.get("error", {}).get("cuda_error") for p in up["processes"]]
        return f"resume exited {code}; states after {states}; driver errors {errors}"


@scenario("single-GPU PyTorch process: no NCCL warning; suspend and resume; data intact")
def torch_single(tools):
    with TorchTargets("single") as one:
        expect(one.all_ok_since(0), "the process never reported its data")
        pid = one.pids[0]
        expect("libnccl" in open(f"/proc/{pid}/maps").read(), "PyTorch maps libnccl (else this proves nothing)")
        down = tools.json("suspend", pid)
        p = down["processes"][0]
        expect(p["state"] == "checkpointed" and not p.get("warnings"), f"suspend: {p}")
        up = tools.json("resume", pid)
        expect(up["processes"][0]["state"] == "running", f"resume: {up}")
        expect(one.all_ok_since(time.time()), "data after the round trip")
        return "libnccl mapped, no warning"


@scenario("the harm the NCCL refusal prevents: a two-rank job over P2P/SHM suspended with --force cannot be resumed", gpus=2)
def nccl_job_forced(tools):
    with TorchTargets("nccl", env={"MASTER_PORT": "29533"}) as job:
        expect(job.all_ok_since(0, timeout=120), "the job never all-reduced")
        down = tools.json("suspend", "--force", *job.pids)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"suspend --force: {down}")
        code, out, _ = tools.run("--json", "resume", *job.pids)
        up = json.loads(out)
        expect(code != 0, f"the resume was expected to fail on this driver: {up}")
        again, _, _ = tools.run("--json", "resume", *job.pids)
        states = {pid: tools.state(pid) for pid in job.pids}
        expect(any(s != "running" for s in states.values()), f"the job came back after all: {states}")
        errors = [p.get("error", {}).get("cuda_error") for p in up["processes"]]
        return f"resume exited {code}, a second resume {again}; states after {states}; driver errors {errors}"


@scenario("two-rank NCCL job: refused by default; over sockets it suspends, resumes and goes on", gpus=2)
def nccl_job(tools):
    with TorchTargets("nccl") as job:
        expect(job.all_ok_since(0, timeout=120), "the job never all-reduced")
        doc = tools.json("suspend", *job.pids, expect_code=8)
        kinds = sorted(p["error"]["kind"] for p in doc["processes"])
        expect(kinds.count("unrestorable") == 2, f"both ranks refused: {kinds}")
        expect(job.all_ok_since(time.time()), "the job stopped after the refusal")
    with TorchTargets("nccl", env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "MASTER_PORT": "29532"}) as sockets:
        expect(sockets.all_ok_since(0, timeout=120), "the socket job never all-reduced")
        down = tools.json("suspend", *sockets.pids)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        warned = [w for p in down["processes"] for w in p.get("warnings", [])]
        expect(len(warned) == 2 and all("socket transport" in w for w in warned), f"warnings {warned}")
        up = tools.json("resume", *sockets.pids)
        expect(all(p["state"] == "running" for p in up["processes"]), f"{up}")
        expect(sockets.all_ok_since(time.time(), timeout=120), "the job did not go on after the round trip")
        return "P2P/SHM job refused (2 x unrestorable); socket job round-tripped and all-reduced again"
