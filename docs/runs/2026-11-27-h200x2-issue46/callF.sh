#!/bin/bash
# Device call F (issue 46): the undump's new port check on a GPU host:
# the plain round trip and the torchrun job (its store, NCCL's and RAS's
# listeners in the images) on the final binaries.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; } > $O/host.txt 2>&1
timeout $(left 200) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite/suite.json \
  --only disk_torchrun,disk_round_trip > $O/suite/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "^\[(PASS|FAIL|SKIP)" $O/suite/suite.log | cut -c1-400
