"""cudackpt's own CRIU plugin (libcudackpt_criu_plugin.so, carried beside
the binaries): CRIU, runc and Podman dump and restore GPU processes
through it, with the driver called in the plugin's helper, forked from
CRIU."""

import os
import tempfile

from harness.criu import GpuContainer, checkpoint_or_fail, criu_command, criu_round_trip, restore_or_fail, runc_parts, runc_round_trip
from harness.host import HOST
from harness.procs import gpu_of, wait_for, wait_for_line
from harness.registry import Failed, Skipped, expect, scenario


def own_plugin_dir(tools):
    """A directory holding cudackpt's plugin alone (CRIU loads every .so of
    its plugin directory), or Skipped."""
    built = os.path.join(os.path.dirname(tools.cudackpt), "libcudackpt_criu_plugin.so")
    if not os.path.exists(built):
        raise Skipped("libcudackpt_criu_plugin.so is not beside the binaries (cargo build --profile plugin -p cudackpt-criu-plugin)")
    plugin_dir = tempfile.mkdtemp(prefix="cudackpt-own-plugin-")
    os.chmod(plugin_dir, 0o755)
    with open(built, "rb") as src, open(os.path.join(plugin_dir, "cudackpt_plugin.so"), "wb") as dst:
        dst.write(src.read())
    return plugin_dir


def plugin_lines(log_path):
    with open(log_path) as f:
        return [l for l in f.read().splitlines() if "cudackpt:" in l or "cudackpt plugin" in l]


@scenario("CRIU dump and restore of a GPU target through cudackpt's own plugin (the driver called in its helper: locked at the first pause hook, checkpointed once frozen, resumed late); data intact")
def criu_with_own_plugin(tools):
    if not criu_command():
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    work = tempfile.mkdtemp(prefix="cudackpt-own-plugin-criu-")
    dumped, restored = criu_round_trip(tools, own_plugin_dir(tools), tools.compat_dir, work)
    said = plugin_lines(os.path.join(work, "images", "dump.log")) + plugin_lines(os.path.join(work, "images", "restore.log"))
    for step in ("lock: PID", "checkpoint: PID", "resume: PID"):
        expect(any(step in l for l in said), f"the plugin's log says {step!r}: {said[-6:]}")
    return f"dump {dumped:.1f} s, restore {restored:.1f} s, data intact; {len(said)} plugin lines in CRIU's logs"


@scenario("runc checkpoint and restore of a GPU container through cudackpt's own plugin; data intact")
def runc_with_own_plugin(tools):
    plugin_dir = own_plugin_dir(tools)
    return runc_round_trip(tools, "own-plugin", lambda box: {"CRIU_LIBS_DIR": plugin_dir})


@scenario("runc restore of a GPU container through cudackpt's own plugin onto the other GPU (CUDACKPT_MAP=0=1 in CRIU's environment); data intact", gpus=2)
def runc_own_plugin_moved(tools):
    plugin_dir = own_plugin_dir(tools)
    gpus = tools.json("devices")["gpus"]
    with GpuContainer(tools, "own-plugin-moved") as box:
        before = gpu_of(box.ct.pid())
        expect(before == gpus[0]["uuid"], f"the container's target starts on GPU 0: {before}")
        images = box.images("images")
        dumped = checkpoint_or_fail(box, images, env={"CRIU_LIBS_DIR": plugin_dir})
        restored = restore_or_fail(box, images, {"CRIU_LIBS_DIR": plugin_dir, "CUDACKPT_MAP": "0=1"})
        box.seen = len(box.ct.lines())
        after = box.ct.pid()
        box.expect_ok("after the restore")
        on = gpu_of(after)
        expect(on == gpus[1]["uuid"], f"restored onto GPU 1 ({gpus[1]['uuid']}): on {on}")
        return f"checkpoint {dumped:.1f} s, restore onto GPU 1 {restored:.1f} s, data intact"


@scenario("Podman checkpoint --export and restore --import of a GPU container through cudackpt's own plugin; data intact")
def podman_with_own_plugin(tools):
    return podman_round_trip(tools, onto=0)


@scenario("Podman checkpoint --export and restore --import of a GPU container through cudackpt's own plugin, restored onto the other GPU (CUDACKPT_MAP=0=1); data intact", gpus=2)
def podman_own_plugin_moved(tools):
    return podman_round_trip(tools, onto=1)


def podman_round_trip(tools, onto):
    """A GPU container started on GPU 0, checkpointed and exported by
    Podman, removed, imported and restored onto GPU `onto`: its data
    intact, the plugin's lines in CRIU's logs."""
    from podman_container import Podman

    if not HOST.podman:
        raise Skipped("no Podman carried (--podman-dir: Debian's podman, conmon and lib/)")
    plugin_dir = own_plugin_dir(tools)
    gpus = tools.json("devices")["gpus"]
    work = tempfile.mkdtemp(prefix="cudackpt-podman-")
    os.chmod(work, 0o755)
    podman = Podman(HOST.podman, work, *runc_parts())
    name = f"cudackpt-podman-{os.getpid()}"
    try:
        podman.criu_environment({"CRIU_LIBS_DIR": plugin_dir})
        podman.import_empty_image()
        podman.run_target(name, os.path.dirname(tools.target_bin), os.path.basename(tools.target_bin), 256)
        pid = running_pid(podman, name)
        ready, seen = wait_for_line(f"/proc/{pid}/root/tmp/target.log", "READY", 0, 60)
        line, seen = wait_for_line(f"/proc/{pid}/root/tmp/target.log", "OK", seen, 30)
        expect(line == f"OK {ready.split()[2]}", f"at the start the container's target says {line!r}")
        before = gpu_of(pid)
        expect(before == gpus[0]["uuid"], f"the container's target starts on GPU 0: {before}")
        archive = os.path.join(work, "checkpoint.tar.gz")
        dumped = podman_step(podman, work, "container", "checkpoint", "--keep", "--export", archive, name)
        expect(podman.pid(name) is None, "the container is stopped after its checkpoint")
        # CRIU's dump log is in the container's folder, which `rm` takes.
        said = [l for path in criu_logs(work) for l in plugin_lines(path)]
        podman.must("rm", name)
        podman.criu_environment({"CRIU_LIBS_DIR": plugin_dir, **({"CUDACKPT_MAP": f"0={onto}"} if onto else {})})
        restored = podman_step(podman, work, "container", "restore", "--keep", "--import", archive)
        after = running_pid(podman, name)
        log = f"/proc/{after}/root/tmp/target.log"
        with open(log) as f:
            seen = len(f.read().splitlines())
        line, _ = wait_for_line(log, "OK", seen, 60)
        expect(line == f"OK {ready.split()[2]}", f"after the restore the container's target says {line!r}")
        on = gpu_of(after)
        expect(on == gpus[onto]["uuid"], f"restored onto GPU {onto} ({gpus[onto]['uuid']}): on {on}")
        said += [l for path in criu_logs(work) for l in plugin_lines(path)]
        for step in ("lock: PID", "checkpoint: PID", "resume: PID"):
            expect(any(step in l for l in said), f"the plugin's log says {step!r}: {said[-6:]}")
        megabytes = os.path.getsize(archive) / 1e6
        return (f"{podman.version()}; PID {pid} -> {after}; checkpoint --export {dumped:.1f} s ({megabytes:.0f} MB), "
                f"restore --import onto GPU {onto} {restored:.1f} s, data intact")
    finally:
        podman.close(name)


def podman_step(podman, work, *args):
    """Runs a Podman checkpoint or restore; on failure the error carries
    the end of CRIU's logs, which Podman keeps in the container's folder."""
    code, _out, err, took = podman.run(*args)
    if code != 0:
        tails = " | ".join(f"{path}: {tail(path, 800)}" for path in criu_logs(work))
        raise Failed(f"podman {args[1]} exited {code}: {err.strip()[-800:]} | {tails or 'no CRIU log'}")
    return took


def tail(path, limit):
    with open(path) as f:
        return f.read()[-limit:]


def criu_logs(work):
    """CRIU's dump and restore logs anywhere under Podman's storage."""
    found = []
    for root, _dirs, names in os.walk(work):
        found += [os.path.join(root, n) for n in names if n in ("dump.log", "restore.log")]
    return sorted(found)


def running_pid(podman, name):
    """The host PID of the container's init once it runs."""
    found = []
    wait_for(f"container {name} running", lambda: found.append(podman.pid(name)) or found[-1], 60)
    return found[-1]
