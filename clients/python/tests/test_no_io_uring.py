"""Tests of `python3 -m cudackpt_drain.no_io_uring CMD...`: the command and
every process it starts cannot set up an io_uring (ENOSYS), and nothing
else changes for them."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")

# Sets up an io_uring and prints the result and errno.
PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(425, 4, (ctypes.c_ubyte * 120)())
print(fd if fd < 0 else "ring", ctypes.get_errno() if fd < 0 else 0)
"""


def run(*command):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [SRC, os.environ.get("PYTHONPATH", "")] if p))
    return subprocess.run(list(command), capture_output=True, text=True, env=env, timeout=60)


def wrapped(*command):
    return run(sys.executable, "-m", "cudackpt_drain.no_io_uring", *command)


class NoIoUring(unittest.TestCase):
    def setUp(self):
        here = run(sys.executable, "-c", PROBE).stdout.split()
        if here != ["ring", "0"]:
            # CI must have it: a kernel without io_uring proves nothing here.
            self.assertNotIn("CI", os.environ, f"io_uring is not available here: {here}")
            self.skipTest(f"io_uring is not available here: {here}")

    def test_the_command_cannot_set_up_an_io_uring(self):
        done = wrapped(sys.executable, "-c", PROBE)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split(), ["-1", "38"], "ENOSYS, as on a kernel without io_uring")

    def test_nor_can_any_process_it_starts(self):
        done = wrapped("sh", "-c", f"{sys.executable} -c '{PROBE}'")
        self.assertEqual(done.stdout.split(), ["-1", "38"], done.stderr)

    def test_a_missing_command_is_named(self):
        done = wrapped("/nonexistent/torchrun")
        self.assertEqual(done.returncode, 127)
        self.assertIn("cannot run '/nonexistent/torchrun'", done.stderr)

    def test_no_command_is_a_usage_error(self):
        self.assertEqual(wrapped().returncode, 2)


if __name__ == "__main__":
    unittest.main()
