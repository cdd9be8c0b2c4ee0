"""A GPU container as Podman runs one, for the GPU suite's Podman scenario:
Debian's Podman carried in (the suite's --podman-dir: podman, conmon and
lib/), its storage, state and configuration all under one work directory,
so that nothing of the host's /etc/containers or /var/lib/containers is
read or written.

The image is an empty root file system (mount points and the host's
merged-/usr links), imported once; the host's /usr and the rest are bound
read-only into the container, as tests/gpu/containers.py does for runc.
Podman drives runc, and runc CRIU, through a small wrapper that gives
runc the carried CRIU and CRIU its libraries and environment (the plugin
directory, CUDACKPT_MAP): Podman hands conmon and the runtime an
environment of its own, not the caller's.

Host network (CRIU then dumps no network namespace and needs no iptables
tools, which the GPU host lacks), the host's cgroup namespace, no
seccomp or AppArmor profile (Podman's are not carried).
"""

import json
import os
import shlex
import subprocess
import tarfile
import time

from containers import HOST_TREES, host_tree_mounts, nvidia_devices

IMAGE = "localhost/cudackpt-empty"


class Podman:
    """The carried Podman with all its state under `work`; runc and CRIU
    (with the environment it needs) as the runtime's."""

    def __init__(self, directory, work, runc_binary, runc_lib, criu, criu_env):
        self.directory = directory
        self.work = work
        self.runc = (runc_binary, runc_lib)
        self.criu = (criu, criu_env)
        self.wrapper = os.path.join(work, "runc-for-podman")
        libs = os.path.join(directory, "lib")
        home = os.path.join(work, "home")
        os.makedirs(os.path.join(home, ".config", "containers"))
        # containers/image reads a user's policy.json before /etc's; the
        # import needs one, and the GPU host has none.
        with open(os.path.join(home, ".config", "containers", "policy.json"), "w") as f:
            json.dump({"default": [{"type": "insecureAcceptAnything"}]}, f)
        registries = os.path.join(work, "registries.conf")
        with open(registries, "w") as f:
            f.write("unqualified-search-registries = []\n")
        storage = os.path.join(work, "storage.conf")
        with open(storage, "w") as f:
            f.write(f'[storage]\ndriver = "vfs"\nrunroot = "{work}/run"\ngraphroot = "{work}/storage"\n')
        criu_path = os.path.dirname(criu)
        criu_libs = criu_env.get("LD_LIBRARY_PATH", "")
        conf = os.path.join(work, "containers.conf")
        with open(conf, "w") as f:
            f.write(f"""[containers]
cgroupns = "host"
[network]
network_config_dir = "{work}/networks"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{work}/events.log"
conmon_path = ["{directory}/conmon"]
conmon_env_vars = ["PATH={criu_path}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LD_LIBRARY_PATH={libs}"]
tmp_dir = "{work}/libpod-tmp"
static_dir = "{work}/storage/libpod"
volume_path = "{work}/volumes"
""")
        # Podman itself asks the criu on its PATH for its version.
        self.env = dict(os.environ, HOME=home, CONTAINERS_CONF=conf, CONTAINERS_REGISTRIES_CONF=registries, CONTAINERS_STORAGE_CONF=storage,
                        PATH=criu_path + os.pathsep + os.environ["PATH"],
                        LD_LIBRARY_PATH=os.pathsep.join(p for p in [libs, criu_libs] if p))
        self.criu_environment({})

    def criu_environment(self, extra):
        """(Re)writes the runtime wrapper: runc with the carried CRIU, and
        CRIU's environment with `extra` added (CRIU_LIBS_DIR, CUDACKPT_MAP)."""
        runc_binary, runc_lib = self.runc
        criu, criu_env = self.criu
        env = dict(criu_env, **extra)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [runc_lib, criu_env.get("LD_LIBRARY_PATH", "")] if p)
        lines = ["#!/bin/sh"] + [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
        lines.append(f'exec {shlex.quote(runc_binary)} --criu {shlex.quote(criu)} "$@"')
        with open(self.wrapper + ".new", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(self.wrapper + ".new", 0o755)
        os.rename(self.wrapper + ".new", self.wrapper)

    def run(self, *args, timeout=300):
        argv = [os.path.join(self.directory, "podman"), "--runtime", self.wrapper, *args]
        started = time.monotonic()
        out = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        return out.returncode, out.stdout, out.stderr, time.monotonic() - started

    def must(self, *args, timeout=300):
        code, out, err, took = self.run(*args, timeout=timeout)
        if code != 0:
            raise RuntimeError(f"podman {' '.join(args[:2])} exited {code}: {err.strip()[-1500:]}")
        return out, took

    def version(self):
        return self.must("--version")[0].strip()

    def import_empty_image(self):
        """The image: mount points and the host's top-level links, nothing else."""
        archive = os.path.join(self.work, "empty-root.tar")
        empty_root_archive(archive)
        self.must("import", archive, IMAGE)

    def run_target(self, name, target_dir, target_name, size_mib):
        """Starts the GPU target in a container named `name`, every NVIDIA
        device in it; it writes its checks to /tmp/target.log inside."""
        # Podman gives root's containers limits of 1048576, which a host
        # without CAP_SYS_RESOURCE (the GPU host) refuses; lowering is
        # always allowed.
        args = ["run", "-d", "--name", name, "--network", "host", "--security-opt", "seccomp=unconfined",
                "--security-opt", "apparmor=unconfined", "--security-opt", "label=disable",
                "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
        for path, _major, _minor in nvidia_devices():
            args += ["--device", path]
        # Plain (not recursive) binds, one per mount, as for runc: CRIU
        # refuses a mount below one it was not told of.
        binds = [(target_dir, "/cudackpt")] + [(path, path) for path in host_tree_mounts(skip=("/etc",))]
        # Of /etc only the loader's cache: Podman writes /etc/hosts and
        # friends into the container's own /etc.
        if os.path.exists("/etc/ld.so.cache"):
            binds.append(("/etc/ld.so.cache", "/etc/ld.so.cache"))
        for source, destination in binds:
            args += ["--mount", f"type=bind,source={source},destination={destination},ro=true,bind-nonrecursive=true"]
        if os.environ.get("LD_LIBRARY_PATH"):
            args += ["--env", f"LD_LIBRARY_PATH={os.environ['LD_LIBRARY_PATH']}"]
        target = os.path.join("/cudackpt", target_name)
        args += [IMAGE, "/bin/sh", "-c", f"exec {target} --size-mib {size_mib} --hold >/tmp/target.log 2>&1"]
        self.must(*args)

    def pid(self, name):
        code, out, _err, _took = self.run("inspect", "--format", "{{.State.Status}} {{.State.Pid}}", name)
        if code != 0:
            return None
        status, pid = out.split()
        return int(pid) if status == "running" and int(pid) > 0 else None

    def close(self, *names):
        for name in names:
            self.run("rm", "-f", "-t", "0", name, timeout=60)
        self.run("rmi", "-f", IMAGE, timeout=60)


def empty_root_archive(path):
    """Writes the image's one layer to `path`: the container's mount points
    and, on a merged-/usr host, its top-level links (/lib -> usr/lib), each
    once (a duplicate fails Podman's import)."""
    with tarfile.open(path, "w") as tar:
        names = ["proc", "dev", "sys", "tmp", "run", "etc", "cudackpt"]
        for name in names:
            tar.addfile(directory_entry(name))
        for tree in HOST_TREES:
            name = tree.lstrip("/")
            if name in names:
                continue
            entry = tarfile.TarInfo(name)
            if os.path.islink(tree):
                entry.type, entry.linkname = tarfile.SYMTYPE, os.readlink(tree)
                tar.addfile(entry)
            elif os.path.isdir(tree):
                tar.addfile(directory_entry(name))


def directory_entry(name):
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode = tarfile.DIRTYPE, 0o755
    return entry
