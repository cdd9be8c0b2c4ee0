# Sourced by profile.sh and perf.sh: `held_tree N` starts a shell leading
# a session of its own with N held cudackpt-gpu-targets of 64 MiB below it
# (the plugin bench's tree), sets `root` to the shell's PID, and returns
# once the GPU lists N compute processes (or a minute has passed).
held_tree() {
    setsid sh -c "for i in \$(seq $1); do .carry/head/cudackpt-gpu-target --size-mib 64 --hold >/dev/null 2>&1 & done; wait" &
    root=$!
    for _ in $(seq 120); do
        [ "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)" -ge "$1" ] && break
        sleep 0.5
    done
    sleep 2
}
