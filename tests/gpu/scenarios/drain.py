"""The drain handshake (cudackpt(1), DRAIN PROTOCOL) on real ranks and
processes: round trips, the harm without it, a rank that does not answer,
cudackpt killed mid-drain, the shrink, and a job in its own namespaces."""

import json
import os
import select
import subprocess
import sys
import tempfile
import time

from harness.jobs import DRAIN_IPC, DrainJob, first_steps, split_ranks, start_single, stop_drain_ipc
from harness.procs import gpus_free_mib, limit_headroom, memory_cgroup, shows_marker, state_or_gone, wait_for
from harness.registry import Failed, RAW, expect, scenario
from harness.tools import Target


@scenario("drain: a torchrun job on one GPU over gloo (the torchrun store, the client): suspend --drain, resume, rebuilt, finishes right")
def drain_round_trip_gloo(tools):
    with DrainJob(env={"DRAIN_BACKEND": "gloo", "HOLD_MIB": "512", "BANDWIDTH_MIB": "16"}) as job:
        job.wait_steps(10)
        down = tools.json("suspend", "--drain", "--tree", job.launcher)
        ranks, others = split_ranks(down, job)
        expect(len(ranks) == 2 and all(p["state"] == "checkpointed" and p["drain"]["outcome"] == "drained" for p in ranks), f"{down}")
        # torchrun's agent is a CUDA process to the driver, with no handler
        # and no rank: left out of the handshake, checkpointed as it is.
        expect(all(p["state"] == "checkpointed" and p["drain"]["outcome"] == "not_needed" for p in others), f"{others}")
        steps = job.steps()
        up = tools.json("resume", "--tree", job.launcher)
        expect(all(p["state"] == "running" for p in up["processes"]), f"{up}")
        expect(all(p["drain"]["outcome"] == "rebuilt" for p in up["processes"] if p["pid"] in job.pids), f"{up}")
        job.wait_steps(max(steps) + 10)
        code, finished = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] and r["drains"] == 1 for r in finished), f"exit {code}: {finished}")
        RAW["drain_round_trip_gloo"] = {"suspend": down, "resume": up, "ranks": finished}
        ack = [round(p["drain"]["acknowledged_ms"]) for p in ranks]
        rebuilt = [round(p["drain"]["rebuilt_ms"]) for p in up["processes"] if p["pid"] in job.pids]
        return f"2 ranks on GPU 0 and torchrun's agent ({len(others)} left out, not_needed): acks {ack} ms, rebuilds {rebuilt} ms, finished right"


@scenario("drain: the harm first: the same job without the client suspended with --force cannot be resumed", gpus=2)
def drain_harm_forced(tools):
    with DrainJob(env={"NO_DRAIN": "1"}) as job:
        job.wait_steps(5)
        down = tools.json("suspend", "--force", "--tree", job.launcher)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        code, out, _ = tools.run("--json", "resume", "--tree", job.launcher)
        up = json.loads(out)
        again, _, _ = tools.run("--json", "resume", "--tree", job.launcher)
        states = {pid: tools.state(pid) for pid in job.pids}
        expect(code != 0 and any(s != "running" for s in states.values()), f"the job came back: {up} {states}")
        errors = [p.get("error", {}).get("cuda_error") for p in up["processes"]]
        RAW["drain_harm_forced"] = {"suspend": down, "resume": up, "states_after": states}
        return f"resume exited {code}, again {again}; states {states}; driver errors {errors}"


@scenario("drain: a torchrun job on NVLink drains, is checkpointed (GPUs freed), resumes, rebuilds, finishes with right values; all-reduce bandwidth the same before and after", gpus=2)
def drain_round_trip(tools):
    with DrainJob(env={"HOLD_MIB": "2048"}) as job:
        job.wait_steps(10)
        free_before = gpus_free_mib(tools)
        refused = tools.json("suspend", "--tree", job.launcher, expect_code=8)
        refused_ranks, refused_others = split_ranks(refused, job)
        expect(len(refused_ranks) == 2 and all(p["error"]["kind"] == "unrestorable" for p in refused_ranks), f"without --drain: {refused}")
        expect(all(p["error"]["kind"] == "not_attempted" for p in refused_others), f"without --drain, torchrun's agent: {refused}")
        checked = tools.json("check", "--drain", "--tree", job.launcher)
        started = time.monotonic()
        down = tools.json("suspend", "--drain", "--tree", job.launcher)
        suspend_s = time.monotonic() - started
        ranks, others = split_ranks(down, job)
        expect(len(ranks) == 2, f"both ranks: {down}")
        for p in ranks:
            expect(p["state"] == "checkpointed", f"{p}")
            expect(p["drain"]["outcome"] == "drained" and "WORLD_SIZE" in p["drain"].get("exempted", ""), f"{p}")
        expect(all(p["state"] == "checkpointed" and p["drain"]["outcome"] == "not_needed" for p in others), f"torchrun's agent: {others}")
        free_during = gpus_free_mib(tools)
        # The job's two ranks hold GPUs 0 and 1: on a host with more, the
        # others are not the job's to free.
        freed = [d - b for b, d in zip(free_before, free_during)][:2]
        expect(all(f >= 2048 for f in freed), f"the job's GPUs were freed: free MiB {free_before} -> {free_during}")
        steps = job.steps()
        time.sleep(1)
        expect(job.steps() == steps, "no step while checkpointed")
        started = time.monotonic()
        up = tools.json("resume", "--tree", job.launcher)
        resume_s = time.monotonic() - started
        expect(all(p["state"] == "running" for p in up["processes"]), f"{up}")
        for p in split_ranks(up, job)[0]:
            expect(p["drain"]["outcome"] == "rebuilt", f"{p}")
        wait_for("a step after the rebuild", lambda: all(s > t for s, t in zip(job.steps(), steps)))
        wait_for("the bandwidth after the rebuild", lambda: all(len(r["bandwidth_gbps"]) >= 2 for r in job.ranks()))
        job.wait_steps(max(steps) + 10)
        code, finished = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] and r["drains"] == 1 for r in finished), f"the job: exit {code}, {finished}")
        bandwidth = [r["bandwidth_gbps"] for r in finished]
        RAW["drain_round_trip"] = {"check": checked, "suspend": down, "resume": up, "free_mib_before": free_before,
                                   "free_mib_checkpointed": free_during, "bandwidth_gbps": bandwidth,
                                   "suspend_wall_s": round(suspend_s, 3), "resume_wall_s": round(resume_s, 3)}
        ack = [round(p["drain"]["acknowledged_ms"]) for p in ranks]
        rebuilt = [round(p["drain"]["rebuilt_ms"]) for p in split_ranks(up, job)[0]]
        return (f"suspend --drain {suspend_s:.2f} s (acks {ack} ms), resume {resume_s:.2f} s (rebuilds {rebuilt} ms); "
                f"freed {freed} MiB; bus bandwidth GB/s before/after {bandwidth}")


@scenario("drain: the price users avoid: the socket-only job's all-reduce bandwidth", gpus=2)
def drain_sockets_bandwidth(tools):
    with DrainJob(env={"NO_DRAIN": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}) as job:
        job.wait_steps(3)
        code, ranks = job.finish()
        expect(code == 0, f"exit {code}: {job.tail()}")
        bandwidth = [r["bandwidth_gbps"][0] for r in ranks]
        RAW["drain_sockets_bandwidth"] = {"bandwidth_gbps": bandwidth}
        return f"bus bandwidth over sockets: {bandwidth} GB/s"


@scenario("drain: a rank that does not acknowledge in time: exit 12, nothing locked, the other rank rebuilds, the job finishes right", gpus=2)
def drain_never_acknowledges(tools):
    # Rank 1 stalls after its tear-down, before its acknowledgement: a
    # stall before it would hold rank 0 too (NCCL's tear-down waits for
    # its peer, measured on 2 x H200), and no rank would have drained.
    with DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "7", "STALL_AT": "acknowledge"}) as job:
        job.wait_steps(5)
        started = time.monotonic()
        doc = tools.json("suspend", "--drain", "--drain-timeout", "5s", "--tree", job.launcher, expect_code=12)
        took = time.monotonic() - started
        ranks, _ = split_ranks(doc, job)
        kinds = {p["pid"]: p["error"]["kind"] for p in ranks}
        outcomes = {p["pid"]: p["drain"]["outcome"] for p in ranks}
        expect(sorted(kinds.values()) == ["drain_timeout", "not_attempted"], f"{doc}")
        expect(sorted(outcomes.values()) == ["not_acknowledged", "rebuilt"], f"the rank that drained rebuilt: {doc}")
        expect(all(p["error"]["kind"] == "not_attempted" for p in split_ranks(doc, job)[1]), f"{doc}")
        expect(all(tools.state(pid) == "running" for pid in job.pids), "nothing locked")
        steps = job.steps()
        wait_for("steps after the call-off", lambda: all(s > t for s, t in zip(job.steps(), steps)), 120)
        code, finished = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] for r in finished), f"exit {code}: {finished}")
        RAW["drain_never_acknowledges"] = {"suspend": doc, "ranks": finished}
        return f"exit 12 after {took:.1f} s; kinds {sorted(kinds.values())}; outcomes {sorted(outcomes.values())}; job finished right"


@scenario("drain: kill -9 of cudackpt mid-drain, then recover: the ranks rebuild and the job finishes right", gpus=2)
def drain_killed_then_recovered(tools):
    with DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "6", "STALL_AT": "acknowledge"}) as job:
        job.wait_steps(5)
        pids = job.pids
        p = subprocess.Popen([tools.cudackpt, "--json", "suspend", "--drain", "--tree", str(job.launcher)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for("rank 0 to acknowledge", lambda: shows_marker(pids[0]), 60)
        p.kill()
        p.wait()
        intents = os.listdir("/run/cudackpt/intents")
        expect(intents, "the killed cudackpt left its intent record")
        refused, _, _ = tools.run("suspend", *pids)
        expect(refused == 10, f"another cudackpt refuses the group until recover: exit {refused}")
        rec = tools.json("recover")
        outcomes = {p["pid"]: (p.get("drain") or {}).get("outcome") for p in rec["processes"]}
        steps = job.steps()
        wait_for("steps after recover", lambda: all(s > t for s, t in zip(job.steps(), steps)), 120)
        code, ranks = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] for r in ranks), f"exit {code}: {ranks}")
        expect(not os.listdir("/run/cudackpt/intents"), "recover removed the record")
        RAW["drain_killed_then_recovered"] = {"recover": rec, "ranks": ranks}
        return f"record {intents}; another cudackpt exited {refused}; recover outcomes {outcomes}; job finished right"


@scenario("drain: kill -9 of cudackpt while a resumed job's ranks rebuild, then recover: the record is finished forward (nothing locked or checkpointed again), each rank rebuilds once, the job finishes right", gpus=2)
def drain_resume_killed_then_finished(tools):
    with DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "8", "STALL_AT": "rebuild"}) as job:
        job.wait_steps(5)
        pids = job.pids
        tools.json("suspend", "--drain", "--tree", str(job.launcher))
        p = subprocess.Popen([tools.cudackpt, "--json", "resume", "--tree", str(job.launcher)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Rank 0 rebuilds at once; rank 1 takes 8 s, its marker up.
        wait_for("rank 0 to rebuild", lambda: not shows_marker(pids[0]) and shows_marker(pids[1]), 60)
        p.kill()
        p.wait()
        intents = os.listdir("/run/cudackpt/intents")
        expect(intents, "the killed resume left its intent record")
        states = {pid: state_or_gone(tools, pid) for pid in pids}
        expect(all(s == "running" for s in states.values()), f"the resume's calls were made: {states}")
        refused, _, _ = tools.run("suspend", *pids)
        expect(refused == 10, f"another cudackpt refuses the group until recover: exit {refused}")
        rec = tools.json("recover")
        steps = {p["pid"]: [s["step"] for s in p.get("steps", [])] for p in rec["processes"]}
        expect(not any(steps.values()), f"recover made no driver step: {steps}")
        wait_for("rank 1 to finish its rebuild", lambda: not shows_marker(pids[1]), 60)
        before = job.steps()
        wait_for("steps after recover", lambda: all(s > t for s, t in zip(job.steps(), before)), 120)
        code, ranks = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] for r in ranks), f"exit {code}: {ranks}")
        drains = [r["drains"] for r in ranks]
        expect(not os.listdir("/run/cudackpt/intents"), "recover removed the record")
        RAW["drain_resume_killed_then_finished"] = {"recover": rec, "ranks": ranks}
        return f"record {intents}; another cudackpt exited {refused}; recover made no driver step {steps}; drains {drains}; job finished right"


@scenario("drain: a single-GPU PyTorch process with the client: check --drain predicts, suspend --drain, resume rebuilds, data right; a rank with no handler is never sent the signal, a plain process with none is left out")
def drain_single_torch(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-drain-single-")
    p = start_single(work)
    # The project's target under a launcher's WORLD_SIZE: a rank to the
    # evidence, with no handler for signal 40 (whose default kills it).
    bystander = Target(tools, size_mib=256, env={"WORLD_SIZE": "2"})
    plain = Target(tools, size_mib=256, seed=2)
    try:
        pid, status = first_steps(p, work)
        refused = tools.json("suspend", "--drain", pid, bystander.pid, expect_code=8)
        kinds = {q["pid"]: q["error"]["kind"] for q in refused["processes"]}
        expect(kinds.get(bystander.pid) == "cannot_drain", f"{refused}")
        expect(tools.state(bystander.pid) == "running" and bystander.p.poll() is None, "the bystander was not signalled (signal 40 would have killed it)")
        expect(not shows_marker(pid) and tools.state(pid) == "running", "nothing was sent to the group")
        bystander.verify()
        checked = tools.json("check", "--drain", pid, plain.pid)
        outcomes = {q["pid"]: q["drain"]["outcome"] for q in checked["processes"]}
        expect(outcomes == {pid: "would_drain", plain.pid: "not_needed"}, f"{checked}")
        down = tools.json("suspend", "--drain", pid, plain.pid)
        outcomes = {q["pid"]: (q["state"], q["drain"]["outcome"]) for q in down["processes"]}
        expect(outcomes == {pid: ("checkpointed", "drained"), plain.pid: ("checkpointed", "not_needed")}, f"{down}")
        steps = status()["steps"]
        up = tools.json("resume", pid, plain.pid)
        expect(next(q for q in up["processes"] if q["pid"] == pid)["drain"]["outcome"] == "rebuilt", f"{up}")
        plain.verify()
        wait_for("steps after the rebuild", lambda: status()["steps"] > steps + 3)
        expect(status()["ok"] and status()["drains"] == 1, f"{status()}")
        RAW["drain_single_torch"] = {"refused": refused, "check": checked, "suspend": down, "resume": up}
        mine = lambda doc: next(q for q in doc["processes"] if q["pid"] == pid)["drain"]
        return (f"a rank with no handler refused cannot_drain and alive; drained in {mine(down)['acknowledged_ms']:.0f} ms, "
                f"rebuilt in {mine(up)['rebuilt_ms']:.0f} ms, data right; a plain target left out (not_needed), data intact")
    finally:
        bystander.close()
        plain.close()
        stop_drain_ipc(p, work)


@scenario("shrink: a PyTorch process holding 1 GiB live and 6 GiB freed into its cache: a plain suspend copies all it reserved; suspend --drain empties the cache first, NVML shows the bytes released, the checkpoint is faster, data right after the resume")
def drain_shrink(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-drain-shrink-")
    p = start_single(work, SHRINK_LIVE_MIB="1024", SHRINK_FREED_MIB="6144")
    try:
        pid, status = first_steps(p, work)
        reserved = status()["reserved"]
        expect(reserved >= 7 << 30, f"the process reserved {reserved >> 20} MiB, expected 7 GiB: {status()}")
        plain = tools.json("suspend", pid)
        plain_ms = plain["processes"][0]["duration_ms"]
        moved = plain["processes"][0].get("gpu_memory_moved_bytes") or 0
        tools.json("resume", pid)
        down = tools.json("suspend", "--drain", pid)
        q = down["processes"][0]
        drain = q["drain"]
        released, footprint = drain.get("released_bytes", 0), drain.get("footprint_bytes", 0)
        expect(q["state"] == "checkpointed" and drain["outcome"] == "drained", f"{down}")
        expect(released >= 5 << 30, f"NVML should show about 6 GiB released: {drain}")
        expect(footprint <= (1 << 30) + (768 << 20), f"what is left to copy should be about 1 GiB and the context: {drain}")
        steps = status()["steps"]
        up = tools.json("resume", pid)
        expect(up["processes"][0]["drain"]["outcome"] == "rebuilt", f"{up}")
        wait_for("steps after the rebuild", lambda: status()["steps"] > steps + 3)
        expect(status()["ok"] and status()["drains"] == 1, f"{status()}")
        RAW["drain_shrink"] = {"plain_suspend": plain, "suspend": down, "resume": up, "status": status()}
        return (f"plain suspend {plain_ms / 1000:.2f} s (moved {moved / 2**30:.1f} GiB); suspend --drain {q['duration_ms'] / 1000:.2f} s, "
                f"released {released / 2**30:.1f} GiB, left {footprint / 2**30:.2f} GiB; resume {up['processes'][0]['duration_ms'] / 1000:.2f} s; data right")
    finally:
        stop_drain_ipc(p, work)


@scenario("toggle --drain: a PyTorch process with the client and no process group shrinks, is checkpointed, and the next toggle restores and rebuilds it; data right")
def toggle_drain(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-toggle-drain-")
    p = start_single(work, SHRINK_LIVE_MIB="1024", SHRINK_FREED_MIB="2048")
    try:
        pid, status = first_steps(p, work)
        down = tools.json("toggle", "--drain", pid)
        q = down["processes"][0]
        expect(q["state"] == "checkpointed" and q["drain"]["outcome"] == "drained", f"{down}")
        released = q["drain"].get("released_bytes", 0)
        expect(released >= 3 << 29, f"NVML should show about 2 GiB released: {q['drain']}")
        steps = status()["steps"]
        up = tools.json("toggle", pid)
        r = up["processes"][0]
        expect(r["state"] == "running" and (r.get("drain") or {}).get("outcome") == "rebuilt", f"{up}")
        wait_for("steps after the rebuild", lambda: status()["steps"] > steps + 3)
        expect(status()["ok"] and status()["drains"] == 1, f"{status()}")
        RAW["toggle_drain"] = {"toggle_down": down, "toggle_up": up}
        return (f"toggle --drain {q['duration_ms'] / 1000:.2f} s, released {released / 2**30:.1f} GiB; "
                f"toggle back {r['duration_ms'] / 1000:.2f} s, rebuilt, data right")
    finally:
        stop_drain_ipc(p, work)


@scenario("shrink under a memory limit: a job that fits its cgroup only once shrunk is refused without --drain and checkpointed with it; one that does not fit even then is refused after the drain, which is called off (running, rebuilt, data right)")
def cgroup_drain_shrink(tools):
    cg = memory_cgroup("cudackpt-shrink")
    work = tempfile.mkdtemp(prefix="cudackpt-cg-shrink-")
    p = subprocess.Popen(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", sys.executable, DRAIN_IPC, work, "single"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                         env=dict(os.environ, SHRINK_LIVE_MIB="1024", SHRINK_FREED_MIB="6144"))
    result = {}
    RAW["cgroup_drain_shrink"] = result
    try:
        pid, status = first_steps(p, work)
        # 4 GiB of headroom: the 7.6 GiB it reserved does not fit, the
        # 1.6 GiB it keeps once the cache is emptied does.
        result["memory_current"] = limit_headroom(cg, 4 << 30)
        plain = tools.json("suspend", pid, expect_code=8)
        result["plain"] = plain
        error = plain.get("error") or plain["processes"][0]["error"]
        expect(error["kind"] == "insufficient_host_memory" and tools.state(pid) == "running", f"{plain}")
        down = tools.json("suspend", "--drain", pid)
        result["drained"] = down
        q = down["processes"][0]
        expect(q["state"] == "checkpointed" and q["drain"]["outcome"] == "drained", f"{down}")
        steps = status()["steps"]
        result["resume"] = tools.json("resume", pid)
        wait_for("steps after the rebuild", lambda: status()["steps"] > steps + 3)
        # 1 GiB of headroom: even the shrunk footprint does not fit.
        result["memory_current_2"] = limit_headroom(cg, 1 << 30)
        refused = tools.json("suspend", "--drain", pid, expect_code=8)
        result["refused_after_drain"] = refused
        error = refused.get("error") or refused["processes"][0]["error"]
        expect(error["kind"] == "insufficient_host_memory", f"{refused}")
        expect(tools.state(pid) == "running", "refused after the drain: still running")
        wait_for("no marker", lambda: not shows_marker(pid), 60)
        steps = status()["steps"]
        wait_for("steps after the call-off", lambda: status()["steps"] > steps + 3)
        expect(status()["ok"] and status()["drains"] == 2, f"drained twice (the second called off), data right: {status()}")
        return (f"4 GiB headroom: plain suspend refused ({error['kind']}), suspend --drain {q['duration_ms'] / 1000:.2f} s "
                f"(released {q['drain'].get('released_bytes', 0) / 2**30:.1f} GiB); 1 GiB headroom: refused after the drain: "
                f"{error['message'][:160]}; running, rebuilt, data right")
    finally:
        stop_drain_ipc(p, work)
        try:
            os.rmdir(cg)
        except OSError:
            pass


@scenario("drain trust: a launcher's rank is refused without a drain; lock --drain then checkpoint (the drained record vouches); kill -9 mid-drain, then recover: one rebuild, data right")
def drain_vouched_and_recovered(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-drain-vouched-")
    p = start_single(work, WORLD_SIZE="2")
    try:
        pid, status = first_steps(p, work)
        # Its launcher environment refuses a plain checkpoint.
        refused = tools.json("suspend", pid, expect_code=8)
        expect(refused["processes"][0]["error"]["kind"] == "unrestorable" and tools.state(pid) == "running", f"{refused}")
        # Drained at its lock by one command, checkpointed by the next.
        locked = tools.json("lock", "--drain", pid)
        expect(locked["processes"][0]["drain"]["outcome"] == "drained", f"{locked}")
        expect(os.path.exists(f"/run/cudackpt/drained/{pid}.json"), "the drained record")
        ckpt = tools.json("checkpoint", pid)
        expect(ckpt["processes"][0]["state"] == "checkpointed", f"{ckpt}")
        up = tools.json("resume", pid)
        expect(up["processes"][0]["drain"]["outcome"] == "rebuilt", f"{up}")
        expect(not os.path.exists(f"/run/cudackpt/drained/{pid}.json"), "forgotten once rebuilt")
        steps = status()["steps"]
        wait_for("steps after the rebuild", lambda: status()["steps"] > steps + 3)
        # A cudackpt killed the moment the process acknowledges.
        k = subprocess.Popen([tools.cudackpt, "--json", "suspend", "--drain", str(pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for("the acknowledgement", lambda: shows_marker(pid) or k.poll() is not None, 60)
        k.kill()
        k.wait()
        left = [n for n in os.listdir("/run/cudackpt/intents") if n.endswith(".json")]
        # Killed too late (it had finished), there is no record: resume it.
        rec = tools.json("recover") if left else tools.json("resume", pid)
        wait_for("no marker", lambda: not shows_marker(pid), 60)
        expect(tools.state(pid) == "running", "running after recover")
        steps = status()["steps"]
        wait_for("steps after recover", lambda: status()["steps"] > steps + 3)
        final = status()
        expect(final["ok"] and final["drains"] == 2, f"two drains, each rebuilt once, data right: {final}")
        RAW["drain_vouched_and_recovered"] = {"refused": refused, "lock": locked, "checkpoint": ckpt, "resume": up, "recover": rec}
        return (f"plain suspend refused (unrestorable); lock --drain + checkpoint + resume went, rebuilt in {up['processes'][0]['drain']['rebuilt_ms']:.0f} ms; "
                f"killed mid-drain (record left: {bool(left)}), recovered, drains {final['drains']}, data right")
    finally:
        stop_drain_ipc(p, work)


@scenario("drain: a CUDA IPC pair that drops its shared tensor still maps the driver's IPC file: refused on evidence; forced, what the pair does after the restore is measured")
def drain_ipc_pair(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-drain-ipc-")
    log = open(os.path.join(work, "pair.log"), "w")
    p = subprocess.Popen([sys.executable, DRAIN_IPC, work], stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    result = {}
    RAW["drain_ipc_pair"] = result
    maps = lambda pid: sorted({line.split()[-1] for line in open(f"/proc/{pid}/maps") if "/dev/shm/cuda.shm." in line})
    try:
        ready, _, _ = select.select([p.stdout], [], [], 180)
        line = p.stdout.readline().strip() if ready else ""
        expect(line.startswith("PIDS"), f"the pair did not start: {line!r}")
        pids = [int(x) for x in line.split()[1:]]
        status = lambda pid: json.load(open(os.path.join(work, f"{pid}.json")))
        wait_for("both processes' first steps", lambda: all(os.path.exists(os.path.join(work, f"{pid}.json")) for pid in pids))
        result["ipc_files_before"] = {pid: maps(pid) for pid in pids}
        code, out, _ = tools.run("--json", "suspend", "--drain", *pids)
        result["suspend"] = json.loads(out)
        result["ipc_files_drained"] = {pid: maps(pid) for pid in pids}
        if code == 0:
            up = tools.json("resume", *pids)
            result["resume"] = up
            steps = {pid: status(pid)["steps"] for pid in pids}
            wait_for("steps after the rebuild", lambda: all(status(pid)["steps"] > steps[pid] for pid in pids))
            oks = {pid: status(pid)["ok"] for pid in pids}
            expect(all(oks.values()), f"data after the round trip: {oks}")
            return f"IPC files before {result['ipc_files_before']}, drained {result['ipc_files_drained']}: checkpointed and restored, data right"
        expect(code == 8, f"suspend --drain exited {code}: {result['suspend']}")
        # Refused on evidence: the driver's files are still mapped. What does
        # the driver do with a pair that released its memory all the same?
        forced_code, forced_out, _ = tools.run("--json", "suspend", "--drain", "--force", *pids)
        result["forced_suspend"] = json.loads(forced_out)
        resumed_code, resumed_out, _ = tools.run("--json", "resume", *pids)
        result["forced_resume"] = json.loads(resumed_out)
        expect(forced_code == 0 and resumed_code == 0, f"forced: suspend exit {forced_code}, resume exit {resumed_code}")
        # What the pair does after the forced round trip, measured rather
        # than assumed: several steps of each (the child reads the parent's
        # new tensor at every one), then a second forced round trip.
        def progressed(since):
            try:
                return all(status(pid)["steps"] >= since[pid] + 5 for pid in pids)
            except (OSError, ValueError):
                return False
        after = {}
        for trip in (1, 2):
            since = {pid: status(pid)["steps"] for pid in pids}
            moved = True
            try:
                wait_for(f"steps after forced round trip {trip}", lambda: progressed(since), 30)
            except Failed:
                moved = False
            after[trip] = {"states": {pid: state_or_gone(tools, pid) for pid in pids}, "stepping": moved,
                           "ok": {pid: status(pid).get("ok") for pid in pids},
                           "log": open(os.path.join(work, "pair.log")).read()[-1500:]}
            if trip == 1 and moved:
                code2, out2, _ = tools.run("--json", "suspend", "--drain", "--force", *pids)
                up2, outup2, _ = tools.run("--json", "resume", *pids)
                after["second"] = {"suspend_exit": code2, "resume_exit": up2, "suspend": json.loads(out2), "resume": json.loads(outup2)}
            else:
                break
        result["after_forced"] = after
        result["pair_log"] = open(os.path.join(work, "pair.log")).read()[-3000:]
        shared_again = all(a["stepping"] and all(a["ok"].values()) for k, a in after.items() if k != "second") and "operation not permitted" not in result["pair_log"]
        return (f"IPC files before {result['ipc_files_before']}, after the drain {result['ipc_files_drained']}: refused on evidence (exit 8); "
                f"forced: both checkpointed and restored (exit 0); afterwards: "
                + ("both went on sharing, data right, over two forced round trips (F4 needs this measurement)" if shared_again else
                   f"sharing again failed: {[(k, a['states'], a['stepping'], a['ok']) for k, a in after.items() if k != 'second']} {result['pair_log'][-300:]!r}"))
    finally:
        result.setdefault("pair_log", open(os.path.join(work, "pair.log")).read()[-3000:])
        stop_drain_ipc(p, work)


@scenario("drain: a job in its own PID and mount namespace (private /dev/shm), driven from the host", gpus=2)
def drain_in_namespace(tools):
    wrap = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh"]
    with DrainJob(wrap=wrap) as job:
        job.wait_steps(5)
        # The ranks write their PIDs as their namespace sees them; the host's
        # are cudackpt's to find.
        listed = tools.json("ps", "--tree", job.launcher)
        nspid_of = lambda pid: open(f"/proc/{pid}/status").read().split("NSpid:")[1].split("\n")[0].split()
        nspid = [nspid_of(p["pid"]) for p in listed["processes"]]
        host_ranks = sorted(int(n[0]) for n in nspid if len(n) == 2 and int(n[1]) in job.pids)
        expect(len(host_ranks) == 2, f"the ranks are in a PID namespace: NSpid {nspid}, their own PIDs {job.pids}")
        down = tools.json("suspend", "--drain", "--tree", job.launcher)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        up = tools.json("resume", "--tree", job.launcher)
        rebuilt = sorted(p["pid"] for p in up["processes"] if (p.get("drain") or {}).get("outcome") == "rebuilt")
        expect(rebuilt == host_ranks, f"the ranks, by their host PIDs, rebuilt: {up}")
        job.wait_steps(max(job.steps()) + 5)
        code, finished = job.finish()
        expect(code == 0 and all(r["sums_ok"] and r["held_ok"] and r["drains"] == 1 for r in finished), f"exit {code}: {finished}")
        RAW["drain_in_namespace"] = {"nspid": nspid, "suspend": down, "resume": up}
        return f"ranks' NSpid {nspid}; drained, checkpointed, rebuilt, finished right"
