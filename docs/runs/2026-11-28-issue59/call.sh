#!/bin/bash
# Device calls of issue 59 (its last: the current binaries): the GPU suite's drain, CRIU, plugin
# and disk scenarios after the house's restructuring (58), with the
# snapshot and compiled-job scenarios (59), on one GPU and two, on
# a host of two H200s, with this branch's binaries in .carry/ (BUILT says
# their commit) and CRIU 4.2.1 in .carry/criu. Output in $OUT/NAME/,
# tarred into $OUT/NAME.tgz.
#   call.sh NAME [SCENARIO,...]   (Debian's runc carried in .carry/runc)
set -u
name=$1
one=single_steps,group,killed_then_recovered,action_script,criu_with_own_plugin,criu_with_action_script,criu_failed_dump,criu_with_plugin,runc_with_own_plugin,drain_single_torch,drain_shrink,drain_vouched_and_recovered,toggle_drain,disk_round_trip,disk_users_own_job
two=drain_round_trip,drain_killed_then_recovered,drain_never_acknowledges,runc_own_plugin_moved,disk_moved_gpu,disk_torchrun,compiled_drain,snapshot_torchrun
out=$OUT/$name
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader; cat .carry/BUILT; sha256sum .carry/cudackpt .carry/libcudackpt_criu_plugin.so; } >"$out/host.txt" 2>&1
timeout 560 python3 tests/gpu/suite.py --bin-dir .carry --criu-dir .carry/criu --runc-dir .carry/runc --only "${2:-$one,$two}" \
    --json "$out/suite.json" >"$out/suite.log" 2>&1
echo "suite rc=$?" | tee -a "$out/host.txt"
grep -E "^(PASS|FAIL|SKIP)" "$out/suite.log" | cut -c1-300
tail -n 15 "$out/suite.log" | cut -c1-400
(cd "$OUT" && tar czf "$name.tgz" "$name")
