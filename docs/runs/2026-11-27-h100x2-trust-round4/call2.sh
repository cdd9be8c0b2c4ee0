#!/bin/bash
# Device call 2 (issue 45, the final binaries): host facts, then the disk
# scenarios (dump and undump by descriptor, the user's-home refusal, a
# nobody job undumped from nobody's directory through the stage, the moved
# GPU, the DataLoader job) and a drain over NVLink, with the carried CRIU
# 4.2.1.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite2
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; nproc; python3 -c 'import torch; print(torch.__version__)'; } > $O/host.txt 2>&1
timeout $(left 560) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite2/suite.json \
  --only disk_round_trip,disk_user_home,disk_users_own_job,disk_moved_gpu,disk_dataloader,drain_round_trip > $O/suite2/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "PASS|FAIL|SKIP|passed" $O/suite2/suite.log | tail -20
