"""Groups of processes at once: together, rolled back (a lock timeout, a
signal, a deadline, cudackpt killed), under cgroup limits, and check
agreeing with what then happens."""

import json
import os
import signal
import subprocess
import tempfile
import time

from harness.procs import kill_and_reap, memory_cgroup, pids_cgroup, several, wait_for_line
from harness.registry import Skipped, expect, scenario
from harness.tools import Target, step


@scenario("group of 4: suspend and resume together; data intact")
def group(tools):
    size_mib = 512
    with several(4, lambda i: Target(tools, size_mib=size_mib, seed=10 + i)) as targets:
        pids = [t.pid for t in targets]
        down = tools.json("suspend", *pids)
        expect(down["ok"] and all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        up = tools.json("resume", *pids)
        expect(up["ok"] and all(p["state"] == "running" for p in up["processes"]), f"{up}")
        for t in targets:
            t.verify()
        return f"4 x {size_mib} MiB: suspend {down['duration_ms']:.0f} ms, resume {up['duration_ms']:.0f} ms"


@scenario("group of 4 with one busy past the lock timeout: all rolled back, data intact")
def group_rollback(tools):
    size_mib = 512
    with several(4, lambda i: Target(tools, size_mib=size_mib, seed=20 + i)) as targets:
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


@scenario("SIGTERM, then SIGUSR1 (a batch system's warning), during a group suspend: every process rolled back, data intact (exit 128 + the signal: 143, 138)")
def group_interrupted(tools):
    size_mib = 1024
    with several(4, lambda i: Target(tools, size_mib=size_mib, seed=30 + i)) as targets:
        pids = [t.pid for t in targets]
        said = []
        for signal_number, name in [(signal.SIGTERM, "SIGTERM"), (signal.SIGUSR1, "SIGUSR1")]:
            code = 128 + int(signal_number)
            p = subprocess.Popen([tools.cudackpt, "--json", "suspend", *map(str, pids)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)  # inside the checkpoint phase of 4 x 1 GiB
            p.send_signal(signal_number)
            out, err = p.communicate(timeout=120)
            doc = json.loads(out)
            if p.returncode == 0:
                raise Skipped(f"the suspend finished before {name} arrived ({doc['duration_ms']:.0f} ms)")
            expect(p.returncode == code and doc["exit_code"] == code, f"{name}: exit {p.returncode} (document {doc.get('exit_code')}), expected {code}: {err}")
            kinds = {(q.get("error") or {}).get("kind") for q in doc["processes"]}
            expect(kinds == {"interrupted"} and all(q["rolled_back"] for q in doc["processes"]), f"{name}: {doc}")
            expect(all(name in q["error"]["message"] for q in doc["processes"]), f"{name} named: {doc}")
            for pid in pids:
                expect(tools.state(pid) == "running", f"{name}: PID {pid} left {tools.state(pid)}")
            for t in targets:
                t.verify()
            said.append(f"{name} after {doc['duration_ms']:.0f} ms")
        return f"interrupted by {', '.join(said)}; all 4 back to running each time"


@scenario("a deadline passing mid-checkpoint rolls a group of 4 x 2 GiB back, data intact")
def group_deadline(tools):
    with several(4, lambda i: Target(tools, size_mib=2048, seed=50 + i)) as targets:
        pids = [t.pid for t in targets]
        doc = tools.json("suspend", "--deadline", "500ms", *pids, expect_code=1)
        kinds = {(q.get("error") or {}).get("kind") for q in doc["processes"]}
        expect(kinds == {"deadline_exceeded"} and all(q["rolled_back"] for q in doc["processes"]), f"{doc}")
        expect("slowest" in doc["processes"][0]["error"]["message"], f"{doc}")
        for pid in pids:
            expect(tools.state(pid) == "running", f"PID {pid} left {tools.state(pid)}")
        for t in targets:
            t.verify()
        return doc["processes"][0]["error"]["message"]


@scenario("kill -9 of cudackpt mid-suspend of 4 x 2 GiB, then recover: all running, data intact")
def killed_then_recovered(tools):
    with several(4, lambda i: Target(tools, size_mib=2048, seed=40 + i)) as targets:
        pids = [str(t.pid) for t in targets]
        p = subprocess.Popen([tools.cudackpt, "--json", "suspend", *pids], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.8)  # the locks are done; 2 GiB checkpoints take longer
        p.kill()
        p.wait()
        states = {t.pid: tools.state(t.pid) for t in targets}
        moved = [pid for pid, state in states.items() if state != "running"]
        expect(moved, f"the kill came too late or too early to prove anything: {states}")
        code, out, err = tools.run("--json", "lock", targets[0].pid)
        expect(code == 10 and "needs_recovery" in out, f"another cudackpt must refuse until recover: exit {code}: {out[:300]}")
        doc = tools.json("recover")
        expect(doc["ok"], f"recover: {doc}")
        for t in targets:
            expect(tools.state(t.pid) == "running", f"PID {t.pid} after recover: {tools.state(t.pid)}")
            t.verify()
        return f"killed with {states}; recover put all 4 back to running, data intact"


@scenario("check agrees with what then happens and reports the state it read: running and checkpointed targets, and a refused one (a launcher's WORLD_SIZE) said to be running and 'would be refused'")
def check_agrees(tools):
    with Target(tools, size_mib=1024) as t, Target(tools, size_mib=64, seed=7, env={"WORLD_SIZE": "2"}) as ranked:
        doc = tools.json("check", t.pid)
        note = doc["processes"][0]["note"]
        expect("suspend: every check passed" in note, f"check on a running target: {note}")
        expect(doc["processes"][0]["state"] == "running", f"the state check read: {doc}")
        step(tools, "suspend", t.pid, "checkpointed")
        doc = tools.json("check", t.pid)
        note2 = doc["processes"][0]["note"]
        expect("resume: every check passed" in note2 and "suspend: already there" in note2, f"check on a checkpointed target: {note2}")
        expect(doc["processes"][0]["state"] == "checkpointed", f"the state check read: {doc}")
        # A refusal still says the state the driver gives, never unknown.
        code, out, _ = tools.run("--json", "check", ranked.pid, t.pid)
        refused = {p["pid"]: p for p in json.loads(out)["processes"]}
        expect(code == 8 and refused[ranked.pid]["error"]["kind"] == "unrestorable", f"exit {code}: {out[:600]}")
        states = {pid: p["state"] for pid, p in refused.items()}
        expect(states == {ranked.pid: "running", t.pid: "checkpointed"}, f"the states a refused check read: {states}")
        code, table, _ = tools.run("check", ranked.pid)
        expect(code == 8 and "would be refused: could not be restored" in table and "FAILED" not in table, f"the words: {table}")
        step(tools, "resume", t.pid, "running")
        t.verify()
        dry = tools.json("suspend", "--dry-run", t.pid)
        expect(tools.state(t.pid) == "running" and dry["ok"], f"a dry run changed something: {dry}")
        return f"running: {note!r}; checkpointed: {note2!r}; both came true; refused: states {states}"


@scenario("64 processes under a pids limit of 12: suspend and resume together; data intact; ps with no thread allowed lists them")
def group_under_pids_limit(tools):
    cgroup = pids_cgroup(12)
    if not cgroup:
        raise Skipped("no cgroup v2 with the pids controller here")
    try:
        with several(64, lambda i: Target(tools, size_mib=16, seed=100 + i)) as targets:
            pids = [str(t.pid) for t in targets]
            times = {}
            for command, state in [("suspend", "checkpointed"), ("resume", "running")]:
                line = f"echo $$ > {cgroup}/cgroup.procs && exec {tools.cudackpt} --json {command} {' '.join(pids)}"
                started = time.monotonic()
                p = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=600)
                times[command] = time.monotonic() - started
                expect(p.returncode == 0, f"{command} under pids.max=12 exited {p.returncode}: {p.stderr[-800:]}")
                doc = json.loads(p.stdout)
                expect(all(q["state"] == state for q in doc["processes"]), f"{command}: not all {state}")
            for t in targets:
                t.verify()
            # Discovery of 64+ processes starts threads; with none allowed it
            # used to panic (abort): it must read them itself.
            with open(os.path.join(cgroup, "pids.max"), "w") as f:
                f.write("1")
            line = f"echo $$ > {cgroup}/cgroup.procs && exec {tools.cudackpt} --json ps"
            p = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120)
            expect(p.returncode == 0, f"ps under pids.max=1 exited {p.returncode}: {p.stderr[-800:]}")
            listed = {q["pid"] for q in json.loads(p.stdout)["processes"]}
            expect(all(t.pid in listed for t in targets), f"ps under pids.max=1 missed targets: {sorted(listed)}")
            return (f"64 x 16 MiB: suspend {times['suspend']:.1f} s, resume {times['resume']:.1f} s; "
                    f"ps under pids.max=1 listed all 64 ({len(listed)} CUDA processes)")
    finally:
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


@scenario("a target whose cgroup memory.max is below its GPU footprint: refused, data intact; with --force the kernel OOM-kills it")
def cgroup_memory_limit(tools):
    cg = memory_cgroup("cudackpt-mem")
    with open(os.path.join(cg, "memory.max"), "w") as f:
        f.write(str(2 << 30))
    work = tempfile.mkdtemp(prefix="cudackpt-oom-")
    log_path = os.path.join(work, "target.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen(["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec {tools.target_bin} --size-mib 4096 --hold"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready, seen = wait_for_line(log_path, "READY", 0, 120)
        line, seen = wait_for_line(log_path, "OK", seen, 60)
        pid = p.pid
        checked = tools.json("check", pid, expect_code=8)
        said = (checked.get("error") or checked["processes"][0].get("error") or {}).get("kind")
        expect(said == "insufficient_host_memory", f"check: {checked}")
        doctor_doc = tools.json("doctor", "--cgroup", cg)
        headroom = next(c for c in doctor_doc["checks"] if c["name"] == "cgroup memory")
        expect(headroom["status"] == "warn" and "would be refused" in (headroom.get("hint") or ""), f"doctor --cgroup: {headroom}")
        doc = tools.json("suspend", pid, expect_code=8)
        error = doc.get("error") or doc["processes"][0]["error"]
        expect(error["kind"] == "insufficient_host_memory", f"{error}")
        expect(tools.state(pid) == "running", "refused, so still running")
        with open(log_path) as f:
            seen = len(f.read().splitlines())
        line, _ = wait_for_line(log_path, "OK", seen, 60)
        expect(line == f"OK {ready.split()[2]}", f"data after the refusal: {line}")
        oom_before = int(dict(l.split() for l in open(os.path.join(cg, "memory.events")))["oom_kill"])
        code, out, _ = tools.run("--json", "suspend", "--force", pid)
        p.wait(timeout=120)
        oom_after = int(dict(l.split() for l in open(os.path.join(cg, "memory.events")))["oom_kill"])
        expect(oom_after > oom_before, f"the forced suspend was expected to get it OOM-killed (oom_kill {oom_before} -> {oom_after})")
        said = json.loads(out)["processes"][0].get("error", {})
        expect(said.get("kind") == "oom_killed", f"the forced suspend should be diagnosed as an OOM kill: {said}")
        expect(f"Killed process {pid} (" in said.get("message", ""), f"as root the kernel log's line should be quoted: {said}")
        said = said["kind"] + ": " + said["message"][:400]
        return f"refused: {error['message'][:150]}...; forced: exit {code} ({said}), oom_kill {oom_before} -> {oom_after}, the process is gone"
    finally:
        kill_and_reap(p, timeout=10)
        try:
            os.rmdir(cg)
        except OSError:
            pass
