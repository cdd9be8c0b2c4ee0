#!/usr/bin/env python3
"""cudackpt's real-GPU suite: one command, run as root on a host with an
NVIDIA GPU and driver 570+ (see docs/gpu-results.md for how and where).

    python3 tests/gpu/suite.py --bin-dir DIR [--json FILE] [--only A,B] [--list] [--bench] [--criu-dir C] [--runc-dir R] [--podman-dir P]

DIR holds the release binaries `cudackpt`, `cudackpt-gpu-target` and
`cudackpt-bench`, and optionally NVIDIA's `cuda-checkpoint` to compare with.
C holds a CRIU built elsewhere (`criu`, `cuda_plugin.so`, and the shared
libraries it needs under `lib/`), for hosts without one installed; R a
runc (`runc` and `lib/libseccomp.so.2`, from Debian's packages).
Each scenario drives real CUDA processes (the project's own target program,
holding a seeded pattern in device memory, or PyTorch jobs) through
cudackpt and checks the states, the exit codes and JSON, and that the data
survived. A scenario that needs more GPUs than the host has is skipped and
says so. Prints a pass/fail table; writes it as JSON; exits 1 if anything
failed.

The scenarios live in scenarios/ (one module a topic), what they are built
from in harness/; `@scenario` registers each where it is defined.
"""

import argparse
import json
import os
import subprocess
import sys

import scenarios  # noqa: F401 (registers every scenario)
from harness import registry
from harness.host import HOST, gpu_count
from harness.tools import Target, Tools


def bench(tools, out_dir):
    args = [tools.bench, "latency", "--cudackpt", tools.cudackpt, "--target", tools.target_bin, "--runs", "30"]
    if tools.nvidia:
        args += ["--nvidia", tools.nvidia]
    if out_dir:
        args += ["--json", os.path.join(out_dir, "latency.json")]
    print("\nper-invocation latency (median of 30, whole process):", flush=True)
    subprocess.run(args, check=False)
    args = [tools.bench, "preflight", "--cudackpt", tools.cudackpt, "--target", tools.target_bin, "--size-mib", "2048", "--runs", "30"]
    if out_dir:
        args += ["--json", os.path.join(out_dir, "preflight.json")]
    print("\nwhat the checkpoint pre-flights add to a suspend (2 GiB target):", flush=True)
    subprocess.run(args, check=False)


def counts(results):
    return {status: sum(r["status"] == status for r in results) for status in ["pass", "fail", "skip"]}


def write(results, json_path, gpus):
    """The results so far as JSON at `json_path`, and what the scenarios
    saw beside it (drain-raw.json); rewritten after every scenario."""
    count = counts(results)
    with open(json_path, "w") as f:
        json.dump({"results": results, "passed": count["pass"], "failed": count["fail"], "skipped": count["skip"], "host_gpus": gpus}, f, indent=2)
    if registry.RAW:
        with open(os.path.join(os.path.dirname(os.path.abspath(json_path)), "drain-raw.json"), "w") as f:
            json.dump(registry.RAW, f, indent=1)


def report(results):
    count = counts(results)
    print(f"\n{'scenario':<90} result")
    for r in results:
        print(f"{r['scenario'][:88]:<90} {r['status'].upper()}")
    print(f"\n{count['pass']} passed, {count['fail']} failed, {count['skip']} skipped")
    return count["fail"] == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", help="the release binaries (required unless --list)")
    parser.add_argument("--json", help="write the results table here")
    parser.add_argument("--bench", action="store_true", help="also run the latency benchmark")
    parser.add_argument("--big-mib", type=int, default=HOST.big_mib, help="size of the larger demo")
    parser.add_argument("--criu-dir", help="a carried CRIU: criu, cuda_plugin.so and lib/")
    parser.add_argument("--runc-dir", help="a carried runc: runc and lib/ (Debian's, with libseccomp)")
    parser.add_argument("--podman-dir", help="a carried Podman: podman, conmon and lib/ (Debian's, unpacked from .carry/podman.tar.xz)")
    parser.add_argument("--only", help="run only the scenarios whose function names are given, comma-separated")
    parser.add_argument("--list", action="store_true", help="list the scenarios (name, GPUs needed, title) and exit")
    args = parser.parse_args()
    if args.list:
        for s in registry.SCENARIOS:
            print(f"{s.name:<36} {s.gpus} GPU{'s' if s.gpus > 1 else ' '}  {s.title}")
        return
    if not args.bin_dir:
        parser.error("--bin-dir is required")
    try:
        chosen = registry.select({name.strip() for name in (args.only or "").split(",") if name.strip()})
    except ValueError as e:
        parser.error(str(e))
    HOST.big_mib = args.big_mib
    if args.criu_dir:
        HOST.carry_criu(args.criu_dir)
    if args.runc_dir:
        HOST.carry_runc(args.runc_dir)
    if args.podman_dir:
        HOST.podman = os.path.abspath(args.podman_dir)
    tools = Tools(args.bin_dir)
    gpus = gpu_count()
    print(f"{len(chosen)} scenario(s) on a host with {gpus} GPU(s)", flush=True)
    written = (lambda results: write(results, args.json, gpus)) if args.json else (lambda results: None)
    results = registry.run(chosen, tools, gpus, lambda: Target(tools, size_mib=256), written)
    ok = report(results)
    if args.bench:
        bench(tools, os.path.dirname(args.json) if args.json else None)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
