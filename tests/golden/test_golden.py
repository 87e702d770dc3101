"""Every preset's rendered output, compared exactly with the reviewed golden files.

UPDATE_GOLDEN=1 regenerates them (`make golden`); review the diff before committing.
Rendered Dockerfiles must pass hadolint and compose files `docker compose config -q`.
"""

import os
import subprocess
from pathlib import Path

import pytest

from kit.config.preset_files import preset_names
from kit.deploy.pipeline import prepare
from tests.conftest import require_compose, require_tool

GOLDEN = Path(__file__).resolve().parent / "files"
PRESETS = preset_names()
# Beyond one preset per folder: the multi-node stacks and the Kubernetes target, reviewed the same way.
# golden name -> (preset, overrides, target)
VARIANTS = {
    "a100x8@nodes2": ("a100x8", ["hardware.nodes=2", "cluster.head_address=ray-head.example.internal"], "compose"),
    "a100x8@nodes2-k8s": ("a100x8", ["hardware.nodes=2"], "k8s"),
    "cpu@nodes2-bridge": ("cpu", ["hardware.nodes=2", "cluster.network=bridge"], "compose"),
    "cpu@k8s": ("cpu", [], "k8s"),
    "rtx3090x2-fp16@k8s": ("rtx3090x2-fp16", [], "k8s"),
    "orin@k8s": ("orin", [], "k8s"),  # runtimeClassName nvidia
    "cpu+cpu-embed": ("cpu", [], "compose"),
    "cpu@monitoring": ("cpu", [], "compose"),
    "a100x8@nodes2-monitoring": ("a100x8", ["hardware.nodes=2", "cluster.head_address=ray-head.example.internal"],
                                 "compose"),
    "cpu@replicas2": ("cpu", ["runtime.replicas=2"], "compose"),  # two servers behind vLLM's router
    "cpu+webui": ("cpu", [], "compose"),
}
# Side-by-side stacks: golden name -> the presets whose servers join the main one (--with-preset).
WITH_PRESETS = {"cpu+cpu-embed": ["cpu-embed"]}
# Profiles (--with): golden name -> the profiles whose services join the stack.
WITH_PROFILES = {"cpu@monitoring": ["monitoring"], "a100x8@nodes2-monitoring": ["monitoring"],
                 "cpu+webui": ["webui"]}
CASES = {name: (name, [], "compose") for name in PRESETS} | VARIANTS
# An address from the documentation range: `docker compose config` needs VLLM_HOST_IP for host networking.
# The monitoring profile's Grafana and the webui profile refuse to start without their secrets (from .env).
COMPOSE_ENV = {"VLLM_HOST_IP": "192.0.2.10", "VLLM_API_KEY": "golden-test-not-a-key", "GRAFANA_ADMIN_PASSWORD": "golden-test",
               "WEBUI_SECRET_KEY": "golden-test-not-a-secret", "WEBUI_ADMIN_EMAIL": "admin@example.test",
               "WEBUI_ADMIN_PASSWORD": "golden-test-not-a-secret"}


REPO = GOLDEN.parents[2]
# Files a render ships as they are in the kit (programs that run in the image or the stack): a golden copy of each
# would only repeat the source. They are compared with their source instead, and SHIPPED lists which a case ships.
SHIPPED_SOURCES = [*sorted((REPO / "kit" / "launch").glob("*.py")), REPO / "kit" / "config" / "tinymodel.py",
                   REPO / "kit" / "image" / "prune.py", *sorted((REPO / "images").glob("*.sh"))]
SHIPPED_LIST = "SHIPPED"


def shipped_copies(files: dict[str, str]) -> dict[str, str]:
    """rendered path -> the kit source it is a verbatim copy of."""
    by_text = {path.read_text(): path.relative_to(REPO).as_posix() for path in SHIPPED_SOURCES}
    return {rel: by_text[text] for rel, text in files.items() if text in by_text}


def golden_view(files: dict[str, str]) -> dict[str, str]:
    """What the golden folder holds for a render: every file but the shipped copies, and the list of those."""
    copies = shipped_copies(files)
    view = {rel: text for rel, text in files.items() if rel not in copies}
    view[SHIPPED_LIST] = "".join(f"{rel} = {source}\n" for rel, source in sorted(copies.items()))
    return view


def render_case(name: str) -> dict[str, str]:
    preset, overrides, target = CASES[name]
    return prepare(preset, overrides, target=target, with_presets=WITH_PRESETS.get(name),
                   with_profiles=WITH_PROFILES.get(name)).files


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request):
    return request.param, render_case(request.param)


def test_matches_golden(rendered):
    name, files = rendered
    files = golden_view(files)
    folder = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in sorted(folder.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    on_disk = ({p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}
               if folder.is_dir() else {})
    assert set(on_disk) == set(files), f"golden files for {name} are stale: run `make golden` and review the diff"
    for rel, text in files.items():
        assert text == on_disk[rel], f"{name}/{rel} differs from its golden file: run `make golden` and review"


def test_render_is_deterministic(rendered):
    name, files = rendered
    assert render_case(name) == files


def test_dockerfile_passes_hadolint(rendered, tmp_path):
    hadolint = require_tool("hadolint")
    _, files = rendered
    (tmp_path / "Dockerfile").write_text(files["Dockerfile"])
    result = subprocess.run([hadolint, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(name for name, (_, _, target) in CASES.items() if target == "compose"))
def test_compose_config_is_valid(name, tmp_path):
    docker = require_compose()
    files = render_case(name)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    compose_files = sorted(rel for rel in files if rel.startswith("compose") and rel.endswith(".yaml"))
    assert compose_files, f"{name}: a compose target rendered no compose file"
    # A one-host cluster (bridge networking) is one project of both files, as its header prints; each file alone
    # is what a host of a host-network cluster runs.
    overlay = "docker compose -f compose.head.yaml -f compose.worker.yaml up -d"
    groups = ([["compose.head.yaml", "compose.worker.yaml"]] if overlay in files.get("compose.head.yaml", "")
              else [[rel] for rel in compose_files])
    for group in groups:
        argv = [docker, "compose", *[a for rel in group for a in ("-f", str(tmp_path / rel))], "config", "-q"]
        result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **COMPOSE_ENV})
        assert result.returncode == 0, f"{' + '.join(group)}: {result.stderr}"
