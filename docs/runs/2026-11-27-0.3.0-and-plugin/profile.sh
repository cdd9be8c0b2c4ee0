#!/bin/bash
# Where cudackpt's own time goes around the driver's calls, for a tree of
# N held GPU targets (the plugin bench's tree): `profile.sh OUT [N]`.
# The plugin runs the same pipeline as the CLI, so the CLI shows it:
#   - `suspend --dry-run` (the plugin's first-hook pre-flights), timed
#     with and without NVML (`--force` skips the memory weighing);
#   - under `strace -f -c` and `strace -f -tt` (what files, what waits);
#   - under `perf record` (where the CPU goes), with a build that keeps
#     its symbols (CUDACKPT_PROF_BIN, else the stripped one);
#   - the real suspend, then `resume`, timed and traced the same way.
# Tools missing on the host are said in OUT/tools.txt and skipped.
set -u
out=$1; n=${2:-16}
mkdir -p "$out"
bin=${CUDACKPT_PROF_BIN:-.carry/head/cudackpt}
{ for t in strace perf; do command -v $t || echo "no $t"; done; } >"$out/tools.txt" 2>&1
# The GPU host has no strace: Debian 12's, carried with its libraries.
if ! command -v strace >/dev/null && [ -x .carry/tools/strace ]; then
    strace() { LD_LIBRARY_PATH=$PWD/.carry/tools/lib "$PWD/.carry/tools/strace" "$@"; }
    echo "strace: .carry/tools/strace" >>"$out/tools.txt"
fi
has() { [ "$(type -t "$1")" = function ] || command -v "$1" >/dev/null; }
# shellcheck source=held-tree.sh
. "$(dirname "$0")/held-tree.sh"
held_tree "$n"
timed() { # NAME ARGS...: three runs, the JSON of each, then traced
    local name=$1; shift
    for i in 1 2 3; do
        "$bin" "$@" --json >"$out/$name-$i.json" 2>"$out/$name-$i.err"
    done
}
traced() { # NAME ARGS...: one run under each tool there is
    local name=$1; shift
    if has strace; then
        strace -f -c -o "$out/$name.strace-c.txt" "$bin" "$@" --json >/dev/null 2>&1
        strace -f -tt -T -o "$out/$name.strace.txt" "$bin" "$@" --json >"$out/$name.traced.json" 2>&1
    fi
    if has perf; then
        perf record -F 4999 -g -o "$out/$name.perf.data" "$bin" "$@" --json >/dev/null 2>"$out/$name.perf.err"
        perf report -i "$out/$name.perf.data" --stdio --no-children --percent-limit 1 \
            >"$out/$name.perf.txt" 2>>"$out/$name.perf.err"
        rm -f "$out/$name.perf.data"
    fi
}
timed dry-run suspend --tree "$root" --dry-run
timed dry-run-forced suspend --tree "$root" --dry-run --force
traced dry-run suspend --tree "$root" --dry-run
"$bin" suspend --tree "$root" --json >"$out/suspend.json" 2>"$out/suspend.err"
traced resume-check resume --tree "$root" --dry-run
"$bin" resume --tree "$root" --json >"$out/resume.json" 2>"$out/resume.err"
"$bin" suspend --tree "$root" --json >"$out/suspend-2.json" 2>&1
if has strace; then
    strace -f -c -o "$out/resume.strace-c.txt" "$bin" resume --tree "$root" --json >"$out/resume-2.json" 2>&1
    "$bin" suspend --tree "$root" --json >"$out/suspend-3.json" 2>&1
    strace -f -tt -T -o "$out/resume.strace.txt" "$bin" resume --tree "$root" --json >"$out/resume-3.json" 2>&1
    strace -f -tt -T -o "$out/suspend.strace.txt" "$bin" suspend --tree "$root" --json >"$out/suspend-4.json" 2>&1
    "$bin" resume --tree "$root" --json >"$out/resume-4.json" 2>&1
else
    "$bin" resume --tree "$root" --json >"$out/resume-2.json" 2>&1
fi
kill -- -"$root" 2>/dev/null
wait
