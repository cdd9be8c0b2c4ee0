#!/usr/bin/env python3
"""cudackpt's real-GPU suite: one command, run as root on a host with an
NVIDIA GPU and driver 570+ (see docs/gpu-results.md for how and where).

    python3 tests/gpu/suite.py --bin-dir DIR [--json FILE] [--bench]

DIR holds the release binaries `cudackpt`, `cudackpt-gpu-target` and
`cudackpt-bench`, and optionally NVIDIA's `cuda-checkpoint` to compare with.
Each scenario drives real CUDA processes (the project's own target program,
holding a seeded pattern in device memory) through cudackpt and checks the
states, the exit codes and JSON, and that the data survived. Prints a
pass/fail table; writes it as JSON; exits 1 if anything failed.
"""

import argparse
import json
import os
import select
import subprocess
import sys
import time

RESULTS = []


class Failed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failed(message)


def scenario(name):
    def wrap(fn):
        def run(*args, **kwargs):
            started = time.monotonic()
            try:
                detail = fn(*args, **kwargs) or ""
                ok = True
            except Failed as e:
                ok, detail = False, str(e)
            except Exception as e:  # a crash in a scenario is a failure of it
                ok, detail = False, f"{type(e).__name__}: {e}"
            took = time.monotonic() - started
            RESULTS.append({"scenario": name, "ok": ok, "detail": detail, "seconds": round(took, 3)})
            mark = "PASS" if ok else "FAIL"
            print(f"[{mark}] {name} ({took:.2f} s) {detail}", flush=True)
        return run
    return wrap


class Tools:
    def __init__(self, bin_dir):
        self.cudackpt = os.path.join(bin_dir, "cudackpt")
        self.target_bin = os.path.join(bin_dir, "cudackpt-gpu-target")
        self.bench = os.path.join(bin_dir, "cudackpt-bench")
        nvidia = os.path.join(bin_dir, "cuda-checkpoint")
        self.nvidia = nvidia if os.access(nvidia, os.X_OK) else None

    def run(self, *args, env=None):
        """Runs cudackpt; returns (exit code, stdout, stderr)."""
        full_env = dict(os.environ, **(env or {}))
        p = subprocess.run([self.cudackpt, *map(str, args)], capture_output=True, text=True, env=full_env, timeout=600)
        return p.returncode, p.stdout, p.stderr

    def json(self, *args, expect_code=0):
        code, out, err = self.run("--json", *args)
        docs = [line for line in out.splitlines() if line.strip()]
        expect(len(docs) == 1, f"`{' '.join(map(str, args))}`: expected one JSON document, got {len(docs)}: {out!r} {err!r}")
        doc = json.loads(docs[0])
        expect(code == expect_code, f"`{' '.join(map(str, args))}` exited {code}, expected {expect_code}: {doc}")
        expect(doc.get("schema_version") == 1, f"schema_version missing: {doc}")
        expect(doc.get("exit_code") == code, f"exit_code {doc.get('exit_code')} != {code}")
        return doc

    def state(self, pid):
        doc = self.json("state", pid)
        return doc["processes"][0]["state"]


class Target:
    """The project's CUDA target program, driven over stdin/stdout."""

    def __init__(self, tools, size_mib=256, device=0, seed=1):
        self.p = subprocess.Popen(
            [tools.target_bin, "--size-mib", str(size_mib), "--device", str(device), "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self.read(120)
        if not line.startswith("READY"):
            raise Failed(f"target did not start: {line!r}")
        _, pid, self.hash = line.split()
        self.pid = int(pid)

    def read(self, timeout):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            raise Failed(f"target {self.p.pid} did not answer within {timeout} s")
        return self.p.stdout.readline().strip()

    def ask(self, command, timeout=120):
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        return self.read(timeout)

    def verify(self):
        answer = self.ask("verify")
        expect(answer == f"OK {self.hash}", f"data check of PID {self.pid}: {answer} (expected OK {self.hash})")

    def close(self):
        try:
            self.p.kill()
        finally:
            self.p.wait()


def step(tools, command, pid, state_after, *extra):
    doc = tools.json(command, *extra, pid)
    p = doc["processes"][0]
    expect(p["ok"] and p["state"] == state_after, f"{command}: {p}")
    expect(tools.state(pid) == state_after, f"after {command} the driver says {tools.state(pid)}, not {state_after}")
    return p


def refused(tools, command, pid, code, kind, *extra):
    doc = tools.json(command, *extra, pid, expect_code=code)
    error = doc["processes"][0].get("error") or {}
    expect(error.get("kind") == kind, f"{command} on {pid}: kind {error.get('kind')!r}, expected {kind!r}: {doc}")
    return error


@scenario("doctor passes on this host")
def doctor(tools):
    doc = tools.json("doctor")
    expect(doc["ok"] and doc["gpus"], f"doctor: {doc}")
    return f"{len(doc['gpus'])} GPU(s): {', '.join(g['name'] for g in doc['gpus'])}; CUDA {doc['driver']['cuda_version']}, module {doc['driver']['kernel_module_version']}"


@scenario("demo round trip")
def demo(tools, size_mib):
    doc = tools.json("demo", "--size-mib", size_mib)
    expect(doc["ok"] and doc["data_intact"], f"demo: {doc}")
    steps = {s["step"]: s["duration_ms"] for s in doc["steps"]}
    return f"{size_mib} MiB: checkpoint {steps['checkpoint']:.1f} ms, restore {steps['restore']:.1f} ms"


@scenario("single steps: lock, checkpoint, restore, unlock; data intact")
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


@scenario("toggle both ways; data intact")
def toggle(tools, t):
    down = step(tools, "toggle", t.pid, "checkpointed")
    expect(down["state_before"] == "running", f"{down}")
    up = step(tools, "toggle", t.pid, "running")
    expect(up["state_before"] == "checkpointed", f"{up}")
    t.verify()


@scenario("suspend and resume are idempotent; data intact")
def suspend_resume(tools, t):
    step(tools, "suspend", t.pid, "checkpointed")
    again = step(tools, "suspend", t.pid, "checkpointed")
    expect(again.get("note") == "already checkpointed" and not again["steps"], f"second suspend: {again}")
    step(tools, "resume", t.pid, "running")
    again = step(tools, "resume", t.pid, "running")
    expect(again.get("note") == "already running" and not again["steps"], f"second resume: {again}")
    t.verify()


@scenario("wrong-state calls are refused with exit 4 and the state named")
def wrong_states(tools, t):
    for command in ["unlock", "checkpoint", "restore"]:
        error = refused(tools, command, t.pid, 4, "wrong_state")
        expect(error.get("code") == 401 and "running" in error["message"], f"{command}: {error}")
    step(tools, "lock", t.pid, "locked")
    for command in ["lock", "restore"]:
        error = refused(tools, command, t.pid, 4, "wrong_state")
        expect("locked" in error["message"], f"{command}: {error}")
    code, _, _ = tools.run("toggle", t.pid)
    expect(code == 4, f"toggle on a locked process exited {code}")
    step(tools, "unlock", t.pid, "running")
    t.verify()


@scenario("wait times out with exit 1")
def wait_timeout(tools, t):
    refused(tools, "wait", t.pid, 1, "wait_timeout", "--state", "checkpointed", "--timeout", "200ms")


@scenario("targets: PID 1, a dead PID, a thread id are refused (exit 5)")
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


@scenario("lock timeout against a busy kernel: exit 3, still running")
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


@scenario("restore with an identity map over every GPU")
def identity_map(tools, t):
    gpus = tools.json("doctor")["gpus"]
    mapping = ",".join(f"{g['uuid']}={g['uuid']}" for g in gpus)
    step(tools, "suspend", t.pid, "checkpointed")
    step(tools, "resume", t.pid, "running", "--map", mapping)
    t.verify()
    return f"{len(gpus)} GPU(s) mapped to themselves"


@scenario("no driver: exit 7 naming the path tried")
def no_driver(tools):
    code, out, err = tools.run("state", "1", "--libcuda", "/nonexistent/libcuda.so.1")
    expect(code == 7 and "/nonexistent/libcuda.so.1" in err, f"exit {code}: {err}")


@scenario("NVIDIA's cuda-checkpoint sees the states cudackpt sets")
def nvidia_agrees(tools, t):
    if not tools.nvidia:
        return "skipped: no cuda-checkpoint in --bin-dir"
    def theirs():
        p = subprocess.run([tools.nvidia, "--get-state", "--pid", str(t.pid)], capture_output=True, text=True)
        return p.stdout.strip()
    expect(theirs() == "running", f"nvidia says {theirs()}")
    step(tools, "suspend", t.pid, "checkpointed")
    expect(theirs() == "checkpointed", f"nvidia says {theirs()}")
    step(tools, "resume", t.pid, "running")
    t.verify()


@scenario("group of 4: suspend and resume together; data intact")
def group(tools, size_mib):
    targets = [Target(tools, size_mib=size_mib, seed=10 + i) for i in range(4)]
    try:
        pids = [t.pid for t in targets]
        down = tools.json("suspend", *pids)
        expect(down["ok"] and all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        up = tools.json("resume", *pids)
        expect(up["ok"] and all(p["state"] == "running" for p in up["processes"]), f"{up}")
        for t in targets:
            t.verify()
        return f"4 x {size_mib} MiB: suspend {down['duration_ms']:.0f} ms, resume {up['duration_ms']:.0f} ms"
    finally:
        for t in targets:
            t.close()


@scenario("group of 4 with one busy past the lock timeout: all rolled back, data intact")
def group_rollback(tools, size_mib):
    targets = [Target(tools, size_mib=size_mib, seed=20 + i) for i in range(4)]
    try:
        pids = [t.pid for t in targets]
        expect(targets[2].ask("busy 5000") == "BUSY", "spin kernel")
        doc = tools.json("suspend", "--timeout", "1s", *pids, expect_code=3)
        kinds = [(p.get("error") or {}).get("kind") for p in doc["processes"]]
        expect(kinds[2] == "lock_timeout" and all(k == "rolled_back" for i, k in enumerate(kinds) if i != 2), f"kinds {kinds}")
        for pid in pids:
            expect(tools.state(pid) == "running", f"PID {pid} not running after rollback")
        targets[2].ask("sync", timeout=60)
        for t in targets:
            t.verify()
        return f"kinds {kinds}"
    finally:
        for t in targets:
            t.close()


def bench(tools, out_dir):
    args = [tools.bench, "latency", "--cudackpt", tools.cudackpt, "--target", tools.target_bin, "--runs", "30"]
    if tools.nvidia:
        args += ["--nvidia", tools.nvidia]
    if out_dir:
        args += ["--json", os.path.join(out_dir, "latency.json")]
    print("\nper-invocation latency (median of 30, whole process):", flush=True)
    subprocess.run(args, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--json", help="write the results table here")
    parser.add_argument("--bench", action="store_true", help="also run the latency benchmark")
    parser.add_argument("--big-mib", type=int, default=1024, help="size of the larger demo")
    args = parser.parse_args()
    tools = Tools(args.bin_dir)

    doctor(tools)
    demo(tools, 16)
    demo(tools, args.big_mib)
    no_driver(tools)
    t = Target(tools, size_mib=256)
    try:
        single_steps(tools, t)
        toggle(tools, t)
        suspend_resume(tools, t)
        wrong_states(tools, t)
        wait_timeout(tools, t)
        bad_targets(tools, t)
        lock_timeout(tools, t)
        identity_map(tools, t)
        nvidia_agrees(tools, t)
    finally:
        t.close()
    group(tools, 512)
    group_rollback(tools, 512)

    passed = sum(r["ok"] for r in RESULTS)
    print(f"\n{'scenario':<75} result")
    for r in RESULTS:
        print(f"{r['scenario']:<75} {'PASS' if r['ok'] else 'FAIL'}")
    print(f"\n{passed} passed, {len(RESULTS) - passed} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": RESULTS, "passed": passed, "failed": len(RESULTS) - passed}, f, indent=2)
    if args.bench:
        bench(tools, os.path.dirname(args.json) if args.json else None)
    sys.exit(0 if passed == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
