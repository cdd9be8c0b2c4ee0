#!/bin/bash
# Issue 60 on GPUs: a user's (nobody's) one-rank NCCL torchrun job with
# DataLoader workers, under a real Slurm of one node with the host's two
# GPUs as gres, preempted by a job that wants both GPUs, written to disk
# by cudackpt's service, requeued, and brought back on the other GPU (a
# blocker takes the first), finishing bit-exact against a run never
# preempted. Slurm 22.05 and munge are Debian 12's, carried in
# CARRY/slurm (the GPU host has neither) and installed where slurmd looks
# for slurmstepd; cudackpt is CARRY's, CRIU CARRY/criu's (CARRY: .carry,
# or the suite's --bin-dir). The scenario `slurm_preempted` runs it; by
# hand, from the repository root on a GPU host, as root:
#   [CARRY=DIR] [PYTHON=PYTHON] tests/gpu/harness/slurm.sh OUTDIR
set -u
# In a mount namespace of its own, with a /run of its own: a tmpfs, where
# CRIU keeps its cache of kernel facts (where root lacks CAP_SYS_RESOURCE
# the service dumps with the job's real ids, and CRIU then reads it).
if [ -z "${CUDACKPT_SLURM_NS:-}" ]; then
    exec env CUDACKPT_SLURM_NS=1 unshare --mount --propagation private "$0" "$@"
fi
mount -t tmpfs -o mode=755 cudackpt-run /run
out=$1; mkdir -p "$out"
repo=$PWD
carry=$(realpath "${CARRY:-$repo/.carry}")
python=${PYTHON:-$(command -v python3)}
d=/tmp/cudackpt-slurm-gpu; rm -rf "$d"; mkdir -p "$d"/{munge,state,spool,log,share,bin,work}
chmod 755 "$d"
say() { echo "== $(date +%T) $*" | tee -a "$out/steps.txt"; }
finish() {
    say "collecting"
    cp "$d"/log/* "$out/" 2>/dev/null
    cp "$d/work/job.out" "$d/slurm.conf" "$out/" 2>/dev/null
    cp "$d"/work/losses-0.txt "$out/losses-job.txt" 2>/dev/null
    cp "$d"/reference/losses-0.txt "$out/losses-reference.txt" 2>/dev/null
    SLURM_CONF=$d/slurm.conf scontrol show job -o -d >"$out/jobs.txt" 2>&1
    SLURM_CONF=$d/slurm.conf timeout 10 scancel --state=RUNNING 2>/dev/null
    sleep 2
    kill $(cat "$d"/pids 2>/dev/null) 2>/dev/null
    pkill -f "$d" 2>/dev/null; sleep 1; pkill -9 -f "$d" 2>/dev/null
    (cd "$(dirname "$out")" && tar czf "$(basename "$out").tgz" "$(basename "$out")")
}
trap finish EXIT

# Slurm and munge, where their builds look.
cp "$carry"/slurm/sbin/* /usr/sbin/ && cp "$carry"/slurm/bin/* /usr/bin/
mkdir -p /usr/lib/x86_64-linux-gnu && cp -r "$carry/slurm/lib/slurm-wlm" /usr/lib/x86_64-linux-gnu/
for lib in libmunge.so.2 libhwloc.so.15 libnuma.so.1 libdbus-1.so.3 liblua5.1.so.0 libjson-c.so.5 libyaml-0.so.2; do
    [ -e "/usr/lib/x86_64-linux-gnu/$lib" ] || [ -e "/lib/x86_64-linux-gnu/$lib" ] || cp "$carry/slurm/lib/$lib" /usr/lib/x86_64-linux-gnu/
done
# The carried CRIU's libraries, where the loader finds them without
# LD_LIBRARY_PATH: where root lacks CAP_SYS_RESOURCE the service dumps
# with the job's real ids, the kernel runs cudackpt and CRIU in secure
# mode, and the loader then ignores LD_LIBRARY_PATH (h1-d of
# docs/runs/2026-11-29-slurm-gpu: CRIU could not load libnftables).
for lib in "$carry"/criu/lib/*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "^\s*$name " || cp "$lib" /usr/local/lib/
done
ldconfig
id munge >/dev/null 2>&1 || useradd -r -s /usr/sbin/nologin munge
say "installed: $(slurmd -V 2>&1); plugins missing libraries: $(for f in /usr/lib/x86_64-linux-gnu/slurm-wlm/*.so; do ldd "$f" | grep -q 'not found' && basename "$f"; done | tr '\n' ' ')"

# What the job needs, where nobody reaches it.
cp "$carry/cudackpt" "$d/bin/"; chmod 755 "$d/bin/cudackpt"
cp -r tests/fixtures/disk-job clients/python/src "$d/share/"; chmod -R a+rX "$d/share"
chown nobody:nogroup "$d/work"; mkdir -p "$d/work/tmp"; chown nobody:nogroup "$d/work/tmp"

# The reference: the same job, never preempted, on GPU 0.
say "reference run"
mkdir -p "$d/reference"
(cd "$d/reference" && CUDA_VISIBLE_DEVICES=0 DDP_BACKEND=nccl NCCL_NVLS_ENABLE=0 PYTHONPATH="$d/share/src" \
    timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node 1 "$d/share/disk-job/ddp_loader.py" "$d/reference" 24 0 \
    >"$out/reference.log" 2>&1)
say "reference: $(wc -l <"$d/reference/losses-0.txt") losses"

dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$d/munge"; chmod 755 "$d/munge"; chmod 400 "$d/munge/munge.key"
setsid setpriv --reuid munge --regid munge --init-groups /usr/sbin/munged -F --socket="$d/munge/munge.sock" \
    --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/munge.seed" </dev/null >/dev/null 2>&1 &
echo $! >>"$d/pids"
cpus=$(nproc)
gpus=$(nvidia-smi -L | wc -l)   # two: the restart moves to the other; one: it comes back on the same
cat >"$d/slurm.conf" <<CONF
ClusterName=cudackpt-gpu
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock,cred_expire=5
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
GresTypes=gpu
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName=n1 NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN
PartitionName=low Nodes=n1 Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=120 MaxTime=INFINITE State=UP
PartitionName=high Nodes=n1 PriorityTier=2 PreemptMode=OFF MaxTime=INFINITE State=UP
CONF
echo "NodeName=n1 Name=gpu File=/dev/nvidia[0-$((gpus - 1))]" >"$d/gres.conf"
# slurmd sets up cgroup v2 for its steps even with proctrack/linuxproc,
# through systemd over dbus unless told not to (the GPU host has neither).
printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' >"$d/cgroup.conf"
mkdir -p /sys/fs/cgroup/system.slice
chmod 644 "$d/slurm.conf" "$d/gres.conf" "$d/cgroup.conf"
export SLURM_CONF=$d/slurm.conf
for _ in $(seq 50); do [ -S "$d/munge/munge.sock" ] && break; sleep 0.1; done
setsid /usr/sbin/slurmctld -D -f "$d/slurm.conf" </dev/null >"$d/log/slurmctld.out" 2>&1 & echo $! >>"$d/pids"
setsid /usr/sbin/slurmd -D -f "$d/slurm.conf" -N n1 </dev/null >"$d/log/slurmd.out" 2>&1 & echo $! >>"$d/pids"
for _ in $(seq 100); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
say "cluster: $(sinfo -h -o '%n %T %G' 2>&1)"
if ! sinfo -h -o %T 2>/dev/null | grep -q idle; then
    say "the node did not come up: $(grep error "$d/log/slurmd.log" | tail -3)"
    exit 1
fi

LD_LIBRARY_PATH=$carry/criu/lib setsid "$carry/cudackpt" slurm serve --socket "$d/cudackpt.sock" \
    --store "$d/store" --criu "$carry/criu/criu" --scontrol /usr/bin/scontrol </dev/null >"$d/log/cudackpt.log" 2>&1 &
echo $! >>"$d/pids"
for _ in $(seq 50); do [ -S "$d/cudackpt.sock" ] && break; sleep 0.1; done

cat >"$d/work/job.sh" <<JOB
#!/bin/bash
#SBATCH --signal=B:USR1@60
#SBATCH --open-mode=append
#SBATCH --output=$d/work/job.out
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
export DDP_BACKEND=nccl NCCL_NVLS_ENABLE=0 PYTHONPATH=$d/share/src TMPDIR=$d/work/tmp OMP_NUM_THREADS=1
exec $d/bin/cudackpt slurm run --socket $d/cudackpt.sock -- $python -m cudackpt_drain.no_io_uring $python -m torch.distributed.run --standalone --nproc-per-node 1 $d/share/disk-job/ddp_loader.py $d/work 24 0.3
JOB
chmod 755 "$d/work/job.sh"
job=$(cd "$d/work" && setpriv --reuid=65534 --regid=65534 --clear-groups sbatch --parsable "$d/work/job.sh")
say "submitted job $job"
for _ in $(seq 200); do [ "$(wc -l <"$d/work/losses-0.txt" 2>/dev/null || echo 0)" -ge 6 ] && break; sleep 0.3; done
say "job at step $(wc -l <"$d/work/losses-0.txt" 2>/dev/null): $(scontrol show job -d "$job" | grep -o ' GRES=[^ ]*' | head -1)"
high=$(sbatch --parsable -p high --gres=gpu:$gpus -c 1 -D "$d" --wrap "sleep 10")
blocker=0
if [ "$gpus" -gt 1 ]; then
    sleep 2
    blocker=$(sbatch --parsable -p high --gres=gpu:1 -c 1 -D "$d" --wrap "sleep 600")
fi
say "preemptor $high (all $gpus GPUs, 25 s), blocker $blocker (one GPU, 0 for none)"
for _ in $(seq 240); do
    state=$(scontrol show job -o "$job" | grep -o 'JobState=[A-Z]*')
    { [ "$state" = "JobState=COMPLETED" ] || [ "$state" = "JobState=FAILED" ]; } && break
    sleep 0.5
done
say "job: $(scontrol show job -o -d "$job" | grep -o 'JobState=[A-Z]*\|Restarts=[0-9]*\|GRES=[^ ]*' | tr '\n' ' ')"
say "blocker: $(scontrol show job -o -d "$blocker" | grep -o 'JobState=[A-Z]*\|GRES=[^ ]*' | tr '\n' ' ')"
last() { awk '{l[$1]=$0} END {for (s in l) print l[s]}' "$1" | sort -n; }
if [ -s "$d/reference/losses-0.txt" ] && cmp -s <(last "$d/reference/losses-0.txt") <(last "$d/work/losses-0.txt"); then
    say "RESULT bit-exact: $(wc -l <"$d/reference/losses-0.txt") losses"
else
    say "RESULT losses differ"
fi
grep "^cudackpt:" "$d/work/job.out" | tee -a "$out/steps.txt"
