"""A folder remembers its deployment (kit/deploy/record.py): what a render was made from is in DIR/vllm-kit.yaml, and
every command given --out DIR reads it, through the real CLI (no Docker: render, validate, status of a stopped stack)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import PRESETS_DIR
from kit.deploy.record import RECORD_FILE, Request, merge_overrides, read_record, resolve

pytestmark = pytest.mark.unit


def kit(*args: str, cwd: Path | None = None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(cli, list(args))
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return runner.invoke(cli, list(args))
    finally:
        os.chdir(old)


def served_args(out: Path, service: str = "vllm") -> list[str]:
    return yaml.safe_load((out / "compose.yaml").read_text())["services"][service]["command"]


def test_a_rerender_without_the_preset_keeps_every_override(tmp_path):
    out = tmp_path / "d"
    first = kit("render", "preset=cpu", "runtime.port=8123", "--out", str(out))
    assert first.exit_code == 0, first.output
    compose_before = (out / "compose.yaml").read_text()
    assert "127.0.0.1:8123:8000" in compose_before
    again = kit("render", "--out", str(out))
    assert again.exit_code == 0, again.output
    assert "changed" not in again.stdout and (out / "compose.yaml").read_text() == compose_before
    # The same preset named again: still the recorded overrides (the silent revert)
    named = kit("render", "preset=cpu", "--out", str(out))
    assert named.exit_code == 0 and "changed" not in named.stdout, named.output
    record = read_record(out)
    assert record is not None and record.overrides == ("runtime.port=8123",) and record.preset == "cpu"


def test_overrides_on_the_command_line_change_the_record(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "runtime.port=8123", "--out", str(out)).exit_code == 0
    assert kit("render", "--out", str(out), "engine.max_num_seqs=4").exit_code == 0
    assert kit("render", "--out", str(out), "runtime.port=8124").exit_code == 0
    record = read_record(out)
    assert record.overrides == ("runtime.port=8124", "engine.max_num_seqs=4")
    args = served_args(out)
    assert args[args.index("--max-num-seqs") + 1] == "4"
    reset = kit("render", "--out", str(out), "--reset-overrides")
    assert reset.exit_code == 0 and read_record(out).overrides == ()
    assert "127.0.0.1:8000:8000" in (out / "compose.yaml").read_text()


def test_another_preset_into_a_used_folder_is_refused_unless_replace(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "runtime.port=8123", "--out", str(out)).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    refused = kit("render", "preset=cpu-embed", "--out", str(out))
    assert refused.exit_code == 1
    assert "holds a deployment of preset cpu" in refused.stderr and "--replace" in refused.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing touched
    replaced = kit("render", "preset=cpu-embed", "--out", str(out), "--replace")
    assert replaced.exit_code == 0, replaced.output
    record = read_record(out)
    assert record.preset == "cpu-embed" and record.overrides == ()  # nothing carried over


def test_no_preset_and_no_record_is_a_usage_error(tmp_path):
    result = kit("render", "--out", str(tmp_path / "empty"))
    assert result.exit_code == 2
    assert "no preset given" in result.stderr and RECORD_FILE in result.stderr
    assert not (tmp_path / "empty").exists()


def test_add_ons_are_added_and_taken_out(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--with", "monitoring", "--out", str(out)).exit_code == 0
    assert "prometheus" in yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert kit("render", "--out", str(out)).exit_code == 0  # kept by the record
    assert "prometheus" in yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert read_record(out).with_profiles == ("monitoring",)
    removed = kit("render", "--out", str(out), "--without", "monitoring")
    assert removed.exit_code == 0, removed.output
    assert "prometheus" not in yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert read_record(out).with_profiles == ()
    unknown = kit("render", "--out", str(out), "--without", "webui")
    assert unknown.exit_code == 1 and "--without webui" in unknown.stderr


def test_the_target_is_recorded(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--target", "k8s", "--out", str(out)).exit_code == 0
    again = kit("render", "--out", str(out))
    assert again.exit_code == 0 and "kubectl apply -k" in again.stderr
    assert not (out / "compose.yaml").exists() and read_record(out).target == "k8s"


def test_a_preset_file_is_recorded_by_its_path_from_the_folder(tmp_path):
    """A preset of the user's own, rendered from one directory, re-renders from another (the path is kept relative
    to the folder), and status says when the preset changed since the render."""
    mine = tmp_path / "presets" / "mine.yaml"
    mine.parent.mkdir()
    shutil.copy(PRESETS_DIR / "cpu.yaml", mine)
    out = tmp_path / "deploy"
    assert kit("render", "preset=presets/mine.yaml", "--out", "deploy", cwd=tmp_path).exit_code == 0
    record = read_record(out)
    assert record.preset == "../presets/mine.yaml" and record.preset_name == "mine"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = kit("render", "--out", str(out), cwd=elsewhere)
    assert again.exit_code == 0 and "changed" not in again.stdout, again.output
    mine.write_text(mine.read_text().replace("max_num_seqs: 8", "max_num_seqs: 6"))
    status = kit("status", "--out", str(out))
    assert "changed since the render" in status.stdout
    diff = kit("render", "--out", str(out), "--diff")
    assert diff.exit_code == 0 and '-    - "8"' in diff.stdout and '+    - "6"' in diff.stdout
    assert '"8"' in (out / "compose.yaml").read_text()  # --diff wrote nothing


def test_diff_of_an_unchanged_folder_is_empty_and_writes_nothing(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    stamp = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    diff = kit("render", "--out", str(out), "--diff")
    assert diff.exit_code == 0 and diff.stdout == "" and "would change nothing" in diff.stderr
    tweak = kit("render", "--out", str(out), "--diff", "engine.max_num_seqs=2")
    assert "+- \"engine.max_num_seqs=2\"" in tweak.stdout and "--- a/compose.yaml" in tweak.stdout
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == stamp


def test_model_on_the_command_line_sets_the_id_the_served_name_and_generation(tmp_path):
    out = tmp_path / "d"
    result = kit("render", "preset=cpu", "model=Qwen/Qwen2.5-0.5B-Instruct", "--out", str(out))
    assert result.exit_code == 0, result.output
    services = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert "model-make" not in services and not (out / "tinymodel.py").exists()
    args = services["vllm"]["command"]
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "Qwen/Qwen2.5-0.5B-Instruct" in args
    # validate, plan and the other preset commands take model= as well
    assert kit("validate", "preset=cpu", "model=Qwen/Qwen2.5-0.5B-Instruct").exit_code == 0


def test_status_of_a_rendered_folder_shows_what_it_is(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "runtime.port=8123", "--with", "monitoring", "--out", str(out)).exit_code == 0
    (out / "compose.yaml").write_text((out / "compose.yaml").read_text() + "# mine\n")
    status = kit("status", "--out", str(out))
    assert status.exit_code == 1  # nothing answers: not healthy
    # Shown even though compose refuses the stack here (the monitoring profile wants its password in .env)
    rows = {line[:14].strip(): line[14:].strip() for line in status.stdout.splitlines() if line.strip()}
    assert rows["preset"] == "cpu" and rows["overrides"] == "runtime.port=8123"
    assert rows["add-ons"] == "monitoring" and rows["edited"] == "compose.yaml"


def test_merge_keeps_one_entry_a_key_in_its_first_place():
    assert merge_overrides(("a.b=1", "c.d=2"), ("a.b=3", "e.f=4")) == ("a.b=3", "c.d=2", "e.f=4")


def test_a_record_that_is_not_the_kits_is_refused_naming_the_file(tmp_path):
    (tmp_path / RECORD_FILE).write_text("version: 7\n")
    result = kit("render", "--out", str(tmp_path))
    assert result.exit_code == 1 and f"{tmp_path / RECORD_FILE}: not a deployment record" in result.stderr


def test_resolve_without_a_folder_takes_the_request_as_it_is():
    resolved = resolve(Request(preset="cpu", overrides=("runtime.port=9000",), with_profiles=("monitoring",)), None)
    assert resolved.ref == "cpu" and resolved.overrides == ["runtime.port=9000"]
    assert resolved.with_profiles == ["monitoring"] and resolved.target == "compose" and resolved.recorded is None


@pytest.mark.parametrize("args", [
    ["probe", "preset=cpu", "--native", "--image", "vllm-kit/cpu:x"],
    ["loadtest", "preset=cpu", "--url", "http://127.0.0.1:9", "--port", "9", "--no-plot"],
    ["loadtest", "preset=cpu", "--no-plot", "--plot", "x.png"],
    ["loadtest", "preset=cpu", "--no-plot", "--dataset", "README.md", "--prompt-words", "5"],
    ["plan", "--model", "Qwen/Qwen3-8B", "--device", "cpu", "--gpu", "rtx4090", "--gpu-memory-gib", "64"],
])
def test_a_flag_that_would_be_ignored_is_a_usage_error(args):
    result = kit(*args)
    assert result.exit_code == 2 and "give one" in result.stderr, result.output


def test_a_recorded_shipped_preset_stays_the_shipped_one_when_a_local_one_shadows_it(tmp_path):
    """The record names a shipped preset by name; a ./presets/cpu.yaml that appears later (kit init cpu) does not
    change what `kit render --out DIR` renders, and preset=cpu from there is refused as another file."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out), cwd=tmp_path).exit_code == 0
    (tmp_path / "presets").mkdir()
    shadow = (PRESETS_DIR / "cpu.yaml").read_text().replace("max_num_seqs: 8", "max_num_seqs: 3")
    (tmp_path / "presets" / "cpu.yaml").write_text(shadow)
    again = kit("render", "--out", str(out), cwd=tmp_path)
    assert again.exit_code == 0 and "changed" not in again.stdout, again.output
    named = kit("render", "preset=cpu", "--out", str(out), cwd=tmp_path)
    assert named.exit_code == 1 and "another file of that name" in named.stderr


def test_a_command_other_than_render_removes_what_its_render_no_longer_writes(tmp_path):
    """`kit lock --out DIR model=ID` (any command that renders the folder): the tiny model's script goes, said."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    assert (out / "tinymodel.py").is_file()
    from kit.cli.common import resolve_deployment
    from kit.deploy.pipeline import prepare_resolved
    from kit.run.workflow import render_into

    said: list[str] = []
    render_into(prepare_resolved(resolve_deployment(("model=Qwen/Qwen3-0.6B",), None, out)), out, remove_stale=True,
                progress=said.append)
    assert not (out / "tinymodel.py").exists()
    assert said == [f"removed (no longer rendered): {out / 'tinymodel.py'}"]
