#!/bin/bash
# Device call 3: inference bench (GPU 3, diagnostic) beside frameworks_kept
# then bench/shrink.py --ranks 4; then the restore-throughput bench alone.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=/tmp/out; B=$PWD/.carry; mkdir -p $O/suiteD $O/disk $O/shrink
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=3 timeout 420 python3 bench/inference.py run --cudackpt $B/cudackpt --criu $B/criu/criu --criu-libs $B/criu/lib --device cuda --size 1b --drop-caches --prove-pool --json $O/disk/inference.json > $O/disk/inference.log 2>&1 &
inf=$!
timeout 200 python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --runc-dir $B/runc --json $O/suiteD/suite.json --only frameworks_kept > $O/suiteD/suite.log 2>&1
echo "suiteD rc=$? at $(( $(date +%s) - start )) s"
timeout $(left 400) python3 bench/shrink.py --bin-dir $B --ranks 4 --rounds 1 --json $O/shrink/shrink-4ranks.json > $O/shrink/shrink.log 2>&1
echo "shrink rc=$? at $(( $(date +%s) - start )) s"
wait $inf; echo "inference rc=$? at $(( $(date +%s) - start )) s"
CUDA_VISIBLE_DEVICES=2 timeout $(left 575) python3 bench/restore_throughput.py --cudackpt $B/cudackpt --target $B/cudackpt-gpu-target --criu $B/criu/criu --criu-libs $B/criu/lib --size-mib 8192 --runs 3 --json $O/disk/throughput.json > $O/disk/throughput.log 2>&1
echo "throughput rc=$? at $(( $(date +%s) - start )) s"
(cd $O && tar czf $OUT/all.tgz suiteD disk shrink)
grep -E "^\[(PASS|FAIL|SKIP)" $O/suiteD/suite.log | cut -c1-600; tail -n 12 $O/shrink/shrink.log; tail -n 12 $O/disk/inference.log | cut -c1-1500; tail -n 8 $O/disk/throughput.log
