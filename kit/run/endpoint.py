"""What a running server answers on and reports, read by kit status and kit loadtest alike: the loopback address
its published port answers on, its API key, and the engine's gauges from /metrics. Light on purpose: kit status
imports it, and the load generator (asyncio, httpx) stays in loadtest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kit.core.datafiles import load_yaml
from kit.core.envfile import env_value

LOOPBACK = "127.0.0.1"
# Addresses whose published port also answers on 127.0.0.1: the stack's own host, where the kit runs.
LOOPBACK_REACHABLE = ("127.0.0.1", "localhost", "0.0.0.0", "::", "[::]")


def api_key_from(stack_dir: Path | None, environ: dict[str, str]) -> str | None:
    """VLLM_API_KEY from the stack's .env (the file compose reads), else from the environment."""

    found = env_value(stack_dir / ".env", "VLLM_API_KEY") if stack_dir else None
    return found or environ.get("VLLM_API_KEY") or None


def metric_specs() -> dict[str, dict[str, str]]:
    return load_yaml("loadtest.yaml")["metrics"]


def read_gauges(text: str, specs: dict[str, dict[str, str]] | None = None) -> dict[str, float]:
    """The sampled gauges from Prometheus text exposition, combined over engines as the data file says."""
    specs = specs if specs is not None else metric_specs()
    by_name = {spec["name"]: key for key, spec in specs.items()}
    seen: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in by_name:
            continue
        try:
            value = float(line.rsplit("}", 1)[-1].split()[0])
        except (ValueError, IndexError):
            continue
        seen.setdefault(by_name[name], []).append(value)
    combine: dict[str, Callable[[list[float]], float]] = {"sum": sum, "max": max}
    return {key: combine[specs[key]["across_engines"]](values) for key, values in seen.items()}
