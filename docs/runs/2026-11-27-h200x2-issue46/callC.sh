#!/bin/bash
# Device call C (issue 46): the compiled job's drains again (the pool is
# now found by parent PID), then the inference server's cold start against
# its undumps (a fixed port below the ephemeral range).
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite $O/inference
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; } > $O/host.txt 2>&1
timeout $(left 200) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite/suite.json \
  --only compiled_drain > $O/suite/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "PASS|FAIL|SKIP" $O/suite/suite.log | tail -3
timeout $(left 585) python3 bench/inference.py run --cudackpt $B/cudackpt --criu $B/criu/criu --criu-libs $B/criu/lib \
  --device cuda --drop-caches --json $O/inference/inference.json > $O/inference/inference.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - start )) s"
tail -12 $O/inference/inference.log | cut -c1-600
