#!/bin/bash
# Device call 4 (issue 46, the workers closing their inherited sockets):
# host facts, then the torchrun job to disk and
# back onto the swapped GPUs, the single-process DataLoader job and the
# plain round trip, with the carried CRIU 4.2.1; and whether the host has
# iptables or nft.
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite4
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; nproc; command -v iptables nft || echo 'no iptables, no nft'; python3 -c 'import torch; print(torch.__version__)'; } > $O/host.txt 2>&1
timeout $(left 560) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite4/suite.json \
  --only disk_torchrun,disk_dataloader > $O/suite4/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "PASS|FAIL|SKIP|passed" $O/suite4/suite.log | tail -20
for log in /tmp/cudackpt-disk-ddp-*/images/*.log; do [ -f "$log" ] && { echo "== $log"; grep -E "Error|Warn" "$log" | tail -40; } ; done > $O/suite4/criu-errors.txt 2>&1
tail -c 3000 /tmp/cudackpt-disk-ddp-*/job/job.log > $O/suite4/job-tail.txt 2>&1
