#!/bin/bash
# One device call of release 0.3.0's measurements: `call.sh NAME PART...`
# runs scripts/release-figures for each PART in turn (each under a limit
# of what is left of the call's 580 s) and tars OUT/NAME into OUT/NAME.tgz.
set -u
name=$1; shift
start=$(date +%s); left() { echo $(( 580 - ($(date +%s) - start) )); }
for part in "$@"; do
    timeout "$(left)" scripts/release-figures "$part" "$OUT/$name" >"$OUT/$part.log" 2>&1
    echo "$part rc=$? at $(( $(date +%s) - start )) s"
    mv "$OUT/$part.log" "$OUT/$name/$part/" 2>/dev/null
    tail -n 25 "$OUT/$name/$part/$part.log" | cut -c1-400
done
(cd "$OUT" && tar czf "$name.tgz" "$name" && rm -rf "$name")
