"""CRIU and runc as the scenarios drive them: found (carried or installed),
run with cudackpt as the CUDA plugin's `cuda-checkpoint` or as the action
script, and their images and logs read back."""

import json
import os
import shutil
import subprocess
import tempfile
import time

from harness.host import HOST
from harness.procs import Closing, dir_bytes, kill_and_reap, process_tree, vanish, wait_for_line
from harness.registry import Failed, Skipped, expect


def criu_command():
    """The criu to run and the environment it needs, or None."""
    if HOST.criu:
        binary, _, libs = HOST.criu
        return binary, {"LD_LIBRARY_PATH": libs}
    found = shutil.which("criu")
    return (found, {}) if found else None


def find_cuda_plugin():
    if HOST.criu:
        return HOST.criu[1]
    for directory in ["/usr/lib/criu", "/usr/local/lib/criu", "/usr/lib64/criu", "/usr/lib/x86_64-linux-gnu/criu", "/usr/local/lib64/criu"]:
        if os.path.exists(os.path.join(directory, "cuda_plugin.so")):
            return directory
    return None


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
        kill_and_reap(p)


def runc_parts():
    """runc (carried, else installed) and the carried or installed CRIU:
    (runc, its library dir or None, criu, CRIU's environment), or Skipped
    naming what is missing."""
    if HOST.runc:
        binary, lib_dir = HOST.runc
    else:
        binary, lib_dir = shutil.which("runc"), None
    if not binary:
        raise Skipped("runc is not installed on this host (carry Debian's with --runc-dir)")
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        raise Skipped("no cgroup v2 here")
    criu, criu_env = found
    return binary, lib_dir, criu, criu_env


def runc_for(tools, work):
    """runc driving CRIU (runc_parts), its state under work."""
    import containers

    binary, lib_dir, criu, criu_env = runc_parts()
    return containers.Runc(binary, lib_dir, os.path.join(work, "runc-root"), criu, criu_env)


class GpuContainer(Closing):
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


def runc_round_trip(tools, name, env_for, annotations=None):
    """runc checkpoint and restore of a GPU container (with `annotations`),
    CRIU's environment `env_for(box)`: the container gone between, its init
    running after with its data intact. Returns the line for the table."""
    with GpuContainer(tools, name, annotations=annotations) as box:
        pid = box.ct.pid()
        env = env_for(box)
        images = box.images("images")
        dumped = checkpoint_or_fail(box, images, env=env)
        expect(box.ct.pid() is None, f"the container is gone after the checkpoint: {box.ct.state()}")
        restored = restore_or_fail(box, images, env)
        box.seen = len(box.ct.lines())
        after = box.ct.pid()
        expect(after is not None and tools.state(after) == "running", f"restored container's init {after} running")
        box.expect_ok("after the restore")
        return f"{box.runc.version()}; init PID {pid} -> {after}; checkpoint {dumped:.1f} s, restore {restored:.1f} s, data intact"


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


# torchrun's ranks talk to its agent's store over TCP on this host; the
# whole tree is frozen, so no iptables lock is needed (nor installed).
TCP_DUMP = ("--tcp-established", "--network-lock", "skip")


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
