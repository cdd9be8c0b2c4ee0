#!/bin/bash
# One device call of issue 57 (trust, fifth round): the GPU scenarios its
# changes reach (undump's stage and descriptor bound, recover's pool, the
# walk of a tree, the plugin's log) with this branch's binaries in .carry/
# (BUILT says their commit), CRIU 4.2.1 carried in .carry/criu. Output in
# $OUT/NAME/, tarred into $OUT/NAME.tgz.
#   call.sh NAME [SCENARIO,...]
set -u
name=$1
only=${2:-disk_round_trip,disk_user_home,disk_users_own_job,disk_dataloader,criu_with_own_plugin,criu_with_action_script,criu_failed_dump,action_script,killed_then_recovered,drain_vouched_and_recovered,drain_single_torch,group,group_under_pids_limit,ipc_pair_refused,preflight_memory,single_steps,toggle,bad_targets}
out=$OUT/$name
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader; cat .carry/BUILT; } >"$out/host.txt" 2>&1
timeout 560 python3 tests/gpu/suite.py --bin-dir .carry --criu-dir .carry/criu --only "$only" \
    --json "$out/suite.json" >"$out/suite.log" 2>&1
echo "suite rc=$?" | tee -a "$out/host.txt"
grep -E "^(PASS|FAIL|SKIP)" "$out/suite.log" | cut -c1-300
tail -n 25 "$out/suite.log" | cut -c1-400
(cd "$OUT" && tar czf "$name.tgz" "$name")
