#!/bin/bash
# Device call A (issue 46): host facts; the torchrun job of four NCCL ranks
# to disk and back with every rank moved; the compiled job's drains (a
# suspend's keeps the pool, a dump's releases it); what a drained job still
# holds (NCCL's RAS on and off); the two-rank job again.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; nproc; command -v iptables nft || echo 'no iptables, no nft'; python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'; df -h /tmp | tail -1; } > $O/host.txt 2>&1
timeout $(left 575) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite/suite.json \
  --only disk_torchrun4,compiled_drain,drained_sockets,disk_torchrun > $O/suite/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "PASS|FAIL|SKIP|passed" $O/suite/suite.log | tail -20
for log in /tmp/cudackpt-*/images/*.log; do [ -f "$log" ] && { echo "== $log"; grep -E "Error|Warn" "$log" | tail -40; } ; done > $O/suite/criu-errors.txt 2>&1
tail -c 3000 /tmp/cudackpt-*/job/job.log > $O/suite/job-tail.txt 2>&1
