#!/bin/bash
# One device call of issue 49's runs (and issue 48's release parts):
# `call.sh NAME STEP...` runs each STEP in turn under what is left of the
# call's 580 s, its output in OUT/NAME/STEP/, then tars OUT/NAME into
# OUT/NAME.tgz. Plugin steps use .carry/head (this commit's binaries and
# libcudackpt_criu_plugin.so); release parts use .carry (release 0.3.0).
#   scenarios      the plugin's CRIU, runc and Podman scenarios of the suite
#   plugin-bench   bench/criu_plugin.py, trees of 1 and 16 processes
#   profile        profile.sh: where cudackpt's own time goes, 16 targets
#   restore        bench/restore_throughput.py alone (release binaries)
#   shrink2        bench/shrink.py at two ranks (release binaries)
#   PART           scripts/release-figures PART (calls, throughput, ...)
set -u
name=$1; shift
start=$(date +%s); left() { echo $(( 580 - ($(date +%s) - start) )); }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
[ -d /tmp/podman ] || tar xJf .carry/podman.tar.xz -C /tmp
for step in "$@"; do
    out=$OUT/$name/$step
    mkdir -p "$out"
    { date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader; } >"$out/host.txt" 2>&1
    case $step in
    scenarios)
        cat .carry/head/BUILT >>"$out/host.txt"
        timeout "$(left)" python3 tests/gpu/suite.py --bin-dir .carry/head --criu-dir .carry/criu --runc-dir .carry/runc \
            --podman-dir /tmp/podman --only "${ONLY:-criu_with_own_plugin,runc_with_own_plugin,runc_own_plugin_moved,podman_own_plugin_moved}" \
            --json "$out/suite.json" >"$out/$step.log" 2>&1 ;;
    plugin-bench)
        cat .carry/head/BUILT >>"$out/host.txt"
        timeout "$(left)" python3 bench/criu_plugin.py --bin-dir .carry/head --criu-dir .carry/criu --counts "${COUNTS:-1,16}" \
            --size-mib "${SIZE_MIB:-64}" --runs "${RUNS:-2}" --json "$out/criu_plugin.json" --keep-hook-lines "$out/hook-lines" >"$out/$step.log" 2>&1 ;;
    profile)
        cat .carry/head/BUILT >>"$out/host.txt"
        CUDACKPT_PROF_BIN=$PWD/.carry/prof/cudackpt timeout "$(left)" bash "$(dirname "$0")/profile.sh" "$out" >"$out/$step.log" 2>&1 ;;
    restore)
        cat .carry/BUILT >>"$out/host.txt"
        timeout "$(left)" python3 bench/restore_throughput.py --cudackpt .carry/cudackpt --target .carry/cudackpt-gpu-target \
            --criu "$PWD/.carry/criu/criu" --criu-libs "$PWD/.carry/criu/lib" --size-mib 8192 --runs 3 --json "$out/restore.json" >"$out/$step.log" 2>&1 ;;
    shrink2)
        cat .carry/BUILT >>"$out/host.txt"
        timeout "$(left)" python3 bench/shrink.py --bin-dir .carry --ranks 2 --rounds 1 --json "$out/shrink.json" >"$out/$step.log" 2>&1 ;;
    *)
        timeout "$(left)" scripts/release-figures "$step" "$OUT/$name" >"$out/$step.log" 2>&1 ;;
    esac
    echo "$step rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/host.txt"
    tail -n 30 "$out/$step.log" | cut -c1-600
done
(cd "$OUT" && tar czf "$name.tgz" "$name" && rm -rf "$name")
