#!/bin/bash
# What a checkpoint pays for cuInit, on the fake driver: suspend and resume
# one fake CUDA process N times on a host without NVML or a kernel GPU
# listing, with the fake's cuInit delayed 2 s, and count the cuInit calls.
# On a GPU host the kernel's listing (/proc/driver/nvidia) is hidden under
# an empty tmpfs in a mount namespace of the script's own (needs root): a
# release build reads no variable that could stand in for it.
# Before issue 9, suspend listed the GPUs for its record through the CUDA
# driver (cuInit); docs/driver-facts.md, F1: the process path never calls it.
#
#   cargo build --release -p cudackpt -p fake-libcuda
#   bench/scripts/no-cuinit-on-suspend.sh target/release/cudackpt \
#       "$PWD/target/release/libfake_libcuda.so" [N]
set -u
if [ -d /proc/driver/nvidia ] && [ -z "${CUDACKPT_BENCH_HIDDEN:-}" ]; then
    exec unshare --mount env CUDACKPT_BENCH_HIDDEN=1 sh -c \
        'mount -t tmpfs none /proc/driver/nvidia && exec "$0" "$@"' "$0" "$@"
fi
bin=$1; fake=$2; n=${3:-5}
dir=$(mktemp -d); export FAKE_CUDA_STATE_DIR=$dir CUDACKPT_LIBCUDA=$fake CUDACKPT_RECORD_DIR=$dir/rec CUDACKPT_LOCK_DIR=$dir/locks
LD_PRELOAD=$fake sleep 600 & pid=$!; sleep 0.3
echo "init=delay:2000" > $dir/inject
for i in $(seq $n); do
  for op in suspend resume; do
    s=$(date +%s%N); $bin $op $pid >/dev/null 2>&1 || echo "$op failed"; e=$(date +%s%N)
    echo "$op $(( (e-s)/1000000 ))"
  done
done | sort | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k": "a[k]" ms"}'
echo "cuInit calls: $(cat $dir/init.log 2>/dev/null | wc -l)"
kill $pid; rm -rf $dir
