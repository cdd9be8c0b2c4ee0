"""The private parts of torch this client reaches into, checked in one
place: a torch that lacks one fails here, at once, with the names and the
version, instead of deep inside a drain. Tested with torch 2.11."""

from __future__ import annotations

#: (module or class path, attribute) pairs the client uses.
_NEEDED = (
    ("torch.distributed.distributed_c10d", "_get_default_store"),
    ("torch.distributed.ProcessGroup", "_register_backend"),
    ("torch.distributed.ProcessGroup", "_set_default_backend"),
    ("torch.distributed.ProcessGroup", "_get_backend"),
    ("torch.distributed.Backend", "register_backend"),
)


def _lookup(path: str):
    import importlib

    module, _, name = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ImportError:
        return getattr(importlib.import_module(module), name)


def missing() -> list:
    """The private names this torch does not have (pure but for imports)."""
    absent = []
    for owner, name in _NEEDED:
        try:
            if not hasattr(_lookup(owner), name):
                absent.append(f"{owner}.{name}")
        except (ImportError, AttributeError):
            absent.append(f"{owner}.{name}")
    return absent


def check() -> None:
    """Raises ImportError naming what this torch lacks, if anything."""
    absent = missing()
    if absent:
        import torch

        raise ImportError(
            f"cudackpt_drain needs {', '.join(absent)}, which torch {torch.__version__} does not have "
            "(the client is tested with torch 2.11); use a tested torch, or a client made for this one"
        )
