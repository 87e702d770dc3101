"""Stage 5, run: a built image -> a running stack, proved to answer (smoke), operated (ps, logs, status, down),
load-tested, and probed on a real GPU beside the plan."""
