#!/bin/bash
# How large a PyTorch CUDA process's /proc/PID/maps is, how long one read
# takes, and cudackpt's dry run on it beside a cudackpt-gpu-target.
set -u
out=$OUT/maps; mkdir -p $out
python3 -c "import torch,time; x=torch.zeros(1<<20, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); time.sleep(120)" > $out/torch.log 2>&1 &
tp=$!
.carry/head/cudackpt-gpu-target --size-mib 64 --hold > $out/target.log 2>&1 &
gp=$!
for _ in $(seq 120); do grep -q ready $out/torch.log && break; sleep 0.5; done
sleep 2
for p in $tp $gp; do
  python3 - $p <<'PY' >> $out/maps.txt
import sys,time
p=sys.argv[1]
t=[]
for _ in range(20):
    s=time.perf_counter(); d=open(f"/proc/{p}/maps","rb").read(); t.append(time.perf_counter()-s)
t.sort()
print(p, "lines", d.count(b"\n"), "bytes", len(d), "median ms", round(t[10]*1000,3), "min ms", round(t[0]*1000,3))
PY
  for i in 1 2 3; do .carry/head/cudackpt suspend $p --dry-run --json | python3 -c "import json,sys; d=json.load(sys.stdin); print('$p dry-run ms', d['duration_ms'], d['ok'])" >> $out/maps.txt; done
  for i in 1 2 3; do .carry/head/cudackpt suspend $p --dry-run --force --json | python3 -c "import json,sys; d=json.load(sys.stdin); print('$p dry-run forced ms', d['duration_ms'], d['ok'])" >> $out/maps.txt; done
done
kill $tp $gp; wait
cat $out/maps.txt
