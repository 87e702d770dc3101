"""Writing: create / identical / changed, user edits kept unless forced, all or nothing, atomic."""

import json

import pytest

from kit.core.errors import KitError
from kit.core.write import JOURNAL, LOCK_FILE, MANIFEST, STAGING, manifest_text, sha256_text, write_files


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


# --- stale files: what an earlier write made and this one no longer writes -----------------------------


def manifest(directory):
    return json.loads((directory / MANIFEST).read_text())


def test_an_unedited_stale_file_is_removed_and_leaves_the_manifest(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    assert statuses(write_files({"a.txt": "one\n"}, tmp_path, remove_stale=True)) == {"a.txt": "identical",
                                                                                       "b.txt": "removed"}
    assert not (tmp_path / "b.txt").exists()
    assert manifest(tmp_path) == {"files": {"a.txt": sha256_text("one\n")}}  # no "kept" when nothing is kept


def test_an_edited_stale_file_is_kept_reported_once_and_no_longer_the_kits(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    (tmp_path / "b.txt").write_text("my edit\n")
    assert statuses(write_files({"a.txt": "one\n"}, tmp_path, remove_stale=True)) == {"a.txt": "identical",
                                                                                       "b.txt": "kept"}
    assert (tmp_path / "b.txt").read_text() == "my edit\n"
    assert manifest(tmp_path) == {"files": {"a.txt": sha256_text("one\n")}, "kept": ["b.txt"]}
    # The next render says nothing more about it: it is the user's now.
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path, remove_stale=True)) == {"a.txt": "changed"}
    assert (tmp_path / "b.txt").read_text() == "my edit\n"
    # A render that writes the path again meets the user's file: refused unless --force, which takes it back.
    with pytest.raises(KitError):
        write_files({"a.txt": "uno\n", "b.txt": "two\n"}, tmp_path, remove_stale=True)
    assert statuses(write_files({"a.txt": "uno\n", "b.txt": "two\n"}, tmp_path, force=True,
                                remove_stale=True)) == {"a.txt": "identical", "b.txt": "forced"}
    assert manifest(tmp_path) == {"files": {"a.txt": sha256_text("uno\n"), "b.txt": sha256_text("two\n")}}


def test_force_never_removes_an_edited_stale_file(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    (tmp_path / "b.txt").write_text("my edit\n")
    assert statuses(write_files({"a.txt": "one\n"}, tmp_path, force=True, remove_stale=True))["b.txt"] == "kept"
    assert (tmp_path / "b.txt").read_text() == "my edit\n"


def test_a_kept_file_the_user_deletes_is_forgotten(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    (tmp_path / "b.txt").write_text("my edit\n")
    write_files({"a.txt": "one\n"}, tmp_path, remove_stale=True)
    (tmp_path / "b.txt").unlink()
    assert statuses(write_files({"a.txt": "one\n"}, tmp_path, remove_stale=True)) == {"a.txt": "identical"}
    assert "kept" not in manifest(tmp_path)


def test_a_stale_file_already_deleted_just_leaves_the_manifest(tmp_path):
    write_files({"a.txt": "one\n", "b.txt": "two\n"}, tmp_path)
    (tmp_path / "b.txt").unlink()
    assert statuses(write_files({"a.txt": "one\n"}, tmp_path, remove_stale=True)) == {"a.txt": "identical"}
    assert set(manifest(tmp_path)["files"]) == {"a.txt"}


def test_without_remove_stale_nothing_is_removed_and_the_manifest_keeps_it(tmp_path):
    """build, lock, fetch, up, smoke render without --with/--with-preset/--target: a part of what render wrote."""
    write_files({"a.txt": "one\n", "extra/b.txt": "two\n"}, tmp_path)
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path)) == {"a.txt": "changed"}
    assert (tmp_path / "extra" / "b.txt").read_text() == "two\n"
    assert set(manifest(tmp_path)["files"]) == {"a.txt", "extra/b.txt"}
    # ...so the next `kit render` still knows it as the kit's, and removes it.
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path, remove_stale=True))["extra/b.txt"] == "removed"


def test_folders_left_empty_go_folders_with_anything_else_stay(tmp_path):
    old = {"a.txt": "1\n", "mon/grafana/dash/x.json": "2\n", "mon/grafana/ds/y.yaml": "3\n", "mon/p.yml": "4\n",
           "k8s/d.yaml": "5\n", "k8s/s.yaml": "6\n", "shared/keep.txt": "7\n", "shared/old.txt": "8\n"}
    write_files(old, tmp_path)
    (tmp_path / "k8s" / "mine.txt").write_text("the user's\n")  # a file the kit never wrote
    (tmp_path / "mon" / "grafana" / "empty-of-mine").mkdir()  # an empty folder of the user's, under a stale one
    results = write_files({"a.txt": "1\n", "shared/keep.txt": "7\n"}, tmp_path, remove_stale=True)
    assert sorted(r.path for r in results if r.status == "removed") == sorted(set(old) - {"a.txt", "shared/keep.txt"})
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    # k8s/ holds the user's file, shared/ a rendered one, mon/grafana/ the user's empty folder: they stay.
    assert left == [MANIFEST, LOCK_FILE, "a.txt", "k8s", "k8s/mine.txt", "mon", "mon/grafana",
                    "mon/grafana/empty-of-mine", "shared", "shared/keep.txt"]


def test_nested_empty_folders_all_go(tmp_path):
    write_files({"a.txt": "1\n", "mon/grafana/dash/x.json": "2\n", "mon/grafana/ds/y.yaml": "3\n"}, tmp_path)
    write_files({"a.txt": "1\n"}, tmp_path, remove_stale=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, LOCK_FILE, "a.txt"]


def test_a_folder_a_new_file_needs_is_not_removed(tmp_path):
    write_files({"k8s/old.yaml": "1\n"}, tmp_path)
    assert statuses(write_files({"k8s/new.yaml": "2\n"}, tmp_path, remove_stale=True)) == {
        "k8s/new.yaml": "create", "k8s/old.yaml": "removed"}
    assert sorted(p.name for p in (tmp_path / "k8s").iterdir()) == ["new.yaml"]


def test_dry_run_reports_stale_files_and_touches_nothing(tmp_path):
    write_files({"a.txt": "one\n", "sub/b.txt": "two\n", "c.txt": "three\n"}, tmp_path)
    (tmp_path / "c.txt").write_text("mine\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    results = write_files({"a.txt": "one\n"}, tmp_path, dry_run=True, remove_stale=True)
    assert statuses(results) == {"a.txt": "identical", "c.txt": "kept", "sub/b.txt": "removed"}
    assert [r.path for r in results] == ["a.txt", "c.txt", "sub/b.txt"]  # one list, by path
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert (tmp_path / "sub").is_dir()


def test_a_stale_file_under_a_symlinked_folder_is_kept_and_nothing_outside_is_touched(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    write_files({"a.txt": "1\n", "sub/b.txt": "2\n"}, out)
    outside.mkdir()
    (outside / "b.txt").write_text("2\n")  # the very content the manifest vouches for
    (out / "sub" / "b.txt").unlink()
    (out / "sub").rmdir()
    (out / "sub").symlink_to(outside)
    assert statuses(write_files({"a.txt": "1\n"}, out, remove_stale=True))["sub/b.txt"] == "kept"
    assert (outside / "b.txt").read_text() == "2\n" and (out / "sub").is_symlink()


def test_a_stale_symlink_is_kept_not_followed(tmp_path):
    out, target = tmp_path / "out", tmp_path / "target.txt"
    write_files({"a.txt": "1\n", "b.txt": "2\n"}, out)
    target.write_text("2\n")
    (out / "b.txt").unlink()
    (out / "b.txt").symlink_to(target)
    assert statuses(write_files({"a.txt": "1\n"}, out, remove_stale=True))["b.txt"] == "kept"
    assert (out / "b.txt").is_symlink() and target.read_text() == "2\n"


def test_a_manifest_naming_paths_outside_the_directory_removes_nothing_there(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("2\n")
    write_files({"a.txt": "1\n"}, out)
    hashes = {"a.txt": sha256_text("1\n"), "../victim.txt": sha256_text("2\n"), str(victim): sha256_text("2\n")}
    (out / MANIFEST).write_text(json.dumps({"files": hashes}))
    assert statuses(write_files({"a.txt": "1\n"}, out, remove_stale=True)) == {"a.txt": "identical"}
    assert victim.read_text() == "2\n"
    assert manifest(out) == {"files": {"a.txt": sha256_text("1\n")}}


def test_no_rendered_file_lies_in_the_kits_work_folder():
    """.kit/ (build logs, contexts) is the kit's scratch space, never in the manifest, so never removed as stale."""
    from kit.config.preset_files import preset_names
    from kit.deploy.pipeline import prepare
    from kit.image.build import KIT_DIR

    renders = [prepare(name).files for name in preset_names()]
    renders += [prepare("rtx4090-awq", target="k8s").files, prepare("cpu", with_profiles=["monitoring"]).files,
                prepare("cpu", with_presets=["cpu-embed"]).files]
    assert all(rel.split("/")[0] != KIT_DIR for files in renders for rel in files)


# --- the journal: version 2 (removals), version 1 still recovered, any other refused -------------------


def committed_journal(out, version, moves, removals=(), folders=()):
    """A committed write as a kit of that journal version leaves it when killed right after its commit point."""
    staging = out / STAGING
    staging.mkdir()
    entries = []
    for i, (rel, text) in enumerate(moves):
        (staging / str(i)).write_text(text)
        entries.append({"staged": str(i), "target": rel, "sha256": sha256_text(text)})
    record = {"version": version, "moves": entries}
    if version >= 2:
        record |= {"removals": [{"target": rel, "sha256": digest} for rel, digest in removals],
                   "folders": list(folders)}
    (out / JOURNAL).write_text(json.dumps(record))


def test_a_version_1_journal_from_an_older_kit_is_still_completed(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    committed_journal(tmp_path, 1, [("a.txt", "uno\n"), (MANIFEST, manifest_text({"a.txt": sha256_text("uno\n")}))])
    said = []
    assert statuses(write_files({"a.txt": "uno\n"}, tmp_path, notify=said.append)) == {"a.txt": "identical"}
    assert "completed an interrupted write of 1 file(s)" in said[0]
    assert (tmp_path / "a.txt").read_text() == "uno\n" and not (tmp_path / JOURNAL).exists()
    assert not (tmp_path / STAGING).exists()


def test_a_version_2_journal_removes_only_what_still_has_its_hash(tmp_path):
    write_files({"a.txt": "one\n", "sub/b.txt": "two\n", "c.txt": "three\n"}, tmp_path)
    (tmp_path / "c.txt").write_text("written since the crash\n")
    new_manifest = manifest_text({"a.txt": sha256_text("one\n")})
    committed_journal(tmp_path, 2, [(MANIFEST, new_manifest)],
                      removals=[("sub/b.txt", sha256_text("two\n")), ("c.txt", sha256_text("three\n"))],
                      folders=["sub"])
    recover_into = write_files({"a.txt": "one\n"}, tmp_path, dry_run=True, remove_stale=True)  # a dry run recovers
    assert statuses(recover_into) == {"a.txt": "identical"}
    assert not (tmp_path / "sub").exists()
    assert (tmp_path / "c.txt").read_text() == "written since the crash\n"
    assert (tmp_path / MANIFEST).read_text() == new_manifest and not (tmp_path / JOURNAL).exists()


def test_a_journal_of_a_newer_kit_is_refused_untouched(tmp_path):
    write_files({"a.txt": "one\n"}, tmp_path)
    committed_journal(tmp_path, 3, [("a.txt", "uno\n")])
    journal = (tmp_path / JOURNAL).read_text()
    with pytest.raises(KitError) as info:
        write_files({"a.txt": "one\n"}, tmp_path)
    assert "journal version 3, written by a newer vllm-kit" in info.value.lines()[0]
    assert (tmp_path / JOURNAL).read_text() == journal and (tmp_path / "a.txt").read_text() == "one\n"


@pytest.mark.parametrize("record", [
    {"version": 2, "moves": [{"staged": "0", "target": "a.txt", "sha256": "x"}]},  # removals, folders missing
    {"version": 2, "moves": [{"staged": "0", "target": "a.txt", "sha256": "x"}],
     "removals": [{"target": "../../etc/passwd", "sha256": "x"}], "folders": []},
    {"version": 2, "moves": [{"staged": "0", "target": "a.txt", "sha256": "x"}], "removals": [], "folders": ["/etc"]},
    {"version": 1, "moves": [{"staged": "0", "target": "a.txt", "sha256": "x"}], "removals": []},
])
def test_a_journal_that_does_not_fit_its_version_is_refused(tmp_path, record):
    write_files({"a.txt": "one\n"}, tmp_path)
    (tmp_path / JOURNAL).write_text(json.dumps(record))
    with pytest.raises(KitError) as info:
        write_files({"a.txt": "one\n"}, tmp_path)
    assert "not a journal this kit wrote" in info.value.lines()[0]


# --- kit render: stale files printed and in --json; the other commands leave them ----------------------


def render_cli(*args):
    from click.testing import CliRunner

    from kit.cli.main import cli

    return CliRunner().invoke(cli, ["render", *args], catch_exceptions=False)


def test_kit_render_removes_a_dropped_add_on_and_says_so(tmp_path):
    out = tmp_path / "d"
    assert render_cli("preset=cpu", "--with", "monitoring", "--out", str(out)).exit_code == 0
    monitoring = sorted(p.relative_to(out).as_posix() for p in (out / "monitoring").rglob("*") if p.is_file())
    assert len(monitoring) == 4
    (out / "monitoring" / "prometheus.yml").write_text("# my scrape config\n")

    dry = render_cli("--without", "monitoring", "--out", str(out), "--dry-run")
    assert dry.exit_code == 0
    assert f"would remove  {out / 'monitoring/grafana/dashboards/vllm.json'}" in dry.stdout
    assert f"would keep (edited)  {out / 'monitoring/prometheus.yml'}" in dry.stdout
    assert "you edited; they stay, and the kit no longer tracks them" in dry.stderr
    assert len(monitoring) == sum(1 for p in (out / "monitoring").rglob("*") if p.is_file())  # nothing removed

    done = render_cli("--without", "monitoring", "--out", str(out), "--json")
    assert done.exit_code == 0, done.output
    files = json.loads(done.stdout)["data"]["files"]
    assert {rel: files[rel] for rel in monitoring} == {
        rel: "kept" if rel == "monitoring/prometheus.yml" else "removed" for rel in monitoring}
    assert sorted(p.relative_to(out).as_posix() for p in (out / "monitoring").rglob("*")) == [
        "monitoring/prometheus.yml"]

    again = render_cli("--out", str(out))  # the folder's record: the cpu preset, without monitoring now
    assert again.exit_code == 0, again.output
    assert "monitoring" not in again.stdout  # reported once: the kept file is the user's now


def test_kit_render_prints_removed_files(tmp_path):
    out = tmp_path / "d"
    render_cli("preset=cpu", "--with-preset", "cpu-embed", "--out", str(out))
    result = render_cli("--without", "cpu-embed", "--out", str(out))
    assert f"removed  {out / 'compose.cpu-embed.yaml'}" in result.stdout
    assert not (out / "compose.cpu-embed.yaml").exists()


def test_a_build_of_the_same_preset_leaves_what_render_added(tmp_path):
    """`kit build` (and lock, fetch, up, smoke) render without --with: the add-on's files stay, still the kit's."""
    from kit.deploy.pipeline import prepare
    from kit.run.workflow import render_into

    out = tmp_path / "d"
    render_cli("preset=cpu", "--with", "monitoring", "--out", str(out))
    render_into(prepare("cpu"), out)
    assert (out / "monitoring" / "prometheus.yml").is_file()
    assert "monitoring/prometheus.yml" in manifest(out)["files"]
