"""Four gloo ranks on CPU (tests/parallel_rank.py) keep every process group
through a drain with no ``on_rebuild`` code: DDP (kept, not rewrapped) and
FSDP2 on a 2-D mesh go on bit-exact against untouched runs, every group the
model holds is the object it had, registered with torch, and the old
communicators are really gone (gloo's connections closed: on gloo a
destroyed group still works for whoever holds it, so equal losses alone
would prove little). The harm first: the old way (torch's own groups, the
default one made anew) leaves FSDP2 on a 2-D mesh dead at the next step.
This test plays cudackpt: it sends the drain signal and reads the marker."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import cudackpt_drain as cd

try:
    import torch.distributed  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4
STEPS = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shows_marker(pid):
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                if comm.read().rstrip("\n") == cd.MARKER:
                    return True
        except OSError:
            pass
    return False


def wait_until(what, condition, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Run:
    """One run of the four-rank job: `drain` sends a drain and its rebuild
    mid-run; `plain` starts torch's own groups."""

    def __init__(self, mode, drain=False, plain=False, install=False):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-groups-test-")
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            WORLD_SIZE=str(WORLD),
            PYTHONPATH=os.pathsep.join(
                p for p in [os.path.join(HERE, "..", "src"), os.environ.get("PYTHONPATH", "")] if p
            ),
            OMP_NUM_THREADS="1",
        )
        if plain:
            env["PLAIN"] = "1"
        if install:
            env["INSTALL"] = "1"
        self.logs = [os.path.join(self.dir, f"rank{rank}.log") for rank in range(WORLD)]
        stderr = [os.path.join(self.dir, f"rank{rank}.err") for rank in range(WORLD)]
        self.ranks = []
        for rank in range(WORLD):
            # A file each, not a pipe: a rank blocked on a full pipe would
            # stall the others in their collectives.
            with open(stderr[rank], "w") as err:
                self.ranks.append(
                    subprocess.Popen(
                        [sys.executable, os.path.join(HERE, "parallel_rank.py"), mode, str(STEPS), self.logs[rank]],
                        env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                        stderr=err,
                    )
                )
        try:
            if drain:
                self.drain()
            self.codes = [p.wait(timeout=300) for p in self.ranks]
        finally:
            for p in self.ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.errors = []
        for path in stderr:
            with open(path) as err:
                self.errors.append(err.read())
        self.final = [self.lines(rank) for rank in range(WORLD)]
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

    def drain(self):
        wait_until("every rank under way", lambda: min(self.steps(r) for r in range(WORLD)) >= 8)
        pids = [p.pid for p in self.ranks]
        for pid in pids:
            os.kill(pid, cd.DEFAULT_SIGNAL)
        wait_until("every acknowledgement", lambda: all(shows_marker(pid) or self.ranks[i].poll() is not None for i, pid in enumerate(pids)))
        for pid in pids:
            if self.ranks[pids.index(pid)].poll() is None:
                os.kill(pid, cd.DEFAULT_SIGNAL)

    def losses(self, rank):
        return [line.split("loss=")[1] for line in self.lines(rank) if line.startswith("step=")]

    def value(self, rank, key):
        for line in self.lines(rank):
            if line.startswith(key + "="):
                return line.split("=", 1)[1]
        return None


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class KeptGroups(unittest.TestCase):
    def check_kept(self, mode):
        untouched = [Run(mode), Run(mode)]
        for run in untouched:
            self.assertEqual(run.codes, [0] * WORLD, run.errors)
        self.assertEqual(
            [untouched[0].losses(r) for r in range(WORLD)],
            [untouched[1].losses(r) for r in range(WORLD)],
            "two untouched runs agree",
        )
        drained = Run(mode, drain=True)
        self.assertEqual(drained.codes, [0] * WORLD, drained.errors)
        for rank in range(WORLD):
            self.assertEqual(drained.value(rank, "drains"), "1", drained.lines(rank))
            self.assertEqual(len(drained.losses(rank)), STEPS)
            self.assertEqual(drained.losses(rank), untouched[0].losses(rank), f"rank {rank}: bit-exact")
            self.assertEqual(drained.value(rank, "same_groups"), "True", f"rank {rank}")
            self.assertEqual(drained.value(rank, "registered"), "True", f"rank {rank}")
            # The old communicators are gone: each rank's gloo connections
            # to its peers closed at the release.
            at_start = int(drained.value(rank, "sockets_at_start"))
            after = int(drained.value(rank, "sockets_after_release"))
            self.assertGreaterEqual(at_start - after, WORLD - 1, f"rank {rank}: {at_start} -> {after}")

    def test_ddp_on_four_ranks_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("ddp")

    def test_fsdp2_on_a_2x2_mesh_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("fsdp2_hsdp")

    def test_tensor_parallelism_on_four_ranks_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("tp")

    def test_a_framework_calling_torch_s_init_after_install_gets_groups_that_are_kept(self):
        untouched = Run("ddp")
        self.assertEqual(untouched.codes, [0] * WORLD, untouched.errors)
        drained = Run("ddp", drain=True, install=True)
        self.assertEqual(drained.codes, [0] * WORLD, drained.errors)
        for rank in range(WORLD):
            self.assertEqual(drained.value(rank, "drains"), "1", drained.lines(rank))
            self.assertEqual(drained.losses(rank), untouched.losses(rank), f"rank {rank}: bit-exact")
            self.assertEqual(drained.value(rank, "same_groups"), "True", f"rank {rank}")

    def test_the_harm_first_the_old_way_kills_fsdp2_on_a_2d_mesh(self):
        run = Run("fsdp2_hsdp", drain=True, plain=True)
        self.assertTrue(any(code != 0 for code in run.codes), f"the job died: {run.codes}")
        self.assertTrue(
            any("process group" in error.lower() for error in run.errors),
            "\n".join(error[-600:] for error in run.errors),
        )


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class PrivateTorch(unittest.TestCase):
    def test_this_torch_has_every_private_name_the_client_uses(self):
        from cudackpt_drain import _torch_private

        self.assertEqual(_torch_private.missing(), [])

    def test_a_torch_without_one_is_named_at_once(self):
        from cudackpt_drain import _torch_private

        needed = _torch_private._NEEDED
        try:
            _torch_private._NEEDED = needed + (("torch.distributed.ProcessGroup", "_no_such_thing"),)
            with self.assertRaises(ImportError) as raised:
                _torch_private.check()
            self.assertIn("ProcessGroup._no_such_thing", str(raised.exception))
            self.assertIn("torch 2.11", str(raised.exception))
        finally:
            _torch_private._NEEDED = needed
