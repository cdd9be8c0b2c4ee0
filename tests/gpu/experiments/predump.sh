#!/bin/bash
# Pre-dump experiment (issue 59): does `criu pre-dump --track-mem` work on
# a CUDA process with cudackpt's plugin claiming the driver's mappings,
# and does the incremental dump keep pinned memory written only by DMA?
# Run from the repository root on a GPU host, with .carry/ as call.sh has it.
#   predump.sh OUTDIR
set -u
out=$1; mkdir -p "$out"
criu=$PWD/.carry/criu/criu
export LD_LIBRARY_PATH=$PWD/.carry/criu/lib
lib=$(mktemp -d); cp .carry/libcudackpt_criu_plugin.so "$lib/"
work=$(mktemp -d /var/tmp/predump.XXXX)
say() { echo "== $*" | tee -a "$out/steps.txt"; }
$criu check --feature mem_dirty_track >"$out/check.txt" 2>&1; say "mem_dirty_track rc=$?"
for mode in incremental plain; do
  d=$work/$mode; mkdir -p "$d/pre" "$d/final"
  setsid python3 tests/gpu/experiments/predump_target.py >"$d/target.log" 2>&1 </dev/null &
  pid=$!
  for i in $(seq 100); do grep -q "step 5 " "$d/target.log" 2>/dev/null && break; sleep 0.2; done
  say "$mode: target $pid up"
  extra=()
  if [ $mode = incremental ]; then
    t0=$(date +%s.%N)
    $criu pre-dump -t $pid -D "$d/pre" --track-mem --libdir "$lib" -v4 -o pre.log; rc=$?
    t1=$(date +%s.%N)
    say "$mode: pre-dump rc=$rc $(echo "$t1 - $t0" | bc) s, $(du -sb "$d/pre" | cut -f1) bytes"
    sleep 2
    extra=(--prev-images-dir ../pre --track-mem)
  fi
  t0=$(date +%s.%N)
  $criu dump -t $pid -D "$d/final" "${extra[@]}" --libdir "$lib" -v4 -o dump.log; rc=$?
  t1=$(date +%s.%N)
  say "$mode: dump rc=$rc $(echo "$t1 - $t0" | bc) s, $(du -sb "$d/final" | cut -f1) bytes (final dir only)"
  grep -c "" "$d/target.log" >/dev/null; last=$(grep "^step" "$d/target.log" | tail -1); say "$mode: last before dump: $last"
  sleep 1
  t0=$(date +%s.%N)
  (cd "$d/final" && $criu restore -D . --libdir "$lib" -d -v4 -o restore.log); rc=$?
  t1=$(date +%s.%N)
  say "$mode: restore rc=$rc $(echo "$t1 - $t0" | bc) s"
  sleep 4
  say "$mode: after restore: $(grep -E '^(step|STALE)' "$d/target.log" | tail -2 | tr '\n' ' ')"
  grep -q STALE "$d/target.log" && say "$mode: STALE"
  pkill -9 -f predump_target.py; sleep 3
  for f in pre/pre.log final/dump.log final/restore.log target.log; do [ -f "$d/$f" ] && tail -c 300000 "$d/$f" > "$out/$mode-$(basename $f)"; done
  ls -la "$d/pre" "$d/final" > "$out/$mode-ls.txt" 2>&1
done
grep -E "Error|error|Can't" "$out"/incremental-pre.log | head -20 > "$out/pre-errors.txt"
rm -rf "$work" "$lib"
