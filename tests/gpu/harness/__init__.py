"""What the GPU suite's scenarios are built from: the registry and its
runner, the host's settings, cudackpt and its target program, processes and
waits, CRIU and runc, and the jobs (PyTorch, torchrun) the scenarios drive."""
