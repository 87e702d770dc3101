"""The compose route says how to reach the server, as `kit up` does: the walk's `kit render` then its printed
`docker compose ... up` line left the user with no curl line (only `kit up` printed them). `kit render` now follows its
next line with curl lines that run from the folder that line leaves the shell in, reading the key from ./.env
themselves: the key is never printed, nor written into a rendered file."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.envfile import read_env_file

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _engine_has_the_images(monkeypatch):
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: True)


def render(out, *args):
    result = CliRunner().invoke(cli, ["render", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result


def try_lines(result, out) -> list[str]:
    err = result.stderr.splitlines()
    [at] = [i for i, line in enumerate(err) if line.startswith(f"then try it from {out}, where that line leaves you")]
    assert err[at - 1].startswith(f"next: cd {shlex.quote(str(out))} && docker compose ")  # right after the line
    return [line.strip() for line in err[at + 1:] if line.startswith("  curl ")]


def test_render_prints_curl_lines_that_send_the_key_from_the_folder(tmp_path):
    out = tmp_path / "my run"
    result = render(out, "preset=cpu", "runtime.port=8123")
    key = read_env_file(out / ".env")["VLLM_API_KEY"]
    models, completion = try_lines(result, out)
    assert models.startswith("curl -s http://127.0.0.1:8123/v1/models -H ")
    assert completion.startswith("curl -s http://127.0.0.1:8123/v1/completions -H 'Content-Type: application/json' ")
    body = json.loads(shlex.split(completion)[-1])
    assert body == {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 16}
    # Run as printed in a POSIX shell in the folder (curl stood in by printf): the header carries the folder's key.
    for line in (models, completion):
        done = subprocess.run(["sh", "-c", "printf '%s\\n' " + line.removeprefix("curl ")], cwd=out, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert f"Authorization: Bearer {key}" in done.stdout.splitlines()
    assert key not in result.output
    for path in out.rglob("*"):
        if path.is_file() and path.name != ".env":
            assert key not in path.read_text(errors="replace"), path


def test_a_pooling_server_is_tried_with_an_embedding(tmp_path):
    result = render(tmp_path / "e", "preset=cpu-embed")
    models, request = try_lines(result, tmp_path / "e")
    assert "/v1/embeddings" in request and json.loads(shlex.split(request)[-1])["input"] == "Hello"


def test_kubernetes_gets_no_compose_try_lines(tmp_path):
    result = render(tmp_path, "preset=cpu", "--target", "k8s")
    assert "then try it" not in result.stderr
