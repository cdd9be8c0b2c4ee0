#!/bin/bash
# Device call 2 (binaries of 8c86739 + the CRIU-version fix, 2280003): inference bench (GPU 3) beside suite C: the disk scenarios
# again (CRIU's version now asked in the caller's environment), then the
# single-GPU groups, PyTorch refusals and drains; NVML's start split.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=/tmp/out; B=$PWD/.carry; mkdir -p $O/suiteC $O/disk $O/pre
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
python3 $B/nvml_split.py > $O/pre/nvml-split.json 2>&1
CUDA_VISIBLE_DEVICES=3 timeout $(left 540) python3 bench/inference.py run --cudackpt $B/cudackpt --criu $B/criu/criu --criu-libs $B/criu/lib --device cuda --size 1b --drop-caches --prove-pool --json $O/disk/inference.json > $O/disk/inference.log 2>&1 &
inf=$!
timeout $(left 535) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --runc-dir $B/runc --json $O/suiteC/suite.json --only disk_round_trip,disk_dataloader,disk_moved_gpu,group,group_rollback,group_interrupted,group_deadline,killed_then_recovered,check_agrees,group_under_pids_limit,cgroup_memory_limit,ipc_pair_refused,ipc_pair_forced,torch_single,drain_round_trip_gloo,drain_single_torch,drain_shrink,toggle_drain,cgroup_drain_shrink,drain_vouched_and_recovered,drain_ipc_pair > $O/suiteC/suite.log 2>&1
echo "suiteC rc=$? at $(( $(date +%s) - start )) s"
wait $inf; echo "inference rc=$? at $(( $(date +%s) - start )) s"
(cd $O && tar czf $OUT/all.tgz suiteC disk pre)
grep -E "^\[(PASS|FAIL|SKIP)" $O/suiteC/suite.log | cut -c1-400; tail -n 3 $O/suiteC/suite.log; cat $O/pre/nvml-split.json; tail -n 15 $O/disk/inference.log
