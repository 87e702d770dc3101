"""A key by default (issue 35, item 3) and a `next:` line that runs as printed (issue 36, item 2): `kit render` writes
what the stack requires and the kit can make into the folder's .env (random secrets, never into a rendered file),
keeps every byte the user wrote there, never follows a link or reads a FIFO, and prints only names."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import threading

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.cli.up import auth_header_option
from kit.core.envfile import EnvFileError, fill_env_values, read_env_file

pytestmark = pytest.mark.unit

TOKEN = re.compile(r"[A-Za-z0-9_-]{43,}")  # secrets.token_urlsafe(32): 32 bytes, 43 characters
PEM = ('MY_TLS_KEY="-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n'
       '-----END PRIVATE KEY-----"\n')


def render(out, *args):
    return CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out), *args])


def render_json(out, *args):
    result = render(out, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def next_line(result) -> str:
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("next: ")]
    return line


def test_render_writes_a_random_key_into_a_new_env_mode_0600_and_never_prints_it(tmp_path):
    result = render(tmp_path)
    assert result.exit_code == 0, result.output
    env = tmp_path / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    key = read_env_file(env)["VLLM_API_KEY"]
    assert key and TOKEN.fullmatch(key)
    assert key not in result.output
    assert f"wrote VLLM_API_KEY into {env}" in result.stderr
    # Never in a rendered file: only .env holds it.
    holders = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file() and key in p.read_text()]
    assert holders == [".env"]
    # Each render makes its own.
    other = tmp_path / "other"
    assert render(other).exit_code == 0
    assert read_env_file(other / ".env")["VLLM_API_KEY"] != key


def test_a_re_render_keeps_the_key_and_every_byte_of_the_users_env(tmp_path):
    env = tmp_path / ".env"
    mine = f"# my notes\nexport HF_TOKEN=hf_mine\n{PEM}HF_ENDPOINT='https://mirror.example/x # y'\n"
    env.write_text(mine)
    assert render(tmp_path).exit_code == 0
    text = env.read_text()
    assert text.startswith(mine)  # kept byte for byte; the key appended after a comment that says who wrote it
    added = text[len(mine):]
    assert added.startswith("# Written by vllm-kit") and re.search(r"^VLLM_API_KEY=[A-Za-z0-9_-]{43,}$", added, re.M)
    before = env.read_bytes()
    assert render(tmp_path).exit_code == 0
    assert env.read_bytes() == before  # set now: never replaced
    assert read_env_file(env)["MY_TLS_KEY"].startswith("-----BEGIN PRIVATE KEY-----\n")


@pytest.mark.parametrize("empty", ["VLLM_API_KEY=", "VLLM_API_KEY=''", "export VLLM_API_KEY=   ", "VLLM_API_KEY"])
def test_an_empty_key_is_no_key_and_is_filled_on_its_own_line(tmp_path, empty):
    env = tmp_path / ".env"
    env.write_text(f"# first\n{empty}\nHF_TOKEN=hf_x\n")
    assert render(tmp_path).exit_code == 0
    lines = env.read_text().splitlines()
    assert lines[0] == "# first" and lines[2] == "HF_TOKEN=hf_x" and len(lines) == 3
    assert lines[1].startswith("VLLM_API_KEY=") and TOKEN.fullmatch(lines[1].removeprefix("VLLM_API_KEY="))


def test_a_set_key_stays_and_the_file_is_not_rewritten(tmp_path):
    env = tmp_path / ".env"
    env.write_text("VLLM_API_KEY=my-own-key\n")
    env.chmod(0o640)
    inode = env.stat().st_ino
    assert render(tmp_path).exit_code == 0
    assert env.read_text() == "VLLM_API_KEY=my-own-key\n" and env.stat().st_ino == inode
    assert stat.S_IMODE(env.stat().st_mode) == 0o640


def test_a_linked_env_is_neither_followed_nor_replaced_and_next_says_so(tmp_path):
    elsewhere = tmp_path / "elsewhere.env"
    elsewhere.write_text("HF_TOKEN=hf_x\n")
    out = tmp_path / "deploy"
    out.mkdir()
    (out / ".env").symlink_to(elsewhere)
    result = render(out)
    assert result.exit_code == 0, result.output
    assert (out / ".env").is_symlink() and elsewhere.read_text() == "HF_TOKEN=hf_x\n"
    assert next_line(result).startswith(f"next: make sure {out / '.env'} sets VLLM_API_KEY (the kit left it alone: "
                                        "is a link")
    with pytest.raises(EnvFileError, match="is a link"):
        fill_env_values(out / ".env", {"VLLM_API_KEY": "k"})


def test_a_fifo_env_is_not_read_or_written(tmp_path):
    os.mkfifo(tmp_path / ".env")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(render(tmp_path)), daemon=True)
    worker.start()
    worker.join(60)
    assert done, "kit render hung on a FIFO .env"
    assert done[0].exit_code == 0 and stat.S_ISFIFO(os.lstat(tmp_path / ".env").st_mode)
    assert "make sure" in next_line(done[0])


def test_a_keyless_stack_asked_for_by_name_gets_no_key(tmp_path):
    result = render(tmp_path, "runtime.require_api_key=false")
    assert result.exit_code == 0
    assert not (tmp_path / ".env").exists()
    assert "warning: override runtime.require_api_key: false" in result.stderr


def test_add_ons_get_their_secrets_and_the_next_line_needs_nothing_else(tmp_path):
    data = render_json(tmp_path, "--with", "monitoring", "--with", "webui")
    written = data["data"]["env"]["written"]
    assert set(written) == {"VLLM_API_KEY", "GRAFANA_ADMIN_PASSWORD", "WEBUI_SECRET_KEY", "WEBUI_ADMIN_PASSWORD",
                            "WEBUI_ADMIN_EMAIL"}
    assert data["data"]["env"]["missing"] == []
    values = read_env_file(tmp_path / ".env")
    assert values["WEBUI_ADMIN_EMAIL"] == "admin@localhost"
    assert all(TOKEN.fullmatch(values[n] or "") for n in written if n != "WEBUI_ADMIN_EMAIL")
    assert len({values[n] for n in written}) == len(written)  # one secret each, never shared
    # Taken out again: the add-on's values stay (its data volume keeps the account), and are not warned about.
    result = render(tmp_path, "--without", "webui")
    assert result.exit_code == 0 and "reaches no container" not in result.output
    assert "WEBUI_SECRET_KEY" in read_env_file(tmp_path / ".env")


def test_dry_run_and_diff_write_no_env(tmp_path):
    for option in ("--dry-run", "--diff"):
        assert render(tmp_path / option.strip("-"), option).exit_code == 0
        assert not (tmp_path / option.strip("-") / ".env").exists()


def test_kubernetes_gets_the_key_for_its_secret(tmp_path):
    result = render(tmp_path, "--target", "k8s")
    assert result.exit_code == 0
    assert TOKEN.fullmatch(read_env_file(tmp_path / ".env")["VLLM_API_KEY"] or "")
    assert "kubectl create secret generic" in (tmp_path / "k8s" / "kustomization.yaml").read_text()


def test_the_next_line_names_what_the_kit_cannot_make(tmp_path):
    """A host-networked cluster's head needs this host's address, which only the user knows: the next line says to
    set it first; the key the kit made is not named."""
    result = CliRunner().invoke(cli, ["render", "preset=a100x8", "hardware.nodes=2", "cluster.head_address=10.0.0.11",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    line = next_line(result)
    assert line.startswith(f"next: set VLLM_HOST_IP in {tmp_path / '.env'} (.env.example says what each is), then: ")
    assert "VLLM_API_KEY" not in line and read_env_file(tmp_path / ".env")["VLLM_API_KEY"]


def test_the_next_line_removes_the_services_a_render_took_out(tmp_path):
    line = next_line(render(tmp_path))
    assert line.endswith(" up -d --wait --remove-orphans")


def test_the_printed_auth_header_sends_the_folders_key_in_a_shell(tmp_path):
    """`kit up` prints curl lines with this header; a POSIX shell, in the directory `kit up` ran in, expands it to
    the key compose reads from .env (quoted and exported forms too), and the kit itself never prints the value."""
    out = tmp_path / "my run"
    out.mkdir()
    for text, key in (("VLLM_API_KEY=plain-key_1\n", "plain-key_1"),
                      ("# c\nexport VLLM_API_KEY='quoted key'\nHF_TOKEN=x\n", "quoted key")):
        (out / ".env").write_text(text)
        for where, folder in ((tmp_path, out.relative_to(tmp_path)), (out, out.relative_to(out))):
            line = "printf '%s\\n'" + auth_header_option(folder)
            done = subprocess.run(["sh", "-c", line], cwd=where, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == ["-H", f"Authorization: Bearer {key}"], (line, done.stdout)
            assert key not in line and "$VLLM_API_KEY" in line
    assert shlex.split(auth_header_option(out))[0] == "-H"


def test_a_folder_the_kit_cannot_write_env_in_is_one_line_not_a_traceback(tmp_path):
    # A folder that is not there (the tests run as root, for whom a read-only folder is writable): an OS error
    # is EnvFileError naming the file, which render reports as a warning and its next line, never a traceback.
    with pytest.raises(EnvFileError, match=r"gone/\.env: cannot write \(No such file or directory\)"):
        fill_env_values(tmp_path / "gone" / ".env", {"VLLM_API_KEY": "k"})
    assert not (tmp_path / "gone").exists()


def test_a_second_write_adds_names_not_a_second_header(tmp_path, monkeypatch):
    """The walk: render wrote the key under the kit's two-line header; a re-render with a site image in the shell
    (VLLM_KIT_DOOR_IMAGE) appended that name under a second copy of the same header."""
    from kit.deploy.door import IMAGE_ENV
    from kit.deploy.service_env import HEADER

    assert render(tmp_path).exit_code == 0
    monkeypatch.setenv(IMAGE_ENV, "vllm-kit/standin-haproxy:local")
    assert render(tmp_path).exit_code == 0
    text = (tmp_path / ".env").read_text()
    assert text.count(HEADER[0]) == 1, text
    assert set(read_env_file(tmp_path / ".env")) == {"VLLM_API_KEY", IMAGE_ENV}
    # A header the user removed comes back once, above what is added.
    (tmp_path / ".env").write_text("HF_TOKEN=hf_x\n")
    fill_env_values(tmp_path / ".env", {"VLLM_API_KEY": "k"}, HEADER)
    assert (tmp_path / ".env").read_text() == "HF_TOKEN=hf_x\n" + "".join(f"# {line}\n" for line in HEADER) + \
        "VLLM_API_KEY=k\n"
