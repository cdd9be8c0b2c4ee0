"""The jobs the scenarios drive: PyTorch processes (torch_target.py,
train.py), torchrun jobs with the drain client (drain_job.py, the client's
rank scripts), a CUDA IPC pair (drain_ipc.py); and the run that drains a
job twice and checks it finishes bit-exact."""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from harness.host import CLIENT_TESTS, GPU_TESTS
from harness.procs import Closing, free_port, gpu_of, process_tree, wait_for
from harness.registry import Failed, expect


TORCH_TARGET = os.path.join(GPU_TESTS, "torch_target.py")


class TorchTargets(Closing):
    """tests/gpu/torch_target.py: PyTorch processes reporting their data."""

    def __init__(self, mode, env=None):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-torch-")
        self.p = subprocess.Popen([sys.executable, TORCH_TARGET, mode, self.dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True, env=dict(os.environ, **(env or {})))
        ready, _, _ = select.select([self.p.stdout], [], [], 180)
        line = self.p.stdout.readline().strip() if ready else ""
        if not line.startswith("PIDS"):
            self.close()
            raise Failed(f"torch target ({mode}) did not start: {line!r}")
        self.pids = [int(x) for x in line.split()[1:]]

    def all_ok_since(self, since, timeout=60):
        """Waits until every process reported `ok` after `since`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fresh = []
            for pid in self.pids:
                try:
                    word, _, stamp = open(os.path.join(self.dir, str(pid))).read().split()
                    fresh.append(word == "ok" and float(stamp) > since)
                except (OSError, ValueError):
                    fresh.append(False)
            if all(fresh):
                return True
            time.sleep(0.3)
        return False

    def close(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait(timeout=30)


# ---------------------------------------------------------------------------
# The drain handshake (cudackpt(1), DRAIN PROTOCOL) on real ranks: tests/gpu/drain_job.py under
# torchrun (2 GPUs, NCCL over NVLink and SHM, NCCL_NVLS_ENABLE=0) with the
# PyTorch client, and tests/gpu/drain_ipc.py for a CUDA IPC pair.

DRAIN_JOB = os.path.join(GPU_TESTS, "drain_job.py")


DRAIN_JOB = os.path.join(GPU_TESTS, "drain_job.py")
DRAIN_IPC = os.path.join(GPU_TESTS, "drain_ipc.py")


class DrainJob(Closing):
    """The torchrun job of drain_job.py, in a process session of its own;
    `wrap` goes before torchrun (e.g. unshare into a PID namespace)."""

    PORTS = iter(range(29600, 29700))

    def __init__(self, env=None, wrap=None):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-drain-job-")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                   "--master-port", str(next(self.PORTS)), DRAIN_JOB, self.dir]
        self.log = open(os.path.join(self.dir, "job.log"), "w")
        self.p = subprocess.Popen((wrap or []) + command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env={**os.environ, "NCCL_NVLS_ENABLE": "0", "HOLD_MIB": "1024", **(env or {})})
        self.launcher = self.p.pid

    def ranks(self):
        ranks = []
        for r in range(2):
            try:
                ranks.append(json.load(open(os.path.join(self.dir, f"rank{r}.json"))))
            except (OSError, ValueError):
                return None
        return ranks

    @property
    def pids(self):
        return [r["pid"] for r in self.ranks()]

    def wait_steps(self, at_least, timeout=180):
        def ready():
            ranks = self.ranks()
            return ranks is not None and all(r["steps"] >= at_least for r in ranks)
        if self.p.poll() is not None:
            raise Failed(f"the job exited {self.p.returncode}: {self.tail()}")
        wait_for(f"the job to reach step {at_least} ({self.tail()})", ready, timeout)

    def steps(self):
        return [r["steps"] for r in self.ranks()]

    def tail(self):
        try:
            return open(os.path.join(self.dir, "job.log")).read()[-600:]
        except OSError:
            return ""

    def finish(self, timeout=180):
        """Stops the job at a step boundary; its exit code and the ranks."""
        open(os.path.join(self.dir, "stop"), "w").close()
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"the job did not finish: {self.tail()}")
        return code, self.ranks()

    def close(self):
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        self.p.wait(timeout=60)


def split_ranks(doc, job):
    """A document's processes: the job's ranks, and the rest (torchrun's
    agent, a CUDA process to the driver)."""
    pids = job.pids
    return ([p for p in doc["processes"] if p["pid"] in pids],
            [p for p in doc["processes"] if p["pid"] not in pids])


def stop_drain_ipc(p, work):
    """Stops a drain_ipc.py process (and its child): asked through `work`,
    then its whole session killed, and reaped."""
    open(os.path.join(work, "stop"), "w").close()
    try:
        os.killpg(p.pid, 9)
    except OSError:
        pass
    p.wait(timeout=60)


def start_single(work, **env):
    """A single-GPU PyTorch process with the drain client (drain_ipc.py
    single), writing its status in `work`."""
    return subprocess.Popen([sys.executable, DRAIN_IPC, work, "single"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True, env=dict(os.environ, **env))


def first_steps(p, work):
    """Its PID once it has made its first steps, and a reader of its status."""
    ready, _, _ = select.select([p.stdout], [], [], 180)
    line = p.stdout.readline().strip() if ready else ""
    expect(line.startswith("PIDS"), f"the process did not start: {line!r}")
    pid = int(line.split()[1])
    wait_for("its first steps", lambda: os.path.exists(os.path.join(work, f"{pid}.json")))
    return pid, lambda: json.load(open(os.path.join(work, f"{pid}.json")))


TRAIN = os.path.join(GPU_TESTS, "train.py")


TRAIN = os.path.join(GPU_TESTS, "train.py")
CLIENT_SRC = os.path.join(GPU_TESTS, "..", "..", "clients", "python", "src")


class TrainJob(Closing):
    """tests/gpu/train.py in a session of its own (under torchrun with
    `torchrun`, under a wrapper command with `wrap`), its output in
    WORK/job.log."""

    def __init__(self, work, *args, wrap=(), env=None, torchrun=False, nproc=1):
        self.work = work
        self.nproc = nproc
        os.makedirs(work, exist_ok=True)
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if torchrun else []
        command = [*wrap, sys.executable, *launcher, TRAIN, work, *map(str, args)]
        self.log = open(os.path.join(work, "job.log"), "w")
        self.p = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=dict(os.environ, PYTHONPATH=CLIENT_SRC, **(env or {})))

    def suffix(self, rank):
        """How train.py names a rank's files: nothing for one process."""
        return f"-{rank}" if self.nproc > 1 else ""

    def status(self, rank=0):
        try:
            return json.load(open(os.path.join(self.work, f"status{self.suffix(rank)}.json")))
        except (OSError, ValueError):
            return {}

    def tail(self):
        return open(os.path.join(self.work, "job.log")).read()[-1500:]

    def wait_step(self, n, timeout=300):
        def reached():
            if self.status().get("step", 0) >= n:
                return True
            if self.p.poll() is not None and not self.status().get("done"):
                raise Failed(f"the job exited {self.p.returncode} before step {n}: {self.tail()}")
            return False
        wait_for(f"step {n}", reached, timeout)

    def wait_done(self, timeout=300):
        wait_for("the job to finish", lambda: all(self.status(r).get("done") for r in range(self.nproc)), timeout)

    def losses(self, rank=0):
        try:
            return open(os.path.join(self.work, f"losses{self.suffix(rank)}.txt")).read().split("\n")
        except OSError:
            return []

    def tree(self):
        return process_tree(self.p.pid)

    def close(self):
        for pid in reversed(self.tree()):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        try:
            os.killpg(self.p.pid, 9)
        except OSError:
            pass
        try:
            self.p.wait(timeout=30)
        except Exception:
            pass


PARALLEL_RANK = os.path.join(CLIENT_TESTS, "parallel_rank.py")


PARALLEL_RANK = os.path.join(CLIENT_TESTS, "parallel_rank.py")
FRAMEWORK_RANK = os.path.join(CLIENT_TESTS, "framework_rank.py")


class ParallelJob(Closing):
    """A rank script of the client's tests (parallel_rank.py, or
    framework_rank.py) under torchrun (NCCL): MODE's model, its groups
    started through the client, one rank a GPU on `ranks` GPUs; `env` is
    added to the ranks'. With `nodes` > 1, one torchrun agent a "node"
    (static rendezvous, `--nnodes` and `--node-rank`), each with
    `ranks / nodes` ranks on GPUs of its own (CUDA_VISIBLE_DEVICES), as a
    job across hosts runs: `agents` are the nodes' launchers."""

    def __init__(self, mode, steps, step_seconds, script=PARALLEL_RANK, env=None, ranks=2, nodes=1):
        self.dir = tempfile.mkdtemp(prefix=f"cudackpt-groups-{mode}-")
        self.ranks = ranks
        self.logs = [os.path.join(self.dir, f"rank{r}.log") for r in range(ranks)]
        env = dict(os.environ, DEVICE="cuda", STEP_SECONDS=str(step_seconds), NCCL_NVLS_ENABLE="0",
                   CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(p for p in [CLIENT_SRC, os.environ.get("PYTHONPATH", "")] if p),
                   **(env or {}))
        self.errs = []
        self.agents = []
        port, per_node = free_port(), ranks // nodes
        for node in range(nodes):
            launcher = ["--nproc-per-node", str(per_node), "--master-port", str(port)]
            node_env = env
            if nodes > 1:
                launcher += ["--nnodes", str(nodes), "--node-rank", str(node), "--master-addr", "127.0.0.1"]
                node_env = dict(env, CUDA_VISIBLE_DEVICES=",".join(str(node * per_node + i) for i in range(per_node)))
            self.errs.append(open(os.path.join(self.dir, f"torchrun{node}.err"), "w"))
            # Every rank logs to LOG with its rank: the torchrun command is
            # the same for all, so the rank script is given a per-rank path.
            self.agents.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", *launcher,
                 script, mode, str(steps), os.path.join(self.dir, "rank{RANK}.log")],
                env=node_env, stdout=subprocess.DEVNULL, stderr=self.errs[-1], start_new_session=True))
        self.p = self.agents[0]

    def lines(self, rank):
        try:
            with open(self.logs[rank]) as log:
                return log.read().splitlines()
        except OSError:
            return []

    def losses(self, rank):
        return [line.split("loss=")[1] for line in self.lines(rank) if line.startswith("step=")]

    def value(self, rank, key):
        return next((line.split("=", 1)[1] for line in self.lines(rank) if line.startswith(key + "=")), None)

    def pids(self):
        return [int(self.value(r, "pid") or 0) for r in range(self.ranks)]

    def wait_step(self, step, timeout=240):
        wait_for(f"step {step}", lambda: min(len(self.losses(r)) for r in range(self.ranks)) >= step, timeout)

    def tail(self, chars=1500):
        """The end of each torchrun agent's stderr (its ranks' tracebacks)."""
        said = []
        for node, err in enumerate(self.errs):
            err.flush()
            with open(err.name) as f:
                said.append(f"node {node}: {f.read()[-chars:]}")
        return " | ".join(said)

    def wait_done(self, timeout=300):
        for agent, err in zip(self.agents, self.errs):
            code = agent.wait(timeout=timeout)
            err.flush()
            expect(code == 0, f"torchrun exited {code}: {open(err.name).read()[-1500:]}")

    def close(self):
        for agent in self.agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        for err in self.errs:
            err.close()


def kept_through_two_drains(tools, name, steps, make, ranks=2):
    """The job `make(step_seconds)` starts (one rank a GPU on the first
    `ranks` GPUs), run twice untouched (the two must agree), then drained
    with suspend --drain --tree and resume --tree, then again with resume
    --map moving every rank onto the next GPU (0→1, 1→2, …, the last→0;
    on two GPUs, a swap): every rank drains and rebuilds, moves, keeps its
    groups (the same objects, registered) and finishes bit-exact. Returns
    the raw documents and a line."""
    expected = untouched_losses(name, make, ranks)
    row = {}
    with make(0.15) as job:
        job.wait_step(5)
        pids = job.pids()
        down = tools.json("suspend", "--drain", "--tree", job.p.pid)
        row["suspend"] = down
        expect(all(q["drain"]["outcome"] == "drained" for q in down["processes"] if q["pid"] in pids), f"{name}: {down}")
        up = tools.json("resume", "--tree", job.p.pid)
        row["resume"] = up
        expect(all((q.get("drain") or {}).get("outcome") == "rebuilt" for q in up["processes"] if q["pid"] in pids), f"{name}: {up}")
        job.wait_step(15)
        down2 = tools.json("suspend", "--drain", "--tree", job.p.pid)
        row["suspend_2"] = down2
        gpus = [g["uuid"] for g in tools.json("devices")["gpus"]]
        before = {pid: gpu_of(pid) for pid in pids}
        rotation = ",".join(f"{gpus[i]}={gpus[(i + 1) % ranks]}" for i in range(ranks))
        moved = tools.json("resume", "--tree", job.p.pid, "--map", rotation)
        row["resume_moved"] = moved
        after = {pid: gpu_of(pid) for pid in pids}
        expect(all(after[pid] != before[pid] for pid in pids), f"{name}: not moved: {before} -> {after}")
        finished_whole(name, job, expected, drains=2)
        row["steps"] = [step_times(job, r) for r in range(ranks)]
        rows = lambda doc: [q for q in doc["processes"] if q["pid"] in pids]
        released = [q["drain"].get("released_bytes", 0) >> 20 for q in rows(down)]
        acks = [q["drain"].get("acknowledged_ms") for q in rows(down)]
        rebuilt = [q["drain"].get("rebuilt_ms") for q in rows(up)]
        after_ms = [[round(t * 1000, 1) for t in times["after_drain"]] for times in row["steps"]]
        usual_ms = [round(times["median"] * 1000, 1) for times in row["steps"]]
        return row, (f"{name}: suspend --drain {down['duration_ms'] / 1000:.2f} s (acks {acks} ms, released {released} MiB), "
                     f"resume {up['duration_ms'] / 1000:.2f} s (rebuilt {rebuilt} ms), first steps after {after_ms} ms "
                     f"(median {usual_ms} ms), moved, {steps} losses bit-exact")


def untouched_losses(name, make, ranks):
    """Each rank's losses of the job `make(0)` starts, run twice untouched:
    the two runs must agree, or no later comparison means anything."""
    runs = []
    for _ in range(2):
        with make(0) as job:
            job.wait_done()
            runs.append([job.losses(r) for r in range(ranks)])
    expect(runs[0] == runs[1], f"{name}: two untouched runs differ")
    return runs[0]


def finished_whole(name, job, expected, drains):
    """After `job` ended: every rank drained `drains` times, kept its group
    objects (registered), and logged the `expected` losses bit for bit."""
    job.wait_done()
    for r in range(job.ranks):
        expect(job.value(r, "drains") == str(drains), f"{name} rank {r}: drains {job.value(r, 'drains')}")
        expect(job.value(r, "same_groups") == "True" and job.value(r, "registered") == "True",
               f"{name} rank {r}: groups same {job.value(r, 'same_groups')}, registered {job.value(r, 'registered')}")
        expect(job.losses(r) == expected[r], f"{name} rank {r}: losses differ at {[i for i, (a, b) in enumerate(zip(job.losses(r), expected[r])) if a != b][:3]}")


def on_every_node(tools, job, command, stagger=0.0):
    """`cudackpt --json COMMAND --tree AGENT` for each node's agent, as a
    scheduler runs one cudackpt per node: all at once, or each `stagger`
    seconds after the one before. The documents, node by node."""
    def call(node, agent):
        time.sleep(node * stagger)
        return tools.run("--json", *command, "--tree", agent.pid)
    with ThreadPoolExecutor(len(job.agents)) as pool:
        done = [c.result() for c in [pool.submit(call, node, agent) for node, agent in enumerate(job.agents)]]
    # Every node's answer, whichever failed: one node's failure is often
    # explained by the other's.
    said = [f"node {node}: exit {code}: {out.strip() or err.strip()}" for node, (code, out, err) in enumerate(done)]
    expect(all(code == 0 for code, _, _ in done), f"`{' '.join(command)}` on every node: " + " | ".join(said))
    return [json.loads(out) for _, out, _ in done]


def kept_across_nodes(tools, name, steps, make, ranks, stagger=4.0):
    """The job `make(step_seconds)` starts as torchrun "nodes" (one agent
    each), run twice untouched (the two must agree), then drained by one
    cudackpt per node: suspend --drain and resume on every node at once,
    then again with each node's cudackpt `stagger` s after the other's. The
    ranks agree among themselves (the first node's wait for the second's
    at their next step); every rank drains twice, keeps its groups and
    finishes bit-exact. Returns the raw documents and a line."""
    expected = untouched_losses(name, make, ranks)
    with make(0.15) as job:
        try:
            return across_nodes(tools, name, steps, job, expected, stagger)
        except Failed as e:
            ranks_said = " | ".join(f"rank {r}: {job.lines(r)[-6:]}" for r in range(ranks))
            raise Failed(f"{e}; the ranks' logs end: {ranks_said}; torchrun said: {job.tail()}")


def across_nodes(tools, name, steps, job, expected, stagger):
    """kept_across_nodes' drains of the running `job`."""
    ranks = job.ranks
    row = {}
    job.wait_step(5)
    pids = job.pids()
    said = []
    for round_name, stagger_s, at_step in (("together", 0.0, 15), ("staggered", stagger, None)):
        started = time.monotonic()
        at = [len(job.losses(r)) for r in range(ranks)]
        try:
            downs = on_every_node(tools, job, ["suspend", "--drain"], stagger_s)
        except Failed as e:
            raise Failed(f"{e}; the ranks were at steps {at} when it began, {time.monotonic() - started:.2f} s before")
        down_s = time.monotonic() - started
        for node, doc in enumerate(downs):
            drained = sorted(q["pid"] for q in doc["processes"] if (q.get("drain") or {}).get("outcome") == "drained")
            per_node = ranks // len(job.agents)
            expect(drained == sorted(pids[node * per_node:(node + 1) * per_node]), f"{name} {round_name}: node {node} drained {drained}: {doc}")
        started = time.monotonic()
        ups = on_every_node(tools, job, ["resume"], stagger_s)
        up_s = time.monotonic() - started
        for node, doc in enumerate(ups):
            expect(all((q.get("drain") or {}).get("outcome") == "rebuilt" for q in doc["processes"] if q["pid"] in pids), f"{name} {round_name}: node {node}: {doc}")
        row[round_name] = {"suspend": downs, "resume": ups, "suspend_wall_s": round(down_s, 3), "resume_wall_s": round(up_s, 3)}
        acks = [round(q["drain"]["acknowledged_ms"]) for doc in downs for q in doc["processes"] if q["pid"] in pids]
        rebuilt = [round(q["drain"]["rebuilt_ms"]) for doc in ups for q in doc["processes"] if q["pid"] in pids]
        took = [f"{doc['duration_ms'] / 1000:.2f}" for doc in downs]
        said.append(f"{round_name}: suspend --drain per node {took} s (acks {acks} ms), resume {up_s:.2f} s (rebuilt {rebuilt} ms)")
        if at_step:
            job.wait_step(at_step)
    finished_whole(name, job, expected, drains=2)
    row["steps"] = [step_times(job, r) for r in range(ranks)]
    return row, f"{name}: " + "; ".join(said) + f"; {steps} losses bit-exact"


def step_times(job, rank):
    """How long each step of `rank` took (its `took=STEP SECONDS` lines):
    the median, and the first step after each drain."""
    took = {}
    for line in job.lines(rank):
        if line.startswith("took="):
            step, seconds = line[5:].split()
            took[int(step)] = float(seconds)
    drained = [int(line.split("=")[1]) for line in job.lines(rank) if line.startswith("drained_at=")]
    ordered = sorted(took.values())
    return {"median": ordered[len(ordered) // 2] if ordered else None,
            "after_drain": [took[d + 1] for d in drained if d + 1 in took], "drained_at": drained}
