"""The benchmarks' pure parts, run by CI (tests/cli/gpu_suite.rs) without
a GPU: python3 -m unittest test_benches, from bench/."""

import unittest

from criu_plugin import driver_seconds, hook_lines, hook_seconds, summary

DUMP_LOG = """\
(00.100000) plugin: `cuda_plugin' hook 10 -> 0x1
(00.110000) cuda_plugin: pausing devices on pid 7
(00.120000) Seized task 7, state 1
(00.200000) plugin: `cuda_plugin' hook 11 -> 0x2
(00.210000) cuda_plugin: Checkpointing CUDA devices on pid 7 restore_tid 7
(00.300000) plugin: `cuda_plugin' hook 11 -> 0x2
(00.350000) cuda_plugin: Checkpointing CUDA devices on pid 8 restore_tid 8
cuda-checkpoint output, a line with no stamp
(00.400000) net: Lock network
"""


class HookSeconds(unittest.TestCase):
    def test_each_call_ends_at_criu_s_next_line_the_next_call_included(self):
        spent = hook_seconds(DUMP_LOG)
        self.assertEqual(spent["pause_devices"][1], 1)
        self.assertAlmostEqual(spent["pause_devices"][0], 0.02)
        seconds, calls = spent["checkpoint_devices"]
        self.assertEqual(calls, 2)
        # 0.1 s to the next call, then 0.1 s to the network lock; not 0.2 + 0.1.
        self.assertAlmostEqual(seconds, 0.2)

    def test_no_hook_no_time(self):
        self.assertEqual(hook_seconds("(00.1) Seized task 7, state 1\n"), {})


class HookLines(unittest.TestCase):
    def test_keeps_each_call_its_plugin_lines_and_the_line_that_ends_it_once(self):
        self.assertEqual(hook_lines(DUMP_LOG), [
            "(0.100000) plugin: `cuda_plugin' hook 10 -> 0x1",
            "(0.110000) cuda_plugin: pausing devices on pid 7",
            "(0.120000) Seized task 7, state 1",
            "(0.200000) plugin: `cuda_plugin' hook 11 -> 0x2",
            "(0.210000) cuda_plugin: Checkpointing CUDA devices on pid 7 restore_tid 7",
            "(0.300000) plugin: `cuda_plugin' hook 11 -> 0x2",
            "(0.350000) cuda_plugin: Checkpointing CUDA devices on pid 8 restore_tid 8",
            "(0.400000) net: Lock network",
        ])

    def test_what_it_keeps_gives_the_same_seconds(self):
        kept = "\n".join(hook_lines(DUMP_LOG))
        self.assertEqual(hook_seconds(kept).keys(), hook_seconds(DUMP_LOG).keys())
        for hook, (seconds, calls) in hook_seconds(DUMP_LOG).items():
            self.assertAlmostEqual(hook_seconds(kept)[hook][0], seconds)
            self.assertEqual(hook_seconds(kept)[hook][1], calls)

    def test_no_hook_nothing_kept(self):
        self.assertEqual(hook_lines("(00.1) Seized task 7, state 1\n"), [])


OURS_LOG = """\
(00.100000) plugin: `cudackpt' hook 10 -> 0x1
(00.120000) cudackpt: pre-flights: the tree scanned and 2 processes weighed in 20.00 ms, before any change
(00.150000) cudackpt: lock: 2 processes in 30.00 ms, 25.50 ms of it the driver's calls (each step's slowest process)
(00.151000) Seized task 7, state 1
(00.151100) plugin: `cudackpt' hook 10 -> 0x1
(00.151200) Seized task 8, state 1
(00.200000) plugin: `cudackpt' hook 11 -> 0x2
(00.700000) cudackpt: checkpoint: 2 processes in 500.00 ms, 490.00 ms of it the driver's calls (each step's slowest process)
(00.700100) net: Lock network
"""


class DriverSeconds(unittest.TestCase):
    def test_each_hook_sums_what_the_plugin_said_was_the_driver_s(self):
        said = driver_seconds(OURS_LOG)
        self.assertAlmostEqual(said["pause_devices"], 0.0255)
        self.assertAlmostEqual(said["checkpoint_devices"], 0.49)

    def test_criu_s_own_plugin_says_none(self):
        self.assertEqual(driver_seconds(DUMP_LOG), {})

    def test_own_time_is_the_hooks_less_the_driver_s_per_process(self):
        hooks = {h: {"seconds": s, "calls": c, "driver_seconds": driver_seconds(OURS_LOG)[h]}
                 for h, (s, c) in hook_seconds(OURS_LOG).items()}
        ours = {"config": "cudackpt-plugin", "processes": 2, "dump_s": 1.0, "restore_s": 1.0, "hooks": hooks}
        theirs = {"config": "criu+cudackpt", "processes": 2, "dump_s": 1.0, "restore_s": 1.0,
                  "hooks": {h: {"seconds": s, "calls": c} for h, (s, c) in hook_seconds(DUMP_LOG).items()}}
        rows = {r["config"]: r for r in summary([ours, theirs])}
        # pause 51.0 + 0.1 ms less 25.5, checkpoint 500.1 ms less 490: 35.7 ms, over 2 processes.
        self.assertAlmostEqual(rows["cudackpt-plugin"]["own_ms_per_process"], 17.85)
        self.assertIsNone(rows["criu+cudackpt"]["own_ms_per_process"])


if __name__ == "__main__":
    unittest.main()
