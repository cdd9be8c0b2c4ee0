"""cudackpt's own CRIU plugin (libcudackpt_criu_plugin.so, carried beside
the binaries): CRIU and runc dump and restore GPU processes through it,
with the driver called in CRIU's process."""

import os
import tempfile

from harness.criu import GpuContainer, checkpoint_or_fail, criu_command, criu_round_trip, restore_or_fail, runc_round_trip
from harness.procs import gpu_of
from harness.registry import Skipped, expect, scenario


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


@scenario("CRIU dump and restore of a GPU target through cudackpt's own plugin (the driver called in CRIU's process: locked at the first pause hook, checkpointed once frozen, resumed late); data intact")
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
