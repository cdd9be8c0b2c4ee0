"""One process on one GPU: every command, the compatible grammar, NVIDIA's
tool agreeing, maps between GPUs, the pre-flights, ps and devices."""

import os
import signal
import subprocess
import time

from harness.host import HOST
from harness.procs import gpu_of, proc_state, wait_for
from harness.registry import Skipped, expect, scenario
from harness.tools import Target, refused, step


@scenario("doctor passes on this host")
def doctor(tools):
    doc = tools.json("doctor")
    expect(doc["ok"] and doc["gpus"], f"doctor: {doc}")
    nvml = next((c for c in doc["checks"] if c["name"] == "NVML"), {})
    expect(nvml.get("status") == "ok", f"doctor's NVML check on a GPU host: {nvml}")
    return f"{len(doc['gpus'])} GPU(s): {', '.join(g['name'] for g in doc['gpus'])}; CUDA {doc['driver']['cuda_version']}, module {doc['driver']['kernel_module_version']}"


@scenario("demo round trip: 16 MiB, then the larger size (--big-mib)")
def demo(tools):
    said = []
    for size_mib in (16, HOST.big_mib):
        doc = tools.json("demo", "--size-mib", size_mib)
        expect(doc["ok"] and doc["data_intact"], f"demo: {doc}")
        steps = {s["step"]: s["duration_ms"] for s in doc["steps"]}
        said.append(f"{size_mib} MiB: checkpoint {steps['checkpoint']:.1f} ms, restore {steps['restore']:.1f} ms")
    return "; ".join(said)


@scenario("no driver: exit 7 naming the path tried")
def no_driver(tools):
    code, out, err = tools.run("state", "1", "--libcuda", "/nonexistent/libcuda.so.1")
    expect(code == 7 and "/nonexistent/libcuda.so.1" in err, f"exit {code}: {err}")


@scenario("single steps: lock, checkpoint, restore, unlock; data intact", shared_target=True)
def single_steps(tools, t):
    expect(tools.state(t.pid) == "running", "target should start running")
    step(tools, "lock", t.pid, "locked", "--timeout", "5s")
    step(tools, "wait", t.pid, "locked", "--state", "locked", "--timeout", "1s")
    ck = step(tools, "checkpoint", t.pid, "checkpointed")
    tid = tools.json("restore-tid", t.pid)["processes"][0].get("restore_tid")
    expect(isinstance(tid, int) and tid > 0, f"restore tid {tid}")
    rs = step(tools, "restore", t.pid, "locked")
    step(tools, "unlock", t.pid, "running")
    t.verify()
    return f"checkpoint {ck['duration_ms']:.1f} ms, restore {rs['duration_ms']:.1f} ms, restore tid {tid}"


@scenario("the library's example program suspends and resumes through Process; a stopped process is refused with no state change; data intact", shared_target=True)
def library_example(tools, t):
    expect(os.access(tools.example, os.X_OK), f"{tools.example} is missing: carry target/release/examples/checkpoint")
    p = subprocess.run([tools.example, str(t.pid)], capture_output=True, text=True, timeout=600)
    lines = p.stdout.splitlines()
    expect(p.returncode == 0 and len(lines) == 3, f"example exited {p.returncode}: {p.stdout!r} {p.stderr!r}")
    expect(lines[0].startswith(f"PID {t.pid}: running, restore thread "), f"{lines}")
    expect(lines[1].endswith(": checkpointed") and lines[2].endswith(": running"), f"{lines}")
    t.verify()
    os.kill(t.pid, signal.SIGSTOP)
    try:
        wait_for("the target to stop", lambda: proc_state(t.pid) in ("T", "t"), timeout=10)
        p = subprocess.run([tools.example, str(t.pid)], capture_output=True, text=True, timeout=60)
        expect(p.returncode == 1 and "is stopped" in p.stderr, f"a stopped target: exit {p.returncode}, {p.stderr!r}")
    finally:
        os.kill(t.pid, signal.SIGCONT)
    expect(tools.state(t.pid) == "running", "the refused target is still running")
    t.verify()
    return " / ".join(line.split(":")[0] for line in lines[1:])


@scenario("toggle both ways; data intact", shared_target=True)
def toggle(tools, t):
    down = step(tools, "toggle", t.pid, "checkpointed")
    expect(down["state_before"] == "running", f"{down}")
    up = step(tools, "toggle", t.pid, "running")
    expect(up["state_before"] == "checkpointed", f"{up}")
    t.verify()


@scenario("suspend and resume are idempotent; data intact", shared_target=True)
def suspend_resume(tools, t):
    step(tools, "suspend", t.pid, "checkpointed")
    again = step(tools, "suspend", t.pid, "checkpointed")
    expect(again.get("note") == "already checkpointed" and not again["steps"], f"second suspend: {again}")
    step(tools, "resume", t.pid, "running")
    again = step(tools, "resume", t.pid, "running")
    expect(again.get("note") == "already running" and not again["steps"], f"second resume: {again}")
    t.verify()


@scenario("wrong-state calls are refused with exit 4 and the state named; a step already where it leads is 'already there'", shared_target=True)
def wrong_states(tools, t):
    for command in ["checkpoint", "restore"]:
        error = refused(tools, command, t.pid, 4, "wrong_state")
        expect(error.get("code") == 401 and "running" in error["message"], f"{command}: {error}")
    there = tools.json("unlock", t.pid)
    expect(there["processes"][0].get("note") == "already running", f"unlock of a running process: {there}")
    step(tools, "lock", t.pid, "locked")
    for command in ["lock", "restore"]:
        there = tools.json(command, t.pid)
        expect(there["processes"][0].get("note") == "already locked", f"{command} of a locked process: {there}")
    code, _, _ = tools.run("toggle", t.pid)
    expect(code == 4, f"toggle on a locked process exited {code}")
    step(tools, "unlock", t.pid, "running")
    t.verify()


@scenario("wait times out with exit 14", shared_target=True)
def wait_timeout(tools, t):
    refused(tools, "wait", t.pid, 14, "wait_timeout", "--state", "checkpointed", "--timeout", "200ms")


@scenario("targets: PID 1, a dead PID, a thread id are refused (exit 5)", shared_target=True)
def bad_targets(tools, t):
    error = refused(tools, "state", 1, 5, "not_cuda_process")
    expect(error.get("code") == 3, f"PID 1: {error}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    refused(tools, "lock", dead.pid, 5, "no_such_process")
    tids = [int(x) for x in os.listdir(f"/proc/{t.pid}/task") if int(x) != t.pid]
    expect(tids, "the target should have helper threads")
    error = refused(tools, "lock", tids[0], 5, "thread_not_process")
    expect(str(t.pid) in error["message"], f"thread message should name the process: {error}")
    expect(tools.state(t.pid) == "running", "nothing may have been locked")


@scenario("lock timeout against a busy kernel: exit 3, still running", shared_target=True)
def lock_timeout(tools, t):
    expect(t.ask("busy 4000") == "BUSY", "could not start the spin kernel")
    started = time.monotonic()
    error = refused(tools, "lock", t.pid, 3, "lock_timeout", "--timeout", "500")
    took = time.monotonic() - started
    expect(error.get("cuda_error") == "CUDA_ERROR_NOT_READY" and error.get("code") == 600, f"{error}")
    expect(tools.state(t.pid) == "running", "a timed-out lock must leave the process running")
    expect(t.ask("sync", timeout=60) == "SYNCED", "kernel did not finish")
    t.verify()
    return f"refused after {took * 1000:.0f} ms"


@scenario("restore with an identity map over every GPU", shared_target=True)
def identity_map(tools, t):
    gpus = tools.json("doctor")["gpus"]
    mapping = ",".join(f"{g['uuid']}={g['uuid']}" for g in gpus)
    step(tools, "suspend", t.pid, "checkpointed")
    step(tools, "resume", t.pid, "running", "--map", mapping)
    t.verify()
    return f"{len(gpus)} GPU(s) mapped to themselves"


@scenario("a map to a GPU that is not on this host is refused before the driver (exit 8)", shared_target=True)
def foreign_map(tools, t):
    gpus = tools.json("doctor")["gpus"]
    step(tools, "suspend", t.pid, "checkpointed")
    foreign = "GPU-00000000-1111-2222-3333-444444444444"
    mapping = ",".join(f"{g['uuid']}={foreign if i == 0 else g['uuid']}" for i, g in enumerate(gpus))
    error = refused(tools, "resume", t.pid, 8, "invalid_map", "--map", mapping)
    expect(foreign in error["message"], f"{error}")
    expect(tools.state(t.pid) == "checkpointed", "nothing may have changed")
    step(tools, "resume", t.pid, "running")
    t.verify()


@scenario("NVIDIA's cuda-checkpoint sees the states cudackpt sets", shared_target=True)
def nvidia_agrees(tools, t):
    if not tools.nvidia:
        raise Skipped("no cuda-checkpoint in --bin-dir")
    def theirs():
        p = subprocess.run([tools.nvidia, "--get-state", "--pid", str(t.pid)], capture_output=True, text=True)
        return p.stdout.strip()
    expect(theirs() == "running", f"nvidia says {theirs()}")
    step(tools, "suspend", t.pid, "checkpointed")
    expect(theirs() == "checkpointed", f"nvidia says {theirs()}")
    step(tools, "resume", t.pid, "running")
    t.verify()


@scenario("compatible grammar driven as CRIU's plugin drives it; data intact", shared_target=True)
def compat_grammar(tools, t):
    code, _, out = tools.compat("-h")
    expect(code == 0 and "--action" in out and "--device-map" in out, f"-h: exit {code}")
    expect(tools.compat("--get-state", "--pid", t.pid)[:2] == (0, "running"), "get-state")
    code, tid, out = tools.compat("--get-restore-tid", "--pid", t.pid)
    expect(code == 0 and out == f"{tid}\n" and tid.isdigit(), f"get-restore-tid: {out!r}")
    # The plugin asks for the state of the restore thread, a thread id.
    expect(tools.compat("--get-state", "--pid", tid)[:2] == (0, "running"), "get-state by thread id")
    for action, after in [("lock", "locked"), ("checkpoint", "checkpointed"), ("restore", "locked"), ("unlock", "running")]:
        extra = ["--timeout", "10000"] if action == "lock" else []
        code, _, out = tools.compat("--action", action, "--pid", t.pid, *extra)
        expect(code == 0 and out == "", f"--action {action}: exit {code}, output {out!r}")
        state = tools.compat("--get-state", "--pid", t.pid)[1]
        expect(state == after, f"after --action {action}: {state}")
    t.verify()
    for after in ["checkpointed", "running"]:
        code, _, out = tools.compat("--toggle", "--pid", t.pid)
        expect(code == 0 and out == "", f"--toggle: exit {code} {out!r}")
        expect(tools.compat("--get-state", "-p", t.pid)[1] == after, f"toggle should leave {after}")
    t.verify()
    code, first, _ = tools.compat("--action", "unlock", "--pid", t.pid)
    expect(code == 1 and "running" in first, f"unlock while running: exit {code}: {first}")
    code, first, _ = tools.compat("--action", "lock", "--pid", t.pid, "--bogus")
    expect(code != 0 and "--bogus" in first, f"unknown flag: exit {code}: {first}")
    expect(tools.state(t.pid) == "running", "nothing may have changed")


@scenario("ps finds the CUDA processes among 2000 others, read-only", shared_target=True)
def ps_scale(tools, t):
    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(2000)]
    try:
        total = len([p for p in os.listdir("/proc") if p.isdigit()])
        times = []
        for _ in range(5):
            started = time.monotonic()
            doc = tools.json("ps")
            times.append(time.monotonic() - started)
        pids = {p["pid"] for p in doc["processes"]}
        expect(t.pid in pids, f"ps missed the target {t.pid}: {pids}")
        row = next(p for p in doc["processes"] if p["pid"] == t.pid)
        expect(row.get("gpu_memory_bytes", 0) >= 256 << 20, f"NVML should show the target's 256 MiB: {row}")
        expect(not pids & {s.pid for s in sleepers}, "ps listed a non-CUDA process")
        expect(tools.state(t.pid) == "running", "ps must not change anything")
        times.sort()
        return f"{total} processes, {len(pids)} CUDA: median {times[2] * 1000:.0f} ms"
    finally:
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()


@scenario("devices lists every GPU with free memory, MIG and persistence mode (NVML)")
def devices_listing(tools):
    doc = tools.json("devices")
    expect(doc["source"] == "nvml" and doc["gpus"], f"{doc}")
    for gpu in doc["gpus"]:
        expect(gpu["memory_free_bytes"] and gpu["persistence_mode"] is not None, f"{gpu}")
    features = tools.json("doctor")["driver"]["features"]
    expect(features == {"checkpoint_api": True, "lock_timeout": True, "gpu_remapping": True}, f"{features}")
    return ", ".join(f"{g['index']}: {g['name']} {g['memory_free_bytes'] >> 30} GiB free" for g in doc["gpus"])


@scenario("--verify: NVML confirms the checkpoint freed the GPU and the restore brought the memory back")
def verify_round_trip(tools):
    with Target(tools, size_mib=1024, seed=85) as t:
        down = step(tools, "suspend", t.pid, "checkpointed", "--verify")
        expect(down.get("gpu_memory_bytes", 0) >= 1024 << 20, f"memory moved: {down}")
        expect(down.get("record"), f"a checkpoint record: {down}")
        up = step(tools, "resume", t.pid, "running", "--verify")
        expect(up.get("gpu_memory_bytes", 0) >= 1024 << 20, f"memory back: {up}")
        t.verify()
        return f"moved {down['gpu_memory_bytes'] >> 20} MiB out and {up['gpu_memory_bytes'] >> 20} MiB back"


@scenario("memory pre-flight: restore refused while the GPU is full, done once it is freed")
def preflight_memory(tools):
    with Target(tools, size_mib=4096, seed=80) as t:
        step(tools, "suspend", t.pid, "checkpointed")
        free_mib = tools.json("devices")["gpus"][0]["memory_free_bytes"] >> 20
        # Leaves about 1.5 GiB: too little for the 4 GiB target.
        with Target(tools, size_mib=free_mib - 2048, seed=81, fill=False):
            error = refused(tools, "resume", t.pid, 8, "insufficient_gpu_memory")
            expect("MiB free" in error["message"], f"{error}")
            expect(tools.state(t.pid) == "checkpointed", "the pre-flight must change nothing")
        step(tools, "resume", t.pid, "running")
        t.verify()
        return error["message"][:160]


@scenario("two GPUs: a partial map, an index map and --map auto move a process, data intact", gpus=2)
def two_gpu_moves(tools):
    gpus = tools.json("devices")["gpus"]
    a, b = gpus[0]["uuid"], gpus[1]["uuid"]
    with Target(tools, size_mib=1024, seed=90) as t:
        expect(gpu_of(t.pid) == a, f"the target should start on {a}: {gpu_of(t.pid)}")
        step(tools, "suspend", t.pid, "checkpointed")
        doc = tools.json("resume", "--verify", "--map", f"{a}={b}", t.pid)
        expect(any("completed the map" in w for w in doc.get("warnings", [])), f"{doc}")
        expect(len(doc["map"]) == len(gpus), f"completed over every GPU: {doc['map']}")
        t.verify()
        expect(gpu_of(t.pid) == b, f"after A=B the process is on {gpu_of(t.pid)}, not {b}")
        step(tools, "suspend", t.pid, "checkpointed")
        step(tools, "resume", t.pid, "running", "--verify", "--map", f"{b}=0")
        t.verify()
        expect(gpu_of(t.pid) == a, f"after B=0 the process is on {gpu_of(t.pid)}, not {a}")
        step(tools, "suspend", t.pid, "checkpointed")
        doc = tools.json("resume", "--map", "auto", t.pid)
        expect(any("nothing moves" in w for w in doc.get("warnings", [])), f"{doc}")
        t.verify()
        expect(gpu_of(t.pid) == a, "auto on the same host moves nothing")
        return f"{a[:12]}.. -> {b[:12]}.. and back, data intact"
