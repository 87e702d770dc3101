"""Switches that open the server or load code, the kit's own variables, GPU ids and model ids (issue 23, items 6
and 7): each refused or warned about through the real `kit validate` / `prepare`, naming the field."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.preset import is_hub_id, model_path_problem
from kit.config.presetload import load_preset
from kit.core.datafiles import load_yaml
from kit.core.errors import PresetError
from kit.deploy.pipeline import prepare

RULES = load_yaml("switches.yaml")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def validate(*overrides: str, preset: str = "cpu"):
    return CliRunner().invoke(cli, ["validate", f"preset={preset}", *overrides])


def problems(overrides: list[str], preset: str = "cpu") -> list[str]:
    try:
        prepare(preset, overrides)
    except PresetError as exc:
        return [str(p) for p in exc.problems]
    return []


def warnings(overrides: list[str], preset: str = "cpu") -> list[str]:
    return [str(w) for w in prepare(preset, overrides).report.warnings]


@pytest.mark.parametrize("name", [n for n, r in RULES["env"].items() if r["action"] == "refuse"])
def test_environment_switches_that_open_the_server_or_load_code_are_refused(name):
    result = validate(f"runtime.env.{name}=1")
    assert result.exit_code == 1, result.output
    assert f"override runtime.env.{name}: refused: {name} {RULES['env'][name]['reason']}" in result.output


def test_the_four_named_in_the_issue_are_refused():
    refused = {n for n, r in RULES["env"].items() if r["action"] == "refuse"}
    assert {"VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_INSECURE_SERIALIZATION", "LD_PRELOAD", "PYTHONPATH"} <= refused
    for rule in [*RULES["env"].values(), *RULES["engine"].values()]:
        assert rule["reason"] and rule["source"]  # each says why, and where the reader of it says so


@pytest.mark.parametrize("name", [n for n, r in RULES["env"].items() if r["action"] == "warn"])
def test_environment_switches_that_widen_the_server_are_unsafe_and_warned_about(name):
    assert any(p.startswith(f"override runtime.env.{name}: {name} is not on the kit's list")
               for p in problems([f"runtime.env.{name}=1"]))
    [warning] = [w for w in warnings([f"runtime.unsafe_env.{name}=1"]) if name in w]
    assert warning.startswith(f"override runtime.unsafe_env.{name}: unsafe: set in the server unchecked")
    assert f"{name} {RULES['env'][name]['reason']}" in warning


def _server_environments(files: dict[str, str]) -> dict[str, dict]:
    found = {}
    for path, text in files.items():
        if path.startswith("compose") and path.endswith(".yaml"):
            for name, service in (yaml.safe_load(text) or {}).get("services", {}).items():
                if "build" in service and "environment" in service and service.get("command"):
                    # The kit's own values; a name with no value is one compose takes from .env (service_env.yaml).
                    found[f"{path}:{name}"] = {k: v for k, v in service["environment"].items() if v is not None}
    return found


RENDERS = [("cpu", []), ("cpu-embed", []), ("a100x8", []), ("rtx4090-awq", []), ("orin", []),
           ("cpu", ["hardware.nodes=2", "cluster.head_address=192.0.2.1"]), ("a100x8", ["runtime.replicas=2",
                                                                                       "engine.tensor_parallel_size=4"])]


@pytest.mark.parametrize("preset, overrides", RENDERS)
def test_no_variable_the_kit_sets_in_a_server_can_be_overridden_silently(preset, overrides):
    # Read from what the render sets, not from the data's list: a variable the kit starts setting is covered too.
    environments = _server_environments(prepare(preset, overrides).files)
    assert environments
    names = {name for env in environments.values() for name in env}
    assert "HF_HUB_OFFLINE" in names
    for name in sorted(names):
        found = problems([*overrides, f"runtime.env.{name}=x"], preset)
        assert any(p.startswith(f"override runtime.env.{name}: ") for p in found), (name, found)


def test_the_kits_own_variable_names_the_field_that_sets_it():
    [problem] = problems(["runtime.env.HF_HUB_OFFLINE=0"])
    assert problem.startswith("override runtime.env.HF_HUB_OFFLINE: the kit sets HF_HUB_OFFLINE itself (1: the "
                              "model-fetch service fills the cache first")
    assert "a value here would silently replace it" in problem
    [problem] = problems(["runtime.env.VLLM_CPU_KVCACHE_SPACE=4"])
    assert "hint: remove it from runtime.env; runtime.cpu_kvcache_space_gib sets it" in problem
    assert problems(["runtime.env.NCCL_DEBUG=INFO"]) == []  # a name on the allow-list passes


HUB_MODEL = ["model.id=Qwen/Qwen3-0.6B", "model.host_path=null", "model.generate=null"]


def test_trust_remote_code_needs_a_pinned_commit():
    result = validate(*HUB_MODEL, "engine.trust_remote_code=true")
    assert result.exit_code == 1
    assert ("override engine.trust_remote_code: refused with no model.revision: it runs the model repository's own "
            "Python code") in result.output
    [moving] = problems([*HUB_MODEL, "engine.trust_remote_code=true", "model.revision=main"])
    assert "refused with model.revision main is a branch or tag, which moves" in moving
    assert problems([*HUB_MODEL, "engine.trust_remote_code=true", f"model.revision={COMMIT}"]) == []
    assert problems(["engine.trust_remote_code=true"]) == []  # a local folder: its code is already on this host
    assert problems([*HUB_MODEL, "engine.trust_remote_code=false"]) == []


@pytest.mark.parametrize("flag, value", [("worker_extension_cls", "pkg.Ext"), ("middleware", "[pkg.mw]"),
                                         ("tool_parser_plugin", "/x/plugin.py"),
                                         ("allowed_local_media_path", "/data"),
                                         ("logging_config", "'{\"version\": 1}'"), ("tokenizer_mode", "custom")])
def test_engine_flags_that_load_code_or_open_files_are_refused_unless_named_unsafe(flag, value):
    [refused] = [p for p in problems([f"engine.{flag}={value}"]) if f"engine.{flag}:" in p]
    assert f"override engine.{flag}: refused: it {RULES['engine'][flag]['reason']}" in refused
    assert f"runtime.unsafe_engine_flags=[{flag}]" in refused
    named = [f"engine.{flag}={value}", f"runtime.unsafe_engine_flags=[{flag}]"]
    [warning] = [w for w in warnings(named) if f"engine.{flag}:" in w]
    assert f"override engine.{flag}: unsafe: loads code or opens files: it {RULES['engine'][flag]['reason']}" in warning


def test_a_tokenizer_mode_vllm_names_passes():
    assert problems(["engine.tokenizer_mode=hf"]) == []
    assert problems(["engine.tokenizer_mode=mistral"]) == []


def test_unsafe_engine_flags_names_only_flags_the_kit_holds_back():
    [problem] = problems(["runtime.unsafe_engine_flags=[max_num_seqs]"])
    assert problem.startswith("override runtime.unsafe_engine_flags: max_num_seqs is not an engine flag the kit "
                              "holds back") or "runtime.unsafe_engine_flags[0]: max_num_seqs" in problem


GPU = ["preset=rtx3090x2-fp16"]


@pytest.mark.parametrize("ids, message", [
    ('["0,1"]', "device_ids[0] is not one GPU"), ("[all, 1]", "device_ids[0] is not one GPU"),
    ("[0-1, 2]", "device_ids[0] is not one GPU"), ("[0, GPU-xyz]", "device_ids[1] is not one GPU"),
    ("[0, 0]", "device_ids names a GPU twice"), ("[0, 1, 2]", "device_ids lists 3 GPUs but count is 2"),
    ("[-1, 0]", "device_ids[0] is not one GPU"), ("[' 0', 1]", "device_ids[0] is not one GPU"),
])
def test_device_ids_are_each_one_gpu_and_as_many_as_the_count(ids, message):
    result = CliRunner().invoke(cli, ["validate", *GPU, f"hardware.device_ids={ids}"])
    assert result.exit_code == 1
    # The count is checked against hardware.count, which the file sets: that problem is the section's.
    where = "presets/rtx3090x2-fp16.yaml: hardware: " if "count" in message else "override hardware.device_ids: "
    assert where + message in result.output


@pytest.mark.parametrize("ids", ["[0, 1]", "[3, 7]", "[GPU-8b3c5d1e-0f2a-4b6c-9d8e-7f6a5b4c3d2e, 1]",
                                 "[MIG-0e1d2c3b-4a59-6877-8695-a4b3c2d1e0f9, 0]"])
def test_indexes_and_uuids_pass(ids):
    result = CliRunner().invoke(cli, ["validate", *GPU, f"hardware.device_ids={ids}"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-8B", "gpt2", "meta-llama/Llama-3.1-8B-Instruct", "org_1/m.v2",
                                      "a/" + "b" * 96])
def test_hub_ids_as_the_hub_takes_them(model_id):
    assert is_hub_id(model_id)


@pytest.mark.parametrize("model_id", ["a/b/c", "org/na--me", "org/a..b", "org/m.git", "-org/m", "org/m-", "org/.m",
                                      "org/" + "b" * 97, "org/caf\u00e9", "org name/m", "org/", "m/", "org:m",
                                      "https://huggingface.co/org/m"])
def test_other_text_is_not_a_hub_id_and_is_refused(model_id):
    assert not is_hub_id(model_id)
    result = validate(f"model.id={model_id}", "model.host_path=null", "model.generate=null")
    assert result.exit_code == 1
    assert "override model.id: is not a hub id" in result.output or "override model.id:" in result.output


@pytest.mark.parametrize("path", ["/", "/etc", "/etc/", "//etc", "/usr/lib/x", "/proc/self", "/root/m", "/var",
                                  "/home", "/tmp", "/./etc", "/srv/../etc", "../x", "../../etc", "./a/../../x", "./",
                                  "~", "~/", "~/..", "~root/m", ".."])
def test_system_folders_and_escapes_are_refused_as_model_paths(path):
    assert model_path_problem(path), path
    result = validate(f"model.host_path='{path}'", "model.generate=null")
    assert result.exit_code == 1
    assert "override model.host_path: " in result.output


def test_an_unquoted_tilde_is_the_home_folder_in_a_host_path():
    """Issue 38: `model.host_path=~` read as YAML's null, so the home folder a zsh user typed passed as "no folder"
    (bash expands it first). The field is a path: ~ is the home folder there and is refused; null still unsets."""
    for argv in (["model.host_path=~"], ["model.host_path=~", "model.generate=null"], ["model=~"]):
        result = validate(*argv)
        assert result.exit_code == 1, (argv, result.output)
        assert "override model.host_path: is the home folder itself" in result.output, (argv, result.output)
    assert validate("model.host_path=null").exit_code == 0
    # Other text fields keep YAML's meaning: ~ unsets them.
    assert load_preset("a100x8", ["image.cuda=~"])[2].image.cuda is None


@pytest.mark.parametrize("path", ["./models/tiny-llama", "/srv/models/m", "~/models/m", "/etc", "../../etc"])
def test_a_path_as_model_id_is_refused_with_the_field_to_use(path):
    """Before, a model.id that was a path was bind-mounted; a host folder is now only taken by model.host_path."""
    result = validate(f"model.id='{path}'", "model.host_path=null", "model.generate=null")
    assert result.exit_code == 1
    if "etc" in path:  # model.host_path refuses it too: no spelling is offered that is refused next (issue 36)
        assert "override model.id: is a host path that model.host_path refuses too: " in result.output
        assert "sets both" not in result.output
        return
    assert "override model.id: is a host path: a model folder goes in model.host_path (mounted read-only)" in result.output


def test_host_path_must_be_a_path_and_generate_never_writes_into_it():
    result = validate("model.host_path=models/m")
    assert result.exit_code == 1 and "override model.host_path: must be a path" in result.output
    # The cpu preset generates its model into the kit's own volume: a host folder beside it is refused, not written.
    result = validate("model.host_path=./models/mine")
    assert result.exit_code == 1 and "generate makes the model in the stack's own volume" in result.output
    assert "model.generate=null" in result.output
    assert validate("model.host_path=./models/mine", "model.generate=null").exit_code == 0


def test_model_swap_on_the_command_line_sets_the_field_for_a_folder(tmp_path):
    from kit.deploy.record import model_overrides

    assert model_overrides("./models/mine") == ("model.host_path=./models/mine", "model.id=mine",
                                                "model.generate=null", "model.served_model_name=null")
    assert model_overrides("Qwen/Qwen3-0.6B")[:2] == ("model.id=Qwen/Qwen3-0.6B", "model.host_path=null")
    result = validate("model=/etc")
    assert result.exit_code == 1 and "model.host_path: is a system folder (/etc)" in result.output
    from kit.deploy.pipeline import prepare

    d = prepare("cpu", list(model_overrides("/srv/models/mine"))).deployment
    assert d.serve.model_mount == ("/srv/models/mine", "/models/mine")
    assert d.serve.serve_args[d.serve.serve_args.index("--served-model-name") + 1] == "mine"


@pytest.mark.parametrize("path", ["./models/tiny-llama", "/srv/models/m", "/opt/models/m", "/home/me/models/m",
                                  "~/models/m", "/tmp/m", "./a/../b"])
def test_a_models_own_folder_passes(path):
    assert model_path_problem(path) is None


def test_a_link_to_a_system_folder_is_refused_where_it_leads(tmp_path):
    """Issue 35, item 8: host paths were checked as text, so a link to /etc passed, and so did /var/lib."""
    link = tmp_path / "models"
    link.symlink_to("/etc")
    problem = model_path_problem(str(link / "m"))
    assert problem == ("resolves, links followed, to /etc/m, which is a system folder (/etc/m): a local model is "
                       "mounted into the containers; point at the model's own folder (e.g. /srv/models/NAME)")
    result = validate(f"model.host_path={link}", "model.generate=null")
    assert result.exit_code == 1 and "override model.host_path: resolves, links followed, to /etc" in result.output
    assert model_path_problem("/var/lib/docker/volumes/x") and model_path_problem("/var/lib/models/m")
    real = tmp_path / "real-models"
    real.mkdir()
    (tmp_path / "ok").symlink_to(real)
    assert model_path_problem(str(tmp_path / "ok" / "m")) is None  # a link to an ordinary folder passes
