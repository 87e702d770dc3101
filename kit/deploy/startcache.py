"""The caches a restart reuses, all on the vLLM cache volume (kit/data/startcache.yaml)."""

from __future__ import annotations

from posixpath import join

from kit.core.datafiles import load_yaml
from kit.core.versions import version


def cache_env(vllm_cache: str, *, gpu: bool, vllm_version: str, startup_plan: bool = True,
              fork_engine: bool = True) -> dict[str, str]:
    """The environment that puts every cache vLLM can reuse below `vllm_cache` (the volume's mount point), and the
    switches (``startup_plan``: runtime.startup_plan; ``fork_engine``: runtime.fork_engine)."""
    data = load_yaml("startcache.yaml")
    backend = "gpu" if gpu else "cpu"
    folders = {name: (join(vllm_cache, row["folder"]) if row["folder"] else vllm_cache)
               for name, row in data["caches"].items() if backend in row["backends"]}
    wanted = {"VLLM_ENABLE_STARTUP_PLAN": startup_plan, "VLLM_WORKER_MULTIPROC_METHOD": fork_engine}
    switches = {name: str(row["value"]) for name, row in data["switches"].items()
                if wanted.get(name, True) and backend in row["backends"]
                and version(vllm_version) >= version(str(row["since"]))}
    return {**folders, **switches}
