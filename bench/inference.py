#!/usr/bin/env python3
"""An inference server started cold against the same server brought back
by `cudackpt undump`: time to the first answer, and the answers compared.

The server (`inference.py serve`) builds a transformers Llama model from a
config (random weights from a fixed seed, no download), compiles it with
`torch.compile(dynamic=True)`, warms it with every prompt the runs send and answers greedy
completions over TCP on loopback, one connection a request. torch.compile's
compile-worker pool (a sidecar process and its forked workers) is part of
its tree until the server, once warm, shuts it down with
`cudackpt_drain.release_compile_workers()` (the pool starts CUDA and forks
workers CRIU cannot dump; `--keep-compile-workers` leaves it running, and
the dump is refused, naming the pool).

`inference.py run` (as root, with CRIU) measures, on one host:

1. cold start: the server from nothing (an empty inductor and Triton cache,
   the page cache dropped with `--drop-caches`) to its first answer;
2. `cudackpt dump` of the warm server (the server is gone after it);
3. the disk's own time for the images: every file read once from a
   dropped page cache, one after another and four at a time
   (`--drop-caches`);
4. undump with the page cache dropped (`--drop-caches`), to its first
   answer; then the restored server is killed (`--repeat N`: N times);
5. undump again with the images in the page cache, to its first answer.

Each undump row gives the undump's own split (its `phases`: cudackpt's
checks, CRIU's memory restore, the GPU restore) beside the first answer.

With `--prove-pool` the server keeps its pool through warm-up, and before
step 2 the dump is tried with the pool there, plain (refused, naming it)
and with `--force` (what the refusal spares); then the server releases
the pool and step 2 runs.

Every row's answers must equal the cold server's; the run fails otherwise.
Prints a Markdown table and, with `--json`, writes the raw documents.
Timings are a benchmark, never a pass/fail test.

    sudo python3 bench/inference.py run --cudackpt target/release/cudackpt \\
        --criu /path/to/criu [--device cuda] [--drop-caches] [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import cudackpt, wait_for

# Prompts every row answers (token ids; the model has no tokenizer).
PROMPTS = [[1, 15, 27, 9], [3, 3, 8, 200, 41, 7], [99]]
# Sizes: "1b" is the server (about 1.3 B parameters, a few GiB in
# bf16); "tiny" is for a CPU.
SIZES = {
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4, vocab_size=32000),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=256),
}


def serve(args):
    """The server: READY on stdout once warm, then answers forever."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = LlamaForCausalLM(LlamaConfig(**SIZES[args.size])).to(args.device, dtype).eval()
    forward = torch.compile(model, dynamic=True)

    def complete(ids, new):
        x = torch.tensor([ids], device=args.device)
        out = []
        with torch.no_grad():
            for _ in range(new):
                token = int(forward(x).logits[0, -1].argmax())
                out.append(token)
                x = torch.cat([x, torch.tensor([[token]], device=args.device)], 1)
        return out

    for prompt in PROMPTS:  # every shape the runs ask for, compiled now
        complete(prompt, args.new)
    if not args.keep_compile_workers:
        # As a server to be snapshotted does once warm: CRIU cannot dump
        # the pool's workers (forked after the pool started CUDA).
        import cudackpt_drain

        cudackpt_drain.release_compile_workers()
    # A fixed port below the ephemeral range (32768-60999), as a service
    # has: a port the kernel picked is free again once the server is
    # dumped, and the GPU host's own connections took one (40893) before
    # the undump could bind it again ("Address already in use"); one in
    # the ephemeral range was taken by the runner's polls. SO_REUSEADDR
    # as servers set it.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen()
    print("READY", listener.getsockname()[1], flush=True)
    while True:
        connection, _ = listener.accept()
        with connection:
            request = json.loads(connection.makefile().readline())
            if request.get("release_compile_workers"):  # --prove-pool's last step
                import cudackpt_drain

                cudackpt_drain.release_compile_workers()
                answer = "released"
            else:
                answer = complete(request["ids"], request["new"])
            connection.sendall((json.dumps(answer) + "\n").encode())


def ask(port, ids, new, timeout, request=None):
    """One request; None while nothing listens yet. A connection to a
    loopback port nobody listens on can meet itself (TCP's simultaneous
    open, when the kernel gives the polling socket that very port as its
    own) and read back its own request: on the GPU host such echoes passed
    for a server's answers. That connection counts as nothing listening."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            if connection.getsockname() == connection.getpeername():
                return None
            connection.sendall((json.dumps(request or {"ids": ids, "new": new}) + "\n").encode())
            answer = json.loads(connection.makefile().readline())
    except (ConnectionRefusedError, ConnectionResetError):
        return None
    if request is None and not (isinstance(answer, list) and len(answer) == new and all(isinstance(t, int) for t in answer)):
        raise SystemExit(f"port {port} answered {answer!r}, not {new} token ids")
    return answer


def first_answer(port, new, since, timeout=900):
    """Polls until the server answers the first prompt: (seconds since
    `since`, every prompt's answer)."""
    answers = {}

    def answered():
        answers["first"] = ask(port, PROMPTS[0], new, timeout)
        return answers["first"] is not None

    wait_for(answered, "the server's first answer", timeout=timeout, every=0.005)
    took = time.monotonic() - since
    return took, [answers["first"]] + [ask(port, p, new, timeout) for p in PROMPTS[1:]]


def ready_port(log_path, server, timeout=900):
    """The port the server's READY line names, once it is warm; SystemExit
    if it dies first (its log says why)."""
    def said():
        if server.poll() is not None:
            raise SystemExit(f"the server exited {server.returncode} before it was ready: see {log_path}")
        with open(log_path) as f:
            return next((line.split()[1] for line in f if line.startswith("READY ")), None)

    wait_for(said, "the server to be ready", timeout=timeout, every=0.005)
    return int(said())


def attempt(binary, *args, env=None):
    """`binary --json ARGS` that may fail: (wall seconds, exit code, document)."""
    started = time.monotonic()
    out = subprocess.run([binary, "--json", *map(str, args)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **(env or {})))
    return time.monotonic() - started, out.returncode, json.loads(out.stdout or "null")


def session_tree(sid):
    """Every process of the server's session: PID, parent and command line."""
    out = subprocess.run(["ps", "-o", "pid,ppid,args", "-s", str(sid)], capture_output=True, text=True).stdout
    return out.splitlines()[1:]


def prove_pool(args, server, port, work, expected, criu_env):
    """Issue 37's 0.09 s failure, replayed on the warm server that kept its
    compile-worker pool: the dump refused before any change, naming the
    pool; the same dump forced, to record what the refusal spares (where
    CRIU fails, the tree must be resumed and answer as before; where it
    dumps, those images are the snapshot); then the pool released, after
    which run() dumps as usual. What each step did is
    recorded, not asserted: a benchmark states what happened."""
    proof = {"tree_with_pool": session_tree(server.pid)}
    for label, extra in (("refused", []), ("forced", ["--force"])):
        wall, code, doc = attempt(args.cudackpt, "dump", "--to", os.path.join(work, f"images-{label}"), "--criu", args.criu,
                                  *extra, server.pid, env=criu_env)
        failure = (doc or {}).get("error") or {}
        proof[label] = {"wall_s": round(wall, 3), "exit": code, "kind": failure.get("kind"), "message": failure.get("message"),
                        "hint": failure.get("hint"), "document": doc}
        print(f"pool kept, dump {' '.join(extra) or '(plain)'}: exit {code} in {wall:.2f} s: {failure.get('message')}", flush=True)
        try:
            with open(f"/proc/{server.pid}/stat") as f:
                proof[label]["server_after"] = f.read().rsplit(")", 1)[1].split()[0]  # its state letter
        except OSError:
            proof[label]["server_after"] = "gone"
        if code == 0:  # the pool did not stop it: those images are the snapshot
            proof["dumped_with_pool"] = label
            return proof, os.path.join(work, f"images-{label}")
        _, answers = first_answer(port, args.new, time.monotonic())
        proof[label]["answers_equal_after"] = answers == expected
    proof["released"] = ask(port, None, None, 300, request={"release_compile_workers": True})
    proof["tree_released"] = session_tree(server.pid)
    return proof, None


def what_cudackpt_sees(args, pid):
    """The warm server as cudackpt and NVML see it: its session's
    processes with their GPU mappings, `cudackpt check --tree`, and
    nvidia-smi's compute processes (recorded; a failed dump is read
    against it)."""
    seen = {}
    for line in session_tree(pid):
        member = line.split()[0]
        try:
            with open(f"/proc/{member}/maps") as f:
                seen[line] = sum("/dev/nvidia" in m for m in f)
        except OSError as e:
            seen[line] = str(e)
    _, code, check = attempt(args.cudackpt, "check", "--tree", pid)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout if args.device == "cuda" else ""
    return {"session_nvidia_mappings": seen, "check_exit": code, "check": check, "nvidia_smi_apps": smi.splitlines()}


def read_all(directory, readers):
    """Seconds to read every file of `directory` once, `readers` at a time
    (8 MiB reads): the disk's time for them from a dropped cache."""
    from concurrent.futures import ThreadPoolExecutor
    files = sorted((os.path.join(directory, f) for f in os.listdir(directory)), key=os.path.getsize, reverse=True)

    def read(path):
        with open(path, "rb", buffering=0) as f:
            while f.read(8 << 20):
                pass

    started = time.monotonic()
    with ThreadPoolExecutor(readers) as pool:
        list(pool.map(read, files))
    return time.monotonic() - started


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run(args):
    work = tempfile.mkdtemp(prefix="cudackpt-inference-")
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"),
               TRITON_CACHE_DIR=os.path.join(work, "triton"), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(client), os.environ.get("PYTHONPATH")])))
    if args.compile_threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(args.compile_threads)
    criu_env = {"LD_LIBRARY_PATH": args.criu_libs} if args.criu_libs else None
    rows, raw = [], {"size": args.size, "device": args.device, "new_tokens": args.new}
    server = None
    try:
        if args.drop_caches:
            drop_caches()
        started = time.monotonic()
        log = open(os.path.join(work, "server.log"), "w")
        # A session of its own, as a service manager starts one: a session
        # led from outside (a shell's, a container runtime's) is a shell job
        # at best for CRIU, and refused where its leader is outside the PID
        # namespace.
        keep_pool = args.keep_compile_workers or args.prove_pool
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--port", str(args.port),
                                   "--device", args.device, "--size", args.size, "--new", str(args.new),
                                   "--seed", str(args.seed), *(["--keep-compile-workers"] if keep_pool else [])],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, env=env)
        port = ready_port(os.path.join(work, "server.log"), server)
        cold_s, expected = first_answer(port, args.new, started)
        raw["warm_server"] = what_cudackpt_sees(args, server.pid)
        rows.append(("cold start", cold_s, "compile from an empty cache" + (", page cache dropped" if args.drop_caches else "")))
        tree = subprocess.run(["ps", "-o", "pid,ppid,args", "--ppid", str(server.pid)], capture_output=True, text=True).stdout
        raw["children"] = tree.splitlines()[1:]
        images = os.path.join(work, "images")
        # Reaped the moment CRIU kills it, as a service manager would: the
        # dump waits (3 s at most) for a dumped root's PID to be free.
        reaper = threading.Thread(target=server.wait, daemon=True)
        reaper.start()
        forced_images = None
        if args.prove_pool:
            raw["pool"], forced_images = prove_pool(args, server, port, work, expected, criu_env)
        if forced_images:
            step = raw["pool"][raw["pool"]["dumped_with_pool"]]
            images, dump_s, dumped = forced_images, step["wall_s"], step["document"]
        else:
            dump_s, dumped = cudackpt(args.cudackpt, "dump", "--to", images, "--criu", args.criu, server.pid, env=criu_env)
        raw["dump"] = dumped
        reaper.join(timeout=60)
        raw["server_gone_after_dump"] = not reaper.is_alive()
        if args.drop_caches:
            raw["disk_read_s"] = {}
            for readers in (1, 4):
                drop_caches()
                raw["disk_read_s"][readers] = read_all(images, readers)
            image_bytes = dumped["manifest"]["image_bytes"]
            for readers, seconds in raw["disk_read_s"].items():
                rows.append((f"the images read from disk, {readers} at a time", seconds,
                             f"{image_bytes / seconds / 1e9:.2f} GB/s; no server"))
        undumps = [(f"undump, page cache dropped{f' ({n + 1})' if args.repeat > 1 else ''}", True, [])
                   for n in range(args.repeat)]
        undumps.append(("undump, images in the page cache", False, []))
        for label, drop, extra in undumps:
            if drop and not args.drop_caches:
                continue
            if drop:
                drop_caches()
            since = time.monotonic()
            undump_s, undumped = cudackpt(args.cudackpt, "undump", images, "--criu", args.criu, *extra, env=criu_env)
            took, answers = first_answer(port, args.new, since)
            raw.setdefault("undumps", []).append({"label": label, "document": undumped, "first_answer_s": took})
            if answers != expected:
                raise SystemExit(f"{label}: the answers differ from the cold server's: {answers} != {expected}")
            phases = undumped.get("phases") or {}
            split = ", ".join(f"{name[:-3].replace('_', ' ')} {phases[name] / 1e3:.2f} s"
                              for name in ("checks_ms", "criu_memory_ms", "criu_resume_ms", "gpu_restore_ms", "after_criu_ms")
                              if name in phases)
            rows.append((label, took, f"undump {undump_s:.2f} s of it ({split})"))
            try:
                os.kill(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_for(lambda: not os.path.exists(f"/proc/{server.pid}"), "the restored server to be gone", timeout=60)
        manifest = dumped["manifest"]
        raw["rows"] = [{"start": r[0], "first_answer_s": round(r[1], 3), "note": r[2]} for r in rows]
        print(f"server: Llama {args.size} on {args.device}, compiled (dynamic=True); images {manifest['image_bytes'] / 1e9:.2f} GB, "
              f"dump {dump_s:.2f} s; answers equal in every row; children: {len(raw['children'])}")
        print("| start | first answer | note |\n| --- | --- | --- |")
        for label, seconds, note in rows:
            print(f"| {label} | {seconds:.2f} s | {note} |")
    except SystemExit as stopped:
        raw["failed"] = str(stopped)
        raise
    finally:
        if args.json:  # what was measured, and the server's log, even when a step failed
            with open(args.json, "w") as f:
                json.dump(raw, f, indent=1)
            stem = os.path.splitext(args.json)[0]
            if os.path.exists(os.path.join(work, "server.log")):
                shutil.copyfile(os.path.join(work, "server.log"), stem + "-server.log")
            for images in sorted(d for d in os.listdir(work) if d.startswith("images")):
                for log_name in ("dump.log", "restore.log"):
                    if os.path.exists(os.path.join(work, images, log_name)):
                        shutil.copyfile(os.path.join(work, images, log_name), f"{stem}-{images}-{log_name}")
        if server and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "run"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, default=24817,
                       help="the server's port, below the ephemeral range (0: the kernel picks one, said on READY)")
        p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
        p.add_argument("--size", choices=sorted(SIZES), default="1b")
        p.add_argument("--new", type=int, default=16, help="tokens each answer generates")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--keep-compile-workers", action="store_true",
                       help="leave torch.compile's compile-worker pool running once warm (the dump is then refused where the pool started CUDA)")
    run_parser = sub.choices["run"]
    run_parser.add_argument("--cudackpt", required=True)
    run_parser.add_argument("--criu", required=True)
    run_parser.add_argument("--criu-libs", help="LD_LIBRARY_PATH for a carried CRIU")
    run_parser.add_argument("--compile-threads", type=int, help="TORCHINDUCTOR_COMPILE_THREADS (default: torch's)")
    run_parser.add_argument("--drop-caches", action="store_true", help="drop the page cache before the cold start and the first undump (root)")
    run_parser.add_argument("--prove-pool", action="store_true",
                            help="keep the compile-worker pool through warm-up, try the dump plain and forced, then release the pool and go on")
    run_parser.add_argument("--repeat", type=int, default=1,
                            help="undumps from a dropped page cache, this many")
    run_parser.add_argument("--json")
    args = parser.parse_args()
    serve(args) if args.command == "serve" else run(args)


if __name__ == "__main__":
    main()
