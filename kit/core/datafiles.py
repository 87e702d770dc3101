"""kit/data/ as the kit reads it: every name of kit/core/dataread.py (the one reader of the files, which the CLI's
start imports alone), and vllm.yaml with the user's release rows, each checked by kit/core/tables.py (so this module
loads the table models)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from kit.core.dataread import (
    COMPOSE_DIR, DATA_DIR, FLOOR_DIR, FLOOR_NAME, IMAGES_DIR, PACKAGE_DIR, PRESETS_DIR, REPO_ROOT,
    SAFE_LOADER, TEMPLATES_DIR, checkout_root, floor_files, gpu_catalog, load_yaml, prune_rules,
)
from kit.core.tables import shipped_vllm_model, user_rows_with
from kit.core.userdata import user_config_dir

__all__ = ["COMPOSE_DIR", "DATA_DIR", "FLOOR_DIR", "FLOOR_NAME", "IMAGES_DIR", "PACKAGE_DIR", "PRESETS_DIR",
           "REPO_ROOT", "SAFE_LOADER", "TEMPLATES_DIR", "checkout_root", "floor_files", "gpu_catalog",
           "load_yaml", "prune_rules", "vllm_table"]


def vllm_table() -> dict[str, Any]:
    """kit/data/vllm.yaml, with the `versions` rows of releases it lacks from the user's config folder
    (kit/core/userdata.py: $XDG_CONFIG_HOME/vllm-kit/vllm.yaml; the shipped rows win), as written: each checked
    against kit/core/tables.py (kit.core.tables ``vllm_model`` is the same table typed)."""
    return _vllm_table_with(user_config_dir())


@functools.cache
def _vllm_table_with(user_folder: Path | None) -> dict[str, Any]:
    shipped = load_yaml("vllm.yaml")
    shipped_vllm_model()  # checked: a table of the wrong shape is a KitError naming the file and the field
    rows = {version: row.model_dump(exclude_unset=True) for version, row in user_rows_with(user_folder).items()}
    return {**shipped, "versions": {**shipped["versions"], **rows}} if rows else shipped
