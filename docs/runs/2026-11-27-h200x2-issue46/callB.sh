#!/bin/bash
# Device call B (issue 46's measures): the compiled 1.3B transformers server
# started cold against the same server undumped (page cache dropped, with
# and without the read-ahead; then warm), the images' own read time from
# disk, and each undump's split.
set -u
O=$OUT; B=.carry; mkdir -p $O/inference
export PYTHONUNBUFFERED=1
cat $B/BUILT > $O/inference/built.txt
timeout 580 python3 bench/inference.py run --cudackpt $B/cudackpt --criu $B/criu/criu --criu-libs $B/criu/lib \
  --device cuda --drop-caches --json $O/inference/inference.json > $O/inference/inference.log 2>&1
echo "bench rc=$?"
tail -20 $O/inference/inference.log
