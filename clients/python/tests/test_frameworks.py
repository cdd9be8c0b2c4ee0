"""Frameworks that own the training loop drain with one line added: the
client's callback (cudackpt_drain.lightning, cudackpt_drain.transformers),
on two gloo ranks on CPU (tests/framework_rank.py). Each job goes on
bit-exact against untouched runs, the group its DDP holds is the one it
held before and still the registered default group, and the old
communicators are really gone (gloo's connections closed at the release:
on gloo a destroyed group keeps working for whoever holds it, so equal
losses alone would prove little). A callback imported after the framework
started its process group refuses at the start of training, before any
drain could replace the group under the model. This test plays cudackpt:
it sends the drain signal and reads the marker."""

import importlib.util
import unittest

from ranks import Run, assert_kept

WORLD = 2
STEPS = 24


def have(*modules):
    return all(importlib.util.find_spec(m) is not None for m in ("torch",) + modules)


HAVE_LIGHTNING = have("lightning") or have("pytorch_lightning")
HAVE_TRANSFORMERS = have("transformers", "accelerate")


def job(mode, drain=False, env=None):
    return Run("framework_rank.py", mode, WORLD, STEPS, drain=drain, env=env)


class Kept:
    """The checks both frameworks pass."""

    mode = None

    def test_a_drain_keeps_the_job_bit_exact_with_its_groups_and_closes_the_old_communicators(self):
        assert_kept(self, lambda drain: job(self.mode, drain=drain))


@unittest.skipUnless(HAVE_LIGHTNING, "needs torch and lightning (or pytorch_lightning)")
class Lightning(Kept, unittest.TestCase):
    mode = "lightning"


@unittest.skipUnless(HAVE_TRANSFORMERS, "needs torch, transformers and accelerate")
class Transformers(Kept, unittest.TestCase):
    mode = "transformers"

    def test_a_callback_imported_after_the_group_started_refuses_before_any_drain(self):
        run = job(self.mode, env={"LATE": "1"})
        self.assertTrue(all(code != 0 for code in run.codes), run.codes)
        for rank in range(WORLD):
            self.assertIn("started before cudackpt_drain was installed", run.errors[rank])
            self.assertEqual(run.losses(rank), [], "refused before the first step")


if __name__ == "__main__":
    unittest.main()
