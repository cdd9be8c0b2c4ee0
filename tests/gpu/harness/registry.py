"""The scenarios, registered where they are defined, and the one loop that
runs them. `@scenario` is the only way in: `--only`, `--list` and the run
read the same list, so a scenario cannot be defined and never run, nor an
`--only` name match nothing in silence."""

import inspect
import time
from dataclasses import dataclass
from typing import Callable


class Failed(Exception):
    pass


class Skipped(Exception):
    """What a scenario needs is not on this host; neither pass nor fail."""


def expect(condition, message):
    if not condition:
        raise Failed(message)


@dataclass
class Scenario:
    name: str  # the function's name: what --only takes
    title: str  # what the table says
    run: Callable
    gpus: int  # GPUs the host needs; fewer: skipped, with the count said
    shared_target: bool  # takes the one 256 MiB target several scenarios share


# In definition order: the run's order is the order the topic modules are
# imported in (scenarios/__init__.py), then the order within each.
SCENARIOS = []
# What the scenarios saw beyond their one line, written beside --json as
# drain-raw.json: scenario name -> documents.
RAW = {}


def scenario(title, gpus=1, shared_target=False):
    """Registers the decorated function as a scenario titled `title`. It is
    called with the suite's Tools (and the shared Target if
    `shared_target`); it returns a line for the table, or raises Failed or
    Skipped."""

    def register(fn):
        expected = ["tools", "t"] if shared_target else ["tools"]
        params = list(inspect.signature(fn).parameters)
        if params != expected:
            raise TypeError(f"scenario {fn.__name__} takes {params}; the runner passes {expected}")
        if any(s.name == fn.__name__ for s in SCENARIOS):
            raise ValueError(f"two scenarios are named {fn.__name__}")
        SCENARIOS.append(Scenario(fn.__name__, title, fn, gpus, shared_target))
        return fn

    return register


def select(only):
    """The scenarios to run: all, or those `only` names (in the suite's
    order). An unknown name is an error that lists the known ones."""
    if not only:
        return list(SCENARIOS)
    known = {s.name for s in SCENARIOS}
    unknown = sorted(set(only) - known)
    if unknown:
        raise ValueError(f"no scenario named {', '.join(unknown)}; --list shows them all")
    return [s for s in SCENARIOS if s.name in only]


def run(chosen, tools, host_gpus, make_shared_target, after_each=lambda results: None):
    """Runs `chosen` in order, printing a line each as it ends and calling
    `after_each` with the results so far (a run cut off by a time limit
    still leaves them); returns the results. The shared target is started
    for the first scenario that takes it and closed after the last, so the
    others see a host without it."""
    results = []
    shared = None
    last_sharer = max((i for i, s in enumerate(chosen) if s.shared_target), default=-1)
    for i, s in enumerate(chosen):
        started = time.monotonic()
        status = "pass"
        try:
            if s.gpus > host_gpus:
                raise Skipped(f"needs {s.gpus} GPUs; this host has {host_gpus}")
            if s.shared_target:
                if shared is None:
                    shared = make_shared_target()
                detail = s.run(tools, shared)
            else:
                detail = s.run(tools)
            detail = detail or ""
        except Failed as e:
            status, detail = "fail", str(e)
        except Skipped as e:
            status, detail = "skip", str(e)
        except Exception as e:  # a crash in a scenario is a failure of it
            status, detail = "fail", f"{type(e).__name__}: {e}"
        finally:
            if i == last_sharer and shared is not None:
                shared.close()
                shared = None
        took = time.monotonic() - started
        results.append({"scenario": s.title, "name": s.name, "status": status, "ok": status != "fail", "detail": detail, "seconds": round(took, 3)})
        print(f"[{status.upper()}] {s.title} ({took:.2f} s) {detail}", flush=True)
        after_each(results)
    return results
