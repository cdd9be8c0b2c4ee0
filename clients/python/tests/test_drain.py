"""Tests of the PyTorch drain client, on CPU: the protocol in one process
(this test plays cudackpt: it sends the signal and reads the marker in
/proc), and two gloo ranks that agree, drain together and rebuild their
process group on the job's store. Run: python3 -m unittest discover -s
clients/python/tests (with clients/python/src on PYTHONPATH)."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import cudackpt_drain as cd

try:
    import torch.distributed  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

HERE = os.path.dirname(os.path.abspath(__file__))


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                names.append(comm.read().rstrip("\n"))
        except OSError:
            pass
    return names


def shows_marker(pid):
    return cd.MARKER in thread_names(pid)


def wait_until(what, condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def caught(pid, number):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16) >> (number - 1) & 1 == 1
    return False


class Protocol(unittest.TestCase):
    def setUp(self):
        self.events = []
        self.drain = cd.Drain(
            on_release=[lambda: self.events.append("release")],
            on_rebuild=[lambda: self.events.append("rebuild")],
        )

    def tearDown(self):
        self.drain.close()

    def ask(self):
        os.kill(os.getpid(), self.drain.signal)

    def test_signals_are_read_as_cudackpt_reads_them(self):
        self.assertEqual(cd.parse_signal("40"), 40)
        self.assertEqual(cd.parse_signal("RTMIN+6"), 40)
        self.assertEqual(cd.parse_signal("sigrtmin+6"), 40)
        self.assertEqual(cd.parse_signal("RTMAX-2"), 62)
        self.assertEqual(cd.parse_signal("64"), 64)
        for stop in ("SIGUSR2", "TERM", "INT", "15", "33", "65", "NOPE", "RTMIN+x"):
            with self.assertRaises(ValueError, msg=stop):
                cd.parse_signal(stop)

    def test_the_handler_shows_in_sigcgt_where_cudackpt_looks(self):
        self.assertEqual(self.drain.signal, cd.DEFAULT_SIGNAL)
        self.assertTrue(caught(os.getpid(), cd.DEFAULT_SIGNAL))
        self.drain.close()
        self.assertFalse(caught(os.getpid(), cd.DEFAULT_SIGNAL), "close puts the default back")
        self.drain = cd.Drain()

    def test_nothing_asked_nothing_done(self):
        self.assertFalse(self.drain.point())
        self.assertEqual(self.events, [])
        self.assertFalse(shows_marker(os.getpid()))

    def drain_once(self):
        """Plays cudackpt for one drain: asks, waits for the marker, notes
        the events so far, asks for the rebuild. Returns what it noted."""
        seen = []

        def cudackpt():
            self.ask()
            wait_until("the acknowledgement", lambda: shows_marker(os.getpid()))
            seen.append(list(self.events))
            self.ask()

        helper = threading.Thread(target=cudackpt)
        helper.start()
        wait_until("the request", self.drain.requested)
        self.assertTrue(self.drain.point())
        helper.join()
        return seen

    def test_a_request_drains_at_the_next_point_and_the_next_signal_rebuilds(self):
        seen = self.drain_once()
        self.assertEqual(seen, [["release"]], "released before it acknowledged")
        self.assertEqual(self.events, ["release", "rebuild"])
        self.assertFalse(shows_marker(os.getpid()), "the marker goes after the rebuild")
        self.assertEqual(self.drain.drains, 1)
        self.assertFalse(self.drain.requested())
        self.assertFalse(self.drain.point(), "one request, one drain")

    def test_the_cache_is_emptied_before_the_hooks_and_again_after_them_then_the_marker(self):
        self.drain.release_cache = lambda: self.events.append("cache")
        seen = self.drain_once()
        self.assertEqual(seen, [["cache", "release", "cache"]], "all released before the marker")
        self.assertEqual(self.events, ["cache", "release", "cache", "rebuild"])

    def test_without_hooks_the_cache_is_emptied_once(self):
        self.drain.close()
        self.drain = cd.Drain()
        self.drain.release_cache = lambda: self.events.append("cache")
        seen = self.drain_once()
        self.assertEqual(seen, [["cache"]], "emptied once, before the marker")
        self.assertEqual(self.events, ["cache"])

    def test_a_request_called_off_before_the_point_does_nothing(self):
        self.ask()
        wait_until("the request", self.drain.requested)
        self.ask()
        wait_until("the call-off", lambda: not self.drain.requested())
        self.assertFalse(self.drain.point())
        self.assertEqual(self.events, [])

    def test_every_n_points_only_the_nth_looks(self):
        self.drain.close()
        drain = cd.Drain(every=3)
        try:
            os.kill(os.getpid(), drain.signal)
            wait_until("the request", drain.requested)
            threading.Thread(
                target=lambda: (
                    wait_until("the marker", lambda: shows_marker(os.getpid())),
                    os.kill(os.getpid(), drain.signal),
                )
            ).start()
            self.assertEqual([drain.point(), drain.point(), drain.point()], [False, False, True])
        finally:
            drain.close()
        self.drain = cd.Drain()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAVE_TORCH, "torch is not importable here (CI sets CUDACKPT_TEST_PYTHON to an interpreter with it)")
class GlooRanks(unittest.TestCase):
    """Two ranks (tests/gloo_rank.py) all-reduce at every step and call
    point() between steps; this test is cudackpt."""

    def start(self, steps):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-drain-test-")
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            WORLD_SIZE="2",
            PYTHONPATH=os.pathsep.join(
                p for p in [os.path.join(HERE, "..", "src"), os.environ.get("PYTHONPATH", "")] if p
            ),
        )
        self.ranks = []
        for rank in range(2):
            log = os.path.join(self.dir, f"rank{rank}.log")
            self.ranks.append(
                (
                    subprocess.Popen(
                        [sys.executable, os.path.join(HERE, "gloo_rank.py"), str(steps), log],
                        env=dict(env, RANK=str(rank)),
                    ),
                    log,
                )
            )

    def tearDown(self):
        for process, _ in getattr(self, "ranks", []):
            if process.poll() is None:
                process.kill()
                process.wait()

    def lines(self, rank):
        try:
            with open(self.ranks[rank][1]) as log:
                return log.read().split()
        except OSError:
            return []

    def step_of(self, rank):
        steps = [int(line[5:]) for line in self.lines(rank) if line.startswith("step=")]
        return max(steps, default=-1)

    def signal(self, rank):
        os.kill(self.ranks[rank][0].pid, cd.DEFAULT_SIGNAL)

    def finish(self):
        results = []
        for process, _ in self.ranks:
            self.assertEqual(process.wait(timeout=120), 0)
        for rank in range(2):
            results.append([line for line in self.lines(rank) if not line.startswith("step=")])
        return results

    def test_two_ranks_drain_at_one_step_and_rebuild_their_group(self):
        self.start(steps=150)
        wait_until("both ranks under way", lambda: min(self.step_of(0), self.step_of(1)) >= 5, 60)
        for pid in (p.pid for p, _ in self.ranks):
            self.assertTrue(caught(pid, cd.DEFAULT_SIGNAL))
        self.signal(0)
        self.signal(1)
        pids = [p.pid for p, _ in self.ranks]
        wait_until("both acknowledgements", lambda: all(shows_marker(pid) for pid in pids), 60)
        drained_at = [self.step_of(0), self.step_of(1)]
        self.assertEqual(drained_at[0], drained_at[1], "they drained at the same step")
        time.sleep(0.3)
        self.assertEqual([self.step_of(0), self.step_of(1)], drained_at, "no step while drained")
        self.signal(0)
        self.signal(1)
        results = self.finish()
        for rank, lines in enumerate(results):
            self.assertIn("drains=1", lines, f"rank {rank}: {lines}")
            self.assertIn("sums=ok", lines, f"rank {rank}: {lines}")
            self.assertIn(f"drained_at={drained_at[rank]}", lines, f"rank {rank}: {lines}")
            # The hooks ran after the group was gone and the cache emptied.
            self.assertIn("release=group_gone,cache_emptied", lines, f"rank {rank}: {lines}")

    def test_a_rank_asked_alone_does_not_drain(self):
        self.start(steps=120)
        wait_until("both ranks under way", lambda: min(self.step_of(0), self.step_of(1)) >= 5, 60)
        self.signal(0)
        before = self.step_of(1)
        wait_until("more steps", lambda: self.step_of(1) >= before + 20, 60)
        self.assertFalse(shows_marker(self.ranks[0][0].pid), "the other rank was not asked")
        self.signal(0)  # cudackpt calls it off
        results = self.finish()
        for rank, lines in enumerate(results):
            self.assertIn("drains=0", lines, f"rank {rank}: {lines}")
            self.assertIn("sums=ok", lines, f"rank {rank}: {lines}")


if __name__ == "__main__":
    unittest.main()
