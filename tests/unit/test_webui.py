"""The chat front end profile (issue 13, point 3): `kit render ... --with webui` adds Open WebUI wired to the
server's OpenAI endpoint on the compose network, with secrets from .env only, its data on a named volume, a
pinned image, a loopback port and the hardening it allows. `make webui-e2e` drives the real thing in a browser."""

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import PresetError
from kit.deploy.pipeline import prepare
from kit.deploy.webui import SERVICE, image_ref, webui_data

SECRET = "sk-sentinel-3f9d"  # must never reach a rendered file


@pytest.fixture(scope="module")
def stack():
    files = prepare("cpu", [], with_profiles=["webui"]).files
    return files, yaml.safe_load(files["compose.yaml"])


def test_webui_points_at_the_server_service_and_its_container_port(stack):
    _, doc = stack
    services = doc["services"]
    webui = services[SERVICE]
    server_name = next(name for name in services if name not in (SERVICE, "model-fetch", "model-make"))
    server_args = services[server_name]["command"]
    container_port = server_args[server_args.index("--port") + 1]
    assert webui["environment"]["OPENAI_API_BASE_URL"] == f"http://{server_name}:{container_port}/v1"
    assert webui["depends_on"] == {server_name: {"condition": "service_healthy"}}
    assert webui["environment"]["ENABLE_OLLAMA_API"] == "False"


def test_tool_calls_follow_the_servers_tool_parser(stack):
    # The cpu preset's server has no tool parser: Open WebUI must not send `tools` (vLLM would refuse "auto").
    _, doc = stack
    assert "--enable-auto-tool-choice" not in doc["services"]["vllm"]["command"]
    params = doc["services"][SERVICE]["environment"]["DEFAULT_MODEL_PARAMS"]
    assert json.loads(params) == {"function_calling": "legacy"}
    with_parser = prepare("cpu", ["engine.enable_auto_tool_choice=true", "engine.tool_call_parser=hermes"],
                          with_profiles=["webui"])
    doc = yaml.safe_load(with_parser.files["compose.yaml"])
    assert "--enable-auto-tool-choice" in doc["services"]["vllm"]["command"]
    assert "DEFAULT_MODEL_PARAMS" not in doc["services"][SERVICE]["environment"]


def test_secrets_come_from_env_by_interpolation_only(stack, monkeypatch):
    _, doc = stack
    env = doc["services"][SERVICE]["environment"]
    assert env["OPENAI_API_KEY"] == "${VLLM_API_KEY:-}"
    assert env["WEBUI_SECRET_KEY"].startswith("${WEBUI_SECRET_KEY:?")
    # Secrets in the renderer's environment do not leak into any file (render is pure).
    monkeypatch.setenv("VLLM_API_KEY", SECRET)
    monkeypatch.setenv("WEBUI_SECRET_KEY", SECRET)
    files = prepare("cpu", [], with_profiles=["webui"]).files
    assert not [path for path, text in files.items() if SECRET in text]
    # The webui service gets no env_file: .env also holds HF_TOKEN, which Open WebUI has no use for.
    assert "env_file" not in doc["services"][SERVICE]


def test_env_example_asks_for_the_session_key_only_with_the_profile(stack):
    files, _ = stack
    # Commented: kit render writes a random one into .env (kit/data/service_env.yaml generated).
    assert re.search(r"^# WEBUI_SECRET_KEY=$", files[".env.example"], re.M)
    assert "WEBUI_SECRET_KEY" not in prepare("cpu", []).files[".env.example"]


def test_image_is_pinned_to_a_release_tag(stack):
    _, doc = stack
    data = webui_data()
    assert doc["services"][SERVICE]["image"] == image_ref() == f"ghcr.io/open-webui/open-webui:{data['tag']}"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", data["tag"]) and data["tag"] == f"v{data['version']}"


def test_data_on_a_named_volume_and_port_on_loopback(stack):
    _, doc = stack
    webui = doc["services"][SERVICE]
    data = webui_data()
    assert webui["volumes"] == [f"{data['volume']}:{data['data_dir']}"]
    assert data["volume"] in doc["volumes"]
    assert webui["environment"]["DATA_DIR"] == data["data_dir"]
    assert webui["ports"] == [f"127.0.0.1:${{WEBUI_PORT:-{data['default_host_port']}}}:{data['container_port']}"]


def test_port_follows_the_presets_bind_address():
    doc = yaml.safe_load(prepare("cpu", ["runtime.bind_address=0.0.0.0"], with_profiles=["webui"]).files["compose.yaml"])
    assert doc["services"][SERVICE]["ports"][0].startswith("0.0.0.0:")


def test_hardened(stack):
    _, doc = stack
    webui = doc["services"][SERVICE]
    assert webui["cap_drop"] == ["ALL"] and "cap_add" not in webui
    assert webui["read_only"] is True
    assert webui["security_opt"] == ["no-new-privileges:true"]
    assert {t.split(":")[0] for t in webui["tmpfs"]} == {"/tmp", "/root"}
    assert webui["pids_limit"] > 0
    assert "privileged" not in webui and "network_mode" not in webui


def test_without_the_profile_nothing_changes():
    doc = yaml.safe_load(prepare("cpu", []).files["compose.yaml"])
    assert SERVICE not in doc["services"] and webui_data()["volume"] not in doc["volumes"]


@pytest.mark.parametrize("overrides, target", [([], "k8s"), (["hardware.nodes=2", "cluster.network=bridge"], "compose")])
def test_profile_refused_where_it_does_not_fit(overrides, target):
    with pytest.raises(PresetError, match="--with webui"):
        prepare("cpu", overrides, target=target, with_profiles=["webui"])


def test_cli_with_webui(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--with", "webui", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert SERVICE in yaml.safe_load((tmp_path / "compose.yaml").read_text())["services"]
    bad = CliRunner().invoke(cli, ["render", "preset=cpu", "--with", "nope", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "nope" in bad.output


def test_sign_up_is_off_and_the_admin_comes_from_env(stack):
    # issue 23, item 3: with open sign-up the first visitor became admin (the server's key, Functions).
    files, doc = stack
    env = doc["services"][SERVICE]["environment"]
    assert env["ENABLE_SIGNUP"] == "False"
    for name in ("WEBUI_ADMIN_EMAIL", "WEBUI_ADMIN_PASSWORD"):
        assert env[name] == f"${{{name}:?set {name} in .env (see .env.example)}}"  # required, from .env only
        assert re.search(rf"^# {name}=", files[".env.example"], re.M)  # kit render writes it into .env
    assert env["WEBUI_ADMIN_NAME"] == "${WEBUI_ADMIN_NAME:-Admin}"
    assert "WEBUI_ADMIN_PASSWORD" not in prepare("cpu", []).files[".env.example"]


def test_a_web_ui_beyond_loopback_is_a_warning_of_its_own():
    def webui_warnings(overrides, profiles):
        return [str(w) for w in prepare("cpu", overrides, with_profiles=profiles).report.warnings
                if "Open WebUI" in str(w)]

    [warning] = webui_warnings(["runtime.bind_address=0.0.0.0"], ["webui"])
    assert warning.startswith("override runtime.bind_address: --with webui publishes Open WebUI on 0.0.0.0:8080")
    assert "WEBUI_ADMIN_PASSWORD" in warning
    assert webui_warnings([], ["webui"]) == []  # loopback
    assert webui_warnings(["runtime.bind_address=0.0.0.0"], []) == []  # no web UI, only the API's own warning
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "runtime.bind_address=0.0.0.0", "--with", "webui",
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning: override runtime.bind_address: --with webui publishes Open WebUI" in result.output
