#!/bin/bash
# Device call 1: host facts, pre-flight cost, inference bench (GPU 3, beside),
# then suite A (disk, runc, nvidia_agrees) and suite B (basics, CRIU).
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/pre $O/suiteA $O/suiteB $O/disk
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; git log -1 --format=%h 2>/dev/null; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2; df -h /tmp | tail -1; cat /sys/kernel/mm/transparent_hugepage/enabled; python3 -c 'import torch; print(torch.__version__)'; } > $O/host.txt 2>&1
$B/cudackpt-bench preflight --cudackpt $B/cudackpt --target $B/cudackpt-gpu-target --size-mib 2048 --runs 30 --json $O/pre/preflight.json > $O/pre/preflight.log 2>&1
$B/cudackpt-bench nvml --runs 15 --json $O/pre/nvml.json > $O/pre/nvml.log 2>&1
echo "pre done at $(( $(date +%s) - start )) s"
CUDA_VISIBLE_DEVICES=3 timeout $(left 575) python3 bench/inference.py run --cudackpt $B/cudackpt --criu $B/criu/criu --criu-libs $B/criu/lib --device cuda --size 1b --drop-caches --prove-pool --json $O/disk/inference.json > $O/disk/inference.log 2>&1 &
inf=$!
suite() { local name=$1 until=$2 only=$3; timeout $(left $until) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --runc-dir $B/runc --json $O/$name/suite.json --only $only > $O/$name/suite.log 2>&1; echo "$name rc=$? at $(( $(date +%s) - start )) s"; }
suite suiteA 300 disk_round_trip,disk_dataloader,disk_moved_gpu,nvidia_agrees,runc_with_plugin,runc_with_action_script,runc_leave_running,runc_cgroup_suspend
suite suiteB 575 doctor,demo,no_driver,single_steps,library_example,toggle,suspend_resume,wrong_states,wait_timeout,bad_targets,lock_timeout,identity_map,foreign_map,compat_grammar,ps_scale,devices_listing,verify_round_trip,preflight_memory,two_gpu_moves,action_script,criu_with_plugin,criu_with_action_script,criu_failed_dump,criu_drain_images,criu_dataloader,criu_torchrun
wait $inf; echo "inference rc=$? at $(( $(date +%s) - start )) s"
tail -n 3 $O/pre/*.log; grep -E "PASS|FAIL|SKIP|passed" $O/suite*/suite.log | tail -40; tail -n 15 $O/disk/inference.log
