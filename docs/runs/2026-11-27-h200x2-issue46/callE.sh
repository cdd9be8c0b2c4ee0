#!/bin/bash
# Device call E (issue 46, before resolving): the GPU suite's drain, CRIU
# and disk scenarios on the final binaries (the dump notice, the compile
# pool left to a dump's drain, the undump's phases, no read-ahead).
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; } > $O/host.txt 2>&1
timeout $(left 585) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite/suite.json \
  --only disk_torchrun,compiled_drain,criu_drain_images,disk_round_trip,disk_dataloader,drain_round_trip,drain_killed_then_recovered,drain_never_acknowledges,criu_torchrun,groups_kept,drain_single_torch,disk_moved_gpu \
  > $O/suite/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "^\[(PASS|FAIL|SKIP)" $O/suite/suite.log | cut -c1-400
