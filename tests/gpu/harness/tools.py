"""cudackpt as the scenarios call it (its JSON checked on every call), and
the project's CUDA target program, driven over its stdin and stdout."""

import json
import os
import select
import subprocess
import tempfile

from harness.procs import Closing
from harness.registry import Failed, expect


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

    def json(self, *args, expect_code=0, env=None):
        code, out, err = self.run("--json", *args, env=env)
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


class Target(Closing):
    """The project's CUDA target program, driven over stdin/stdout."""

    def __init__(self, tools, size_mib=256, device=0, seed=1, fill=True, env=None):
        self.p = subprocess.Popen(
            [tools.target_bin, "--size-mib", str(size_mib), "--device", str(device), "--seed", str(seed)]
            + ([] if fill else ["--no-fill"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env={**os.environ, **(env or {})})
        try:
            line = self.read(120)
            if not line.startswith("READY"):
                raise Failed(f"target did not start: {line!r}")
        except BaseException:
            self.close()
            raise
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
