#!/bin/bash
# For the next session with a four-GPU kind (nvidia-h100-x4 or
# nvidia-h200-x4; none could be started in this one): issue 46's last
# GPU item, the torchrun job of four NCCL ranks to disk and back with every
# rank moved to the next GPU, with the two-rank one and the compiled one
# for comparison on the same host. Carry .carry (release binaries and
# CRIU 4.2.1 with its libraries).
set -u
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT; B=.carry; mkdir -p $O/suite
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; command -v iptables nft || echo 'no iptables, no nft'; } > $O/host.txt 2>&1
timeout $(left 585) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --json $O/suite/suite.json \
  --only disk_torchrun4,disk_torchrun,compiled_drain > $O/suite/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "^\[(PASS|FAIL|SKIP)" $O/suite/suite.log | cut -c1-400
