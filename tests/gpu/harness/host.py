"""What the suite knows of the host it runs on: where its files are, the
CRIU, runc and Podman carried in (the command line's --criu-dir,
--runc-dir and --podman-dir),
and how many GPUs it has."""

import os
import subprocess
from dataclasses import dataclass
from typing import Optional, Tuple

# tests/gpu, where the job scripts the scenarios start live.
GPU_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The Python client's tests, whose rank scripts the kept-groups scenarios run.
CLIENT_TESTS = os.path.join(GPU_TESTS, "..", "..", "clients", "python", "tests")


@dataclass
class Host:
    # A CRIU carried in: (binary, plugin dir, library dir); else the installed one.
    criu: Optional[Tuple[str, str, str]] = None
    # A runc carried in: (binary, library dir); else the installed one.
    runc: Optional[Tuple[str, str]] = None
    # A Podman carried in: the directory of podman, conmon and lib/.
    podman: Optional[str] = None
    # The larger demo's size in MiB (--big-mib).
    big_mib: int = 1024

    def carry_criu(self, directory):
        directory = os.path.abspath(directory)
        self.criu = (os.path.join(directory, "criu"), directory, os.path.join(directory, "lib"))

    def carry_runc(self, directory):
        directory = os.path.abspath(directory)
        self.runc = (os.path.join(directory, "runc"), os.path.join(directory, "lib"))


HOST = Host()


def gpu_count():
    """The GPUs this host has, as nvidia-smi lists them (0 without it): a
    scenario that needs more is skipped, saying so."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.strip().startswith("GPU-"))
