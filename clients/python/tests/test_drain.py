"""Tests of the PyTorch drain client, on CPU: the protocol in one process
(this test plays cudackpt: it sends the signal and reads the marker in
/proc), and two gloo ranks that agree, drain together and rebuild their
process group on the job's store. Run: python3 -m unittest discover -s
clients/python/tests (with clients/python/src on PYTHONPATH)."""

import json
import mmap
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import cudackpt_drain as cd
import ranks
from ranks import shows_marker, thread_names

try:
    import torch.distributed  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_until(what, condition, seconds=20.0):
    ranks.wait_until(what, condition, seconds)


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

    def drain_once(self, for_dump=False):
        """Plays cudackpt for one drain: asks (after the dump notice when
        `for_dump`), waits for the marker, notes the events so far, asks
        for the rebuild. Returns what it noted."""
        seen = []

        def cudackpt():
            if for_dump:
                os.kill(os.getpid(), cd.dump_notice_signal(self.drain.signal))
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

    def test_a_rebuild_that_fails_names_the_thread_so_and_raises(self):
        # In a process of its own: the failure's thread stays while it lives.
        script = (
            "import sys, time\n"
            "import cudackpt_drain as cd\n"
            "def broken():\n"
            "    raise RuntimeError('the new communicator does not work')\n"
            "drain = cd.Drain(on_rebuild=[broken], dumpable_forks=False)\n"
            "print('ready', flush=True)\n"
            "while True:\n"
            "    try:\n"
            "        drain.point()\n"
            "    except RuntimeError as error:\n"
            "        print('raised', error, flush=True)\n"
            "        time.sleep(30)\n"
            "        break\n"
            "    time.sleep(0.005)\n"
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.path.join(HERE, "..", "src"), os.environ.get("PYTHONPATH", "")] if p))
        rank = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        try:
            self.assertEqual(rank.stdout.readline().strip(), "ready")
            wait_until("the handler", lambda: caught(rank.pid, cd.DEFAULT_SIGNAL))
            os.kill(rank.pid, cd.DEFAULT_SIGNAL)
            wait_until("the acknowledgement", lambda: shows_marker(rank.pid))
            os.kill(rank.pid, cd.DEFAULT_SIGNAL)
            self.assertIn("does not work", rank.stdout.readline())
            self.assertFalse(shows_marker(rank.pid), "the marker went")
            self.assertIn(cd.FAIL_MARKER, thread_names(rank.pid), "and the failure is named in its place")
            links = [os.readlink(f"/proc/{rank.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{rank.pid}/fd")]
            self.assertIn(
                "/memfd:cudackpt-error:RuntimeError: the new communicator does not work (deleted)",
                links,
                "and why, for cudackpt to quote",
            )
        finally:
            rank.kill()
            rank.wait()
            rank.stdout.close()

    def test_the_dump_notice_is_caught_next_to_the_request_and_forgotten_at_the_rebuild(self):
        notice = cd.dump_notice_signal(cd.DEFAULT_SIGNAL)
        self.assertEqual((notice, cd.dump_notice_signal(64), cd.dump_notice_signal(34)), (41, 63, 35))
        self.assertTrue(caught(os.getpid(), notice), "shown in SigCgt, where cudackpt looks")
        noted = []
        self.drain.on_release.append(lambda: noted.append(self.drain.for_dump))
        self.drain_once()
        self.drain_once(for_dump=True)
        self.drain_once()
        self.assertEqual(noted, [False, True, False], "a suspend's drain, a dump's, a suspend's again")
        self.assertEqual(self.drain.drains, 3, "the notice changed no count")
        self.drain.close()
        self.assertFalse(caught(os.getpid(), notice), "close puts the default back")
        self.drain = cd.Drain()

    def test_the_compile_pool_goes_only_for_a_dump_unless_the_job_owns_the_notice(self):
        released = []
        # Where the drain looks it up at each call.
        saved = cd.forks.release_compile_workers
        cd.forks.release_compile_workers = lambda: released.append(self.drain.drains) or True
        try:
            self.drain_once()
            self.drain_once(for_dump=True)
            self.assertEqual(released, [1], "kept for a suspend, shut down for a dump")
            # A job with its own handler of that signal keeps it, and its
            # pool goes at every drain (as before the notice).
            self.drain.close()
            notice = cd.dump_notice_signal(cd.DEFAULT_SIGNAL)
            own = lambda signum, frame: None  # noqa: E731
            signal.signal(notice, own)
            try:
                self.drain = cd.Drain()
                self.assertIs(signal.getsignal(notice), own)
                self.drain_once()
                self.assertEqual(released, [1, 0], "the new Drain's first drain, a suspend's")
                self.drain.close()
                self.assertIs(signal.getsignal(notice), own, "and keeps it after close")
            finally:
                signal.signal(notice, signal.SIG_DFL)
            self.drain = cd.Drain()
        finally:
            cd.forks.release_compile_workers = saved

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


def held_by_this_process(prefix):
    """How many mappings and descriptors of ``prefix*`` files this process has."""
    mapped = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            mapped += len(fields) == 6 and fields[5].startswith(prefix)
    opened = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            opened += os.readlink(f"/proc/self/fd/{name}").startswith(prefix)
        except OSError:
            pass
    return mapped, opened


def _report_held(prefix, pipe):
    pipe.send(held_by_this_process(prefix))


class DeviceLike:
    """A file standing in for /dev/nvidia0 (CI has no GPU): mapped shared
    and held open by this process, as the driver maps and holds the device
    node in a CUDA process."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cudackpt-forks-")
        self.prefix = os.path.join(self.dir, "nvidia")
        self.fd = os.open(self.prefix + "0", os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self.fd, 2 * mmap.PAGESIZE)
        self.map = mmap.mmap(self.fd, 2 * mmap.PAGESIZE, mmap.MAP_SHARED)
        self.map[:5] = b"tensor"[:5]
        # One mapping, and two descriptors: Python's mmap keeps a dup.
        self.held = held_by_this_process(self.prefix)
        assert self.held == (1, 2), self.held

    def close(self):
        self.map.close()
        os.close(self.fd)
        shutil.rmtree(self.dir)

    def in_forked_child(self):
        """What a child forked as DataLoader forks its workers still holds."""
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe()
        child = context.Process(target=_report_held, args=(self.prefix, theirs))
        child.start()
        held = ours.recv()
        child.join()
        return held


class Forks(unittest.TestCase):
    """A child forked after CUDA started keeps device mappings CRIU cannot
    dump: the client's fork hook drops them in the child, never in the
    parent."""

    def setUp(self):
        self.device = DeviceLike()

    def tearDown(self):
        self.device.close()

    def test_a_forked_child_drops_what_it_inherited_and_the_parent_keeps_it(self):
        held = self.device.held
        self.assertEqual(self.device.in_forked_child(), held, "without the hook the child inherits all")
        cd.keep_forks_dumpable(self.device.prefix)
        self.assertEqual(self.device.in_forked_child(), (0, 0))
        self.assertEqual(held_by_this_process(self.device.prefix), held)
        self.assertEqual(self.device.map[:5], b"tenso", "the parent's mapping still works")

    def test_dropping_in_this_process_counts_what_went(self):
        pid = os.fork()
        if pid == 0:  # the child checks, and says by its exit status
            dropped = cd.drop_inherited_gpu(self.device.prefix)
            os._exit(0 if dropped == self.device.held and held_by_this_process(self.device.prefix) == (0, 0) else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)

    def test_a_forked_child_drops_its_network_sockets_and_keeps_its_unix_ones(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ours, theirs = socket.socketpair()
        try:
            cd.keep_forks_dumpable(self.device.prefix)
            pid = os.fork()
            if pid == 0:  # the hook has run: the child says what it holds
                def held(fd):
                    try:
                        os.fstat(fd)
                        return True
                    except OSError:
                        return False

                kept = (held(listener.fileno()), held(udp.fileno()), held(theirs.fileno()))
                os._exit(0 if kept == (False, False, True) else 1)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0, "the child kept no TCP or UDP socket, and its Unix one")
            # The parent's are its own still.
            client = socket.create_connection(listener.getsockname())
            client.close()
            ours.send(b"x")
            self.assertEqual(theirs.recv(1), b"x")
        finally:
            for s in (listener, udp, ours, theirs):
                s.close()

    def test_a_drain_keeps_forks_dumpable_for_the_gpu_device_nodes(self):
        with cd.Drain():
            self.assertIn(cd.DEVICE_PREFIX, cd._fork_hooks)
        self.assertEqual(cd.DEVICE_PREFIX, "/dev/nvidia")

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable here (CI sets CUDACKPT_TEST_PYTHON to an interpreter with it)")
    def test_dataloader_workers_hold_nothing_of_the_device(self):
        import torch.utils.data

        prefix = self.device.prefix

        class Held(torch.utils.data.Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, index):
                return torch.tensor(held_by_this_process(prefix))

        def loaded():
            loader = torch.utils.data.DataLoader(
                Held(), batch_size=1, num_workers=2, multiprocessing_context="fork"
            )
            return {tuple(batch[0].tolist()) for batch in loader}

        self.assertEqual(loaded(), {self.device.held}, "without the hook each worker inherits all")
        cd.keep_forks_dumpable(prefix)
        self.assertEqual(loaded(), {(0, 0)})


class CompileWorkers(unittest.TestCase):
    """torch.compile's compile-worker pool starts CUDA and forks workers
    that inherit its GPU mappings: the client shuts it down at a drain and
    on request, and inductor starts it again when it next compiles."""

    def test_only_a_loaded_inductor_with_the_function_is_asked(self):
        name = "torch._inductor.async_compile"
        saved = sys.modules.get(name)
        calls = []
        try:
            sys.modules.pop(name, None)
            self.assertFalse(cd.release_compile_workers(), "no inductor loaded: nothing to do")
            stand_in = type(sys)(name)
            stand_in._pool_set = {"a pool"}
            stand_in.shutdown_compile_workers = lambda: calls.append("shutdown")
            sys.modules[name] = stand_in
            self.assertTrue(cd.release_compile_workers())
            self.assertEqual(calls, ["shutdown"])
            del stand_in.shutdown_compile_workers
            self.assertFalse(cd.release_compile_workers(), "a torch without it keeps its pool")
            self.assertEqual(calls, ["shutdown"])
        finally:
            if saved is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = saved

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable here (CI sets CUDACKPT_TEST_PYTHON to an interpreter with it)")
    def test_the_pool_is_shut_down_on_request_and_at_a_drain_and_comes_back(self):
        src = os.path.join(os.path.dirname(HERE), "src")
        with tempfile.TemporaryDirectory(prefix="cudackpt-inductor-") as cache:
            out = subprocess.run(
                [sys.executable, os.path.join(HERE, "compile_pool.py")],
                capture_output=True, text=True, timeout=600, cwd=HERE,
                env=dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="2", PYTHONPATH=os.pathsep.join([src, HERE]),
                         TORCHINDUCTOR_CACHE_DIR=cache),
            )
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        report = json.loads(out.stdout.splitlines()[-1])
        self.assertTrue(report["pool"], "the pool started (the test's premise)")
        self.assertTrue(report["released"])
        self.assertEqual(report["after_release"], [], "no compile worker left")
        self.assertFalse(report["released_again"], "nothing left to release")
        self.assertTrue(report["pool_again"], "inductor starts it again")
        self.assertEqual(report["served_again"], 6, "and it works")
        self.assertTrue(report["pool_before_drain"])
        self.assertTrue(report["drained"])
        self.assertTrue(report["at_a_suspend_s_marker"], "a suspend keeps the pool")
        self.assertEqual(report["at_the_marker"], [], "a dump's drain: gone by the acknowledgement")


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
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

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
