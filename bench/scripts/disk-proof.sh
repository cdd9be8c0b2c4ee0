#!/bin/bash
# Issue 37's GPU proofs in one command, for a GPU host lent for minutes:
# the suite's disk scenarios (a 4 GiB target and a PyTorch DataLoader job
# to disk and back; with two GPUs, the undump onto the other GPU), the
# inference server cold against undumped, the dump first tried while
# torch.compile's compile-worker pool runs (bench/inference.py
# --prove-pool), and the restore's throughput against the disk and plain
# CRIU (bench/restore_throughput.py). Each step's JSON goes to OUT; a step
# that fails is said and the next runs.
#
#   bench/scripts/disk-proof.sh BIN_DIR CRIU_DIR OUT [SIZE_MIB]
#
# BIN_DIR holds the release cudackpt and cudackpt-gpu-target; CRIU_DIR a
# carried CRIU 4.2 (criu, lib/). Runs as root (CRIU, drop_caches).
set -u
bin=$(realpath "$1"); criu_dir=$(realpath "$2"); out=$3; size=${4:-16384}
here=$(dirname "$(realpath "$0")")/..
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
gpus=$(nvidia-smi -L | wc -l)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } >"$out/host.txt"
only=disk_round_trip,disk_dataloader
[ "$gpus" -ge 2 ] && only=$only,disk_moved_gpu
python3 "$here/../tests/gpu/suite.py" --bin-dir "$bin" --criu-dir "$criu_dir" \
    --json "$out/suite.json" --only "$only" >"$out/suite.log" 2>&1 || echo "suite: FAILED (suite.log)"
python3 "$here/inference.py" run --cudackpt "$bin/cudackpt" --criu "$criu_dir/criu" \
    --criu-libs "$criu_dir/lib" --device cuda --size 1b --drop-caches --prove-pool \
    --json "$out/inference.json" >"$out/inference.log" 2>&1 || echo "inference: FAILED (inference.log)"
python3 "$here/restore_throughput.py" --cudackpt "$bin/cudackpt" --target "$bin/cudackpt-gpu-target" \
    --criu "$criu_dir/criu" --criu-libs "$criu_dir/lib" --size-mib "$size" --runs 3 \
    --json "$out/throughput.json" >"$out/throughput.log" 2>&1 || echo "throughput: FAILED (throughput.log)"
tail -n 12 "$out"/*.log
