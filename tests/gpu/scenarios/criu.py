"""CRIU with cudackpt: as the CUDA plugin's `cuda-checkpoint` and as the
action script, a failed dump, PyTorch jobs with DataLoader workers and
under torchrun, and the drain shrinking the images."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness.criu import TCP_DUMP, criu_command, criu_dump_tree, criu_restore_tree, criu_round_trip, find_cuda_plugin, held_tree, pre_dump_report
from harness.jobs import TrainJob, first_steps, start_single, stop_drain_ipc
from harness.procs import holders, kill_and_reap, process_tree, wait_for, wait_for_line
from harness.registry import RAW, Skipped, expect, scenario
from harness.tools import refused


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
        kill_and_reap(p)


@scenario("CRIU and a PyTorch job with fork DataLoader workers: forced, the dump fails after CUDA was suspended and images written; refused at pre-dump before any change; with the client's fork hook it dumps (drained) and restores, losses bit-exact")
def criu_dataloader(tools):
    if not criu_command():
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    base = tempfile.mkdtemp(prefix="cudackpt-criu-dl-")
    result = {}
    RAW["criu_dataloader"] = result
    steps = 60
    with TrainJob(os.path.join(base, "reference"), "--workers", "2", "--steps", steps) as reference:
        reference.wait_done()
    expected = reference.losses()
    expect(len([l for l in expected if l]) == steps, f"the reference run made {len(expected)} steps: {reference.tail()}")

    # Without the fork hook: the harm (forced), then the refusal.
    with TrainJob(os.path.join(base, "no-hook"), "--workers", "2", "--steps", steps, "--pause", "0.2", "--no-dumpable-forks") as harmed:
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

    # With the client's fork hook: dump drained, restore, finish.
    with TrainJob(os.path.join(base, "hook"), "--workers", "2", "--steps", steps, "--pause", "0.2") as fixed:
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
        with TrainJob(os.path.join(base, name.replace("=", "-").replace(".", "-")), "--steps", 400, "--pause", "0.05", torchrun=True, env=env, wrap=wrap) as job:
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
    expect(clean is not None, f"every setting left an io_uring in the tree: {json.dumps(result)[:1500]}")
    name, env, wrap = clean
    steps = 40
    with TrainJob(os.path.join(base, "reference"), "--steps", steps, torchrun=True, env=env, wrap=wrap) as reference:
        reference.wait_done(timeout=300)
    expected = reference.losses()
    with TrainJob(os.path.join(base, "dumped"), "--steps", steps, "--pause", "0.2", torchrun=True, env=env, wrap=wrap) as job:
        job.wait_step(10, timeout=240)
        images = os.path.join(base, "images")
        code, took, written, said = criu_dump_tree(tools, job.p.pid, images, extra=TCP_DUMP)
        result["dump"] = {"setting": name, "exit": code, "seconds": took, "image_bytes": written, "said": said}
        expect(code == 0, f"{name}: criu dump of torchrun's tree exited {code}: {said}")
        job.p.wait(timeout=30)
        result["restore_seconds"] = criu_restore_tree(tools, images, extra=TCP_DUMP)
        job.wait_done(timeout=300)
        expect(job.losses() == expected, f"losses differ: {[(a, b) for a, b in zip(job.losses(), expected) if a != b][:3]}")
        return ("io_uring holders: " + "; ".join(f"{n}: {[c for _, c in result[n]['io_uring']]}" for n, _, _ in variants)
                + f"; with {name}: dumped in {took:.1f} s ({written / 1e9:.2f} GB), restored in {result['restore_seconds']:.1f} s, {steps} losses bit-exact")


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
