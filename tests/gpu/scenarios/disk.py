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
from harness.procs import kill_and_reap, process_tree, wait_for_line
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


DDP_LOADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "disk-job", "ddp_loader.py")


def ddp_loader(work, steps, pause, ranks=2, env=None):
    """tests/fixtures/disk-job/ddp_loader.py on `ranks` GPUs over NCCL, under torchrun
    and the client's no_io_uring, in a session of its own: its agent."""
    from harness.jobs import CLIENT_SRC
    os.makedirs(work, exist_ok=True)
    command = [sys.executable, "-m", "cudackpt_drain.no_io_uring", sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(ranks), DDP_LOADER, work, str(steps), str(pause)]
    log = open(os.path.join(work, "job.log"), "w")
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=CLIENT_SRC, DDP_BACKEND="nccl", NCCL_NVLS_ENABLE="0", **(env or {})))


def ddp_losses(work, ranks=2):
    return [open(os.path.join(work, f"losses-{r}.txt")).read() if os.path.exists(os.path.join(work, f"losses-{r}.txt")) else "" for r in range(ranks)]


def ddp_done(work, timeout, ranks=2):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if all(os.path.exists(os.path.join(work, f"done-{r}")) for r in range(ranks)):
            return True
        time.sleep(0.2)
    return False


def ddp_at_step(work, step, timeout, ranks=2):
    until = time.monotonic() + timeout
    while time.monotonic() < until and len(ddp_losses(work, ranks)[0].splitlines()) < step:
        time.sleep(0.2)
    expect(len(ddp_losses(work, ranks)[0].splitlines()) >= step, f"the job reached step {step}: {open(os.path.join(work, 'job.log')).read()[-1500:]}")


def torchrun_round_trip(tools, ranks):
    """The torchrun job of `ranks` NCCL ranks, dumped with --drain at step 8
    and undumped with every rank moved to the next GPU; its losses against
    an untouched run's."""
    base = tempfile.mkdtemp(prefix="cudackpt-disk-ddp-")
    steps = 40
    reference = os.path.join(base, "reference")
    p = ddp_loader(reference, steps, 0, ranks)
    try:
        expect(ddp_done(reference, 240, ranks), f"the reference run finished: {open(os.path.join(reference, 'job.log')).read()[-1500:]}")
    finally:
        kill_and_reap(p)
    expected = ddp_losses(reference, ranks)
    work = os.path.join(base, "job")
    p = ddp_loader(work, steps, 0.3, ranks)
    name = f"disk_torchrun{'' if ranks == 2 else ranks}"
    try:
        ddp_at_step(work, 8, 240, ranks)
        images = os.path.join(base, "images")
        dumped, dump_s = disk(tools, "dump", "--drain", "--to", images, p.pid)
        RAW[name] = {"dump": dumped}
        p.wait(timeout=60)
        at_dump = len(ddp_losses(work, ranks)[0].splitlines())
        gpus = tools.json("devices")["gpus"][:ranks]
        moved = ",".join(f"{gpus[i]['uuid']}={gpus[(i + 1) % ranks]['uuid']}" for i in range(ranks))
        undumped, undump_s = disk(tools, "undump", images, "--map", moved)
        RAW[name]["undump"] = undumped
        expect(ddp_done(work, 240, ranks), f"the restored job finished: {open(os.path.join(work, 'job.log')).read()[-1500:]}")
        got = ddp_losses(work, ranks)
        expect(got == expected, f"losses after the undump differ from the reference's (rank 0: {len(got[0].splitlines())} lines against {len(expected[0].splitlines())})")
        options = [o["option"] for o in dumped["manifest"]["criu_options"]]
        return (f"dump --drain at step {at_dump} {dump_s:.1f} s ({dumped['manifest']['image_bytes'] / 1e9:.2f} GB; CRIU {', '.join(options)}), "
                f"undump with every rank moved to the next GPU {undump_s:.1f} s, {steps} losses a rank bit-exact")
    finally:
        subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
        kill_and_reap(p)
        shutil.rmtree(base, ignore_errors=True)


@scenario("a torchrun job to disk and back: two NCCL ranks with DDP and two fork DataLoader workers each (8 MiB batches in /dev/shm), under no_io_uring; dump --drain of torchrun's agent with no iptables on the host, undump with every rank moved to the other GPU, losses bit-exact", gpus=2)
def disk_torchrun(tools):
    return torchrun_round_trip(tools, 2)


@scenario("the same torchrun job with four NCCL ranks on four GPUs: dump --drain, undump with every rank moved to the next GPU, losses bit-exact", gpus=4)
def disk_torchrun4(tools):
    return torchrun_round_trip(tools, 4)


def tcp_of(pid):
    """The TCP sockets `pid` holds: (state, local, remote), from its
    descriptors' inodes and /proc/PID/net/tcp and tcp6 (its namespace)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    states = {"01": "ESTABLISHED", "0A": "LISTEN", "06": "TIME_WAIT", "08": "CLOSE_WAIT"}
    held = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    held.append((states.get(fields[3], fields[3]), addr(fields[1]), addr(fields[2])))
    return sorted(held)


def addr(text):
    host, port = text.split(":")
    if len(host) == 8:
        return ".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}"
    return f"[{host}]:{int(port, 16)}"


def tree_of(root):
    """`root` and its descendants (by parent PID: a child started by any
    thread), with their names, thread names, TCP sockets and command
    lines."""
    found = []
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace").split("\0")
            threads = sorted({open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{pid}/task")})
            found.append({"pid": pid, "name": name, "threads": threads, "tcp": tcp_of(pid), "cmdline": cmdline})
        except OSError:
            continue
    return found


@scenario("what a drained NCCL job still holds: each process's TCP sockets and threads while drained (suspend --drain of the torchrun tree), with NCCL's RAS on and off", gpus=2)
def drained_sockets(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-drained-")
    seen = {}
    try:
        for label, env in (("ras_on", {}), ("ras_off", {"NCCL_RAS_ENABLE": "0"})):
            work = os.path.join(base, label)
            p = ddp_loader(work, 400, 0.05, 2, env)
            try:
                ddp_at_step(work, 5, 240)
                seen[label] = {"running": tree_of(p.pid)}
                suspended = tools.json("suspend", "--drain", "--tree", str(p.pid))
                seen[label]["drained"] = tree_of(p.pid)
                seen[label]["suspend"] = suspended
                tools.json("resume", "--tree", str(p.pid))
                ddp_at_step(work, len(ddp_losses(work)[0].splitlines()) + 3, 120)
            finally:
                subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
                kill_and_reap(p)
        RAW["drained_sockets"] = seen

        def summary(label):
            drained = seen[label]["drained"]
            ranks = [m for m in drained if "cudackpt-drain1" in m["threads"]]
            workers = [m for m in drained if m["name"] == "pt_data_worker"]
            held = ["/".join(f"{sum(s[0] == state for s in m['tcp'])} {state.lower()}" for state in ("LISTEN", "ESTABLISHED")) for m in ranks]
            return (f"{label}: drained, each of {len(ranks)} ranks held {', '.join(held)} TCP sockets; "
                    f"{sum(len(m['tcp']) for m in workers)} in its {len(workers)} DataLoader workers")

        return "; ".join(summary(label) for label in seen)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@scenario("a torch.compile'd two-rank DDP job (inductor's compile-worker pool beside each rank): suspend --drain three times, each acknowledged with the pool kept (its workers, started since, checkpointed as they are), resumed each time; then dump --drain releases it (the dump notice) and the job comes back with undump and finishes", gpus=2)
def compiled_drain(tools):
    base = tempfile.mkdtemp(prefix="cudackpt-compiled-")
    work = os.path.join(base, "job")
    env = {"DDP_COMPILE": "1", "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"), "TRITON_CACHE_DIR": os.path.join(base, "triton")}
    p = ddp_loader(work, 60, 0.2, 2, env)
    try:
        ddp_at_step(work, 6, 420)
        pools = lambda: [m for m in tree_of(p.pid) if any("compile_worker" in a for a in m["cmdline"])]  # noqa: E731
        tree_at_start = tree_of(p.pid)
        before = len(pools())
        rounds = []
        RAW["compiled_drain"] = {"tree": tree_at_start, "rounds": rounds}
        for _ in range(3):
            # What the tree holds before each drain, kept should one fail.
            RAW["compiled_drain"]["tree_before_last"] = tree_of(p.pid)
            suspended = tools.json("suspend", "--drain", "--tree", str(p.pid))
            acks = [q["drain"]["acknowledged_ms"] for q in suspended["processes"] if (q.get("drain") or {}).get("acknowledged_ms") is not None]
            pool_pids = {m["pid"] for m in pools()}
            rounds.append({"suspend": suspended, "acks": acks, "pool": len(pool_pids),
                           "pool_targets": [q["pid"] for q in suspended["processes"] if q["pid"] in pool_pids]})
            tools.json("resume", "--tree", str(p.pid))
            ddp_at_step(work, len(ddp_losses(work)[0].splitlines()) + 3, 120)
        images = os.path.join(base, "images")
        dumped, dump_s = disk(tools, "dump", "--drain", "--to", images, p.pid)
        p.wait(timeout=60)
        at_dump = len(ddp_losses(work)[0].splitlines())
        undumped, undump_s = disk(tools, "undump", images)
        RAW["compiled_drain"].update({"dump": dumped, "undump": undumped, "pool_processes": [before] + [r["pool"] for r in rounds],
                                      "drains": [open(os.path.join(work, f"drains-{r}.txt")).read().split() for r in range(2)]})
        expect(ddp_done(work, 300), f"the restored job finished: {open(os.path.join(work, 'job.log')).read()[-1500:]}")
        expect(before > 0, "the job had a compile-worker pool (the scenario's premise)")
        expect(all(r["pool"] >= before for r in rounds), f"each suspend's drain kept the pool: {[before] + [r['pool'] for r in rounds]} processes")
        slowest = max(max(r["acks"]) for r in rounds)
        expect(slowest < 1000, f"each suspend's drain acknowledged in under 1 s (slowest {slowest:.0f} ms)")
        drains = RAW["compiled_drain"]["drains"]
        expect(all(d[:4] == ["False", "False", "False", "True"] for d in drains), f"for_dump per drain: {drains}")
        return (f"three suspend --drain with the pool kept ({[before] + [r['pool'] for r in rounds]} pool processes, "
                f"{[len(r['pool_targets']) for r in rounds]} of them CUDA processes checkpointed as they are; slowest acknowledgement {slowest:.0f} ms), "
                f"released by dump --drain at step {at_dump} ({dump_s:.1f} s, {dumped['manifest']['image_bytes'] / 1e9:.2f} GB); undump {undump_s:.1f} s, the job finished")
    finally:
        subprocess.run(["pkill", "-9", "-s", str(p.pid)], capture_output=True)
        kill_and_reap(p)
        shutil.rmtree(base, ignore_errors=True)
