"""`cudackpt dump` and `cudackpt undump`: a GPU process and a PyTorch job
with DataLoader workers to disk and back through the carried CRIU, and a
job restored onto the other GPU while its own is taken."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness.criu import criu_command
from harness.jobs import TrainJob
from harness.procs import kill_and_reap, wait_for_line
from harness.registry import RAW, Skipped, expect, scenario
from harness.tools import Target


def disk(tools, *args, expect_code=0):
    """`cudackpt --json dump|undump ... --criu CRIU` with the carried CRIU's
    libraries: (document, seconds)."""
    found = criu_command()
    if not found:
        raise Skipped("criu is not installed on this host (carry one with --criu-dir)")
    criu, criu_env = found
    started = time.monotonic()
    doc = tools.json(*args, "--criu", criu, expect_code=expect_code, env=criu_env)
    took = time.monotonic() - started
    return doc, took


def held(tools, work, size_mib, device=0, seed=7, as_uid=None):
    """A held target (its log says READY, then OK HASH every second); run
    as user `as_uid` (a copy of the binary they can run) where given."""
    log_path = os.path.join(work, f"target-{seed}.log")
    command = [tools.target_bin, "--size-mib", str(size_mib), "--device", str(device), "--seed", str(seed), "--hold"]
    if as_uid is not None:
        binary = os.path.join(work, "gpu-target")
        shutil.copy(tools.target_bin, binary)
        os.chmod(binary, 0o755)
        command = ["setpriv", "--reuid", str(as_uid), "--regid", str(as_uid), "--clear-groups", binary] + command[1:]
    with open(log_path, "w") as log:
        p = subprocess.Popen(command,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ready, seen = wait_for_line(log_path, "READY", 0, 120)
    line, seen = wait_for_line(log_path, "OK", seen, 60)
    return p, log_path, ready.split()[2]


def data_back(log_path, expected_hash):
    with open(log_path) as f:
        seen = len(f.read().splitlines())
    line, _ = wait_for_line(log_path, "OK", seen, 120)
    expect(line == f"OK {expected_hash}", f"after the undump the target says {line!r}")


@scenario("dump and undump: a 4 GiB GPU process to disk and back through CRIU in one command each, the manifest right, data intact")
def disk_round_trip(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-disk-")
    images = os.path.join(work, "images")
    p, log_path, hash_ = held(tools, work, 4096)
    try:
        dumped, dump_s = disk(tools, "dump", "--to", images, p.pid)
        manifest = dumped["manifest"]
        RAW["disk_round_trip"] = {"dump": dumped}
        expect(manifest["gpus"] and manifest["processes"][0]["gpu_memory"], f"the manifest has the job's GPU: {manifest}")
        expect(manifest["driver"]["kernel_module"], f"the manifest has the driver: {manifest}")
        p.wait(timeout=30)
        undumped, undump_s = disk(tools, "undump", images)
        RAW["disk_round_trip"]["undump"] = undumped
        data_back(log_path, hash_)
        return (f"dump {dump_s:.1f} s ({manifest['image_bytes'] / 1e9:.2f} GB, CRIU {manifest['criu']['version']}), "
                f"undump {undump_s:.1f} s, data intact")
    finally:
        kill_and_reap(p)


@scenario("dump --drain and undump of a PyTorch job with fork DataLoader workers (the client's fork hook): killed between, restored, losses bit-exact")
def disk_dataloader(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-disk-dl-")
    steps = 60
    with TrainJob(os.path.join(base, "reference"), "--workers", "2", "--steps", steps) as reference:
        reference.wait_done()
    expected = reference.losses()
    with TrainJob(os.path.join(base, "job"), "--workers", "2", "--steps", steps, "--pause", "0.2") as job:
        job.wait_step(10)
        images = os.path.join(base, "images")
        dumped, dump_s = disk(tools, "dump", "--drain", "--to", images, job.p.pid)
        RAW["disk_dataloader"] = {"dump": dumped}
        job.p.wait(timeout=30)
        undumped, undump_s = disk(tools, "undump", images)
        RAW["disk_dataloader"]["undump"] = undumped
        job.wait_done()
        expect(job.losses() == expected, f"losses after the undump differ: {[(a, b) for a, b in zip(job.losses(), expected) if a != b][:3]}")
        manifest = dumped["manifest"]
        return (f"dump --drain {dump_s:.1f} s ({manifest['image_bytes'] / 1e9:.2f} GB; released {manifest.get('drain_released_bytes')}), "
                f"undump {undump_s:.1f} s, {steps} losses bit-exact")


@scenario("undump onto the other GPU: the job's GPU is filled by another process, so the undump moves it to the GPU with room; data intact", gpus=2)
def disk_moved_gpu(tools):
    work = tempfile.mkdtemp(prefix="cudackpt-disk-move-")
    images = os.path.join(work, "images")
    p, log_path, hash_ = held(tools, work, 4096, device=0)
    try:
        dumped, _ = disk(tools, "dump", "--to", images, p.pid)
        p.wait(timeout=30)
        devices = tools.json("devices")["gpus"]
        free_mib = devices[0]["memory_free_bytes"] >> 20
        # Leave GPU 0 less room than the job needs.
        with Target(tools, size_mib=max(free_mib - 2048, 1024), device=0, seed=3, fill=False):
            # The GPUs with room for the job's 4 GiB: on a host of more than
            # two, the one with the most room at the undump, which another
            # process there may decide.
            roomy = {g["uuid"]: i for i, g in enumerate(tools.json("devices")["gpus"]) if g["memory_free_bytes"] >= 5 << 30}
            undumped, undump_s = disk(tools, "undump", images)
            RAW["disk_moved_gpu"] = {"dump": dumped, "undump": undumped}
            moved = undumped.get("gpu_map") or []
            expect(moved and moved[0]["from"] == devices[0]["uuid"] and moved[0]["to"] in roomy,
                   f"moved off GPU 0 onto a GPU with room ({sorted(roomy.values())}): {undumped}")
            data_back(log_path, hash_)
        return f"GPU 0 busy: restored onto GPU {roomy[moved[0]['to']]} in {undump_s:.1f} s, data intact"
    finally:
        kill_and_reap(p)


def nobodys_home(prefix):
    """A work directory others may pass through, holding nobody's home:
    (work, the images directory to be in that home)."""
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o711)
    home = os.path.join(work, "home")
    os.mkdir(home)
    os.chown(home, 65534, 65534)
    return work, os.path.join(home, "job1")


@scenario("dump into a directory under another user's home, undump refused there (the images could be that user's, the job is root's: credentials read from CRIU's images) with the job untouched on disk, then moved where only root writes and undumped: data intact")
def disk_user_home(tools):
    work, images = nobodys_home("cudackpt-disk-home-")
    p, log_path, hash_ = held(tools, work, 1024)
    try:
        dumped, dump_s = disk(tools, "dump", "--to", images, p.pid)
        p.wait(timeout=30)
        refused, _ = disk(tools, "undump", images, expect_code=8)
        RAW["disk_user_home"] = {"dump": dumped, "refused": refused}
        error = refused.get("error", {})
        expect(error.get("kind") == "credentials" and "euid 0" in error.get("message", ""), f"refused for its credentials: {error}")
        roots = os.path.join(work, "roots")
        os.rename(images, roots)
        undumped, undump_s = disk(tools, "undump", roots)
        RAW["disk_user_home"]["undump"] = undumped
        data_back(log_path, hash_)
        return f"dump {dump_s:.1f} s; undump from the user's home refused ({error.get('kind')}); from root's place {undump_s:.1f} s, data intact"
    finally:
        kill_and_reap(p)


@scenario("a job of another user (nobody) dumped by root into that user's own directory and undumped by root from there (its images checked to restore only as that user, through a private stage), or, where root lacks CAP_SYS_RESOURCE (a container's root), the dump refused before any change with the job's data intact")
def disk_users_own_job(tools):
    work, images = nobodys_home("cudackpt-disk-own-")
    p, log_path, hash_ = held(tools, work, 1024, seed=11, as_uid=65534)
    try:
        capable = int([line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:")][0], 16) & (1 << 24)
        if not capable:
            # setpriv execs the target: the PID is the job's.
            refused, _ = disk(tools, "dump", "--to", images, p.pid, expect_code=8)
            RAW["disk_users_own_job"] = {"refused": refused}
            message = refused.get("error", {}).get("message", "")
            expect("CAP_SYS_RESOURCE" in message, f"refused for the missing capability: {refused}")
            data_back(log_path, hash_)
            return "root here lacks CAP_SYS_RESOURCE: the dump of nobody's job refused before any change (CRIU could not read its rlimits), the job untouched, data intact"
        dumped, dump_s = disk(tools, "dump", "--to", images, p.pid)
        p.wait(timeout=30)
        undumped, undump_s = disk(tools, "undump", images)
        RAW["disk_users_own_job"] = {"dump": dumped, "undump": undumped}
        remarks = " ".join(undumped.get("warnings", []))
        expect("private stage" in remarks, f"the undump says it staged the images: {undumped}")
        root = undumped["restored_root_pid"]
        uid = [line.split()[1] for line in open(f"/proc/{root}/status") if line.startswith("Uid:")][0]
        expect(uid == "65534", f"the restored job runs as uid {uid}")
        data_back(log_path, hash_)
        return f"dump {dump_s:.1f} s; undump from nobody's directory {undump_s:.1f} s, restored as uid {uid} through a private stage, data intact"
    finally:
        kill_and_reap(p)
        subprocess.run(["pkill", "-9", "-u", "65534", "-f", "gpu-target"], capture_output=True)


DDP_LOADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "disk-job", "ddp_loader.py")


def ddp_loader(work, steps, pause, env=None):
    """tests/disk-job/ddp_loader.py on two GPUs over NCCL, under torchrun
    and the client's no_io_uring, in a session of its own: its agent."""
    from harness.jobs import CLIENT_SRC
    os.makedirs(work, exist_ok=True)
    command = [sys.executable, "-m", "cudackpt_drain.no_io_uring", sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", DDP_LOADER, work, str(steps), str(pause)]
    log = open(os.path.join(work, "job.log"), "w")
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=CLIENT_SRC, DDP_BACKEND="nccl", NCCL_NVLS_ENABLE="0", **(env or {})))


def ddp_losses(work):
    return [open(os.path.join(work, f"losses-{r}.txt")).read() if os.path.exists(os.path.join(work, f"losses-{r}.txt")) else "" for r in range(2)]


def ddp_done(work, timeout):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if all(os.path.exists(os.path.join(work, f"done-{r}")) for r in range(2)):
            return True
        time.sleep(0.2)
    return False


@scenario("a torchrun job to disk and back: two NCCL ranks with DDP and two fork DataLoader workers each (8 MiB batches in /dev/shm), under no_io_uring; dump --drain of torchrun's agent with no iptables on the host, undump with every rank moved to the other GPU, losses bit-exact", gpus=2)
def disk_torchrun(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-disk-ddp-")
    steps = 40
    reference = os.path.join(base, "reference")
    p = ddp_loader(reference, steps, 0)
    try:
        expect(ddp_done(reference, 180), f"the reference run finished: {open(os.path.join(reference, 'job.log')).read()[-1500:]}")
    finally:
        kill_and_reap(p)
    expected = ddp_losses(reference)
    work = os.path.join(base, "job")
    p = ddp_loader(work, steps, 0.3)
    try:
        until = time.monotonic() + 180
        while time.monotonic() < until and len(ddp_losses(work)[0].splitlines()) < 8:
            time.sleep(0.2)
        images = os.path.join(base, "images")
        dumped, dump_s = disk(tools, "dump", "--drain", "--to", images, p.pid)
        RAW["disk_torchrun"] = {"dump": dumped}
        p.wait(timeout=60)
        at_dump = len(ddp_losses(work)[0].splitlines())
        gpus = tools.json("devices")["gpus"]
        swap = f"{gpus[0]['uuid']}={gpus[1]['uuid']},{gpus[1]['uuid']}={gpus[0]['uuid']}"
        undumped, undump_s = disk(tools, "undump", images, "--map", swap)
        RAW["disk_torchrun"]["undump"] = undumped
        expect(ddp_done(work, 180), f"the restored job finished: {open(os.path.join(work, 'job.log')).read()[-1500:]}")
        got = ddp_losses(work)
        expect(got == expected, f"losses after the undump differ from the reference's (rank 0: {len(got[0].splitlines())} lines against {len(expected[0].splitlines())})")
        options = [o["option"] for o in dumped["manifest"]["criu_options"]]
        return (f"dump --drain at step {at_dump} {dump_s:.1f} s ({dumped['manifest']['image_bytes'] / 1e9:.2f} GB; CRIU {', '.join(options)}), "
                f"undump onto the swapped GPUs {undump_s:.1f} s, {steps} losses a rank bit-exact")
    finally:
        subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
        kill_and_reap(p)
