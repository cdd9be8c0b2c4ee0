"""One rank of the two-rank gloo job that tests/test_drain.py drives: an
all-reduce per step (each rank gives rank + 1, so every sum is 3), the drain
point between steps, and a log of what happened. Arguments: STEPS LOG."""

import sys
import time

import torch
import torch.distributed as dist

import cudackpt_drain


def main():
    steps, log_path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    released = []

    def release():
        # What a hook sees: the group already gone, the cache already emptied.
        gone = "group_gone" if not dist.is_initialized() else "group_still_there"
        emptied = "cache_emptied" if calls["cache"] == 1 else f"cache_emptied_{calls['cache']}_times"
        released.append(f"{gone},{emptied}")

    drain = cudackpt_drain.Drain(on_release=[release])
    calls = {"cache": 0}
    empty = drain.release_cache

    def counted():
        calls["cache"] += 1
        empty()

    drain.release_cache = counted
    sums_ok = True
    drained_at = None
    with open(log_path, "a", buffering=1) as log:
        for step in range(steps):
            value = torch.tensor([float(rank + 1)])
            dist.all_reduce(value)
            sums_ok &= value.item() == 3.0
            log.write(f"step={step}\n")
            if drain.point():
                drained_at = step
            time.sleep(0.01)
        log.write(f"drains={drain.drains}\n")
        for words in released:
            log.write(f"release={words}\n")
        log.write(f"drained_at={drained_at}\n")
        log.write("sums=ok\n" if sums_ok else "sums=wrong\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
