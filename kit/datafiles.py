"""Hardware and software facts live in data files; this module is the one place that reads them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).resolve().parent / "data"
# Templates and presets sit at the top of the repository, beside the package (the design card's layout).
REPO_ROOT = Path(__file__).resolve().parent.parent
PRESETS_DIR = REPO_ROOT / "presets"
IMAGES_DIR = REPO_ROOT / "images"
COMPOSE_DIR = REPO_ROOT / "compose"


@functools.cache
def load_yaml(name: str) -> Any:
    with (DATA_DIR / name).open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def vllm_table() -> dict[str, Any]:
    return load_yaml("vllm.yaml")


def gpu_catalog() -> dict[str, dict[str, Any]]:
    return load_yaml("gpus.yaml")["gpus"]


def gpu_by_name(name: str) -> tuple[str, dict[str, Any]] | None:
    """Find a GPU by catalog key or alias, case-insensitively."""
    wanted = name.strip().lower()
    for key, entry in gpu_catalog().items():
        names = [key] + [str(a).lower() for a in entry.get("aliases", [])]
        if wanted in names:
            return key, entry
    return None


def gpu_names() -> list[str]:
    names: list[str] = []
    for key, entry in gpu_catalog().items():
        names.append(key)
        names.extend(str(a).lower() for a in entry.get("aliases", []))
    return names
