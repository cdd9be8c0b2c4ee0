"""The GPU suite's own machinery, tested without a GPU (CI runs this
through tests/cli/gpu_suite.rs): the registry, its runner and the
lifetimes of what scenarios start. The scenarios themselves need a GPU."""

import ast
import contextlib
import io
import os
import subprocess
import tarfile
import tempfile
import unittest

import scenarios  # noqa: F401 (registers every scenario)
from harness import registry
from harness.procs import Closing, several
from harness.registry import Failed, Scenario, Skipped

HERE = os.path.dirname(os.path.abspath(__file__))


class Thing(Closing):
    def __init__(self, log, name, fail=False):
        if fail:
            raise Failed(f"{name} did not start")
        self.log, self.name = log, name
        log.append(f"start {name}")

    def close(self):
        self.log.append(f"close {self.name}")


def quiet_run(*args):
    with contextlib.redirect_stdout(io.StringIO()):
        return registry.run(*args)


class Registry(unittest.TestCase):
    def test_every_decorated_function_is_registered_once(self):
        # Counted from the source, not from the registry: a module left out
        # of scenarios/__init__.py would register nothing.
        decorated = []
        folder = os.path.join(HERE, "scenarios")
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py") and name != "__init__.py":
                with open(os.path.join(folder, name)) as f:
                    tree = ast.parse(f.read())
                decorated += [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
                              and any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "scenario" for d in f.decorator_list)]
        self.assertEqual(sorted(decorated), sorted(s.name for s in registry.SCENARIOS))
        self.assertGreater(len(decorated), 50)

    def test_an_unknown_only_name_is_an_error_naming_it(self):
        with self.assertRaisesRegex(ValueError, "no scenario named nope"):
            registry.select({"doctor", "nope"})

    def test_only_keeps_the_suites_order(self):
        chosen = registry.select({"drain_round_trip", "doctor"})
        self.assertEqual([s.name for s in chosen], ["doctor", "drain_round_trip"])

    def test_a_duplicate_name_or_a_wrong_signature_is_refused(self):
        before = list(registry.SCENARIOS)
        try:
            with self.assertRaisesRegex(ValueError, "two scenarios are named doctor"):
                def doctor(tools):
                    pass
                registry.scenario("again")(doctor)
            with self.assertRaisesRegex(TypeError, "takes"):
                def wants_a_target(tools):
                    pass
                registry.scenario("wrong", shared_target=True)(wants_a_target)
        finally:
            registry.SCENARIOS[:] = before


class Runner(unittest.TestCase):
    def test_a_scenario_needing_more_gpus_is_skipped_saying_so(self):
        ran = []
        s = Scenario("four", "four GPUs", lambda tools: ran.append(1), 4, False)
        results = quiet_run([s], None, 2, None)
        self.assertEqual(ran, [])
        self.assertEqual((results[0]["status"], results[0]["detail"]), ("skip", "needs 4 GPUs; this host has 2"))
        self.assertTrue(results[0]["ok"])

    def test_outcomes_pass_fail_skip_and_a_crash(self):
        def failing(tools):
            raise Failed("no")

        def skipping(tools):
            raise Skipped("not here")

        def crashing(tools):
            return {}["missing"]

        chosen = [Scenario(n, n, fn, 1, False) for n, fn in
                  [("ok", lambda tools: "fine"), ("failing", failing), ("skipping", skipping), ("crashing", crashing)]]
        results = quiet_run(chosen, None, 1, None)
        self.assertEqual([(r["name"], r["status"], r["ok"]) for r in results],
                         [("ok", "pass", True), ("failing", "fail", False), ("skipping", "skip", True), ("crashing", "fail", False)])
        self.assertEqual(results[3]["detail"], "KeyError: 'missing'")

    def test_the_shared_target_lives_from_its_first_user_to_its_last(self):
        log = []
        seen = lambda name: (lambda tools, *t: log.append(f"{name} {t[0].name if t else '-'}"))
        chosen = [Scenario("a", "a", seen("a"), 1, False), Scenario("b", "b", seen("b"), 1, True),
                  Scenario("c", "c", lambda tools, t: (_ for _ in ()).throw(Failed("x")), 1, True),
                  Scenario("d", "d", seen("d"), 1, True), Scenario("e", "e", seen("e"), 1, False)]
        quiet_run(chosen, None, 1, lambda: Thing(log, "shared"))
        self.assertEqual(log, ["a -", "start shared", "b shared", "d shared", "close shared", "e -"])


class Lifetimes(unittest.TestCase):
    def test_with_closes_on_failure(self):
        log = []
        with self.assertRaises(Failed):
            with Thing(log, "one"):
                raise Failed("the scenario failed")
        self.assertEqual(log, ["start one", "close one"])

    def test_several_closes_those_started_when_a_later_one_fails(self):
        log = []
        with self.assertRaisesRegex(Failed, "2 did not start"):
            with several(4, lambda i: Thing(log, str(i), fail=i == 2)):
                pass
        self.assertEqual(log, ["start 0", "start 1", "close 1", "close 0"])


class PodmanMachinery(unittest.TestCase):
    """The Podman scenario's set-up, without Podman: what it writes."""

    def setUp(self):
        from podman_container import Podman

        self.work = tempfile.TemporaryDirectory()
        self.podman = Podman("/nonexistent/podman", self.work.name, "/usr/sbin/runc", "/opt/runc lib",
                             "/opt/criu/criu", {"LD_LIBRARY_PATH": "/opt/criu/lib"})

    def tearDown(self):
        self.work.cleanup()

    def test_the_runtime_wrapper_gives_criu_its_environment_quoted(self):
        self.podman.criu_environment({"CRIU_LIBS_DIR": "/plugins dir", "CUDACKPT_MAP": "0=1"})
        with open(self.podman.wrapper) as f:
            text = f.read()
        self.assertIn("export CRIU_LIBS_DIR='/plugins dir'", text)
        self.assertIn("export CUDACKPT_MAP=0=1", text)
        self.assertIn("export LD_LIBRARY_PATH='/opt/runc lib:/opt/criu/lib'", text)
        self.assertTrue(text.rstrip().endswith('exec /usr/sbin/runc --criu /opt/criu/criu "$@"'), text)
        # The shell reads it back as written.
        out = subprocess.run(["sh", "-n", self.podman.wrapper], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.podman.criu_environment({})
        with open(self.podman.wrapper) as f:
            self.assertNotIn("CUDACKPT_MAP", f.read(), "a restore's map does not outlive it")

    def test_nothing_of_the_host_s_containers_configuration_is_read(self):
        env = self.podman.env
        for name in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "HOME"):
            self.assertTrue(env[name].startswith(self.work.name), f"{name}={env[name]}")
        self.assertTrue(os.path.exists(os.path.join(env["HOME"], ".config", "containers", "policy.json")))

    def test_the_image_holds_each_entry_once(self):
        from podman_container import empty_root_archive

        path = os.path.join(self.work.name, "root.tar")
        empty_root_archive(path)
        with tarfile.open(path) as tar:
            names = tar.getnames()
        self.assertEqual(len(names), len(set(names)), names)
        for needed in ("proc", "dev", "tmp", "etc", "cudackpt", "usr"):
            self.assertIn(needed, names)


if __name__ == "__main__":
    unittest.main()
