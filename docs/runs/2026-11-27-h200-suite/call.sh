#!/bin/bash
# The whole GPU suite, in parts that fit one call of at most 10 minutes. `call.sh PART SCENARIOS`: runs the suite with --only SCENARIOS
# (every scenario of the part, and on a one-GPU host every multi-GPU one
# too, which must skip saying why). Carry .carry: the release binaries,
# NVIDIA's cuda-checkpoint, CRIU 4.2.1 with its CUDA plugin and libraries,
# Debian's runc with libseccomp.
set -u
part=$1; only=$2
start=$(date +%s); left() { echo $(( $1 - ($(date +%s) - start) )); }
O=$OUT/$part; B=.carry; mkdir -p $O
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; cat $B/BUILT; nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader; command -v iptables nft || echo 'no iptables, no nft'; } > $O/host.txt 2>&1
timeout $(left 585) python3 tests/gpu/suite.py --bin-dir $B --criu-dir $B/criu --runc-dir $B/runc \
  --json $O/suite.json --only "$only" > $O/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "^\[(PASS|FAIL|SKIP)" $O/suite.log | cut -c1-300
