"""Writing: create / identical / changed, user edits kept unless forced, all or nothing, atomic."""

import json

import pytest

from kit.core.errors import KitError
from kit.core.write import LOCK_FILE, MANIFEST, write_files


def statuses(results):
    return {r.path: r.status for r in results}


def test_create_then_identical(tmp_path):
    files = {"a.txt": "one\n", "b.txt": "two\n"}
    assert statuses(write_files(files, tmp_path)) == {"a.txt": "create", "b.txt": "create"}
    assert statuses(write_files(files, tmp_path)) == {"a.txt": "identical", "b.txt": "identical"}
    assert (tmp_path / "a.txt").read_text() == "one\n"
    assert set(json.loads((tmp_path / MANIFEST).read_text())["files"]) == {"a.txt", "b.txt"}


def test_kit_written_file_is_updated(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path)) == {"a.txt": "changed"}
    assert (tmp_path / "a.txt").read_text() == "uno\n"


def test_user_edit_is_kept_and_nothing_is_written(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    (tmp_path / "a.txt").write_text("my edit\n")
    with pytest.raises(KitError) as info:
        write_files({"a.txt": "uno\n", "b.txt": "dos\n"}, tmp_path)
    assert "a.txt" in info.value.lines()[0] and "--force" in info.value.lines()[0]
    assert (tmp_path / "a.txt").read_text() == "my edit\n"
    assert (tmp_path / "b.txt").read_text() == "two\n"  # all or nothing


def test_foreign_file_is_not_clobbered(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM mine:1\n")
    with pytest.raises(KitError):
        write_files({"Dockerfile": "FROM kit:1\n"}, tmp_path)
    assert (tmp_path / "Dockerfile").read_text() == "FROM mine:1\n"


def test_force_overwrites(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    (tmp_path / "a.txt").write_text("my edit\n")
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path, force=True)) == {"a.txt": "forced"}
    assert (tmp_path / "a.txt").read_text() == "uno\n"


def test_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "out"
    assert statuses(write_files({"a.txt": "one\n"}, out, dry_run=True)) == {"a.txt": "create"}
    assert not out.exists()


def test_no_temporary_files_left(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    write_files({"a.txt": "two\n"}, tmp_path)
    # The lock file stays (it is empty and only ever flock'ed); nothing else of the writer's does.
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, LOCK_FILE, "a.txt"]


def test_out_must_be_a_directory(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(KitError):
        write_files({"a.txt": "one\n"}, target)


def test_stack_paths_are_absolute_whatever_the_caller_passes(tmp_path, monkeypatch):
    from kit.run.stack import Stack

    monkeypatch.chdir(tmp_path)
    stack = Stack(__import__("pathlib").Path("run/cpu"), "cpu")
    assert stack.directory == tmp_path / "run" / "cpu"
    assert stack.log_path.is_absolute()
