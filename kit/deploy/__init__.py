"""Stage 3, rules and render: a preset's rules (compatibility, parallelism, memory fit: they need the plan) gate
the deployment plan, which the renderers lay out as Dockerfile, compose, Kubernetes and profile files. Pure:
nothing here writes (kit/core/write.py does) or talks to Docker."""
