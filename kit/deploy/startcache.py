"""The caches a restart reuses, all on the vLLM cache volume (kit/data/startcache.yaml)."""

from __future__ import annotations

from posixpath import join

from kit.core.datafiles import load_yaml
from kit.core.versions import version


def cache_env(vllm_cache: str, *, gpu: bool, vllm_version: str) -> tuple[dict[str, str], dict[str, str]]:
    """(cache folders, switches): the environment that puts every cache vLLM can reuse below `vllm_cache` (the
    volume's mount point), and the switches the kit sets unless runtime.env does."""
    data = load_yaml("startcache.yaml")
    backend = "gpu" if gpu else "cpu"
    folders = {name: (join(vllm_cache, row["folder"]) if row["folder"] else vllm_cache)
               for name, row in data["caches"].items() if backend in row["backends"]}
    switches = {name: str(row["value"]) for name, row in data["switches"].items()
                if backend in row["backends"] and version(vllm_version) >= version(str(row["since"]))}
    return folders, switches
