"""Four gloo ranks on CPU (tests/parallel_rank.py) keep every process group
through a drain with no ``on_rebuild`` code: DDP (kept, not rewrapped),
FSDP2 on a 2-D mesh, tensor and pipeline parallelism go on bit-exact against untouched runs, every group the
model holds is the object it had, registered with torch, and the old
communicators are really gone (gloo's connections closed: on gloo a
destroyed group still works for whoever holds it, so equal losses alone
would prove little). The harm first: the old way (torch's own groups, the
default one made anew) leaves FSDP2 on a 2-D mesh dead at the next step.
This test plays cudackpt: it sends the drain signal and reads the marker."""

import os
import unittest

from ranks import Run as Ranks
from ranks import assert_kept

try:
    import torch
    import torch.distributed  # noqa: F401

    HAVE_TORCH = True
    OLD_TORCH_PIPELINING = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 10)
except ImportError:
    HAVE_TORCH = False
    OLD_TORCH_PIPELINING = False

WORLD = 4
STEPS = 40


def job(mode, drain=False, plain=False, install=False):
    """One run of the four-rank job (parallel_rank.py): `plain` starts
    torch's own groups, `install` starts them through torch's own
    init_process_group after install()."""
    env = {}
    if plain:
        env["PLAIN"] = "1"
    if install:
        env["INSTALL"] = "1"
    return Ranks("parallel_rank.py", mode, WORLD, STEPS, drain=drain, env=env)


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class KeptGroups(unittest.TestCase):
    def check_kept(self, mode):
        assert_kept(self, lambda drain: job(mode, drain=drain))

    def test_ddp_on_four_ranks_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("ddp")

    def test_fsdp2_on_a_1d_mesh_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("fsdp2")

    def test_fsdp2_on_a_2x2_mesh_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("fsdp2_hsdp")

    def test_tensor_parallelism_on_four_ranks_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("tp")

    @unittest.skipIf(
        OLD_TORCH_PIPELINING,
        "not on torch 2.9: its pipelining sends an int64 into a float32 buffer at start-up, which gloo refuses "
        "(with torch's own groups too; NCCL does not check)",
    )
    def test_pipeline_parallelism_on_four_stages_is_kept_bit_exact_and_its_old_communicators_are_gone(self):
        self.check_kept("pp")

    def test_a_framework_calling_torch_s_init_after_install_gets_groups_that_are_kept(self):
        untouched = job("ddp")
        self.assertEqual(untouched.codes, [0] * WORLD, untouched.errors)
        drained = job("ddp", drain=True, install=True)
        self.assertEqual(drained.codes, [0] * WORLD, drained.errors)
        for rank in range(WORLD):
            self.assertEqual(drained.value(rank, "drains"), "1", drained.lines(rank))
            self.assertEqual(drained.losses(rank), untouched.losses(rank), f"rank {rank}: bit-exact")
            self.assertEqual(drained.value(rank, "same_groups"), "True", f"rank {rank}")

    def test_the_harm_first_the_old_way_kills_fsdp2_on_a_2d_mesh(self):
        run = job("fsdp2_hsdp", drain=True, plain=True)
        self.assertTrue(any(code != 0 for code in run.codes), f"the job died: {run.codes}")
        self.assertTrue(
            any("process group" in error.lower() for error in run.errors),
            "\n".join(error[-600:] for error in run.errors),
        )


ONE_RANK = """
import torch, torch.distributed as dist, cudackpt_drain
from cudackpt_drain import groups
cudackpt_drain.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
group = dist.group.WORLD
cpu = torch.device("cpu")
print("devices", [d.type for d in group._device_types], dist.distributed_c10d._get_object_coll_device(group))
first = group._get_backend(cpu)
print("backend", first.name())
groups.release_all()
try:
    group._get_backend(cpu)
    print("drained: answered")
except RuntimeError as error:
    print("drained:", error)
groups.rebuild_all()
again = group._get_backend(cpu)
print("rebuilt", again.name(), again is not first)
objects = [{"a": 1}]
dist.broadcast_object_list(objects, src=0)
print("object", objects)
"""


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class WhatTorchAsksOfAGroup(unittest.TestCase):
    def test_a_group_answers_for_its_inner_backend_as_it_is_now(self):
        import subprocess
        import sys

        from ranks import HERE, free_port

        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src"))
        out = subprocess.run(
            [sys.executable, "-c", ONE_RANK % free_port()], env=env, capture_output=True, text=True, timeout=120
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertIn("devices ['cpu'] cpu", lines, "the inner backends' devices, as torch's own group lists them")
        self.assertIn("backend gloo", lines)
        self.assertTrue(any(line.startswith("drained: cudackpt: this process group is drained") for line in lines), lines)
        self.assertIn("rebuilt gloo True", lines, "a new backend after the rebuild")
        self.assertIn("object [{'a': 1}]", lines)


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class PrivateTorch(unittest.TestCase):
    def test_this_torch_has_every_private_name_the_client_uses(self):
        from cudackpt_drain import _torch_private

        self.assertEqual(_torch_private.missing(), [])

    def test_a_torch_without_one_is_named_at_once(self):
        from cudackpt_drain import _torch_private

        needed = _torch_private._NEEDED
        try:
            _torch_private._NEEDED = needed + (("torch.distributed.ProcessGroup", "_no_such_thing"),)
            with self.assertRaises(ImportError) as raised:
                _torch_private.check()
            self.assertIn("ProcessGroup._no_such_thing", str(raised.exception))
            self.assertIn("tested with torch 2.9 and 2.11", str(raised.exception))
        finally:
            _torch_private._NEEDED = needed

    def test_a_torch_older_than_the_oldest_supported_is_named_and_newer_ones_pass(self):
        from cudackpt_drain import _torch_private

        self.assertIn("older than 2.9", _torch_private.version_problem("2.8.0+cu128"))
        self.assertIn("older than 2.9", _torch_private.version_problem("1.13.1"))
        for fine in ("2.9.0", "2.9.1+cu128", "2.11.0", "2.12.0a0+git1234", "3.0.0"):
            self.assertIsNone(_torch_private.version_problem(fine), fine)
        self.assertIn("does not say", _torch_private.version_problem("nightly"))


if __name__ == "__main__":
    unittest.main()
