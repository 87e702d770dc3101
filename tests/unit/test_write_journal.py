"""Recovery reads the journal a killed write left: each way a journal can fail to be one this kit wrote is refused
with its reason, before anything in the folder is touched; a good one of either version is completed."""

import json

import pytest

from kit.core.errors import KitError
from kit.core.write import JOURNAL, MANIFEST, STAGING, manifest_text, sha256_text, write_files

MOVE = {"staged": "0", "target": "a.txt", "sha256": "x"}


def v2(**fields):
    return {"version": 2, "moves": [MOVE], "removals": [], "folders": []} | fields


def refusal(out, journal: bytes) -> KitError:
    write_files({"a.txt": "one\n"}, out)
    (out / JOURNAL).write_bytes(journal)
    with pytest.raises(KitError) as info:
        write_files({"a.txt": "uno\n"}, out)
    assert (out / "a.txt").read_text() == "one\n" and (out / JOURNAL).read_bytes() == journal  # nothing touched
    return info.value


@pytest.mark.parametrize(("journal", "reason"), [
    (b"", "Expecting value"),
    (b"\xff\xfe", "'utf-8' codec can't decode"),
    (b"[]", "unknown version"),
    (b'{"version": 1.5, "moves": []}', "unknown version"),
    (b'{"version": "2"}', "unknown version"),
    (b'{"version": 0}', "unknown version"),
])
def test_a_journal_that_is_not_json_or_has_no_version_is_refused(tmp_path, journal, reason):
    error = refusal(tmp_path, journal)
    assert error.lines()[0].startswith(f"{tmp_path / JOURNAL}: not a journal this kit wrote (")
    assert reason in error.lines()[0]
    assert error.hint == f"if no kit command is running, delete {JOURNAL} and {STAGING}/ and render again"


@pytest.mark.parametrize(("record", "reason"), [
    ({"version": 1, "moves": [MOVE], "extra": 1}, "keys ['extra', 'moves', 'version'], expected ['moves', 'version']"),
    ({"version": 1, "moves": []}, "no moves, or not lists"),
    (v2(removals={}), "no moves, or not lists"),
    (v2(folders="sub"), "no moves, or not lists"),
    (v2(moves=["a.txt"]), "bad move"),
    (v2(moves=[MOVE | {"mode": "644"}]), "bad move"),
    (v2(moves=[MOVE | {"staged": 0}]), "bad move"),
    (v2(moves=[MOVE | {"target": "../a.txt"}]), "target '../a.txt' is outside the directory"),
    (v2(moves=[MOVE | {"target": f"{STAGING}/0"}]), f"target '{STAGING}/0' is outside the directory"),
    (v2(moves=[MOVE | {"staged": "../0"}]), "bad staged name"),
    (v2(removals=[{"target": "b.txt"}]), "bad removal"),
    (v2(removals=[{"target": "b.txt", "sha256": 1}]), "bad removal"),
    (v2(removals=[{"target": MANIFEST, "sha256": "x"}]), f"removal '{MANIFEST}' is outside the directory"),
    (v2(folders=[1]), "folder 1 is outside the directory"),
    (v2(folders=["a/../.."]), "folder 'a/../..' is outside the directory"),
])
def test_a_journal_entry_that_does_not_fit_is_refused_with_its_reason(tmp_path, record, reason):
    error = refusal(tmp_path, json.dumps(record).encode())
    assert error.lines()[0] == f"{tmp_path / JOURNAL}: not a journal this kit wrote ({reason})"


def test_a_newer_kits_journal_names_the_versions_this_one_reads(tmp_path):
    error = refusal(tmp_path, json.dumps({"version": 7}).encode())
    assert error.lines()[0] == (f"{tmp_path / JOURNAL}: journal version 7, written by a newer vllm-kit "
                                "(this one reads versions 1, 2)")
    assert error.hint.startswith(f"finish the write with the newer kit (any command that renders into {tmp_path}); ")


def test_a_journal_that_is_not_a_regular_file_is_refused(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    (tmp_path / JOURNAL).mkdir()
    with pytest.raises(KitError) as info:
        write_files({"a.txt": "uno\n"}, tmp_path)
    assert info.value.lines()[0] == f"{tmp_path / JOURNAL}: is a directory; the kit keeps its journal here"
    assert (tmp_path / "a.txt").read_text() == "one\n"


def test_a_version_2_journal_with_every_kind_of_entry_is_completed(tmp_path):
    write_files({"a.txt": "one\n", "sub/deeper/b.txt": "two\n"}, tmp_path)
    staging = tmp_path / STAGING
    staging.mkdir()
    manifest = manifest_text({"a.txt": sha256_text("uno\n")})
    (staging / "0").write_text("uno\n")
    (staging / "1").write_text(manifest)
    (tmp_path / JOURNAL).write_text(json.dumps(v2(
        moves=[{"staged": "0", "target": "a.txt", "sha256": sha256_text("uno\n")},
               {"staged": "1", "target": MANIFEST, "sha256": sha256_text(manifest)}],
        removals=[{"target": "sub/deeper/b.txt", "sha256": sha256_text("two\n")}],
        folders=["sub/deeper", "sub"])))
    said = []
    write_files({"a.txt": "uno\n"}, tmp_path, notify=said.append)
    assert said[0] == "completed an interrupted write of 1 file(s) and a removal of 1 stale file(s) (its journal " \
                      "was committed)"
    assert (tmp_path / "a.txt").read_text() == "uno\n" and not (tmp_path / "sub").exists()
    assert not (tmp_path / JOURNAL).exists() and not staging.exists()
