# Where NVML's start goes: dlopen, then nvmlInit_v2 / nvmlInitWithFlags(NO_ATTACH), each a fresh process.
import ctypes, json, subprocess, sys, time
if len(sys.argv) > 1:
    flags = int(sys.argv[1]); t0 = time.perf_counter()
    lib = ctypes.CDLL("libnvidia-ml.so.1", mode=ctypes.RTLD_LOCAL); t1 = time.perf_counter()
    rc = lib.nvmlInitWithFlags(flags) if flags >= 0 else lib.nvmlInit_v2(); t2 = time.perf_counter()
    n = ctypes.c_uint(); lib.nvmlDeviceGetCount_v2(ctypes.byref(n)); t3 = time.perf_counter()
    h = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)); t4 = time.perf_counter()
    lib.nvmlShutdown(); t5 = time.perf_counter()
    print(json.dumps({"rc": rc, "dlopen": t1 - t0, "init": t2 - t1, "count": t3 - t2, "gpu0_handle": t4 - t3, "shutdown": t5 - t4, "gpus": n.value}))
    sys.exit()
out = {}
for name, flags in (("nvmlInit_v2", -1), ("no_attach", 2)):
    runs = [json.loads(subprocess.run([sys.executable, __file__, str(flags)], capture_output=True, text=True).stdout) for _ in range(15)]
    out[name] = {k: round(sorted(r[k] for r in runs)[7] * 1000, 3) for k in ("dlopen", "init", "count", "gpu0_handle", "shutdown")}
    out[name]["gpus"] = runs[0]["gpus"]
print(json.dumps(out, indent=1))
