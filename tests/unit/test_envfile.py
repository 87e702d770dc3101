"""The folder's .env read as compose reads it (python-dotenv), only as a plain file, values never shown (issue 35,
item 7): a multi-line quoted PEM key is one name, a FIFO or a link is not read (and does not hang the kit)."""

from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.envfile import EnvFileError, read_env_file

pytestmark = pytest.mark.unit

PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       "SECRETLINE=abc\n-----END PRIVATE KEY-----")


def render(out):
    return CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out), "--json"])


def test_a_multi_line_quoted_secret_is_one_name_and_never_printed(tmp_path):
    (tmp_path / ".env").write_text(f'VLLM_API_KEY=k\nMY_TLS_KEY="{PEM}"\nexport HF_TOKEN=t\n')
    assert read_env_file(tmp_path / ".env")["MY_TLS_KEY"] == PEM
    result = render(tmp_path)
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert [w for w in warnings if "reaches no container" in w] == [
        f"{tmp_path / '.env'}: MY_TLS_KEY: reaches no container: each service gets only the .env names compose.yaml "
        "lists (kit/data/service_env.yaml) (hint: a setting for the server goes in the preset's runtime.env)"]
    assert "SECRETLINE" not in result.output and "MIIEvQ" not in result.output and "BEGIN" not in result.output


def test_a_fifo_env_does_not_hang_render(tmp_path):
    os.mkfifo(tmp_path / ".env")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(render(tmp_path)), daemon=True)
    worker.start()
    worker.join(60)
    assert done, "kit render hung on a FIFO .env"
    result = done[0]
    assert result.exit_code == 0, result.output
    assert any(w.startswith(f"{tmp_path / '.env'}: not read: is not a regular file")
               for w in json.loads(result.stdout)["warnings"])


def test_a_linked_env_is_not_read_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.mkfifo(elsewhere / "pipe")  # read through the link, this would hang
    out = tmp_path / "deploy"
    out.mkdir()
    (out / ".env").symlink_to(elsewhere / "pipe")
    with pytest.raises(EnvFileError, match=r"\.env: is a link; the kit reads \.env only as a plain file"):
        read_env_file(out / ".env")
    result = render(out)
    assert result.exit_code == 0, result.output
    assert any(w.startswith(f"{out / '.env'}: not read: is a link") for w in json.loads(result.stdout)["warnings"])


def test_the_key_in_curl_lines_is_read_as_compose_reads_it(tmp_path):
    from kit.run.loadtest import api_key_from

    (tmp_path / ".env").write_text("# a comment\nexport VLLM_API_KEY='sk-quoted # not a comment'\n")
    assert api_key_from(tmp_path, {}) == "sk-quoted # not a comment"
    (tmp_path / ".env").write_text("VLLM_API_KEY=\n")
    assert api_key_from(tmp_path, {"VLLM_API_KEY": "from-env"}) == "from-env"
