"""Tests of `python3 -m cudackpt_drain.no_io_uring CMD...`: the command and
every process it starts cannot set up an io_uring (ENOSYS), and nothing
else changes for them."""

import os
import platform
import shutil
import subprocess
import sys
import tempfile
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


# Sets up an io_uring through the i386 ABI (`int $0x80`, call 425) from a
# 64-bit process, and prints what the kernel answered. Static and not
# position-independent, so its buffer's address fits in 32 bits.
I386_PROBE = r"""
#include <stdio.h>
static unsigned char params[120];
int main(void) {
    long ret;
    __asm__ volatile ("int $0x80" : "=a"(ret)
                      : "a"(425), "b"(4), "c"((unsigned int)(unsigned long)params) : "memory");
    printf("%ld\n", ret);
    return 0;
}
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

    def test_nor_through_a_foreign_abi(self):
        if platform.machine() != "x86_64":
            self.skipTest("the i386 probe is x86-64 code")
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            self.assertNotIn("CI", os.environ, "CI has a C compiler")
            self.skipTest("no C compiler")
        with tempfile.TemporaryDirectory() as work:
            source, probe = os.path.join(work, "probe.c"), os.path.join(work, "probe")
            with open(source, "w") as out:
                out.write(I386_PROBE)
            built = subprocess.run([compiler, "-static", "-no-pie", "-o", probe, source], capture_output=True, text=True)
            self.assertEqual(built.returncode, 0, built.stderr)
            # The harm: unwrapped, the i386 call sets up a ring.
            bare = run(probe).stdout.strip()
            if int(bare) < 0:
                self.assertNotIn("CI", os.environ, f"this kernel runs i386 calls: {bare}")
                self.skipTest(f"this kernel refuses i386 calls ({bare})")
            done = wrapped(probe)
            self.assertEqual(done.stdout.strip(), "-38", "ENOSYS for the foreign ABI too")

    def test_a_filter_is_built_for_each_known_machine_only(self):
        from cudackpt_drain import no_io_uring

        for machine in ("x86_64", "aarch64"):
            program = no_io_uring._program(machine)
            self.assertEqual(len(program) % 8, 0)
        with self.assertRaises(OSError):
            no_io_uring._program("riscv64")

    def test_a_missing_command_is_named(self):
        done = wrapped("/nonexistent/torchrun")
        self.assertEqual(done.returncode, 127)
        self.assertIn("cannot run '/nonexistent/torchrun'", done.stderr)

    def test_no_command_is_a_usage_error(self):
        self.assertEqual(wrapped().returncode, 2)


if __name__ == "__main__":
    unittest.main()
