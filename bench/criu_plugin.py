#!/usr/bin/env python3
"""CRIU's CUDA plugin paths side by side, in one run: a tree of N CUDA
processes dumped and restored by CRIU

- with CRIU's own plugin (`cuda_plugin.so`) running NVIDIA's
  `cuda-checkpoint` (`criu+nvidia`),
- with CRIU's own plugin running cudackpt as `cuda-checkpoint`
  (`criu+cudackpt`),
- with cudackpt's plugin (`libcudackpt_criu_plugin.so`, `cudackpt-plugin`),

for each N of `--counts` (the same tree shape each time: a shell leading a
session, N held targets below it). Each config's plugin directory holds its
one plugin; `cuda-checkpoint` is found on a PATH of one directory.

Reported, medians of `--runs`: the time CRIU spent in each device hook
(from the timestamps of `criu -v4`'s log: from the line CRIU writes before
calling a plugin's hook to the next line that is not the plugin's own),
per process of the tree; for cudackpt's plugin, its own time (the device
hooks less the driver's calls, as it says them at -v4: each step of the
group runs side by side, so each step's slowest process); and the dump's
and the restore's wall time. Each restore must bring every target back
with its data (`OK <hash>` as before the dump) before the next run.
Timings are a benchmark, never a pass/fail test.

On a GPU host, as root:

    sudo python3 bench/criu_plugin.py --bin-dir .carry --criu-dir .carry/criu \\
        [--counts 1,16] [--size-mib 256] [--runs 3] [--json out.json] \\
        [--keep-hook-lines DIR]

`--bin-dir` holds cudackpt, cudackpt-gpu-target, NVIDIA's cuda-checkpoint
(left out when absent) and libcudackpt_criu_plugin.so; `--criu-dir` holds
criu, cuda_plugin.so and lib/ (its non-libc libraries). Without a GPU,
`--fake LIBCUDA` runs the same harness over `sleep` processes and the fake
driver (CRIU's plugin forced on with CRIU_FAULT=138; NVIDIA's tool left
out), to test the harness itself.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from harness import children, wait_for

HOOKS = {"9": "resume_devices_late", "10": "pause_devices", "11": "checkpoint_devices"}
STAMP = re.compile(r"^\((\d+\.\d+)\) (.*)$")
DRIVER_SHARE = re.compile(r"^cudackpt: .* ([0-9.]+) ms of it the driver's calls")
HOOK_CALL = re.compile(r"^plugin: `([^']+)' hook (\d+) -> ")
PLUGIN_OWN = ("cuda_plugin: ", "cudackpt: ", "Error (cudackpt plugin)", "Warn  (cudackpt plugin)")


def stamped(log_text):
    """The log's stamped lines: [(seconds, text)] (pure)."""
    entries = []
    for line in log_text.splitlines():
        m = STAMP.match(line)
        if m:
            entries.append((float(m.group(1)), m.group(2)))
    return entries


def hook_calls(entries):
    """Each device hook's call: (hook, index of its line, index of the line
    that ends it) (pure). A call ends at CRIU's next line of its own, the
    next hook's call included (skipping those made every call of a tree run
    to the last one's end: 16 processes counted 76 s in a dump of 14 s)."""
    for i, (_, text) in enumerate(entries):
        call = HOOK_CALL.match(text)
        if not call or call.group(2) not in HOOKS:
            continue
        end = next((j for j in range(i + 1, len(entries)) if not entries[j][1].startswith(PLUGIN_OWN)), i)
        yield HOOKS[call.group(2)], i, end


def hook_seconds(log_text):
    """Seconds CRIU spent in each device hook, summed over its calls, and
    the calls: {hook: (seconds, calls)} (pure)."""
    entries = stamped(log_text)
    spent = {}
    for hook, start, end in hook_calls(entries):
        seconds, calls = spent.get(hook, (0.0, 0))
        spent[hook] = (seconds + (entries[end][0] - entries[start][0]), calls + 1)
    return spent


def driver_seconds(log_text):
    """Seconds of each device hook that were the driver's calls, as
    cudackpt's plugin says them at -v4 (`... N ms of it the driver's
    calls`): {hook: seconds}, for the hooks that said any (pure). CRIU's
    own plugin says none: its binary's time is not split."""
    entries = stamped(log_text)
    said = {}
    for hook, start, end in hook_calls(entries):
        for _, text in entries[start + 1:end]:
            share = DRIVER_SHARE.match(text)
            if share:
                said[hook] = said.get(hook, 0.0) + float(share.group(1)) / 1000
    return said


def hook_lines(log_text):
    """The log's lines that hook_seconds reads, each once, in order: every
    hook's call, the plugin's lines and the line that ends it (pure), so
    that a run's per-hook times can be checked from what it kept."""
    entries = stamped(log_text)
    kept = sorted({j for _, start, end in hook_calls(entries) for j in range(start, end + 1)})
    return [f"({entries[j][0]:.6f}) {entries[j][1]}" for j in kept]


class Tree:
    """A shell leading a session of its own and `count` held CUDA
    processes below it, each logging `OK <hash>` once a second."""

    def __init__(self, args, count, workdir, env):
        self.logs = [os.path.join(workdir, f"target-{i}.log") for i in range(count)]
        for log in self.logs:
            open(log, "w").close()
        if args.fake:
            one = f"LD_PRELOAD={args.fake} FAKE_CUDA_IDENTITY=t{{i}}-$$ sleep 100000"
        else:
            target = os.path.join(args.bin_dir, "cudackpt-gpu-target")
            one = f"{target} --size-mib {args.size_mib} --hold"
        starts = " ".join(f"{one.format(i=i)} >{log} 2>&1 </dev/null &" for i, log in enumerate(self.logs))
        self.shell = subprocess.Popen(["setsid", "sh", "-c", f"{starts} wait"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        self.fake = bool(args.fake)
        wait_for(self.ready, "the tree's processes to start", timeout=120)
        self.hashes = self.last_oks()

    def session_leader(self):
        for pid in [self.shell.pid] + children(self.shell.pid):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == pid:  # its session id is its own PID
                return pid
        raise SystemExit("the tree has no session leader")

    def pids(self):
        leader = self.session_leader()
        return [leader] + children(leader)

    def ready(self):
        try:
            return self.all_ready()
        except (OSError, SystemExit):
            return False  # setsid has not made the session yet

    def all_ready(self):
        if self.fake:
            return len(children(self.session_leader())) == len(self.logs) and all(
                self.maps_fake(p) for p in children(self.session_leader()))
        return all(any(l.startswith("OK") for l in self.lines(log)) for log in self.logs)

    @staticmethod
    def maps_fake(pid):
        try:
            with open(f"/proc/{pid}/maps") as f:
                return "fake" in f.read()
        except OSError:
            return False

    @staticmethod
    def lines(log):
        with open(log) as f:
            return f.read().splitlines()

    def last_oks(self):
        if self.fake:
            return []
        return [[l for l in self.lines(log) if l.startswith(("OK", "MISMATCH"))][-1] for log in self.logs]

    def check_restored(self):
        """Each target's data as before the dump, once it logs again."""
        if self.fake:
            wait_for(lambda: len(children(self.session_leader())) == len(self.logs),
                     "the restored tree", timeout=60)
            return
        sizes = [len(self.lines(log)) for log in self.logs]
        for log, size, want in zip(self.logs, sizes, self.hashes):
            wait_for(lambda: len(self.lines(log)) > size, f"{log} to log again", timeout=120)
            got = self.lines(log)[size]
            if got != want:
                raise SystemExit(f"{log}: {got!r} after the restore, {want!r} before")

    def kill(self):
        try:
            os.killpg(self.session_leader(), 9)
        except (OSError, SystemExit):
            pass
        self.shell.wait()


def configs(args, workdir):
    """{name: (plugin directory, PATH directory, extra environment)}."""
    out = {}
    path_nvidia = os.path.join(workdir, "path-nvidia")
    path_cudackpt = os.path.join(workdir, "path-cudackpt")
    criu_lib = os.path.join(workdir, "lib-criu-plugin")
    ours_lib = os.path.join(workdir, "lib-cudackpt-plugin")
    for d in (path_nvidia, path_cudackpt, criu_lib, ours_lib):
        os.makedirs(d)
    shutil.copy(os.path.join(args.criu_dir, "cuda_plugin.so"), criu_lib)
    shutil.copy(os.path.join(args.bin_dir, "libcudackpt_criu_plugin.so"), os.path.join(ours_lib, "cudackpt_plugin.so"))
    os.symlink(os.path.abspath(os.path.join(args.bin_dir, "cudackpt")), os.path.join(path_cudackpt, "cuda-checkpoint"))
    nvidia = os.path.join(args.bin_dir, "cuda-checkpoint")
    extra = {"CRIU_FAULT": "138"} if args.fake else {}
    if os.path.exists(nvidia) and not args.fake:
        os.symlink(os.path.abspath(nvidia), os.path.join(path_nvidia, "cuda-checkpoint"))
        out["criu+nvidia"] = (criu_lib, path_nvidia, extra)
    out["criu+cudackpt"] = (criu_lib, path_cudackpt, extra)
    out["cudackpt-plugin"] = (ours_lib, path_cudackpt, {})
    return out


def criu(args, action, images, libdir, path, extra, tree_root=None):
    """One `criu dump` or `criu restore`: (wall seconds, log text)."""
    env = dict(os.environ, PATH=f"{path}:/usr/bin:/bin", **extra)
    # Absolute: CRIU changes its directory, and the plugin runs CRIU again
    # (`--version`) from there.
    libs = os.path.abspath(os.path.join(args.criu_dir, "lib"))
    if os.path.isdir(libs):
        env["LD_LIBRARY_PATH"] = libs
    command = [os.path.join(args.criu_dir, "criu"), action, "-D", images, "--libdir", libdir, "-v4",
               "-o", f"{action}.log"]
    command += ["-t", str(tree_root)] if action == "dump" else ["-d"]
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    wall = time.monotonic() - started
    with open(os.path.join(images, f"{action}.log")) as f:
        log = f.read()
    if out.returncode != 0:
        errors = "\n".join(l for l in log.splitlines() if "Error" in l)[-3000:]
        raise SystemExit(f"criu {action} exited {out.returncode}:\n{errors}")
    return wall, log


def keep_hook_lines(args, name, count, action, log):
    """Write the hook lines of one CRIU log under --keep-hook-lines."""
    if not args.keep_hook_lines:
        return
    os.makedirs(args.keep_hook_lines, exist_ok=True)
    stem = os.path.join(args.keep_hook_lines, f"{name}-{count}-{action}")
    n = 1
    while os.path.exists(f"{stem}-{n}.log"):
        n += 1
    with open(f"{stem}-{n}.log", "x") as f:
        f.write("".join(line + "\n" for line in hook_lines(log)))


def one_run(args, name, config, count, workdir, env):
    libdir, path, extra = config
    tree = Tree(args, count, workdir, env)
    images = tempfile.mkdtemp(dir=workdir, prefix=f"{name}-{count}-")
    try:
        pids = tree.pids()
        dump_s, dump_log = criu(args, "dump", images, libdir, path, extra, tree.session_leader())
        tree.shell.wait()
        # CRIU restores every process at its PID: each must be reaped first.
        wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), "the dumped tree to be reaped",
                 timeout=60)
        restore_s, restore_log = criu(args, "restore", images, libdir, path, extra)
        tree.check_restored()
    finally:
        tree.kill()
        shutil.rmtree(images, ignore_errors=True)
    keep_hook_lines(args, name, count, "dump", dump_log)
    keep_hook_lines(args, name, count, "restore", restore_log)
    hooks = {**hook_seconds(dump_log), **hook_seconds(restore_log)}
    driver = {**driver_seconds(dump_log), **driver_seconds(restore_log)}
    return {"config": name, "processes": count, "dump_s": dump_s, "restore_s": restore_s,
            "hooks": {h: {"seconds": s, "calls": c, **({"driver_seconds": driver[h]} if h in driver else {})}
                      for h, (s, c) in hooks.items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--criu-dir", required=True)
    parser.add_argument("--counts", default="1,16")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fake", help="the fake libcuda: sleep processes instead of GPU targets")
    parser.add_argument("--json")
    parser.add_argument("--keep-hook-lines", metavar="DIR",
                        help="write each CRIU log's hook lines (what the per-hook times are read from) under DIR")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.fake:
        env.update(CUDACKPT_LIBCUDA=args.fake, FAKE_CUDA_AS_DRIVER="1")
    os.environ.update(env)
    counts = [int(c) for c in args.counts.split(",")]
    samples = []
    with tempfile.TemporaryDirectory(prefix="criu-plugin-bench-") as workdir:
        if args.fake:
            os.environ.setdefault("FAKE_CUDA_STATE_DIR", os.path.join(workdir, "fake"))
            os.makedirs(os.environ["FAKE_CUDA_STATE_DIR"], exist_ok=True)
        chosen = configs(args, workdir)
        for count in counts:
            for run in range(args.runs):
                # Each round runs every config, in an order that rotates.
                names = list(chosen)
                names = names[run % len(names):] + names[:run % len(names)]
                for name in names:
                    sample = one_run(args, name, chosen[name], count, workdir, dict(os.environ))
                    samples.append(sample)
                    print(f"{name} x{count} run {run + 1}: dump {sample['dump_s']:.2f} s, "
                          f"restore {sample['restore_s']:.2f} s", flush=True)
    table = summary(samples)
    print_table(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "criu_plugin", "size_mib": args.size_mib, "runs": args.runs,
                       "fake": bool(args.fake), "medians": table, "samples": samples}, f, indent=2)


def summary(samples):
    """Medians per (config, processes): each hook's ms per process, and the
    dump's and restore's seconds (pure)."""
    rows = []
    keys = sorted({(s["config"], s["processes"]) for s in samples}, key=lambda k: (k[1], k[0]))
    for config, count in keys:
        mine = [s for s in samples if s["config"] == config and s["processes"] == count]
        row = {"config": config, "processes": count,
               "dump_s": statistics.median(s["dump_s"] for s in mine),
               "restore_s": statistics.median(s["restore_s"] for s in mine)}
        for hook in HOOKS.values():
            spent = [s["hooks"].get(hook, {}).get("seconds", 0.0) for s in mine]
            row[f"{hook}_ms_per_process"] = statistics.median(spent) * 1000 / count
        # The plugin's own time: every device hook less the driver's calls,
        # where the plugin said them (cudackpt's, at -v4).
        if all(any("driver_seconds" in h for h in s["hooks"].values()) for s in mine):
            own = [sum(h["seconds"] - h.get("driver_seconds", 0.0) for h in s["hooks"].values()) for s in mine]
            row["own_ms_per_process"] = statistics.median(own) * 1000 / count
        else:
            row["own_ms_per_process"] = None
        rows.append(row)
    return rows


def print_table(rows):
    print("| config | processes | pause ms/process | checkpoint ms/process | resume ms/process "
          "| own ms/process | dump s | restore s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        own = "—" if r["own_ms_per_process"] is None else f"{r['own_ms_per_process']:.2f}"
        print(f"| {r['config']} | {r['processes']} | {r['pause_devices_ms_per_process']:.2f} | "
              f"{r['checkpoint_devices_ms_per_process']:.2f} | {r['resume_devices_late_ms_per_process']:.2f} | "
              f"{own} | {r['dump_s']:.2f} | {r['restore_s']:.2f} |")


if __name__ == "__main__":
    main()
