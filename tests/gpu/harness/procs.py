"""Processes and waits: /proc read as the scenarios need it, polling with a
bound, cgroups made for a scenario, and `Closing`/`several`, which make
what a scenario starts a context manager so that it is stopped however
the scenario ends."""

import contextlib
import json
import os
import subprocess
import time

from harness.registry import Failed, Skipped


class Closing:
    """What a scenario starts (a target, a job, a container): used with
    `with`, it is closed however the scenario ends."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@contextlib.contextmanager
def several(count, make):
    """`make(0)` … `make(count - 1)` as a list; each one started is closed
    on the way out, even when a later one fails to start."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(make(i)) for i in range(count)]


def kill_and_reap(p, timeout=5):
    """SIGKILL for a child started with Popen (its PID may name a restored
    copy of it now), then reaps it, waiting at most `timeout` seconds."""
    subprocess.run(["kill", "-9", str(p.pid)], capture_output=True)
    try:
        p.wait(timeout=timeout)
    except Exception:
        pass


def proc_state(pid):
    """The state letter of /proc/PID/stat (after the command name)."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


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


def wait_for(what, condition, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise Failed(f"timed out waiting for {what}")


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


def gpu_of(pid):
    """The UUID of the GPU nvidia-smi shows the process on (None if none)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return fields[1]
    return None


def gpus_free_mib(tools):
    doc = tools.json("devices")
    return [g["memory_free_bytes"] >> 20 for g in doc["gpus"]]


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


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state_or_gone(tools, pid):
    """The CUDA state, or `exited` for a process that is gone."""
    code, out, _ = tools.run("--json", "state", pid)
    doc = json.loads(out)
    return doc["processes"][0]["state"] if code == 0 else doc["processes"][0]["error"]["kind"]


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
