"""The torch this client runs with, checked in one place: its version
(2.9 or newer; CI tests 2.9 and 2.11, the GPU suite 2.11) and the private
parts of torch the client reaches into. A torch that is too old or lacks
one fails here, at once, naming what and the version, instead of deep
inside a drain. The client never installs or replaces torch: it declares
no dependency on it (the job's torch is the one it uses)."""

from __future__ import annotations

from typing import Optional

#: The oldest torch the client supports (and CI tests).
OLDEST = (2, 9)
#: The versions CI tests, for the messages.
TESTED = "2.9 and 2.11"

#: (module or class path, attribute) pairs the client uses.
_NEEDED = (
    ("torch.distributed.distributed_c10d", "_get_default_store"),
    ("torch.distributed.ProcessGroup", "_register_backend"),
    ("torch.distributed.ProcessGroup", "_set_default_backend"),
    ("torch.distributed.ProcessGroup", "_get_backend"),
    ("torch.distributed.Backend", "register_backend"),
)
#: The same, checked only where torch was built with NCCL.
_NEEDED_WITH_NCCL = (("torch.distributed.ProcessGroupNCCL.Options", "_timeout"),)


def version_problem(version: str) -> Optional[str]:
    """What is wrong with a torch of this version string (``2.9.1+cu128``),
    or None (pure)."""
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return f"torch {version!r} does not say which release it is"
    if (major, minor) < OLDEST:
        return (
            f"torch {version} is older than {OLDEST[0]}.{OLDEST[1]}, the oldest this client supports "
            f"(tested: {TESTED})"
        )
    return None


def _lookup(path: str):
    import importlib

    module, _, name = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ImportError:
        return getattr(_lookup(module), name)


def _has_nccl() -> bool:
    try:
        from torch.distributed import ProcessGroupNCCL  # noqa: F401
    except ImportError:
        return False
    return True


def missing() -> list:
    """The private names this torch does not have (pure but for imports)."""
    needed = _NEEDED + (_NEEDED_WITH_NCCL if _has_nccl() else ())
    absent = []
    for owner, name in needed:
        try:
            if not hasattr(_lookup(owner), name):
                absent.append(f"{owner}.{name}")
        except (ImportError, AttributeError):
            absent.append(f"{owner}.{name}")
    return absent


#: What to do when this environment has no torch at all.
INSTALL_HINT = (
    "install PyTorch into this environment: `pip install torch` from PyPI (its Linux wheel "
    "brings CUDA's libraries along: about 4.7 GB in a venv for torch 2.11; where you can "
    "reach PyTorch's own index, a CPU-only torch is smaller), or "
    '`pip install "cudackpt-drain[torch]"`'
)


class TorchMissing(ModuleNotFoundError):
    """This environment has no torch: the client runs with the job's own
    and never installs one, so it says what is missing and how to get it."""


def require_torch():
    """The job's torch module; raises TorchMissing, naming this Python and
    what to install, where `import torch` would say only "No module named
    'torch'"."""
    try:
        import torch
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        import sys

        raise TorchMissing(
            f"cudackpt_drain needs PyTorch {OLDEST[0]}.{OLDEST[1]} or newer, and this Python "
            f"({sys.executable}) has no torch: {INSTALL_HINT}",
            name="torch",
        ) from None
    return torch


def check() -> None:
    """Raises ImportError saying what is wrong with this torch, if
    anything: missing, too old, or lacking a private name the client uses."""
    torch = require_torch()

    problem = version_problem(torch.__version__)
    if problem is not None:
        raise ImportError(f"cudackpt_drain: {problem}; use torch {OLDEST[0]}.{OLDEST[1]} or newer")
    absent = missing()
    if absent:
        raise ImportError(
            f"cudackpt_drain needs {', '.join(absent)}, which torch {torch.__version__} does not have "
            f"(the client is tested with torch {TESTED}); use a tested torch, or a client made for this one"
        )
