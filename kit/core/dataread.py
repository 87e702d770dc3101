"""Hardware and software facts live in data files; this module is the one place that reads them: kit/data/ and the
shipped folders (presets/, images/, compose/) in either layout. The bottom of kit/core: yaml and versions.py only, so
the CLI's start reads it without the table models (kit/core/datafiles.py adds vllm.yaml with the user's rows,
checked by kit/core/tables.py)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import yaml

from kit.core.versions import version

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # kit/, above this core/ package
DATA_DIR = PACKAGE_DIR / "data"
# In a checkout (and an editable install) presets/, images/ and compose/ sit at the top of the repository,
# beside the package (the layout docs/architecture/index.md describes). A wheel or sdist install ships them inside the package as
# kit/_presets, kit/_images, kit/_compose (pyproject.toml maps them). This is the one place that knows both.
REPO_ROOT = PACKAGE_DIR.parent


def _shipped_dir(folder: str) -> Path:
    installed = resources.files("kit").joinpath(f"_{folder}")
    if installed.is_dir():
        # Installed wheels are unpacked on disk (pip never installs zipped), so the traversable is a path;
        # Jinja's loader and the preset listing need a real directory.
        return Path(str(installed))
    return REPO_ROOT / folder


def checkout_root() -> Path | None:
    """The repository this package runs from, or None when it is installed from a wheel or sdist."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "presets").is_dir() else None


PRESETS_DIR = _shipped_dir("presets")
IMAGES_DIR = _shipped_dir("images")
COMPOSE_DIR = _shipped_dir("compose")
TEMPLATES_DIR = PACKAGE_DIR / "templates"


# libyaml's parser when PyYAML was built with it (the wheels are): the same safe constructors, parsed in C. The
# data files are most of what a `kit render` reads (issue 14: a render within 0.6 s); SafeLoader otherwise.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_yaml(name: str) -> Any:
    with (DATA_DIR / name).open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader, C or Python


def gpu_catalog() -> dict[str, dict[str, Any]]:
    return load_yaml("gpus.yaml")["gpus"]


def prune_rules(cuda: str | None = None, leave_out: Sequence[str] = ()) -> dict[str, Any]:
    """What slim GPU images leave out (kit/data/prune.yaml), as kit/image/prune.py reads it.

    With ``cuda`` (the image's CUDA, "13.0"), distributions whose rule says ``cuda_from`` are kept in images of
    an older CUDA; without it, every rule is returned. ``leave_out`` names features (prune.yaml ``features``)
    whose distributions join the list, each with its feature's reason.
    """
    rules = load_yaml("prune.yaml")
    distributions = list(rules["distributions"])
    if cuda is not None:
        distributions = [d for d in distributions if "cuda_from" not in d or version(cuda) >= version(d["cuda_from"])]
    for feature in leave_out:
        spec = rules["features"][feature]
        distributions += [{"name": name, "feature": feature, "reason": f"feature {feature} left out: {spec['reason']}"}
                          for name in spec["distributions"]]
    return {**rules, "distributions": distributions}


FLOOR_DIR = DATA_DIR / "floor"


# The floor of the release the slim presets pin (kit/data/floor/README.md): measured on the slim set itself.
FLOOR_NAME = "vllm-0.33.0-h200"


@functools.cache
def floor_files(name: str = FLOOR_NAME) -> list[dict[str, Any]]:
    """The measured floor (kit/data/floor/NAME.json.xz): one dict per file, keyed by the file's `columns`."""
    import json
    import lzma

    with lzma.open(FLOOR_DIR / f"{name}.json.xz", "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    return [dict(zip(data["columns"], row, strict=True)) for row in data["files"]]
