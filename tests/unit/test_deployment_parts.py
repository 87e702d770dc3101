"""A Deployment is read through its parts (issue 38): ``d.image.X``, ``d.serve.X``, ``d.runtime.X``. The flat
pass-through names it once kept are gone; these tests fail if one comes back, as an attribute or as a reader."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from kit.core.datafiles import COMPOSE_DIR, IMAGES_DIR, TEMPLATES_DIR
from kit.deploy.deployment import Deployment, ImageSpec, RuntimeSpec, ServeSpec

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PARTS = {"image": ImageSpec, "serve": ServeSpec, "runtime": RuntimeSpec}
# The names Deployment forwarded to a part, and the two it computed (image_strategy: strategy_for(d.image.strategy);
# local_model_dir: now d.serve.local_model_dir) or never had a reader for (gpus_total).
REMOVED = {
    "image": ("strategy", "vllm_version", "platform", "base_image", "cuda", "requirements", "prune", "cuda_jit",
              "image_repository", "notes"),
    "serve": ("entrypoint", "python", "fetch_command", "served_model_name", "model_arg", "model_mount",
              "model_make_command", "serve_args", "pod_serve_args", "environment", "cluster", "local_model_dir"),
    "runtime": ("run_user", "shm", "gpu_devices", "jetson_runtime", "healthcheck_start_period", "healthcheck_reason",
                "hardening"),
    None: ("image_strategy", "gpus_total"),
}
FLAT = sorted(name for names in REMOVED.values() for name in names)
# A deployment is named `d` or `deployment` wherever it is read (`ctx.d`, `c.d` in templates, `prepared.deployment`):
# the removed name right after one of those is a flat read. A part's own attribute (`d.image.cuda`) does not match.
FLAT_READ = re.compile(r"(?<!\w)(?:d|deployment)\.(" + "|".join(FLAT) + r")\b")


def _names(cls: type) -> set[str]:
    """What an instance answers to: dataclass fields (with or without a default) and class attributes."""
    return {f.name for f in fields(cls)} | set(dir(cls))


@pytest.mark.parametrize("name", FLAT)
def test_a_deployment_has_no_flat_name(name):
    assert name not in _names(Deployment)


def test_each_moved_name_lives_on_its_part():
    for part, names in REMOVED.items():
        if part is not None:
            assert set(names) <= _names(PARTS[part]), part


def test_no_deployment_attribute_repeats_a_part_s_field():
    seen: set[str] = set()
    for part in PARTS.values():
        names = {f.name for f in fields(part)}
        assert not names & seen  # each field lives on one part
        seen |= names
    assert not seen & _names(Deployment)


def _sources() -> list[Path]:
    python = [p for top in ("kit", "tests", "bench", "scripts") for p in (REPO / top).rglob("*.py")]
    templates = [p for top in (IMAGES_DIR, COMPOSE_DIR, TEMPLATES_DIR) if top.is_dir() for p in top.rglob("*.j2")]
    return python + templates


def test_the_flat_read_pattern_tells_a_flat_name_from_a_part_s():
    assert FLAT_READ.search("{{ c.d." + "vllm_version }}")
    assert FLAT_READ.search("prepared.deployment." + "model_arg")
    assert not FLAT_READ.search("{{ c.d.image.vllm_version }} ctx.d.serve.cluster d.runtime.shm preset.image.strategy")


def test_nothing_reads_a_flat_name_of_a_deployment():
    sources = _sources()
    assert any(p.name == "render.py" for p in sources) and any(p.suffix == ".j2" for p in sources)
    found = [f"{p}:{n}: {m[0]}" for p in sources
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in FLAT_READ.finditer(line)]
    assert found == []
