"""Rendered files through the tools that read them: `docker compose config` (the docker CLI and its Compose plugin,
no engine) and hadolint. These need tools on the host, so they live with the golden layer (`make test-golden`:
"golden files, hadolint and compose config"), not in tests/unit ("no Docker"). A missing tool fails in CI."""

from __future__ import annotations

import json
import os
import subprocess

import yaml

from kit.core.safevalue import compose_escape
from kit.deploy.pipeline import prepare
from tests.conftest import require_compose, require_tool
from tests.unit.test_injection import override, structure
from tests.unit.test_multinode import HEAD, files_for
from tests.unit.test_router import compose


# The key the stack requires by default (runtime.require_api_key), as `kit render` would have written it into .env.
TEST_ENV = "VLLM_API_KEY=tools-test-not-a-key\n"


def write(files: dict[str, str], folder, env: bool = True) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    if env:
        (folder / ".env").write_text(TEST_ENV)


def test_compose_config_accepts_the_one_host_cluster_as_printed(tmp_path):
    """Bridge networking: the header's own command overlays both files into one project; compose merges a service
    both define (lists concatenated), so the worker file must not repeat the head's one-shot fetch."""
    docker = require_compose()
    files = files_for("hardware.nodes=2", "cluster.network=bridge")
    write(files, tmp_path)
    printed = "docker compose -f compose.head.yaml -f compose.worker.yaml up -d"
    assert printed in files["compose.head.yaml"]
    argv = [docker, *printed.split()[1:-2], "config", "--format", "json"]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert services["model-fetch"]["security_opt"] == ["no-new-privileges:true"]
    assert "model-fetch" in services["ray-worker"]["depends_on"]


def test_compose_config_accepts_both_cluster_roles(tmp_path):
    docker = require_compose()
    write(files_for("hardware.nodes=2", HEAD), tmp_path)
    env = {**os.environ, "VLLM_HOST_IP": "192.0.2.10"}  # documentation range; nothing is contacted
    for name in ("compose.head.yaml", "compose.worker.yaml"):
        result = subprocess.run([docker, "compose", "-f", name, "config", "-q"], cwd=tmp_path, env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    missing = subprocess.run([docker, "compose", "-f", "compose.head.yaml", "config", "-q"], cwd=tmp_path,
                             env={k: v for k, v in os.environ.items() if k != "VLLM_HOST_IP"},
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "VLLM_HOST_IP" in missing.stderr


def test_hardened_compose_passes_docker_compose_config(tmp_path):
    docker = require_compose()
    write(prepare("cpu").files, tmp_path)
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    svc = json.loads(result.stdout)["services"]["vllm"]
    assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"] and svc["pids_limit"] > 0
    assert "/tmp:size=2g,exec" in svc["tmpfs"]


def test_compose_config_reads_a_hostile_render_as_the_literal_values(tmp_path):
    docker = require_compose()
    value = "$(id) ${HOME} `x` #c 'q' \"d\" yes 1e3"
    files = prepare("cpu", [override("runtime.unsafe_env.FOO", value)]).files
    (tmp_path / "compose.yaml").write_text(files["compose.yaml"])
    (tmp_path / ".env").write_text(TEST_ENV)
    result = subprocess.run([docker, "compose", "-p", "inj", "config", "--format", "json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Compose prints a literal `$` in its escaped form; an interpolated ${HOME} would print the home directory.
    assert json.loads(result.stdout)["services"]["vllm"]["environment"]["FOO"] == compose_escape(value)


def test_hadolint_passes_a_dockerfile_built_from_hostile_label_and_index_values(tmp_path):
    hadolint = require_tool("hadolint")
    files = prepare("orin", [override("image.pip_index_url", "https://x.example/a b\"$(id)`#")]).files
    (tmp_path / "Dockerfile").write_text(files["Dockerfile"])
    result = subprocess.run([hadolint, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert structure(files)["Dockerfile"] == structure(prepare("orin").files)["Dockerfile"]


def test_compose_and_hadolint_accept_the_router_stack(tmp_path):
    docker = require_compose()
    _, files = compose("runtime.replicas=2")
    write(files, tmp_path)
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    hadolint = require_tool("hadolint")
    result = subprocess.run([hadolint, str(tmp_path / "router" / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_resolves_the_side_by_side_include(tmp_path):
    docker = require_compose()
    write(prepare("cpu", with_presets=["cpu-embed"]).files, tmp_path)
    out = subprocess.run([docker, "compose", "config", "--services"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr  # four services, no clash
    assert sorted(out.stdout.split()) == ["door", "door-cpu-embed", "model-fetch", "model-fetch-cpu-embed",
                                          "model-make", "model-make-cpu-embed", "vllm", "vllm-cpu-embed"]


def test_compose_gives_each_service_only_its_names_from_env(tmp_path):
    """Compose itself resolves the names each service lists from the project's .env: the fetch sees the token, the
    server the key, Grafana its password, and a name no service lists reaches none (no shared env_file)."""
    docker = require_compose()
    write(prepare("cpu", with_profiles=["monitoring", "webui"]).files, tmp_path)
    secrets = {"HF_TOKEN": "tok-fetch-only", "VLLM_API_KEY": "key-server", "GRAFANA_ADMIN_PASSWORD": "pw-grafana",
               "WEBUI_SECRET_KEY": "wsk", "WEBUI_ADMIN_EMAIL": "a@example.org", "WEBUI_ADMIN_PASSWORD": "wpw",
               "NOT_LISTED_ANYWHERE": "stray"}
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert set(services) == {"model-make", "model-fetch", "vllm", "door", "prometheus", "grafana", "webui"}
    seen = {name: {k for k, v in (svc.get("environment") or {}).items() if v in secrets.values()}
            for name, svc in services.items()}
    assert seen["model-fetch"] == {"HF_TOKEN"}
    assert seen["vllm"] == {"VLLM_API_KEY"}
    assert seen["grafana"] == {"GF_SECURITY_ADMIN_PASSWORD"}
    assert seen["webui"] == {"OPENAI_API_KEY", "WEBUI_SECRET_KEY", "WEBUI_ADMIN_EMAIL", "WEBUI_ADMIN_PASSWORD"}
    assert seen["door"] == {"VLLM_API_KEY"}
    assert seen["model-make"] == seen["prometheus"] == set()
    assert "stray" not in result.stdout
    # Names a service lists but .env lacks stay unset (null), never an empty value.
    assert services["model-fetch"]["environment"]["HF_ENDPOINT"] is None


def test_compose_refuses_a_required_key_that_env_lacks(tmp_path):
    docker = require_compose()
    write(prepare("cpu").files, tmp_path, env=False)  # required by default
    config = [docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"]
    missing = subprocess.run(config, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "VLLM_API_KEY" in missing.stderr
    (tmp_path / ".env").write_text("VLLM_API_KEY=\n")  # empty is missing too (`:?`)
    assert subprocess.run(config, capture_output=True, text=True, timeout=60).returncode != 0
    (tmp_path / ".env").write_text("VLLM_API_KEY=k\n")
    present = subprocess.run(config, capture_output=True, text=True, timeout=60)
    assert present.returncode == 0, present.stderr


def test_kubectl_kustomize_builds_the_network_policy(tmp_path):
    kubectl = require_tool("kubectl")
    for overrides in ([], ["hardware.nodes=2"]):
        folder = tmp_path / ("nodes" if overrides else "one")
        write(prepare("cpu", overrides, target="k8s").files, folder)
        result = subprocess.run([kubectl, "kustomize", str(folder / "k8s")], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
        assert "NetworkPolicy" in kinds


def test_an_included_companion_stack_takes_its_names_from_the_same_env(tmp_path):
    """A companion preset's servers live in compose.NAME.yaml, which compose.yaml includes; compose loads an included
    file with its own folder's .env (compose-spec 14-include.md), here the same one: its server gets the key too."""
    docker = require_compose()
    write(prepare("cpu", with_presets=["cpu-embed"]).files, tmp_path)
    (tmp_path / ".env").write_text("VLLM_API_KEY=key-both\nHF_TOKEN=tok-fetches\n")
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    for name in ("vllm", "vllm-cpu-embed"):
        assert services[name]["environment"]["VLLM_API_KEY"] == "key-both" and "HF_TOKEN" not in services[name]["environment"]
    for name in ("model-fetch", "model-fetch-cpu-embed"):
        assert services[name]["environment"]["HF_TOKEN"] == "tok-fetches"
        assert "VLLM_API_KEY" not in services[name]["environment"]
def test_compose_config_reads_yamls_typed_words_as_the_strings_written(tmp_path):
    # Compose's go-yaml reads YAML 1.2: 1e3 and 0o17 are numbers there, and compose refuses a number or a bool
    # as an env value or turns it into other text ("1000", "15"). Each must arrive as the string written.
    from tests.unit.test_yaml_typed_words import TYPED

    docker = require_compose()
    values = {f"KIT_TYPED_{i}": value for i, value in enumerate(TYPED)}
    files = prepare("cpu", [override(f"runtime.unsafe_env.{name}", value) for name, value in values.items()]).files
    (tmp_path / "compose.yaml").write_text(files["compose.yaml"])
    (tmp_path / ".env").write_text(TEST_ENV)
    result = subprocess.run([docker, "compose", "-p", "typed", "config", "--format", "json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    environment = json.loads(result.stdout)["services"]["vllm"]["environment"]
    assert {name: environment.get(name) for name in values} == values
