"""The GPU suite's scenarios, one module a topic. Importing this package
registers them all; the import order below is the run's order."""

from scenarios import basics, groups, runc, own_plugin, criu, disk, snapshots, slurm, pytorch, drain, kept  # noqa: F401 (registers)
