"""The caches a restart reuses, all on the vLLM cache volume (kit/data/startcache.yaml)."""

from __future__ import annotations

from posixpath import join

from kit.core.datafiles import load_yaml


def cache_env(vllm_cache: str) -> dict[str, str]:
    """Environment that puts every cache vLLM can reuse below `vllm_cache` (the volume's mount point)."""
    data = load_yaml("startcache.yaml")
    env = {name: (join(vllm_cache, row["folder"]) if row["folder"] else vllm_cache)
           for name, row in data["caches"].items()}
    env.update({k: str(v) for k, v in data["switches"].items()})
    return env
