"""A CUDA process whose pinned host buffers are written only by the GPU
(DMA, non-blocking device-to-host copies), for the pre-dump experiment:
each step checks that both buffers still hold what the last step's copy
wrote, then writes the next. A snapshot whose incremental dump missed a
DMA write brings the process back with a buffer one or more steps behind,
and it says STALE and exits 3."""
import sys
import time

import torch

N = 16 << 20  # floats: 64 MiB per buffer
dev = torch.device("cuda")
src = torch.empty(N, device=dev)
host_alloc = torch.empty(N, dtype=torch.float32).pin_memory()  # cudaHostAlloc
registered = torch.empty(N, dtype=torch.float32)
rc = torch.cuda.cudart().cudaHostRegister(registered.data_ptr(), N * 4, 0)
assert int(rc) == 0, f"cudaHostRegister: {rc}"
ballast = torch.randn(256 << 20, device=dev)  # 1 GiB of device memory
ballast_sum = ballast.sum().item()
host_ballast = torch.randn(128 << 20)  # host memory the pre-dump copies
host_ballast_sum = float(host_ballast.sum())
step = 0
print(f"ready {N}", flush=True)
while True:
    if step > 0:
        for name, buf in (("hostalloc", host_alloc), ("registered", registered)):
            sample = buf[::4096]
            if not bool((sample == float(step)).all()):
                print(f"STALE {name} step {step} holds {sample.unique().tolist()[:4]}", flush=True)
                sys.exit(3)
    if step % 20 == 0:
        assert ballast.sum().item() == ballast_sum, "device ballast changed"
        assert float(host_ballast.sum()) == host_ballast_sum, "host ballast changed"
    step += 1
    src.fill_(float(step))
    host_alloc.copy_(src, non_blocking=True)
    registered.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    print(f"step {step} ok {time.time():.3f}", flush=True)
    time.sleep(0.1)
