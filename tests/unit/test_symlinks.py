"""No `--out` operation follows a link out of the folder: real symlinks in tmp dirs, one per kind of path the kit
writes (the .kit work folder and folders under it, its files, the staging folder during recovery, .env, a rendered
file), and --out itself as a link to a folder, which is fine (the user chose it; every path then lies there)."""

from __future__ import annotations

import json
import os

import pytest

from kit.core.errors import WriteError
from kit.core.safepaths import open_nofollow, work_folder
from kit.core.write import JOURNAL, STAGING, sha256_bytes, write_files
from kit.image.build import prepare_build_context
from kit.run.stack import Stack, write_smoke_env

pytestmark = pytest.mark.unit


@pytest.fixture
def outside(tmp_path):
    """A folder outside the deployment, which nothing may write into."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious").write_text("keep me\n")
    return folder


@pytest.fixture
def out(tmp_path):
    folder = tmp_path / "deploy"
    folder.mkdir()
    return folder


def untouched(folder):
    return sorted(p.name for p in folder.iterdir()) == ["precious"] and (folder / "precious").read_text() == "keep me\n"


def test_a_linked_kit_folder_is_refused_naming_it(out, outside):
    (out / ".kit").symlink_to(outside)
    with pytest.raises(WriteError, match=r"deploy/\.kit: is a symlink \(to .*outside\); the kit writes its work files"):
        work_folder(out)
    # compose commands log there: refused before compose runs
    with pytest.raises(WriteError, match=r"\.kit: is a symlink"):
        Stack(out, "kit-test-links").run("version")
    assert untouched(outside)


def test_a_linked_folder_under_kit_is_refused(out, outside):
    (out / ".kit").mkdir()
    (out / ".kit" / "router").symlink_to(outside)
    with pytest.raises(WriteError, match=r"\.kit/router: is a symlink"):
        work_folder(out, "router")
    (out / ".kit" / "build-context").symlink_to(outside)
    for name in ("Dockerfile", "requirements.txt", ".dockerignore", "fetch_files.py"):
        (out / name).write_text("x\n")
    with pytest.raises(WriteError, match=r"\.kit/build-context: is a symlink"):
        prepare_build_context(out, work_folder(out) / "build-context")
    assert untouched(outside)


def test_a_linked_work_file_is_refused_and_its_target_kept(out, outside):
    folder = work_folder(out)
    (folder / "build.log").symlink_to(outside / "precious")
    with pytest.raises(WriteError, match=r"\.kit/build\.log: is a symlink"):
        open_nofollow(folder / "build.log")
    with pytest.raises(WriteError, match=r"\.kit/build\.log: is a symlink"):
        open_nofollow(folder / "build.log", "a")
    assert untouched(outside)
    with open_nofollow(folder / "compose.log", "a") as log:
        log.write("a plain file is written\n")
    assert (folder / "compose.log").read_text() == "a plain file is written\n"


def test_a_dangling_env_link_is_refused_and_a_linked_env_file_only_read(out, outside):
    (out / ".env").symlink_to(outside / "new.env")
    with pytest.raises(WriteError, match=r"deploy/\.env: is a symlink \(to .*new\.env\); the kit writes the stack's"):
        write_smoke_env(out)
    assert untouched(outside)
    (out / ".env").unlink()
    (outside / "shared.env").write_text("VLLM_API_KEY=mine\n")
    (out / ".env").symlink_to(outside / "shared.env")
    from kit.core.envfile import EnvFileError

    # Issue 35: .env is read only as a plain file, never through a link (kit/core/envfile.py).
    with pytest.raises(EnvFileError, match=r"deploy/\.env: is a link; the kit reads \.env only as a plain file"):
        write_smoke_env(out)
    assert (outside / "shared.env").read_text() == "VLLM_API_KEY=mine\n"


def test_a_fresh_env_is_private(out):
    values = write_smoke_env(out)
    assert set(values) == {"HF_TOKEN", "VLLM_API_KEY"}
    assert oct((out / ".env").stat().st_mode & 0o777) == "0o600"


def test_recovery_refuses_a_linked_staging_folder(out, outside):
    # A committed journal whose staging folder is a link: following it would move a file from outside in.
    payload = b"FROM evil\n"
    (outside / "0").write_bytes(payload)
    journal = {"version": 2, "moves": [{"staged": "0", "target": "Dockerfile", "sha256": sha256_bytes(payload)},
                                       {"staged": "1", "target": ".vllm-kit.json", "sha256": "0" * 64}],
               "removals": [], "folders": []}
    (out / JOURNAL).write_text(json.dumps(journal))
    (out / STAGING).symlink_to(outside)
    with pytest.raises(WriteError, match=r"\.vllm-kit\.staging: is a symbolic link; the kit stages its writes"):
        write_files({"Dockerfile": "FROM base\n"}, out)
    assert (outside / "0").read_bytes() == payload and not (out / "Dockerfile").exists()


def test_a_linked_rendered_file_is_refused(out, outside):
    (out / "compose.yaml").symlink_to(outside / "precious")
    with pytest.raises(WriteError):
        write_files({"compose.yaml": "services: {}\n"}, out, force=True)
    assert untouched(outside)


def test_out_itself_may_be_a_link_to_a_folder(tmp_path, outside):
    link = tmp_path / "deploy-link"
    link.symlink_to(outside)
    results = write_files({"compose.yaml": "services: {}\n"}, link)
    assert [r.status for r in results] == ["create"]
    assert (outside / "compose.yaml").read_text() == "services: {}\n"
    assert work_folder(link) == link / ".kit" and (outside / ".kit").is_dir()
    os.unlink(link)
