"""What the client's tests share: reading a process's thread names (the
marker), waiting, and a job of several ranks on CPU (gloo), started as
torchrun would start it, that the tests drain mid-run by playing cudackpt:
they send the drain signal to every rank, wait for every marker, and send
the rebuild. Each rank logs to a file of its own (`{key}={value}` lines,
`step=N loss=HEX`). Not a test module: the tests import it."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import cudackpt_drain as cd

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_names(pid):
    """The names of `pid`'s threads, as cudackpt reads them (none once it
    has exited)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    names = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                names.append(comm.read().rstrip("\n"))
        except OSError:
            pass
    return names


def shows_marker(pid):
    return cd.MARKER in thread_names(pid)


def wait_until(what, condition, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Run:
    """One run of `script` (`MODE STEPS LOG` on its command line) on `world`
    ranks: `drain` sends a drain and its rebuild once every rank is
    `drain_after` steps in; `env` is added to the ranks' environment."""

    def __init__(self, script, mode, world, steps, drain=False, drain_after=8, env=None):
        self.world = world
        self.dir = tempfile.mkdtemp(prefix="cudackpt-ranks-test-")
        common = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            WORLD_SIZE=str(world),
            PYTHONPATH=os.pathsep.join(
                p for p in [os.path.join(HERE, "..", "src"), os.environ.get("PYTHONPATH", "")] if p
            ),
            OMP_NUM_THREADS="1",
            # A drained run steps slower (the losses do not change), so the
            # drain lands well before the last step on a loaded machine.
            STEP_SECONDS="0.03" if drain else "0.005",
            **(env or {}),
        )
        self.logs = [os.path.join(self.dir, f"rank{rank}.log") for rank in range(world)]
        stderr = [os.path.join(self.dir, f"rank{rank}.err") for rank in range(world)]
        self.ranks = []
        try:
            for rank in range(world):
                # A file each, not a pipe: a rank blocked on a full pipe
                # would stall the others in their collectives.
                with open(stderr[rank], "w") as err:
                    self.ranks.append(
                        subprocess.Popen(
                            [sys.executable, os.path.join(HERE, script), mode, str(steps), self.logs[rank]],
                            env=dict(common, RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0"),
                            stdout=subprocess.DEVNULL,
                            stderr=err,
                        )
                    )
            if drain:
                self.drain(drain_after)
            self.codes = [p.wait(timeout=300) for p in self.ranks]
        finally:
            for p in self.ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.errors = []
            for path in stderr:
                try:
                    with open(path) as err:
                        self.errors.append(err.read())
                except OSError:
                    self.errors.append("")
            self.final = [self.lines(rank) for rank in range(world)]
            shutil.rmtree(self.dir, ignore_errors=True)

    final = None

    def lines(self, rank):
        if self.final is not None:
            return self.final[rank]
        try:
            with open(self.logs[rank]) as log:
                return log.read().splitlines()
        except OSError:
            return []

    def steps(self, rank):
        return sum(1 for line in self.lines(rank) if line.startswith("step="))

    def drain(self, after):
        wait_until("every rank under way", lambda: min(self.steps(r) for r in range(self.world)) >= after)
        pids = [p.pid for p in self.ranks]
        for pid in pids:
            os.kill(pid, cd.DEFAULT_SIGNAL)
        wait_until(
            "every acknowledgement",
            lambda: all(shows_marker(pid) or self.ranks[i].poll() is not None for i, pid in enumerate(pids)),
        )
        for i, pid in enumerate(pids):
            if self.ranks[i].poll() is None:
                os.kill(pid, cd.DEFAULT_SIGNAL)

    def losses(self, rank):
        return [line.split("loss=")[1] for line in self.lines(rank) if line.startswith("step=")]

    def value(self, rank, key):
        for line in self.lines(rank):
            if line.startswith(key + "="):
                return line.split("=", 1)[1]
        return None


def assert_kept(test, start):
    """Runs the job `start(drain=...)` starts twice untouched (they must
    agree) and once drained, and asserts through `test` what a kept job
    shows: it finished, drained once, bit-exact, the groups it holds are
    the objects it had and registered with torch, and each rank's gloo
    connections to its peers closed at the release (the old communicators
    are gone)."""
    untouched = [start(drain=False), start(drain=False)]
    for run in untouched:
        test.assertEqual(run.codes, [0] * run.world, run.errors)
    world = untouched[0].world
    test.assertEqual(
        [untouched[0].losses(r) for r in range(world)],
        [untouched[1].losses(r) for r in range(world)],
        "two untouched runs agree",
    )
    drained = start(drain=True)
    test.assertEqual(drained.codes, [0] * world, drained.errors)
    for rank in range(world):
        test.assertEqual(drained.value(rank, "drains"), "1", drained.lines(rank))
        test.assertEqual(len(drained.losses(rank)), len(untouched[0].losses(rank)))
        test.assertEqual(drained.losses(rank), untouched[0].losses(rank), f"rank {rank}: bit-exact")
        test.assertEqual(drained.value(rank, "same_groups"), "True", f"rank {rank}")
        test.assertEqual(drained.value(rank, "registered"), "True", f"rank {rank}")
        at_start = int(drained.value(rank, "sockets_at_start"))
        after = int(drained.value(rank, "sockets_after_release"))
        test.assertGreaterEqual(at_start - after, world - 1, f"rank {rank}: {at_start} -> {after}")


def tcp_sockets():
    """This process's TCP sockets (gloo's connections to its peers), for the
    rank scripts."""
    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                count += sum(1 for line in lines if line.split()[9] in inodes)
        except OSError:
            pass
    return count
