#!/bin/bash
# Where cudackpt's own time goes on a GPU host, by CPU profile: N held
# targets (the plugin bench's tree), then `perf record -g` of the CLI's
# dry-run suspend, real suspend and resume of the tree (the pipeline the
# plugin runs). `perf.sh OUT [N]`; Debian 12's perf and its libraries are
# carried in .carry/perf, and .carry/prof/cudackpt keeps its symbols.
set -u
out=$1; n=${2:-16}
mkdir -p "$out"
bin=$PWD/.carry/prof/cudackpt
perf() { LD_LIBRARY_PATH=$PWD/.carry/perf/lib "$PWD/.carry/perf/perf" "$@"; }
cat /proc/sys/kernel/perf_event_paranoid >"$out/paranoid.txt" 2>&1
# shellcheck source=held-tree.sh
. "$(dirname "$0")/held-tree.sh"
held_tree "$n"
profile() { # NAME ARGS...: the command's JSON, its profile by symbol, with and without callers
    local name=$1; shift
    perf record -F 20000 -g -o "$out/$name.data" "$bin" "$@" --json >"$out/$name.json" 2>"$out/$name.err"
    perf report -i "$out/$name.data" --stdio --no-children --sort dso,sym -g none --percent-limit 0.5 \
        >"$out/$name.self.txt" 2>>"$out/$name.err"
    perf report -i "$out/$name.data" --stdio --children --sort sym -g none --percent-limit 1 \
        >"$out/$name.children.txt" 2>>"$out/$name.err"
    perf report -i "$out/$name.data" --stdio --no-children --sort sym -g caller,0.5,callee --percent-limit 2 \
        >"$out/$name.callers.txt" 2>>"$out/$name.err"
    rm -f "$out/$name.data"
}
profile dry-run suspend --tree "$root" --dry-run
profile dry-run-one suspend "$(pgrep -f cudackpt-gpu-target | head -1)" --dry-run
profile suspend suspend --tree "$root"
profile resume resume --tree "$root"
kill -- -"$root" 2>/dev/null
wait
