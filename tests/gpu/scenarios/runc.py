"""runc containers of the GPU target: checkpointed with the plugin and with
the action script, --leave-running, and suspended by their cgroup."""

from harness.criu import GpuContainer, checkpoint_or_fail, hook_config, plugin_or_skip, restore_or_fail, runc_round_trip
from harness.procs import gpus_free_mib, wait_for
from harness.registry import expect, scenario


@scenario("runc checkpoint and restore of a GPU container with CRIU and its CUDA plugin, cudackpt as cuda-checkpoint; data intact")
def runc_with_plugin(tools):
    plugin_dir = plugin_or_skip()
    return runc_round_trip(tools, "plugin", lambda box: box.plugin_env(tools, plugin_dir))


@scenario("runc checkpoint and restore of a GPU container with cudackpt as CRIU's action script (runc's CRIU config file, no plugin); data intact")
def runc_with_action_script(tools):
    conf, no_plugins = hook_config(tools)
    # runc hands this file to CRIU (org.criu.config); CRIU runs the
    # script of a config file in RPC mode too.
    return runc_round_trip(tools, "hook", lambda box: {"CRIU_LIBS_DIR": no_plugins},
                           annotations={"org.criu.config": conf})


@scenario("runc checkpoint --leave-running of a GPU container, with the plugin and with the action script: it goes on with its data; its image restores after it is killed")
def runc_leave_running(tools):
    plugin_dir = plugin_or_skip()
    conf, no_plugins = hook_config(tools)
    said = []
    for mode in ["plugin", "action script"]:
        hooked = mode == "action script"
        with GpuContainer(tools, "leave-hook" if hooked else "leave", annotations={"org.criu.config": conf} if hooked else None) as box:
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
    return "; ".join(said) + "; data intact"


@scenario("cudackpt suspend --cgroup on a runc container's cgroup frees its GPU memory; resume --cgroup; data intact")
def runc_cgroup_suspend(tools):
    with GpuContainer(tools, "cgroup", size_mib=1024) as box:
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
