"""The webui profile through Compose itself (`docker compose config`, no engine, no Open WebUI image): the key
reaches Open WebUI from .env, the stack refuses to start without a session key, and both services share a network."""

import os
import subprocess

import pytest
import yaml

from kit.deploy.pipeline import prepare
from kit.deploy.webui import SERVICE
from tests.conftest import require_compose


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory):
    docker = require_compose()
    folder = tmp_path_factory.mktemp("webui-stack")
    for rel, text in prepare("cpu", [], with_profiles=["webui"]).files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return docker, folder


def compose_config(docker, folder, env_text):
    (folder / ".env").write_text(env_text)
    # Only PATH and HOME (the compose plugin) from the test's environment: a WEBUI_SECRET_KEY exported there
    # must not satisfy the check.
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(folder))}
    return subprocess.run([docker, "compose", "config", "--format", "yaml"], capture_output=True, text=True,
                          cwd=folder, env=env)


def test_keys_reach_open_webui_from_env(stack_dir):
    docker, folder = stack_dir
    result = compose_config(docker, folder, "VLLM_API_KEY=k-from-env\nWEBUI_SECRET_KEY=s-from-env\nWEBUI_PORT=18080\n"
                            "WEBUI_ADMIN_EMAIL=admin@example.test\nWEBUI_ADMIN_PASSWORD=p-from-env\n")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    webui = resolved["services"][SERVICE]
    assert webui["environment"]["OPENAI_API_KEY"] == "k-from-env"
    assert webui["environment"]["WEBUI_SECRET_KEY"] == "s-from-env"
    # The admin account from .env, sign-up off (issue 23, item 3).
    assert webui["environment"]["WEBUI_ADMIN_EMAIL"] == "admin@example.test"
    assert webui["environment"]["WEBUI_ADMIN_PASSWORD"] == "p-from-env"
    assert webui["environment"]["WEBUI_ADMIN_NAME"] == "Admin"
    assert webui["environment"]["ENABLE_SIGNUP"] == "False"
    port = webui["ports"][0]
    assert (port["host_ip"], str(port["published"]), port["target"]) == ("127.0.0.1", "18080", 8080)
    server = next(name for name in webui["depends_on"])
    # One project network: Open WebUI resolves the server by its service name.
    assert set(webui["networks"]) == set(resolved["services"][server]["networks"]) == {"default"}
    assert webui["volumes"][0]["type"] == "volume" and webui["volumes"][0]["source"] == "webui-data"
    # The files on disk still hold no value.
    assert "k-from-env" not in (folder / "compose.yaml").read_text()


def test_stack_refuses_to_start_without_a_session_key(stack_dir):
    docker, folder = stack_dir
    result = compose_config(docker, folder, "VLLM_API_KEY=k\nWEBUI_ADMIN_EMAIL=a@example.test\nWEBUI_ADMIN_PASSWORD=p\n")
    assert result.returncode != 0
    assert "WEBUI_SECRET_KEY" in result.stderr and ".env" in result.stderr


@pytest.mark.parametrize("missing", ["WEBUI_ADMIN_EMAIL", "WEBUI_ADMIN_PASSWORD"])
def test_stack_refuses_to_start_without_the_admin_account(stack_dir, missing):
    # Sign-up is off: without the admin account from .env nobody could log in, so compose refuses, naming it.
    docker, folder = stack_dir
    env = {"VLLM_API_KEY": "k", "WEBUI_SECRET_KEY": "s", "WEBUI_ADMIN_EMAIL": "admin@example.test",
           "WEBUI_ADMIN_PASSWORD": "p"}
    del env[missing]
    result = compose_config(docker, folder, "".join(f"{k}={v}\n" for k, v in env.items()))
    assert result.returncode != 0
    assert missing in result.stderr and ".env" in result.stderr
