"""A GPU container as a runtime runs one, for the GPU suite's container
scenarios: an OCI bundle for runc whose root file system is the host's
own (`/usr`, `/etc` and the rest bound read-only), with the NVIDIA device
nodes, a private `/dev/shm`, its own PID, mount, IPC and UTS namespaces and
its own cgroup, and a work directory bound read-write.
Checkpoint and restore go through runc and CRIU exactly as Kubernetes,
Podman and CRI-O drive them: runtime -> runc -> CRIU (swrk) -> CRIU's CUDA
plugin -> `cuda-checkpoint`, or CRIU's action script.

No network namespace: the container shares the host's, which CRIU leaves
alone, so the dump needs no iptables tools. The host's binaries are bound
rather than copied, so the bundle is a few empty directories.
"""

import json
import os
import stat
import subprocess
import time

# Directories of the host bound read-only into the container.
HOST_TREES = ["/usr", "/etc", "/opt", "/lib", "/lib64", "/bin", "/sbin"]


def submounts(tree):
    """The host's mount points strictly below `tree`, parents first (from
    /proc/self/mountinfo)."""
    points = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(tree.rstrip("/") + "/"):
                points.add(point)
    return sorted(points, key=lambda p: (p.count("/"), p))


def host_tree_mounts(skip=()):
    """The host's trees to bind read-only into a container, one mount each
    (the tree, then the mounts below it), for the trees that are real
    directories and not in `skip`: CRIU refuses a mount below a bind it was
    not told is external, so nothing is bound recursively."""
    mounts = []
    for tree in HOST_TREES:
        if tree in skip or os.path.islink(tree) or not os.path.isdir(tree):
            continue
        mounts.append(tree)
        mounts.extend(point for point in submounts(tree) if os.path.exists(point))
    return mounts


def nvidia_devices():
    """The host's NVIDIA character devices: (path, major, minor)."""
    found = []
    for root, _dirs, names in os.walk("/dev"):
        if root != "/dev" and not root.startswith("/dev/nvidia"):
            continue
        for name in sorted(names):
            path = os.path.join(root, name)
            if not path.startswith("/dev/nvidia"):
                continue
            st = os.lstat(path)
            if stat.S_ISCHR(st.st_mode):
                found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def config(args, env, binds, devices, cgroup, annotations):
    """The OCI runtime config (spec 1.0) of the container: `binds` are
    (host path, container path, read_only) pairs, `devices` (path, major,
    minor) triples."""
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        # The container's own /dev/shm: the CUDA IPC files it makes stay inside.
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    ]
    # Plain (not recursive) binds, one per mount: runc tells CRIU that each
    # bind it made is external, and CRIU refuses a mount below one that it
    # was not told of (the driver's /usr/local/nvidia is one, on the GPU host).
    for source, destination, read_only in binds:
        mounts.append({"destination": destination, "type": "bind", "source": source,
                       "options": ["bind", "rprivate"] + (["ro"] if read_only else ["rw"])})
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": env,
            "cwd": "/",
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "cudackpt-gpu",
        "mounts": mounts,
        "annotations": annotations,
        "linux": {
            "namespaces": [{"type": t} for t in ["pid", "mount", "ipc", "uts"]],
            "cgroupsPath": cgroup,
            "devices": [{"path": path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0}
                        for path, major, minor in devices],
            "resources": {"devices": [{"allow": False, "access": "rwm"}]
                          + [{"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"} for _, major, minor in devices]
                          + [{"allow": True, "type": "c", "major": 1, "minor": m, "access": "rwm"} for m in (3, 5, 8, 9)]
                          + [{"allow": True, "type": "c", "major": 5, "minor": m, "access": "rwm"} for m in (0, 1, 2)]
                          + [{"allow": True, "type": "c", "major": 136, "access": "rwm"}]},
        },
    }


class Runc:
    """A runc binary, with its state under `root` and CRIU at `criu`
    (with the environment it needs)."""

    def __init__(self, binary, lib_dir, root, criu, criu_env):
        self.binary = binary
        self.root = root
        self.criu = criu
        self.env = dict(os.environ, **criu_env)
        if lib_dir:
            paths = [lib_dir, self.env.get("LD_LIBRARY_PATH", "")]
            self.env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)

    def command(self, *args, env=None):
        whole = [self.binary, "--root", self.root]
        if self.criu:
            whole += ["--criu", self.criu]
        return whole + list(args), dict(self.env, **(env or {}))

    def run(self, *args, env=None, timeout=300, detached_stdio=False):
        """Runs runc; a detached container inherits runc's stdio, so it gets
        /dev/null rather than this suite's pipes."""
        argv, whole_env = self.command(*args, env=env)
        if detached_stdio:
            out = subprocess.run(argv, env=whole_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
            return out.returncode, "", out.stderr
        out = subprocess.run(argv, env=whole_env, capture_output=True, text=True, timeout=timeout)
        return out.returncode, out.stdout, out.stderr

    def version(self):
        return self.run("--version")[1].split("\n")[0]


class Container:
    """One container of the project's GPU target (`--hold`: it checks its
    device memory once a second and prints `OK <hash>` to /tmp/target.log
    in the container)."""

    def __init__(self, runc, work, name, target_dir, target_name, size_mib, annotations=None):
        self.runc = runc
        self.work = work
        self.name = name
        self.bundle = os.path.join(work, "bundle")
        self.out = os.path.join(work, "out")
        self.cgroup = f"/cudackpt-runc-{name}"
        rootfs = os.path.join(self.bundle, "rootfs")
        os.makedirs(self.out)
        os.makedirs(rootfs)
        binds = [(self.out, "/out", False), (target_dir, "/cudackpt", True)]
        for tree in HOST_TREES:
            if os.path.islink(tree):  # /lib -> usr/lib on a merged-/usr host
                os.symlink(os.readlink(tree), os.path.join(rootfs, tree.lstrip("/")))
        binds.extend((path, path, True) for path in host_tree_mounts())
        # Mount points in the root file system; those below a bound tree
        # exist there already (the host's own).
        for mount_point in ["proc", "dev", "sys", "tmp", "out", "cudackpt"] + [tree.lstrip("/") for tree in HOST_TREES if os.path.isdir(tree) and not os.path.islink(tree)]:
            os.makedirs(os.path.join(rootfs, mount_point), exist_ok=True)
        env = [f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}"]
        if os.environ.get("LD_LIBRARY_PATH"):
            env.append(f"LD_LIBRARY_PATH={os.environ['LD_LIBRARY_PATH']}")
        target = os.path.join("/cudackpt", target_name)
        # The log is in the container's own /tmp (a tmpfs in its image), not
        # on a host directory: CRIU checks the size of every open regular
        # file at restore, and a container left running by --leave-running
        # goes on writing after its dump.
        args = ["/bin/sh", "-c", f"exec {target} --size-mib {size_mib} --hold >/tmp/target.log 2>&1"]
        with open(os.path.join(self.bundle, "config.json"), "w") as f:
            json.dump(config(args, env, binds, nvidia_devices(), self.cgroup, annotations or {}), f, indent=1)

    def start(self):
        code, _, err = self.runc.run("run", "-d", "--bundle", self.bundle, self.name, detached_stdio=True)
        if code != 0:
            raise RuntimeError(f"runc run exited {code}: {err.strip()[-1500:]}")

    def state(self):
        code, out, err = self.runc.run("state", self.name)
        if code != 0:
            return None
        return json.loads(out)

    def pid(self):
        state = self.state()
        return state["pid"] if state and state.get("status") == "running" else None

    def cgroup_dir(self):
        """The container's cgroup directory on the host (cgroup v2), found
        from its init's /proc/PID/cgroup."""
        pid = self.pid()
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                hierarchy, _controllers, path = line.rstrip("\n").split(":", 2)
                if hierarchy == "0":
                    return "/sys/fs/cgroup" + path
        return None

    def checkpoint(self, images, *extra, env=None):
        started = time.monotonic()
        code, _, err = self.runc.run("checkpoint", "--image-path", images, "--work-path", images, *extra, self.name, env=env)
        return code, time.monotonic() - started, err

    def restore(self, images, work_path, env=None):
        started = time.monotonic()
        code, _, err = self.runc.run("restore", "-d", "--image-path", images, "--work-path", work_path, "--bundle", self.bundle, self.name,
                                     env=env, detached_stdio=True)
        return code, time.monotonic() - started, err

    @property
    def log(self):
        """The target's log, seen from the host through its init's root."""
        return f"/proc/{self.pid()}/root/tmp/target.log"

    def lines(self):
        try:
            with open(self.log) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def close(self):
        self.runc.run("kill", self.name, "KILL", timeout=30)
        for _ in range(50):
            state = self.state()
            if not state or state.get("status") != "running":
                break
            time.sleep(0.1)
        self.runc.run("delete", "-f", self.name, timeout=30)


def criu_log_tail(images, name, limit=1500):
    """The end of CRIU's log in the image directory, for a failure's report."""
    try:
        with open(os.path.join(images, name)) as f:
            return f.read()[-limit:]
    except OSError as e:
        return f"(no {name}: {e})"
