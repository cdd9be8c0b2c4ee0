#!/bin/bash
# The Slurm harness on one H200 with the service that reads each
# snapshot's images before recording and before restoring it (issue 60's
# last change): `call.sh NAME`, binaries in .carry/ (BUILT, checksums in
# host.txt); output in /tmp/cudackpt-calls/NAME, tarred into $OUT/NAME.tgz.
set -u
name=$1
out=/tmp/cudackpt-calls/$name
rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader; cat .carry/BUILT; sha256sum .carry/cudackpt; } >"$out/host.txt" 2>&1
start=$(date +%s)
CARRY=$PWD/.carry PYTHON=$(command -v python3) timeout 300 bash tests/gpu/harness/slurm.sh "$out/slurm" >"$out/slurm.log" 2>&1
echo "slurm rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/host.txt"
tail -n 14 "$out/slurm/steps.txt" | cut -c1-400
grep -i "refus\|beyond\|more than" "$out/slurm/cudackpt.log" | head -5
rm -f "$out/slurm.tgz"
tar czf "$OUT/$name.tgz" -C "$(dirname "$out")" "$name"
