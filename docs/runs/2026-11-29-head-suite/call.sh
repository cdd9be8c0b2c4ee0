#!/bin/bash
# The whole one-GPU suite at the last commit of issues 60 and 61, in two
# device calls on one H200 (the two-GPU kind was not lent), the second with
# the Slurm harness on the one GPU. `call.sh PART` runs the part's
# scenarios (below) with the binaries in .carry/ (BUILT says their commit,
# host.txt their checksums), CRIU 4.2.1 and Debian's runc carried; output in
# /tmp/cudackpt-calls/PART/, tarred into $OUT/PART.tgz (the only file that
# comes back, so every log does).
set -u
part=$1
a=doctor,no_driver,single_steps,toggle,wrong_states,wait_timeout,bad_targets,identity_map,ps_scale,devices_listing,preflight_memory,check_agrees,runc_with_plugin,runc_leave_running,runc_cgroup_suspend,criu_with_own_plugin,runc_with_own_plugin,podman_with_own_plugin,criu_with_plugin,criu_failed_dump,criu_torchrun,disk_round_trip,disk_dataloader,disk_user_home,disk_users_own_job,ipc_pair_refused,ipc_pair_forced,drain_round_trip_gloo,drain_single_torch,cgroup_drain_shrink,drain_vouched_and_recovered,drain_ipc_pair
b=demo,library_example,suspend_resume,lock_timeout,foreign_map,nvidia_agrees,compat_grammar,verify_round_trip,group,group_rollback,group_interrupted,group_deadline,killed_then_recovered,group_under_pids_limit,cgroup_memory_limit,runc_with_action_script,action_script,criu_with_action_script,criu_dataloader,criu_drain_images,torch_single,drain_shrink,toggle_drain
case $part in *a) only=$a ;; *b) only=$b ;; *) echo "PART ends in a or b" >&2; exit 2 ;; esac
start=$(date +%s)
out=/tmp/cudackpt-calls/$part
rm -rf "$out"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader; cat .carry/BUILT; sha256sum .carry/cudackpt .carry/libcudackpt_criu_plugin.so .carry/cuda-checkpoint; } >"$out/host.txt" 2>&1
timeout 470 python3 tests/gpu/suite.py --bin-dir .carry --criu-dir .carry/criu --runc-dir .carry/runc --only "$only" \
    --json "$out/suite.json" >"$out/suite.log" 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/host.txt"
grep -E "^(PASS|FAIL|SKIP)" "$out/suite.log" | cut -c1-200
tail -n 4 "$out/suite.log" | cut -c1-300
if [ "${part%b}" != "$part" ]; then
    # The Slurm path on the one GPU (the restart comes back on the same).
    CARRY=$PWD/.carry PYTHON=$(command -v python3) timeout 200 bash tests/gpu/harness/slurm.sh "$out/slurm" >"$out/slurm.log" 2>&1
    echo "slurm rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/host.txt"
    tail -n 12 "$out/slurm/steps.txt" | cut -c1-300
    rm -f "$out/slurm.tgz"
fi
tar czf "$OUT/$part.tgz" -C "$(dirname "$out")" "$part"
