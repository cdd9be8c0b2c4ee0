#!/usr/bin/env python3
"""cudackpt's real-GPU suite: one command, run as root on a host with an
NVIDIA GPU and driver 570+ (see docs/gpu-results.md for how and where).

    python3 tests/gpu/suite.py --bin-dir DIR [--json FILE] [--bench] [--criu-dir C] [--runc-dir R]

DIR holds the release binaries `cudackpt`, `cudackpt-gpu-target` and
`cudackpt-bench`, and optionally NVIDIA's `cuda-checkpoint` to compare with.
C holds a CRIU built elsewhere (`criu`, `cuda_plugin.so`, and the shared
libraries it needs under `lib/`), for hosts without one installed; R a
runc (`runc` and `lib/libseccomp.so.2`, from Debian's packages).
Each scenario drives real CUDA processes (the project's own target program,
holding a seeded pattern in device memory) through cudackpt and checks the
states, the exit codes and JSON, and that the data survived. Prints a
pass/fail table; writes it as JSON; exits 1 if anything failed.
"""

import argparse
import json
import os
import select
import signal
import shutil
import subprocess
import sys
import tempfile
import time

RESULTS = []


class Failed(Exception):
    pass


class Skipped(Exception):
    """What a scenario needs is not on this host; neither pass nor fail."""


def expect(condition, message):
    if not condition:
        raise Failed(message)


# Scenario function names to run (--only); empty: all of them.
ONLY = set()
# The scenarios main() called (by function name), to catch an --only name
# that names none: it would otherwise be left out in silence.
CALLED = set()


def scenario(name):
    def wrap(fn):
        def run(*args, **kwargs):
            CALLED.add(fn.__name__)
            if ONLY and fn.__name__ not in ONLY:
                return
            started = time.monotonic()
            status = "pass"
            try:
                detail = fn(*args, **kwargs) or ""
            except Failed as e:
                status, detail = "fail", str(e)
            except Skipped as e:
                status, detail = "skip", str(e)
            except Exception as e:  # a crash in a scenario is a failure of it
                status, detail = "fail", f"{type(e).__name__}: {e}"
            took = time.monotonic() - started
            RESULTS.append({"scenario": name, "status": status, "ok": status != "fail", "detail": detail, "seconds": round(took, 3)})
            print(f"[{status.upper()}] {name} ({took:.2f} s) {detail}", flush=True)
        return run
    return wrap


class Tools:
    def __init__(self, bin_dir):
        # Absolute: CRIU runs its action script from another directory.
        bin_dir = os.path.abspath(bin_dir)
        self.cudackpt = os.path.join(bin_dir, "cudackpt")
        self.target_bin = os.path.join(bin_dir, "cudackpt-gpu-target")
        self.bench = os.path.join(bin_dir, "cudackpt-bench")
        # The library's example program (examples/checkpoint.rs).
        self.example = os.path.join(bin_dir, "checkpoint")
        nvidia = os.path.join(bin_dir, "cuda-checkpoint")
        self.nvidia = nvidia if os.access(nvidia, os.X_OK) else None
        # cudackpt under NVIDIA's name, as `install-compat` sets it up.
        self.compat_dir = tempfile.mkdtemp(prefix="cudackpt-compat-")
        self.compat_bin = os.path.join(self.compat_dir, "cuda-checkpoint")
        os.symlink(os.path.abspath(self.cudackpt), self.compat_bin)

    def compat(self, *args):
        """Runs the compatible grammar as CRIU's plugin does: stdout and stderr
        on one pipe. Returns (exit code, first line, whole output)."""
        p = subprocess.run([self.compat_bin, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        return p.returncode, (p.stdout.splitlines() or [""])[0], p.stdout

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

    def __init__(self, tools, size_mib=256, device=0, seed=1, fill=True, env=None):
        self.p = subprocess.Popen(
            [tools.target_bin, "--size-mib", str(size_mib), "--device", str(device), "--seed", str(seed)]
            + ([] if fill else ["--no-fill"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env={**os.environ, **(env or {})})
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
    # A refusal of the whole command is said once, at the top.
    error = doc.get("error") or doc["processes"][0].get("error") or {}
    expect(error.get("kind") == kind, f"{command} on {pid}: kind {error.get('kind')!r}, expected {kind!r}: {doc}")
    return error


@scenario("doctor passes on this host")
def doctor(tools):
    doc = tools.json("doctor")
    expect(doc["ok"] and doc["gpus"], f"doctor: {doc}")
    nvml = next((c for c in doc["checks"] if c["name"] == "NVML"), {})
    expect(nvml.get("status") == "ok", f"doctor's NVML check on a GPU host: {nvml}")
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


def proc_state(pid):
    """The state letter of /proc/PID/stat (after the command name)."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


@scenario("the library's example program suspends and resumes through Process; a stopped process is refused with no state change; data intact")
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


@scenario("wrong-state calls are refused with exit 4 and the state named; a step already where it leads is 'already there'")
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


@scenario("a map to a GPU that is not on this host is refused before the driver (exit 8)")
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


@scenario("no driver: exit 7 naming the path tried")
def no_driver(tools):
    code, out, err = tools.run("state", "1", "--libcuda", "/nonexistent/libcuda.so.1")
    expect(code == 7 and "/nonexistent/libcuda.so.1" in err, f"exit {code}: {err}")


@scenario("NVIDIA's cuda-checkpoint sees the states cudackpt sets")
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


@scenario("compatible grammar driven as CRIU's plugin drives it; data intact")
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


# A CRIU carried in with --criu-dir: (binary, plugin dir, library dir).
CARRIED_CRIU = None


def criu_command():
    """The criu to run and the environment it needs, or None."""
    if CARRIED_CRIU:
        binary, _, libs = CARRIED_CRIU
        return binary, {"LD_LIBRARY_PATH": libs}
    found = shutil.which("criu")
    return (found, {}) if found else None


def find_cuda_plugin():
    if CARRIED_CRIU:
        return CARRIED_CRIU[1]
    for directory in ["/usr/lib/criu", "/usr/local/lib/criu", "/usr/lib64/criu", "/usr/lib/x86_64-linux-gnu/criu", "/usr/local/lib64/criu"]:
        if os.path.exists(os.path.join(directory, "cuda_plugin.so")):
            return directory
    return None


def wait_for_line(path, prefix, after_lines, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:  # the shell has not created it yet
            lines = []
        fresh = [l for l in lines[after_lines:] if l.startswith(prefix) or l.startswith("MISMATCH")]
        if fresh:
            return fresh[0], len(lines)
        time.sleep(0.2)
    raise Failed(f"no {prefix!r} line in {path} within {timeout} s")


def criu_round_trip(tools, plugin_dir, tool_dir, work, hook=None):
    """Dumps and restores a held target with CRIU and the CUDA plugin, with
    `cuda-checkpoint` resolved from tool_dir; or, with `hook`, with that
    program as CRIU's --action-script and no plugin. Returns (dump s,
    restore s)."""
    criu, criu_env = criu_command()
    log_path = os.path.join(work, "target.log")
    images = os.path.join(work, "images")
    os.makedirs(images)
    with open(log_path, "w") as log:
        p = subprocess.Popen([tools.target_bin, "--size-mib", "256", "--hold"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready, seen = wait_for_line(log_path, "READY", 0, 60)
        line, seen = wait_for_line(log_path, "OK", seen, 30)
        env = dict(os.environ, PATH=tool_dir + os.pathsep + os.environ["PATH"], **criu_env)
        started = time.monotonic()
        # Without a plugin, point --libdir at an empty folder so no installed
        # plugin is loaded behind the action script's back.
        libdir = plugin_dir or os.path.join(work, "no-plugins")
        os.makedirs(libdir, exist_ok=True)
        extra = ["--action-script", hook] if hook else []
        dump = subprocess.run([criu, "dump", "-t", str(p.pid), "-D", images, "--libdir", libdir, "-v4", "-o", "dump.log", *extra], env=env, capture_output=True, text=True)
        dumped = time.monotonic() - started
        if dump.returncode != 0:
            tail = open(os.path.join(images, "dump.log")).read()[-1500:]
            raise Failed(f"criu dump exited {dump.returncode}: {tail}")
        p.wait(timeout=30)  # CRIU killed it; reap it so the PID is free again
        with open(log_path) as f:
            seen = len(f.read().splitlines())
        started = time.monotonic()
        restore = subprocess.run([criu, "restore", "-D", images, "--libdir", libdir, "-d", "-v4", "-o", "restore.log", *extra], env=env, capture_output=True, text=True)
        restored = time.monotonic() - started
        if restore.returncode != 0:
            tail = open(os.path.join(images, "restore.log")).read()[-1500:]
            raise Failed(f"criu restore exited {restore.returncode}: {tail}")
        line, _ = wait_for_line(log_path, "OK", seen, 60)
        expect(line == f"OK {ready.split()[2]}", f"after restore the target says {line!r}")
        return dumped, restored
    finally:
        subprocess.run(["kill", "-9", str(p.pid)], capture_output=True)
        try:
            p.wait(timeout=5)
        except Exception:
            pass


@scenario("CRIU dump and restore with its CUDA plugin, cudackpt as cuda-checkpoint; data intact")
def criu_with_plugin(tools):
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    plugin_dir = find_cuda_plugin()
    if not plugin_dir:
        raise Skipped("CRIU's cuda_plugin.so not found")
    criu, criu_env = found
    version = subprocess.run([criu, "--version"], capture_output=True, text=True, env=dict(os.environ, **criu_env)).stdout.split("\n")[0]
    dumped, restored = criu_round_trip(tools, plugin_dir, tools.compat_dir, tempfile.mkdtemp(prefix="cudackpt-criu-"))
    return f"{version}, plugin in {plugin_dir}: dump {dumped:.1f} s, restore {restored:.1f} s"


@scenario("CRIU dump and restore with cudackpt as its action script (no plugin); data intact")
def criu_with_action_script(tools):
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    criu, criu_env = found
    version = subprocess.run([criu, "--version"], capture_output=True, text=True, env=dict(os.environ, **criu_env)).stdout.split("\n")[0]
    dumped, restored = criu_round_trip(tools, None, tools.compat_dir, tempfile.mkdtemp(prefix="cudackpt-criu-hook-"), hook=tools.cudackpt)
    return f"{version}: dump {dumped:.1f} s, restore {restored:.1f} s"


@scenario("CRIU dump that fails after pre-dump: cudackpt's watcher resumes the tree; data intact")
def criu_failed_dump(tools):
    """CRIU runs cudackpt's pre-dump (the tree is suspended), then the dump
    fails (here: an action script that fails post-dump), CRIU thaws the tree
    and exits, and no hook that cudackpt acts on runs again. The watcher
    bound to CRIU at pre-dump must resume the tree."""
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    criu, criu_env = found
    work = tempfile.mkdtemp(prefix="cudackpt-criu-fail-")
    images = os.path.join(work, "images")
    os.makedirs(images)
    no_plugins = os.path.join(work, "no-plugins")
    os.makedirs(no_plugins)
    script = os.path.join(work, "hook.sh")
    with open(script, "w") as f:
        f.write(f"""#!/bin/sh
case "$CRTOOLS_SCRIPT_ACTION" in
  pre-dump) exec {tools.cudackpt} ;;
  post-dump) echo "failing the dump on purpose" >&2; exit 1 ;;
  *) exit 0 ;;
esac
""")
    os.chmod(script, 0o755)
    log_path = os.path.join(work, "target.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen([tools.target_bin, "--size-mib", "256", "--hold"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready, seen = wait_for_line(log_path, "READY", 0, 60)
        line, seen = wait_for_line(log_path, "OK", seen, 30)
        dump = subprocess.run([criu, "dump", "-t", str(p.pid), "-D", images, "--libdir", no_plugins, "--action-script", script, "-v4", "-o", "dump.log"], env=dict(os.environ, **criu_env), capture_output=True, text=True)
        expect(dump.returncode != 0, "the dump was meant to fail at post-dump")
        expect(p.poll() is None, "the target must survive a failed dump")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and tools.state(p.pid) != "running":
            time.sleep(0.2)
        state = tools.state(p.pid)
        expect(state == "running", f"after the failed dump the target is {state}: the watcher did not resume it")
        with open(log_path) as f:
            seen = len(f.read().splitlines())
        line, _ = wait_for_line(log_path, "OK", seen, 60)
        expect(line == f"OK {ready.split()[2]}", f"after the failed dump the target says {line!r}")
        return f"criu dump exited {dump.returncode}; the tree was resumed, data intact"
    finally:
        subprocess.run(["kill", "-9", str(p.pid)], capture_output=True)
        try:
            p.wait(timeout=5)
        except Exception:
            pass


# A carried runc with --runc-dir: (binary, library dir).
CARRIED_RUNC = None


def runc_for(tools, work):
    """runc (carried, else installed) driving the carried or installed CRIU,
    or Skipped naming what is missing."""
    import containers

    if CARRIED_RUNC:
        binary, lib_dir = CARRIED_RUNC
    else:
        binary, lib_dir = shutil.which("runc"), None
    if not binary:
        raise Skipped("runc is not installed on this host (carry Debian's with --runc-dir)")
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    criu, criu_env = found
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        raise Skipped("no cgroup v2 here")
    return containers.Runc(binary, lib_dir, os.path.join(work, "runc-root"), criu, criu_env)


class GpuContainer:
    """The project's GPU target in a runc container (tests/gpu/containers.py),
    its CRIU images and logs under a fresh directory."""

    def __init__(self, tools, name, size_mib=256, annotations=None):
        import containers

        self.work = tempfile.mkdtemp(prefix=f"cudackpt-runc-{name}-")
        os.chmod(self.work, 0o755)
        self.runc = runc_for(tools, self.work)
        self.ct = containers.Container(self.runc, os.path.join(self.work, "ct"), f"{name}-{os.getpid()}",
                                       os.path.dirname(tools.target_bin), os.path.basename(tools.target_bin), size_mib, annotations)
        self.ct.start()
        self.ready, self.seen = wait_for_line(self.ct.log, "READY", 0, 60)
        self.expect_ok("at the start")

    def expect_ok(self, when, timeout=60):
        """Waits for the target's next check of its device memory."""
        line, self.seen = wait_for_line(self.ct.log, "OK", self.seen, timeout)
        expect(line == f"OK {self.ready.split()[2]}", f"{when} the container's target says {line!r}")

    def images(self, name):
        path = os.path.join(self.work, name)
        os.makedirs(path)
        return path

    def plugin_env(self, tools, plugin_dir):
        """CRIU loads the CUDA plugin from plugin_dir, which finds
        cudackpt as `cuda-checkpoint` on PATH."""
        return {"CRIU_LIBS_DIR": plugin_dir, "PATH": tools.compat_dir + os.pathsep + os.environ["PATH"]}

    def close(self):
        self.ct.close()


def plugin_or_skip():
    plugin_dir = find_cuda_plugin()
    if not plugin_dir:
        raise Skipped("CRIU's cuda_plugin.so not found")
    return plugin_dir


def checkpoint_or_fail(box, images, *extra, env):
    import containers

    code, took, err = box.ct.checkpoint(images, *extra, env=env)
    expect(code == 0, f"runc checkpoint exited {code}: {err.strip()[-600:]} | dump.log: {containers.criu_log_tail(images, 'dump.log')}")
    return took


def restore_or_fail(box, images, env):
    import containers

    work_path = box.images(f"restore-{time.monotonic_ns()}")
    code, took, err = box.ct.restore(images, work_path, env=env)
    expect(code == 0, f"runc restore exited {code}: {err.strip()[-600:]} | restore.log: {containers.criu_log_tail(work_path, 'restore.log')}")
    return took


@scenario("runc checkpoint and restore of a GPU container with CRIU and its CUDA plugin, cudackpt as cuda-checkpoint; data intact")
def runc_with_plugin(tools):
    plugin_dir = plugin_or_skip()
    box = GpuContainer(tools, "plugin")
    try:
        pid = box.ct.pid()
        env = box.plugin_env(tools, plugin_dir)
        images = box.images("images")
        dumped = checkpoint_or_fail(box, images, env=env)
        expect(box.ct.pid() is None, f"the container is gone after the checkpoint: {box.ct.state()}")
        restored = restore_or_fail(box, images, env)
        box.seen = len(box.ct.lines())
        after = box.ct.pid()
        expect(after is not None and tools.state(after) == "running", f"restored container's init {after} running")
        box.expect_ok("after the restore")
        return f"{box.runc.version()}; init PID {pid} -> {after}; checkpoint {dumped:.1f} s, restore {restored:.1f} s, data intact"
    finally:
        box.close()


@scenario("runc checkpoint and restore of a GPU container with cudackpt as CRIU's action script (runc's CRIU config file, no plugin); data intact")
def runc_with_action_script(tools):
    conf, no_plugins = hook_config(tools)
    # runc hands this file to CRIU (org.criu.config); CRIU runs the
    # script of a config file in RPC mode too.
    box = GpuContainer(tools, "hook", annotations={"org.criu.config": conf})
    try:
        env = {"CRIU_LIBS_DIR": no_plugins}
        images = box.images("images")
        dumped = checkpoint_or_fail(box, images, env=env)
        restored = restore_or_fail(box, images, env)
        box.seen = len(box.ct.lines())
        after = box.ct.pid()
        expect(after is not None and tools.state(after) == "running", f"restored container's init {after} running")
        box.expect_ok("after the restore")
        return f"checkpoint {dumped:.1f} s, restore {restored:.1f} s, data intact"
    finally:
        box.close()


def hook_config(tools):
    """A CRIU config file that makes cudackpt CRIU's action script, and an
    empty plugin directory, so that no installed plugin acts behind it."""
    work = tempfile.mkdtemp(prefix="cudackpt-runc-conf-")
    os.chmod(work, 0o755)
    conf = os.path.join(work, "criu.conf")
    with open(conf, "w") as f:
        f.write(f"action-script {tools.cudackpt}\n")
    no_plugins = os.path.join(work, "no-plugins")
    os.makedirs(no_plugins)
    return conf, no_plugins


@scenario("runc checkpoint --leave-running of a GPU container, with the plugin and with the action script: it goes on with its data; its image restores after it is killed")
def runc_leave_running(tools):
    plugin_dir = plugin_or_skip()
    conf, no_plugins = hook_config(tools)
    said = []
    for mode in ["plugin", "action script"]:
        hooked = mode == "action script"
        box = GpuContainer(tools, "leave-hook" if hooked else "leave", annotations={"org.criu.config": conf} if hooked else None)
        try:
            pid = box.ct.pid()
            env = {"CRIU_LIBS_DIR": no_plugins} if hooked else box.plugin_env(tools, plugin_dir)
            images = box.images("images")
            dumped = checkpoint_or_fail(box, images, "--leave-running", env=env)
            expect(box.ct.pid() == pid, f"{mode}: still running as {pid}: {box.ct.state()}")
            # The action script's post-dump resumes the tree once CRIU thaws
            # it (a detached waiter): give it the few seconds it may take.
            wait_for(f"{mode}: the CUDA state running again", lambda: tools.state(pid) == "running", 30)
            box.expect_ok(f"{mode}: after --leave-running")
            box.ct.close()
            restored = restore_or_fail(box, images, env)
            box.seen = len(box.ct.lines())  # the log as it was at the dump
            after = box.ct.pid()
            expect(after is not None and tools.state(after) == "running", f"{mode}: restored container's init {after} running")
            box.expect_ok(f"{mode}: after the restore of the image")
            said.append(f"{mode}: checkpoint --leave-running {dumped:.1f} s, went on; killed, restored in {restored:.1f} s")
        finally:
            box.close()
    return "; ".join(said) + "; data intact"


@scenario("cudackpt suspend --cgroup on a runc container's cgroup frees its GPU memory; resume --cgroup; data intact")
def runc_cgroup_suspend(tools):
    box = GpuContainer(tools, "cgroup", size_mib=1024)
    try:
        pid = box.ct.pid()
        cgroup = box.ct.cgroup_dir()
        free_before = gpus_free_mib(tools)
        down = tools.json("suspend", "--cgroup", cgroup)
        expect([p["pid"] for p in down["processes"]] == [pid], f"the container's process: {down}")
        expect(down["processes"][0]["state"] == "checkpointed", f"{down}")
        freed = [d - b for b, d in zip(free_before, gpus_free_mib(tools))]
        expect(freed[0] >= 1024, f"GPU memory freed: {freed} MiB")
        up = tools.json("resume", "--cgroup", cgroup)
        expect(up["processes"][0]["state"] == "running", f"{up}")
        box.expect_ok("after resume --cgroup")
        return f"cgroup {cgroup}: PID {pid} suspended ({freed[0]} MiB freed) and resumed, data intact"
    finally:
        box.close()


def pids_cgroup(limit):
    """A child cgroup (v2) with pids.max = limit, or None."""
    root = "/sys/fs/cgroup"
    try:
        controllers = open(os.path.join(root, "cgroup.controllers")).read().split()
        if "pids" not in controllers:
            return None
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+pids")
        path = os.path.join(root, f"cudackpt-suite-{os.getpid()}")
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(limit))
        return path
    except OSError:
        return None


@scenario("64 processes under a pids limit of 12: suspend and resume together; data intact; ps with no thread allowed lists them")
def group_under_pids_limit(tools):
    cgroup = pids_cgroup(12)
    if not cgroup:
        raise Skipped("no cgroup v2 with the pids controller here")
    targets = []
    try:
        for i in range(64):
            targets.append(Target(tools, size_mib=16, seed=100 + i))
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
        for t in targets:
            t.close()
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
        subprocess.run(["kill", "-9", str(p.pid)], capture_output=True)
        try:
            p.wait(timeout=10)
        except Exception:
            pass
        try:
            os.rmdir(cg)
        except OSError:
            pass


@scenario("check agrees with what then happens and reports the state it read: running and checkpointed targets, and a refused one (a launcher's WORLD_SIZE) said to be running and 'would be refused'")
def check_agrees(tools):
    t = Target(tools, size_mib=1024)
    ranked = Target(tools, size_mib=64, seed=7, env={"WORLD_SIZE": "2"})
    try:
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
    finally:
        t.close()
        ranked.close()


@scenario("kill -9 of cudackpt mid-suspend of 4 x 2 GiB, then recover: all running, data intact")
def killed_then_recovered(tools):
    targets = [Target(tools, size_mib=2048, seed=40 + i) for i in range(4)]
    try:
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
    finally:
        for t in targets:
            t.close()


TORCH_TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_target.py")


class TorchTargets:
    """tests/gpu/torch_target.py: PyTorch processes reporting their data."""

    def __init__(self, mode, env=None):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-torch-")
        self.p = subprocess.Popen([sys.executable, TORCH_TARGET, mode, self.dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True, env=dict(os.environ, **(env or {})))
        ready, _, _ = select.select([self.p.stdout], [], [], 180)
        line = self.p.stdout.readline().strip() if ready else ""
        if not line.startswith("PIDS"):
            self.close()
            raise Failed(f"torch target ({mode}) did not start: {line!r}")
        self.pids = [int(x) for x in line.split()[1:]]

    def all_ok_since(self, since, timeout=60):
        """Waits until every process reported `ok` after `since`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fresh = []
            for pid in self.pids:
                try:
                    word, _, stamp = open(os.path.join(self.dir, str(pid))).read().split()
                    fresh.append(word == "ok" and float(stamp) > since)
                except (OSError, ValueError):
                    fresh.append(False)
            if all(fresh):
                return True
            time.sleep(0.3)
        return False

    def close(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait(timeout=30)


@scenario("CUDA IPC pair (torch.multiprocessing): suspend refused before any change (exit 8); data intact")
def ipc_pair_refused(tools):
    pair = TorchTargets("ipc")
    try:
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
    finally:
        pair.close()


@scenario("the harm the refusal prevents: the same pair suspended with --force cannot be resumed")
def ipc_pair_forced(tools):
    pair = TorchTargets("ipc")
    try:
        expect(pair.all_ok_since(0), "the pair never reported its data")
        down = tools.json("suspend", "--force", *pair.pids)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"suspend --force: {down}")
        code, out, _ = tools.run("--json", "resume", *pair.pids)
        up = json.loads(out)
        expect(code != 0, f"the resume was expected to fail on this driver: {up}")
        states = {p["pid"]: tools.state(p["pid"]) for p in up["processes"]}
        errors = [p.get("error", {}).get("cuda_error") for p in up["processes"]]
        return f"resume exited {code}; states after {states}; driver errors {errors}"
    finally:
        pair.close()


@scenario("the harm the NCCL refusal prevents: a two-rank job over P2P/SHM suspended with --force cannot be resumed")
def nccl_job_forced(tools):
    if torch_gpu_count() < 2:
        raise Skipped("needs two GPUs")
    job = TorchTargets("nccl", env={"MASTER_PORT": "29533"})
    try:
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
    finally:
        job.close()


@scenario("two-rank NCCL job: refused by default; over sockets it suspends, resumes and goes on")
def nccl_job(tools):
    if torch_gpu_count() < 2:
        raise Skipped("needs two GPUs")
    job = TorchTargets("nccl")
    try:
        expect(job.all_ok_since(0, timeout=120), "the job never all-reduced")
        doc = tools.json("suspend", *job.pids, expect_code=8)
        kinds = sorted(p["error"]["kind"] for p in doc["processes"])
        expect(kinds.count("unrestorable") == 2, f"both ranks refused: {kinds}")
        expect(job.all_ok_since(time.time()), "the job stopped after the refusal")
    finally:
        job.close()
    sockets = TorchTargets("nccl", env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "MASTER_PORT": "29532"})
    try:
        expect(sockets.all_ok_since(0, timeout=120), "the socket job never all-reduced")
        down = tools.json("suspend", *sockets.pids)
        expect(all(p["state"] == "checkpointed" for p in down["processes"]), f"{down}")
        warned = [w for p in down["processes"] for w in p.get("warnings", [])]
        expect(len(warned) == 2 and all("socket transport" in w for w in warned), f"warnings {warned}")
        up = tools.json("resume", *sockets.pids)
        expect(all(p["state"] == "running" for p in up["processes"]), f"{up}")
        expect(sockets.all_ok_since(time.time(), timeout=120), "the job did not go on after the round trip")
        return "P2P/SHM job refused (2 x unrestorable); socket job round-tripped and all-reduced again"
    finally:
        sockets.close()


def torch_gpu_count():
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True)
    try:
        return int(out.stdout.strip())
    except ValueError:
        return 0


@scenario("single-GPU PyTorch process: no NCCL warning; suspend and resume; data intact")
def torch_single(tools):
    one = TorchTargets("single")
    try:
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
    finally:
        one.close()


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


@scenario("SIGTERM, then SIGUSR1 (a batch system's warning), during a group suspend: every process rolled back, data intact (exit 130)")
def group_interrupted(tools, size_mib):
    targets = [Target(tools, size_mib=size_mib, seed=30 + i) for i in range(4)]
    try:
        pids = [t.pid for t in targets]
        said = []
        for signal_number, name in [(signal.SIGTERM, "SIGTERM"), (signal.SIGUSR1, "SIGUSR1")]:
            p = subprocess.Popen([tools.cudackpt, "--json", "suspend", *map(str, pids)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)  # inside the checkpoint phase of 4 x 1 GiB
            p.send_signal(signal_number)
            out, err = p.communicate(timeout=120)
            doc = json.loads(out)
            if p.returncode == 0:
                raise Skipped(f"the suspend finished before {name} arrived ({doc['duration_ms']:.0f} ms)")
            expect(p.returncode == 130, f"{name}: exit {p.returncode}: {err}")
            kinds = {(q.get("error") or {}).get("kind") for q in doc["processes"]}
            expect(kinds == {"interrupted"} and all(q["rolled_back"] for q in doc["processes"]), f"{name}: {doc}")
            expect(all(name in q["error"]["message"] for q in doc["processes"]), f"{name} named: {doc}")
            for pid in pids:
                expect(tools.state(pid) == "running", f"{name}: PID {pid} left {tools.state(pid)}")
            for t in targets:
                t.verify()
            said.append(f"{name} after {doc['duration_ms']:.0f} ms")
        return f"interrupted by {', '.join(said)}; all 4 back to running each time"
    finally:
        for t in targets:
            t.close()


@scenario("a deadline passing mid-checkpoint rolls a group of 4 x 2 GiB back, data intact")
def group_deadline(tools):
    targets = [Target(tools, size_mib=2048, seed=50 + i) for i in range(4)]
    try:
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
    finally:
        for t in targets:
            t.close()


def held_tree(tools, work, seeds):
    """A shell whose children are held targets (as CRIU would see a job)."""
    logs = [os.path.join(work, f"target-{seed}.log") for seed in seeds]
    script = " ".join(f"{tools.target_bin} --size-mib 512 --seed {seed} --hold > {log} 2>&1 < /dev/null &" for seed, log in zip(seeds, logs))
    # No inherited stdio: a shell left behind must not hold the suite's
    # output pipe open.
    shell = subprocess.Popen(["bash", "-c", script + " wait"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        readies = [wait_for_line(log, "READY", 0, 60)[0] for log in logs]
    except BaseException:
        os.killpg(shell.pid, 9)
        raise
    pids = [int(line.split()[1]) for line in readies]
    hashes = [line.split()[2] for line in readies]
    return shell, pids, hashes, logs


@scenario("CRIU action-script cycle on real processes: pre-dump, frozen post-dump, thaw, data intact")
def action_script(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-hook-")
    shell, pids, hashes, logs = held_tree(tools, work, [61, 62])
    try:
        def hook(action):
            env = dict(os.environ, CRTOOLS_SCRIPT_ACTION=action, CRTOOLS_INIT_PID=str(shell.pid))
            return subprocess.run([tools.cudackpt], env=env, capture_output=True, text=True, timeout=300)
        done = hook("pre-dump")
        expect(done.returncode == 0, f"pre-dump exited {done.returncode}: {done.stderr}")
        for pid in pids:
            expect(tools.state(pid) == "checkpointed", f"pre-dump left PID {pid} {tools.state(pid)}")
        for pid in pids:
            os.kill(pid, 19)  # SIGSTOP, as CRIU's freeze leaves them
        started = time.monotonic()
        done = hook("post-dump")
        took = time.monotonic() - started
        expect(done.returncode == 0 and took < 5, f"post-dump exited {done.returncode} after {took:.1f} s: {done.stderr}")
        time.sleep(0.5)
        for pid in pids:
            # The driver cannot answer for a frozen process; cudackpt says so
            # at once instead of waiting (and nothing resumed it meanwhile).
            error = refused(tools, "state", pid, 4, "process_stopped")
            expect("stopped" in error["message"], f"{error}")
        seen = [len(open(log).read().splitlines()) for log in logs]
        for pid in pids:
            os.kill(pid, 18)  # SIGCONT: CRIU thaws a --leave-running dump
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(tools.state(pid) != "running" for pid in pids):
            time.sleep(0.2)
        expect(all(tools.state(pid) == "running" for pid in pids), "the waiter did not resume the thawed tree")
        for log, count, expected in zip(logs, seen, hashes):
            line, _ = wait_for_line(log, "OK", count, 30)
            expect(line == f"OK {expected}", f"after thaw: {line}")
        done = hook("post-resume")
        expect(done.returncode == 0, f"post-resume exited {done.returncode}: {done.stderr}")
        return f"post-dump returned in {took * 1000:.0f} ms; resumed after thaw"
    finally:
        os.killpg(shell.pid, 9)  # the shell and every target it started
        shell.wait(timeout=10)


@scenario("ps finds the CUDA processes among 2000 others, read-only")
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


def gpu_of(pid):
    """The UUID of the GPU nvidia-smi shows the process on (None if none)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return fields[1]
    return None


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
    t = Target(tools, size_mib=1024, seed=85)
    try:
        down = step(tools, "suspend", t.pid, "checkpointed", "--verify")
        expect(down.get("gpu_memory_bytes", 0) >= 1024 << 20, f"memory moved: {down}")
        expect(down.get("record"), f"a checkpoint record: {down}")
        up = step(tools, "resume", t.pid, "running", "--verify")
        expect(up.get("gpu_memory_bytes", 0) >= 1024 << 20, f"memory back: {up}")
        t.verify()
        return f"moved {down['gpu_memory_bytes'] >> 20} MiB out and {up['gpu_memory_bytes'] >> 20} MiB back"
    finally:
        t.close()


@scenario("memory pre-flight: restore refused while the GPU is full, done once it is freed")
def preflight_memory(tools):
    gpus = tools.json("devices")["gpus"]
    t = Target(tools, size_mib=4096, seed=80)
    hog = None
    try:
        step(tools, "suspend", t.pid, "checkpointed")
        free_mib = tools.json("devices")["gpus"][0]["memory_free_bytes"] >> 20
        hog = Target(tools, size_mib=free_mib - 2048, seed=81, fill=False)  # leaves ~1.5 GiB: too little
        error = refused(tools, "resume", t.pid, 8, "insufficient_gpu_memory")
        expect("MiB free" in error["message"], f"{error}")
        expect(tools.state(t.pid) == "checkpointed", "the pre-flight must change nothing")
        hog.close()
        hog = None
        step(tools, "resume", t.pid, "running")
        t.verify()
        return error["message"][:160]
    finally:
        if hog:
            hog.close()
        t.close()


@scenario("two GPUs: a partial map, an index map and --map auto move a process, data intact")
def two_gpu_moves(tools):
    gpus = tools.json("devices")["gpus"]
    if len(gpus) < 2:
        raise Skipped(f"this host has {len(gpus)} GPU")
    a, b = gpus[0]["uuid"], gpus[1]["uuid"]
    t = Target(tools, size_mib=1024, seed=90)
    try:
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
    finally:
        t.close()



# ---------------------------------------------------------------------------
# The drain handshake (cudackpt(1), DRAIN PROTOCOL) on real ranks: tests/gpu/drain_job.py under
# torchrun (2 GPUs, NCCL over NVLink and SHM, NCCL_NVLS_ENABLE=0) with the
# PyTorch client, and tests/gpu/drain_ipc.py for a CUDA IPC pair.

DRAIN_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "drain_job.py")
DRAIN_IPC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "drain_ipc.py")
# What the drain scenarios saw, written beside --json as drain-raw.json.
RAW = {}


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(open(f"/proc/{pid}/task/{tid}/comm").read().strip())
        except OSError:
            pass
    return names


def shows_marker(pid):
    try:
        return "cudackpt-drain1" in thread_names(pid)
    except OSError:
        return False


def wait_for(what, condition, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise Failed(f"timed out waiting for {what}")


def gpus_free_mib(tools):
    doc = tools.json("devices")
    return [g["memory_free_bytes"] >> 20 for g in doc["gpus"]]


class DrainJob:
    """The torchrun job of drain_job.py, in a process session of its own;
    `wrap` goes before torchrun (e.g. unshare into a PID namespace)."""

    PORTS = iter(range(29600, 29700))

    def __init__(self, env=None, wrap=None):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-drain-job-")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                   "--master-port", str(next(self.PORTS)), DRAIN_JOB, self.dir]
        self.log = open(os.path.join(self.dir, "job.log"), "w")
        self.p = subprocess.Popen((wrap or []) + command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env={**os.environ, "NCCL_NVLS_ENABLE": "0", "HOLD_MIB": "1024", **(env or {})})
        self.launcher = self.p.pid

    def ranks(self):
        ranks = []
        for r in range(2):
            try:
                ranks.append(json.load(open(os.path.join(self.dir, f"rank{r}.json"))))
            except (OSError, ValueError):
                return None
        return ranks

    @property
    def pids(self):
        return [r["pid"] for r in self.ranks()]

    def wait_steps(self, at_least, timeout=180):
        def ready():
            ranks = self.ranks()
            return ranks is not None and all(r["steps"] >= at_least for r in ranks)
        if self.p.poll() is not None:
            raise Failed(f"the job exited {self.p.returncode}: {self.tail()}")
        wait_for(f"the job to reach step {at_least} ({self.tail()})", ready, timeout)

    def steps(self):
        return [r["steps"] for r in self.ranks()]

    def tail(self):
        try:
            return open(os.path.join(self.dir, "job.log")).read()[-600:]
        except OSError:
            return ""

    def finish(self, timeout=180):
        """Stops the job at a step boundary; its exit code and the ranks."""
        open(os.path.join(self.dir, "stop"), "w").close()
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"the job did not finish: {self.tail()}")
        return code, self.ranks()

    def close(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait(timeout=60)


def split_ranks(doc, job):
    """A document's processes: the job's ranks, and the rest (torchrun's
    agent, a CUDA process to the driver)."""
    pids = job.pids
    return ([p for p in doc["processes"] if p["pid"] in pids],
            [p for p in doc["processes"] if p["pid"] not in pids])


def need_two_gpus():
    if torch_gpu_count() < 2:
        raise Skipped("needs two GPUs")


@scenario("drain: a torchrun job on NVLink drains, is checkpointed (GPUs freed), resumes, rebuilds, finishes with right values; all-reduce bandwidth the same before and after")
def drain_round_trip(tools):
    need_two_gpus()
    job = DrainJob(env={"HOLD_MIB": "2048"})
    try:
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
    finally:
        job.close()


@scenario("drain: a torchrun job on one GPU over gloo (the torchrun store, the client): suspend --drain, resume, rebuilt, finishes right")
def drain_round_trip_gloo(tools):
    job = DrainJob(env={"DRAIN_BACKEND": "gloo", "HOLD_MIB": "512", "BANDWIDTH_MIB": "16"})
    try:
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
    finally:
        job.close()


@scenario("drain: the harm first: the same job without the client suspended with --force cannot be resumed")
def drain_harm_forced(tools):
    need_two_gpus()
    job = DrainJob(env={"NO_DRAIN": "1"})
    try:
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
    finally:
        job.close()


@scenario("drain: the price users avoid: the socket-only job's all-reduce bandwidth")
def drain_sockets_bandwidth(tools):
    need_two_gpus()
    job = DrainJob(env={"NO_DRAIN": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    try:
        job.wait_steps(3)
        code, ranks = job.finish()
        expect(code == 0, f"exit {code}: {job.tail()}")
        bandwidth = [r["bandwidth_gbps"][0] for r in ranks]
        RAW["drain_sockets_bandwidth"] = {"bandwidth_gbps": bandwidth}
        return f"bus bandwidth over sockets: {bandwidth} GB/s"
    finally:
        job.close()


@scenario("drain: a rank that does not acknowledge in time: exit 12, nothing locked, the other rank rebuilds, the job finishes right")
def drain_never_acknowledges(tools):
    need_two_gpus()
    # Rank 1 stalls after its tear-down, before its acknowledgement: a
    # stall before it would hold rank 0 too (NCCL's tear-down waits for
    # its peer, measured on 2 x H200), and no rank would have drained.
    job = DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "7", "STALL_AT": "acknowledge"})
    try:
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
    finally:
        job.close()


@scenario("drain: kill -9 of cudackpt mid-drain, then recover: the ranks rebuild and the job finishes right")
def drain_killed_then_recovered(tools):
    need_two_gpus()
    job = DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "6", "STALL_AT": "acknowledge"})
    try:
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
    finally:
        job.close()


@scenario("drain: kill -9 of cudackpt while a resumed job's ranks rebuild, then recover: the record is finished forward (nothing locked or checkpointed again), each rank rebuilds once, the job finishes right")
def drain_resume_killed_then_finished(tools):
    need_two_gpus()
    job = DrainJob(env={"STALL_RANK": "1", "STALL_SECONDS": "8", "STALL_AT": "rebuild"})
    try:
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
    finally:
        job.close()


def state_or_gone(tools, pid):
    """The CUDA state, or `exited` for a process that is gone."""
    code, out, _ = tools.run("--json", "state", pid)
    doc = json.loads(out)
    return doc["processes"][0]["state"] if code == 0 else doc["processes"][0]["error"]["kind"]


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


def stop_drain_ipc(p, work):
    """Stops a drain_ipc.py process (and its child): asked through `work`,
    then its whole session killed, and reaped."""
    open(os.path.join(work, "stop"), "w").close()
    try:
        os.killpg(p.pid, 9)
    except OSError:
        pass
    p.wait(timeout=60)


def start_single(work, **env):
    """A single-GPU PyTorch process with the drain client (drain_ipc.py
    single), writing its status in `work`."""
    return subprocess.Popen([sys.executable, DRAIN_IPC, work, "single"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True, env=dict(os.environ, **env))


def first_steps(p, work):
    """Its PID once it has made its first steps, and a reader of its status."""
    ready, _, _ = select.select([p.stdout], [], [], 180)
    line = p.stdout.readline().strip() if ready else ""
    expect(line.startswith("PIDS"), f"the process did not start: {line!r}")
    pid = int(line.split()[1])
    wait_for("its first steps", lambda: os.path.exists(os.path.join(work, f"{pid}.json")))
    return pid, lambda: json.load(open(os.path.join(work, f"{pid}.json")))


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


def memory_cgroup(name):
    """A cgroup v2 directory with the memory controller, or Skipped."""
    root = "/sys/fs/cgroup"
    try:
        if "memory" not in open(os.path.join(root, "cgroup.controllers")).read().split():
            raise Skipped("no cgroup v2 memory controller here")
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")
    except OSError as e:
        raise Skipped(f"cannot use cgroup v2 memory limits here: {e}")
    cg = os.path.join(root, f"{name}-{os.getpid()}")
    os.makedirs(cg, exist_ok=True)
    return cg


def limit_headroom(cg, headroom):
    """Sets the cgroup's memory.max to what it uses now plus `headroom` bytes."""
    current = int(open(os.path.join(cg, "memory.current")).read())
    with open(os.path.join(cg, "memory.max"), "w") as f:
        f.write(str(current + headroom))
    return current


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


TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
CLIENT_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src")


class TrainJob:
    """tests/gpu/train.py in a session of its own (under torchrun with
    `torchrun`, under a wrapper command with `wrap`), its output in
    WORK/job.log."""

    def __init__(self, work, *args, wrap=(), env=None, torchrun=False, nproc=1):
        self.work = work
        self.nproc = nproc
        os.makedirs(work, exist_ok=True)
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if torchrun else []
        command = [*wrap, sys.executable, *launcher, TRAIN, work, *map(str, args)]
        self.log = open(os.path.join(work, "job.log"), "w")
        self.p = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=dict(os.environ, PYTHONPATH=CLIENT_SRC, **(env or {})))

    def suffix(self, rank):
        """How train.py names a rank's files: nothing for one process."""
        return f"-{rank}" if self.nproc > 1 else ""

    def status(self, rank=0):
        try:
            return json.load(open(os.path.join(self.work, f"status{self.suffix(rank)}.json")))
        except (OSError, ValueError):
            return {}

    def tail(self):
        return open(os.path.join(self.work, "job.log")).read()[-1500:]

    def wait_step(self, n, timeout=300):
        def reached():
            if self.status().get("step", 0) >= n:
                return True
            if self.p.poll() is not None and not self.status().get("done"):
                raise Failed(f"the job exited {self.p.returncode} before step {n}: {self.tail()}")
            return False
        wait_for(f"step {n}", reached, timeout)

    def wait_done(self, timeout=300):
        wait_for("the job to finish", lambda: all(self.status(r).get("done") for r in range(self.nproc)), timeout)

    def losses(self, rank=0):
        try:
            return open(os.path.join(self.work, f"losses{self.suffix(rank)}.txt")).read().split("\n")
        except OSError:
            return []

    def tree(self):
        return process_tree(self.p.pid)

    def close(self):
        for pid in reversed(self.tree()):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        try:
            self.p.wait(timeout=30)
        except Exception:
            pass


def process_tree(root):
    """root and its descendants, by /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
                children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    found, i = [root], 0
    while i < len(found):
        found.extend(children.get(found[i], []))
        i += 1
    return found


def holders(pids, needle):
    """(pid, name) of each of `pids` whose maps hold `needle`."""
    found = []
    for pid in pids:
        try:
            if needle in open(f"/proc/{pid}/maps").read():
                found.append((pid, open(f"/proc/{pid}/comm").read().strip()))
        except OSError:
            pass
    return found


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def criu_dump_tree(tools, root, images, env=None, extra=()):
    """criu dump of root's tree with cudackpt as its action script and no
    plugin: (exit code, seconds, bytes of images, output and log tail)."""
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    criu, criu_env = found
    os.makedirs(images, exist_ok=True)
    no_plugins = os.path.join(os.path.dirname(images), "no-plugins")
    os.makedirs(no_plugins, exist_ok=True)
    tree = process_tree(root)
    started = time.monotonic()
    done = subprocess.run([criu, "dump", "-t", str(root), "-D", images, "--libdir", no_plugins, "--action-script", tools.cudackpt,
                           "-v4", "-o", "dump.log", *extra], env=dict(os.environ, **criu_env, **(env or {})), capture_output=True, text=True)
    took = time.monotonic() - started
    log = ""
    try:
        log = open(os.path.join(images, "dump.log")).read()
    except OSError:
        pass
    errors = [line for line in log.splitlines() if "Error" in line or "rror (" in line][-6:]
    if done.returncode == 0:
        vanish(tree)
    return done.returncode, took, dir_bytes(images), (done.stdout + done.stderr)[-1200:] + " | " + " / ".join(errors)[-1500:]


def vanish(pids, timeout=30):
    """Waits until the processes a dump killed are gone (reaped), so that a
    restore can take their PIDs again."""
    def gone(pid):
        try:
            os.waitpid(pid, os.WNOHANG)  # ours to reap, if it is our child
        except ChildProcessError:
            pass
        try:
            return open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "X"
        except (OSError, IndexError):
            return True
    wait_for(f"the dumped processes {pids} to be reaped", lambda: all(gone(pid) for pid in pids), timeout)


def criu_restore_tree(tools, images, extra=()):
    criu, criu_env = criu_command()
    no_plugins = os.path.join(os.path.dirname(images), "no-plugins")
    started = time.monotonic()
    done = subprocess.run([criu, "restore", "-D", images, "--libdir", no_plugins, "--action-script", tools.cudackpt, "-d",
                           "-v4", "-o", "restore.log", *extra], env=dict(os.environ, **criu_env), capture_output=True, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        log = open(os.path.join(images, "restore.log")).read()[-1500:]
        raise Failed(f"criu restore exited {done.returncode}: {log}")
    return took


def pre_dump_report(tools, root, env=None):
    """cudackpt's pre-dump, run as CRIU runs it, outside CRIU: its JSON."""
    code, out, err = tools.run("--json", "criu-hook", env=dict({"CRTOOLS_SCRIPT_ACTION": "pre-dump", "CRTOOLS_INIT_PID": str(root)}, **(env or {})))
    return code, json.loads(out) if out.strip() else {"stderr": err}


@scenario("CRIU and a PyTorch job with fork DataLoader workers: forced, the dump fails after CUDA was suspended and images written; refused at pre-dump before any change; with the client's fork hook it dumps (drained) and restores, losses bit-exact")
def criu_dataloader(tools):
    if not criu_command():
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    base = tempfile.mkdtemp(prefix="cudackpt-criu-dl-")
    result = {}
    RAW["criu_dataloader"] = result
    steps = 60
    reference = TrainJob(os.path.join(base, "reference"), "--workers", "2", "--steps", steps)
    try:
        reference.wait_done()
    finally:
        reference.close()
    expected = reference.losses()
    expect(len([l for l in expected if l]) == steps, f"the reference run made {len(expected)} steps: {reference.tail()}")

    # Without the fork hook: the harm (forced), then the refusal.
    harmed = TrainJob(os.path.join(base, "no-hook"), "--workers", "2", "--steps", steps, "--pause", "0.2", "--no-dumpable-forks")
    try:
        harmed.wait_step(10)
        tree = harmed.tree()
        result["workers_holding_the_device"] = holders(tree[1:], "/dev/nvidia")
        expect(result["workers_holding_the_device"], f"the workers were expected to map /dev/nvidia*: tree {tree}")
        code, took, written, said = criu_dump_tree(tools, harmed.p.pid, os.path.join(base, "forced-images"), env={"CUDACKPT_FORCE": "1"})
        result["forced"] = {"exit": code, "seconds": took, "image_bytes": written, "said": said}
        expect(code != 0, "the forced dump was expected to fail on the workers' device mappings")
        wait_for("the watcher to resume the job", lambda: tools.state(harmed.status()["pid"]) == "running", 60)
        code, took, written, said = criu_dump_tree(tools, harmed.p.pid, os.path.join(base, "refused-images"))
        result["refused"] = {"exit": code, "seconds": took, "image_bytes": written, "said": said}
        expect(code != 0, "CRIU must abort the dump when pre-dump refuses")
        hook_code, hook_doc = pre_dump_report(tools, harmed.p.pid)
        result["pre_dump"] = hook_doc
        if hook_code == 0:  # not refused: it suspended the job, so bring it back
            tools.run("resume", harmed.status()["pid"])
        error = hook_doc.get("error") or {}
        expect(hook_code == 8 and error.get("kind") == "undumpable", f"pre-dump: exit {hook_code}: {hook_doc}")
        expect(all(not q.get("steps") for q in hook_doc.get("processes", [])), f"refused before any driver step: {hook_doc}")
        expect(all(str(pid) in error["message"] for pid, _ in result["workers_holding_the_device"]), f"each worker named: {error}")
        harmed.wait_done()
        result["losses_after_forced_and_refused_equal"] = harmed.losses() == expected
        expect(harmed.losses() == expected, "the job went on after the forced dump failed and the refusal, its losses bit-exact")
    finally:
        harmed.close()

    # With the client's fork hook: dump drained, restore, finish.
    fixed = TrainJob(os.path.join(base, "hook"), "--workers", "2", "--steps", steps, "--pause", "0.2")
    try:
        fixed.wait_step(10)
        tree = fixed.tree()
        result["workers_holding_the_device_with_hook"] = holders(tree[1:], "/dev/nvidia")
        expect(not result["workers_holding_the_device_with_hook"], f"with the hook the workers hold nothing: {result['workers_holding_the_device_with_hook']}")
        images = os.path.join(base, "images")
        code, took, written, said = criu_dump_tree(tools, fixed.p.pid, images, env={"CUDACKPT_DRAIN": "1"})
        result["dump"] = {"exit": code, "seconds": took, "image_bytes": written, "said": said}
        expect(code == 0, f"criu dump exited {code}: {said}")
        dumped_at = fixed.status()["step"]
        fixed.p.wait(timeout=30)
        restored = criu_restore_tree(tools, images)
        result["restore_seconds"] = restored
        fixed.wait_done()
        result["losses_equal"] = fixed.losses() == expected
        expect(fixed.losses() == expected, f"losses after the restore differ from the untouched run: {[(a, b) for a, b in zip(fixed.losses(), expected) if a != b][:3]}")
        return (f"forced: dump failed after {result['forced']['seconds']:.1f} s and {result['forced']['image_bytes'] / 1e9:.2f} GB of images; "
                f"refused at pre-dump in {result['refused']['seconds']:.2f} s ({result['refused']['image_bytes']} bytes), no driver step; "
                f"with the hook: dumped at step {dumped_at} in {took:.1f} s ({written / 1e9:.2f} GB, drained), restored in {restored:.1f} s, "
                f"{steps} losses bit-exact")
    finally:
        fixed.close()


@scenario("a DDP training job (torchrun, 2 ranks, NCCL on NVLink, transformers Llama): two untouched runs agree; suspend --drain --tree and resume, then suspend --drain and resume --map onto the swapped GPUs: the job rebuilds on the new devices and finishes with the same losses, bit for bit")
def ddp_drain_and_migrate(tools):
    need_two_gpus()
    base = tempfile.mkdtemp(prefix="cudackpt-ddp-")
    result = {}
    RAW["ddp_drain_and_migrate"] = result
    steps = 30
    args = ("--steps", steps, "--backend", "nccl", "--ddp")
    runs = []
    for name in ("reference-1", "reference-2"):
        job = TrainJob(os.path.join(base, name), *args, torchrun=True, nproc=2)
        try:
            job.wait_done(timeout=300)
            runs.append((job.losses(0), job.losses(1)))
        finally:
            job.close()
    expected = runs[0][0]
    expect(len([l for l in expected if l]) == steps, f"the reference made {len(expected)} steps")
    expect(runs[0] == runs[1], f"two untouched runs differ: {[(a, b) for a, b in zip(runs[0][0], runs[1][0]) if a != b][:3]}")
    expect(runs[0][0] == runs[0][1], "both ranks log the same all-reduced loss")
    job = TrainJob(os.path.join(base, "moved"), *args, "--pause", "0.3", torchrun=True, nproc=2)
    try:
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
    finally:
        job.close()


PARALLEL_RANK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "tests", "parallel_rank.py")
FRAMEWORK_RANK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "tests", "framework_rank.py")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ParallelJob:
    """A rank script of the client's tests (parallel_rank.py, or
    framework_rank.py) under torchrun on two GPUs (NCCL): MODE's model,
    its groups started through the client, one rank a GPU on `ranks` GPUs;
    `env` is added to the ranks'."""

    def __init__(self, mode, steps, step_seconds, script=PARALLEL_RANK, env=None, ranks=2):
        self.dir = tempfile.mkdtemp(prefix=f"cudackpt-groups-{mode}-")
        self.ranks = ranks
        self.logs = [os.path.join(self.dir, f"rank{r}.log") for r in range(ranks)]
        env = dict(os.environ, DEVICE="cuda", STEP_SECONDS=str(step_seconds), NCCL_NVLS_ENABLE="0",
                   CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(p for p in [CLIENT_SRC, os.environ.get("PYTHONPATH", "")] if p),
                   **(env or {}))
        self.err = open(os.path.join(self.dir, "torchrun.err"), "w")
        # Every rank logs to LOG with its rank: the torchrun command is the
        # same for both, so the rank script is given a per-rank path.
        self.p = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port", str(free_port()),
             script, mode, str(steps), os.path.join(self.dir, "rank{RANK}.log")],
            env=env, stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)

    def lines(self, rank):
        try:
            with open(self.logs[rank]) as log:
                return log.read().splitlines()
        except OSError:
            return []

    def losses(self, rank):
        return [line.split("loss=")[1] for line in self.lines(rank) if line.startswith("step=")]

    def value(self, rank, key):
        return next((line.split("=", 1)[1] for line in self.lines(rank) if line.startswith(key + "=")), None)

    def pids(self):
        return [int(self.value(r, "pid") or 0) for r in range(self.ranks)]

    def wait_step(self, step, timeout=240):
        wait_for(f"step {step}", lambda: min(len(self.losses(r)) for r in range(self.ranks)) >= step, timeout)

    def wait_done(self, timeout=300):
        code = self.p.wait(timeout=timeout)
        self.err.flush()
        expect(code == 0, f"torchrun exited {code}: {open(self.err.name).read()[-1500:]}")

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.err.close()


def kept_through_two_drains(tools, name, steps, make, ranks=2):
    """The job `make(step_seconds)` starts (one rank a GPU on the first
    `ranks` GPUs), run twice untouched (the two must agree), then drained
    with suspend --drain --tree and resume --tree, then again with resume
    --map moving every rank onto the next GPU (0→1, 1→2, …, the last→0;
    on two GPUs, a swap): every rank drains and rebuilds, moves, keeps its
    groups (the same objects, registered) and finishes bit-exact. Returns
    the raw documents and a line."""
    runs = []
    for _ in range(2):
        job = make(0)
        try:
            job.wait_done()
            runs.append([job.losses(r) for r in range(ranks)])
        finally:
            job.close()
    expect(runs[0] == runs[1], f"{name}: two untouched runs differ")
    job = make(0.15)
    row = {}
    try:
        job.wait_step(5)
        pids = job.pids()
        down = tools.json("suspend", "--drain", "--tree", job.p.pid)
        row["suspend"] = down
        expect(all(q["drain"]["outcome"] == "drained" for q in down["processes"] if q["pid"] in pids), f"{name}: {down}")
        up = tools.json("resume", "--tree", job.p.pid)
        row["resume"] = up
        expect(all((q.get("drain") or {}).get("outcome") == "rebuilt" for q in up["processes"] if q["pid"] in pids), f"{name}: {up}")
        job.wait_step(15)
        down2 = tools.json("suspend", "--drain", "--tree", job.p.pid)
        row["suspend_2"] = down2
        gpus = [g["uuid"] for g in tools.json("devices")["gpus"]]
        before = {pid: gpu_of(pid) for pid in pids}
        rotation = ",".join(f"{gpus[i]}={gpus[(i + 1) % ranks]}" for i in range(ranks))
        moved = tools.json("resume", "--tree", job.p.pid, "--map", rotation)
        row["resume_moved"] = moved
        after = {pid: gpu_of(pid) for pid in pids}
        expect(all(after[pid] != before[pid] for pid in pids), f"{name}: not moved: {before} -> {after}")
        job.wait_done()
        for r in range(ranks):
            expect(job.value(r, "drains") == "2", f"{name} rank {r}: drains {job.value(r, 'drains')}")
            expect(job.value(r, "same_groups") == "True" and job.value(r, "registered") == "True",
                   f"{name} rank {r}: groups same {job.value(r, 'same_groups')}, registered {job.value(r, 'registered')}")
            expect(job.losses(r) == runs[0][r], f"{name} rank {r}: losses differ at {[i for i, (a, b) in enumerate(zip(job.losses(r), runs[0][r])) if a != b][:3]}")
        row["steps"] = [step_times(job, r) for r in range(ranks)]
        rows = lambda doc: [q for q in doc["processes"] if q["pid"] in pids]
        released = [q["drain"].get("released_bytes", 0) >> 20 for q in rows(down)]
        acks = [q["drain"].get("acknowledged_ms") for q in rows(down)]
        rebuilt = [q["drain"].get("rebuilt_ms") for q in rows(up)]
        after_ms = [[round(t * 1000, 1) for t in times["after_drain"]] for times in row["steps"]]
        usual_ms = [round(times["median"] * 1000, 1) for times in row["steps"]]
        return row, (f"{name}: suspend --drain {down['duration_ms'] / 1000:.2f} s (acks {acks} ms, released {released} MiB), "
                     f"resume {up['duration_ms'] / 1000:.2f} s (rebuilt {rebuilt} ms), first steps after {after_ms} ms "
                     f"(median {usual_ms} ms), moved, {steps} losses bit-exact")
    finally:
        job.close()


def step_times(job, rank):
    """How long each step of `rank` took (its `took=STEP SECONDS` lines):
    the median, and the first step after each drain."""
    took = {}
    for line in job.lines(rank):
        if line.startswith("took="):
            step, seconds = line[5:].split()
            took[int(step)] = float(seconds)
    drained = [int(line.split("=")[1]) for line in job.lines(rank) if line.startswith("drained_at=")]
    ordered = sorted(took.values())
    return {"median": ordered[len(ordered) // 2] if ordered else None,
            "after_drain": [took[d + 1] for d in drained if d + 1 in took], "drained_at": drained}


@scenario("groups kept: DDP (and DDP started by torch's own init_process_group after install()), FSDP2 (1-D mesh) and DTensor tensor parallelism on two GPUs over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the same group objects, losses bit-exact against two untouched runs that agree")
def groups_kept(tools):
    need_two_gpus()
    result = {}
    RAW["groups_kept"] = result
    said = []
    steps = 40
    for name, mode, env in (("fsdp2", "fsdp2", None), ("tp", "tp", None), ("ddp", "ddp", None), ("ddp_install", "ddp", {"INSTALL": "1"})):
        result[name], line = kept_through_two_drains(tools, name, steps, lambda pause: ParallelJob(mode, steps, pause, env=env))
        said.append(line)
    return "; ".join(said)


@scenario("pipeline kept: pipeline parallelism (torch.distributed.pipelining, GPipe, one stage a GPU) over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the same group objects, losses bit-exact against two untouched runs that agree")
def pipeline_kept(tools):
    need_two_gpus()
    steps = 40
    RAW["pipeline_kept"], line = kept_through_two_drains(tools, "pp", steps, lambda pause: ParallelJob("pp", steps, pause))
    return line


@scenario("four GPUs kept: DDP, FSDP2 (1-D mesh and a 2 x 2 HSDP mesh) and DTensor tensor parallelism, 4 ranks over NCCL, started through the client, no on_rebuild code: suspend --drain --tree and resume, then again with resume --map moving every rank to the next GPU (0->1, 1->2, 2->3, 3->0); the same group objects, losses bit-exact against two untouched runs that agree")
def four_gpus_kept(tools):
    if torch_gpu_count() < 4:
        raise Skipped("needs four GPUs")
    result = {}
    RAW["four_gpus_kept"] = result
    said = []
    steps = 40
    for mode in ("fsdp2", "ddp", "tp", "fsdp2_hsdp"):
        result[mode], line = kept_through_two_drains(
            tools, mode, steps, lambda pause: ParallelJob(mode, steps, pause, ranks=4), ranks=4)
        said.append(line)
    return "; ".join(said)


@scenario("frameworks kept: a PyTorch Lightning Trainer (DDP strategy) and a transformers Trainer (accelerate's DDP) on two GPUs over NCCL, the client's callback the only cudackpt code: suspend --drain --tree and resume, then again with resume --map onto the swapped GPUs; the DDP's group the same registered default group, losses bit-exact against two untouched runs that agree")
def frameworks_kept(tools):
    need_two_gpus()
    result = {}
    RAW["frameworks_kept"] = result
    said = []
    steps = 40
    for mode in ("lightning", "transformers"):
        result[mode], line = kept_through_two_drains(
            tools, mode, steps, lambda pause: ParallelJob(mode, steps, pause, script=FRAMEWORK_RANK))
        said.append(line)
    return "; ".join(said)


# torchrun's ranks talk to its agent's store over TCP on this host; the
# whole tree is frozen, so no iptables lock is needed (nor installed).
TCP_DUMP = ("--tcp-established", "--network-lock", "skip")


@scenario("torchrun and CRIU: which processes hold an io_uring under each setting; pre-dump refuses the default; the setting without one dumps and restores, losses bit-exact")
def criu_torchrun(tools):
    if not criu_command():
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    base = tempfile.mkdtemp(prefix="cudackpt-criu-torchrun-")
    result = {}
    RAW["criu_torchrun"] = result
    wrapper = (sys.executable, "-m", "cudackpt_drain.no_io_uring")
    variants = [
        ("default", {}, ()),
        ("UV_USE_IO_URING=0", {"UV_USE_IO_URING": "0"}, ()),
        ("USE_LIBUV=0", {"USE_LIBUV": "0"}, ()),
        ("cudackpt_drain.no_io_uring", {}, wrapper),
    ]
    clean = None
    for name, env, wrap in variants:
        job = TrainJob(os.path.join(base, name.replace("=", "-").replace(".", "-")), "--steps", 400, "--pause", "0.05", torchrun=True, env=env, wrap=wrap)
        try:
            job.wait_step(3, timeout=240)
            tree = job.tree()
            rings = holders(tree, "anon_inode:[io_uring]")
            seen = {"tree": [(pid, open(f"/proc/{pid}/comm").read().strip()) for pid in tree if os.path.exists(f"/proc/{pid}")], "io_uring": rings}
            if rings:
                # What pre-dump would refuse, said by check (which changes nothing).
                checked = tools.json("check", "--tree", job.p.pid)
                seen["check_warnings"] = [w for w in checked.get("warnings", []) if "CRIU" in w]
                expect(all(f"PID {pid} " in " ".join(seen["check_warnings"]) for pid, _ in rings), f"check names each io_uring holder: {checked}")
            result[name] = seen
            if not rings and clean is None:
                clean = (name, env, wrap)
        finally:
            job.close()
    expect(clean is not None, f"every setting left an io_uring in the tree: {json.dumps(result)[:1500]}")
    name, env, wrap = clean
    steps = 40
    reference = TrainJob(os.path.join(base, "reference"), "--steps", steps, torchrun=True, env=env, wrap=wrap)
    try:
        reference.wait_done(timeout=300)
    finally:
        reference.close()
    expected = reference.losses()
    job = TrainJob(os.path.join(base, "dumped"), "--steps", steps, "--pause", "0.2", torchrun=True, env=env, wrap=wrap)
    try:
        job.wait_step(10, timeout=240)
        images = os.path.join(base, "images")
        code, took, written, said = criu_dump_tree(tools, job.p.pid, images, extra=TCP_DUMP)
        result["dump"] = {"setting": name, "exit": code, "seconds": took, "image_bytes": written, "said": said}
        expect(code == 0, f"{name}: criu dump of torchrun's tree exited {code}: {said}")
        job.p.wait(timeout=30)
        result["restore_seconds"] = criu_restore_tree(tools, images, extra=TCP_DUMP)
        job.wait_done(timeout=300)
        expect(job.losses() == expected, f"losses differ: {[(a, b) for a, b in zip(job.losses(), expected) if a != b][:3]}")
        return (f"io_uring holders: " + "; ".join(f"{n}: {[c for _, c in result[n]['io_uring']]}" for n, _, _ in variants)
                + f"; with {name}: dumped in {took:.1f} s ({written / 1e9:.2f} GB), restored in {result['restore_seconds']:.1f} s, {steps} losses bit-exact")
    finally:
        job.close()


@scenario("CRIU with cudackpt's action script and CUDACKPT_DRAIN=1: the pre-dump drain shrinks the images of a PyTorch process that freed most of its reserve; restored, data right")
def criu_drain_images(tools):
    if not criu_command():
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    base = tempfile.mkdtemp(prefix="cudackpt-criu-drain-")
    result = {}
    RAW["criu_drain_images"] = result
    p = start_single(base, SHRINK_LIVE_MIB="1024", SHRINK_FREED_MIB="6144")
    restored_pid = None
    try:
        pid, status = first_steps(p, base)
        for label, env in [("plain", {}), ("drained", {"CUDACKPT_DRAIN": "1"})]:
            images = os.path.join(base, f"images-{label}")
            code, took, written, said = criu_dump_tree(tools, pid, images, env=env)
            expect(code == 0, f"{label}: criu dump exited {code}: {said}")
            if label == "plain":
                p.wait(timeout=30)
            steps = status()["steps"]
            restored = criu_restore_tree(tools, images)
            result[label] = {"dump_seconds": took, "image_bytes": written, "restore_seconds": restored}
            wait_for("steps after the restore", lambda: status()["steps"] > steps + 3, 120)
            expect(status()["ok"], f"{label}: data after the restore: {status()}")
            restored_pid = pid
            shutil.rmtree(images)
        plain, drained = result["plain"], result["drained"]
        expect(drained["image_bytes"] < plain["image_bytes"] - (4 << 30), f"the drained images should be about 6 GiB smaller: {result}")
        expect(status()["drains"] == 1, f"one drain, rebuilt after the restore: {status()}")
        return (f"plain: dump {plain['dump_seconds']:.1f} s, {plain['image_bytes'] / 1e9:.2f} GB, restore {plain['restore_seconds']:.1f} s; "
                f"CUDACKPT_DRAIN=1: dump {drained['dump_seconds']:.1f} s, {drained['image_bytes'] / 1e9:.2f} GB, restore {drained['restore_seconds']:.1f} s; data right")
    finally:
        open(os.path.join(base, "stop"), "w").close()
        for pid in filter(None, [restored_pid]):
            for q in reversed(process_tree(pid)):
                try:
                    os.kill(q, 9)
                except OSError:
                    pass
        stop_drain_ipc(p, base)


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


@scenario("drain: a job in its own PID and mount namespace (private /dev/shm), driven from the host")
def drain_in_namespace(tools):
    need_two_gpus()
    wrap = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh"]
    job = DrainJob(wrap=wrap)
    try:
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
    finally:
        job.close()


def bench(tools, out_dir):
    args = [tools.bench, "latency", "--cudackpt", tools.cudackpt, "--target", tools.target_bin, "--runs", "30"]
    if tools.nvidia:
        args += ["--nvidia", tools.nvidia]
    if out_dir:
        args += ["--json", os.path.join(out_dir, "latency.json")]
    print("\nper-invocation latency (median of 30, whole process):", flush=True)
    subprocess.run(args, check=False)
    args = [tools.bench, "preflight", "--cudackpt", tools.cudackpt, "--target", tools.target_bin, "--size-mib", "2048", "--runs", "30"]
    if out_dir:
        args += ["--json", os.path.join(out_dir, "preflight.json")]
    print("\nwhat the checkpoint pre-flights add to a suspend (2 GiB target):", flush=True)
    subprocess.run(args, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--json", help="write the results table here")
    parser.add_argument("--bench", action="store_true", help="also run the latency benchmark")
    parser.add_argument("--big-mib", type=int, default=1024, help="size of the larger demo")
    parser.add_argument("--criu-dir", help="a carried CRIU: criu, cuda_plugin.so and lib/")
    parser.add_argument("--runc-dir", help="a carried runc: runc and lib/ (Debian's, with libseccomp)")
    parser.add_argument("--only", help="run only the scenarios whose function names are given, comma-separated")
    args = parser.parse_args()
    if args.only:
        ONLY.update(name.strip() for name in args.only.split(","))
    if args.criu_dir:
        global CARRIED_CRIU
        criu_dir = os.path.abspath(args.criu_dir)
        CARRIED_CRIU = (os.path.join(criu_dir, "criu"), criu_dir, os.path.join(criu_dir, "lib"))
    if args.runc_dir:
        global CARRIED_RUNC
        runc_dir = os.path.abspath(args.runc_dir)
        CARRIED_RUNC = (os.path.join(runc_dir, "runc"), os.path.join(runc_dir, "lib"))
    tools = Tools(args.bin_dir)

    doctor(tools)
    demo(tools, 16)
    demo(tools, args.big_mib)
    no_driver(tools)
    t = Target(tools, size_mib=256)
    try:
        single_steps(tools, t)
        library_example(tools, t)
        toggle(tools, t)
        suspend_resume(tools, t)
        wrong_states(tools, t)
        wait_timeout(tools, t)
        bad_targets(tools, t)
        lock_timeout(tools, t)
        identity_map(tools, t)
        foreign_map(tools, t)
        nvidia_agrees(tools, t)
        compat_grammar(tools, t)
        ps_scale(tools, t)
    finally:
        t.close()
    group(tools, 512)
    group_rollback(tools, 512)
    group_interrupted(tools, 1024)
    group_deadline(tools)
    action_script(tools)
    devices_listing(tools)
    verify_round_trip(tools)
    preflight_memory(tools)
    two_gpu_moves(tools)
    criu_with_plugin(tools)
    criu_with_action_script(tools)
    criu_failed_dump(tools)
    runc_with_plugin(tools)
    runc_with_action_script(tools)
    runc_leave_running(tools)
    runc_cgroup_suspend(tools)
    group_under_pids_limit(tools)
    ipc_pair_refused(tools)
    ipc_pair_forced(tools)
    torch_single(tools)
    nccl_job_forced(tools)
    nccl_job(tools)
    cgroup_memory_limit(tools)
    killed_then_recovered(tools)
    check_agrees(tools)
    drain_round_trip_gloo(tools)
    drain_harm_forced(tools)
    drain_round_trip(tools)
    drain_sockets_bandwidth(tools)
    drain_never_acknowledges(tools)
    drain_killed_then_recovered(tools)
    drain_resume_killed_then_finished(tools)
    groups_kept(tools)
    frameworks_kept(tools)
    pipeline_kept(tools)
    four_gpus_kept(tools)
    drain_single_torch(tools)
    drain_shrink(tools)
    toggle_drain(tools)
    cgroup_drain_shrink(tools)
    criu_drain_images(tools)
    criu_dataloader(tools)
    criu_torchrun(tools)
    ddp_drain_and_migrate(tools)
    drain_vouched_and_recovered(tools)
    drain_ipc_pair(tools)
    drain_in_namespace(tools)

    for name in sorted(ONLY - CALLED):
        RESULTS.append({"scenario": f"--only {name}", "status": "fail", "ok": False, "detail": "no such scenario (or main() does not call it)", "seconds": 0})
        print(f"[FAIL] --only {name}: no such scenario (or main() does not call it)", flush=True)
    count = {status: sum(r["status"] == status for r in RESULTS) for status in ["pass", "fail", "skip"]}
    print(f"\n{'scenario':<90} result")
    for r in RESULTS:
        print(f"{r['scenario']:<90} {r['status'].upper()}")
    print(f"\n{count['pass']} passed, {count['fail']} failed, {count['skip']} skipped")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": RESULTS, "passed": count["pass"], "failed": count["fail"], "skipped": count["skip"]}, f, indent=2)
        if RAW:
            with open(os.path.join(os.path.dirname(os.path.abspath(args.json)), "drain-raw.json"), "w") as f:
                json.dump(RAW, f, indent=1)
    if args.bench:
        bench(tools, os.path.dirname(args.json) if args.json else None)
    sys.exit(0 if count["fail"] == 0 else 1)


if __name__ == "__main__":
    main()
