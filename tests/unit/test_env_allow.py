"""runtime.env is an allow-list, and engine flags that load code are held back (issue 35, item 1): each attack a shared
preset tried is refused through the real `kit validate` / `kit render`, naming the file and field with a hint; a name
set in runtime.unsafe_env, or a flag named in runtime.unsafe_engine_flags, is warned about on every render."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import DATA_DIR, load_yaml

ALLOWED = load_yaml("env_allow.yaml")["names"]
RULES = load_yaml("switches.yaml")
ATTACKS = ["LD_AUDIT", "VLLM_LOGGING_CONFIG_PATH", "GCONV_PATH", "BASH_ENV", "PYTHONWARNINGS", "HF_HUB_CACHE",
           "TRANSFORMERS_CACHE", "TRANSFORMERS_MODULES_CACHE", "VLLM_PLUGINS", "VLLM_LOGGING_STREAM"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("name", ATTACKS)
def test_a_variable_off_the_list_is_refused_with_the_field_and_a_hint(name):
    result = run("validate", "preset=cpu", f"runtime.env.{name}=/cache/lora/x")
    assert result.exit_code == 1, result.output
    assert (f"override runtime.env.{name}: {name} is not on the kit's list of harmless server variables "
            "(kit/data/env_allow.yaml)") in result.output
    assert f"set it as runtime.unsafe_env.{name} instead" in result.output


def test_the_file_and_field_are_named_for_a_preset_file(tmp_path):
    preset = yaml.safe_load((DATA_DIR.parent.parent / "presets" / "cpu.yaml").read_text())
    preset.setdefault("runtime", {}).setdefault("env", {})["LD_AUDIT"] = "/models/adapter/libx.so"
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(preset))
    result = run("validate", f"preset={path}")
    assert result.exit_code == 1, result.output
    assert re.search(r"shared\.yaml: runtime\.env\.LD_AUDIT: LD_AUDIT is not on the kit's list", result.output)


def test_an_unsafe_variable_is_rendered_and_warned_about_on_every_render(tmp_path):
    args = ["render", "preset=cpu", "runtime.unsafe_env.PYTHONWARNINGS=ignore", "--out", str(tmp_path)]
    for _ in range(2):  # the second render writes nothing new and still warns
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert ("warning: override runtime.unsafe_env.PYTHONWARNINGS: unsafe: set in the server unchecked"
                in result.stderr)
        assert "PYTHONWARNINGS" not in result.stdout
    compose = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    assert any(s.get("environment", {}).get("PYTHONWARNINGS") == "ignore" for s in compose["services"].values())


def test_the_hard_refusals_hold_in_unsafe_env_too():
    result = run("validate", "preset=cpu", "runtime.unsafe_env.LD_PRELOAD=/x.so")
    assert result.exit_code == 1
    assert "override runtime.unsafe_env.LD_PRELOAD: refused: LD_PRELOAD" in result.output
    result = run("validate", "preset=cpu", "runtime.unsafe_env.HF_HUB_OFFLINE=0")
    assert result.exit_code == 1 and "the kit sets HF_HUB_OFFLINE itself" in result.output


def test_a_listed_name_passes_and_is_rendered():
    result = run("validate", "preset=cpu", "runtime.env.NCCL_DEBUG=INFO", "runtime.env.OMP_NUM_THREADS=4")
    assert result.exit_code == 0, result.output
    assert "unsafe" not in result.output


def test_every_allowed_name_says_where_it_comes_from_and_none_names_a_path_or_code():
    assert len(ALLOWED) > 100
    for name, source in ALLOWED.items():
        assert isinstance(source, str) and source.strip(), name
        assert re.search(r"_(PATH|FILE|DIR|PLUGINS?|FOLDER|LIBRARIES|ROOT|HOME|LOGGING_STREAM|SO)$", name) is None, name
        assert not name.startswith(("LD_", "PYTHON", "HF_", "TRANSFORMERS_", "GCONV", "BASH")) or \
            name == "PYTHONUNBUFFERED", name
        if name.startswith("VLLM_"):
            assert source.startswith("vllm/envs.py v0.33.0 line "), name
    assert not set(ATTACKS) & set(ALLOWED)
    assert not {n for n, r in RULES["env"].items()} & set(ALLOWED)
    assert not set(RULES["kit_env"]) & set(ALLOWED)


CODE_WORDS = re.compile(r"class|plugin|module|qualname|file|director|folder|path|import|middleware|logging config",
                        re.IGNORECASE)


def test_the_engine_list_is_read_from_vllms_parser():
    snapshot = json.loads((DATA_DIR / "flags" / "vllm-0.33.0.json").read_text())["flags"]
    held_back = set(RULES["engine"])
    assert held_back <= set(snapshot), held_back - set(snapshot)
    assert set(RULES["engine_reviewed"]) <= set(snapshot)
    # Every flag whose help speaks of classes, plugins, modules or files is held back or reviewed with a reason.
    unreviewed = {name for name, spec in snapshot.items() if CODE_WORDS.search(f"{name} {spec.get('help') or ''}")}
    assert unreviewed - held_back - set(RULES["engine_reviewed"]) == set()
    assert snapshot["tokenizer_mode"]["suggestions"]  # the values that pass without runtime.unsafe_engine_flags
