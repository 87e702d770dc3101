"""Every piece of advice the kit prints, run through the real CLI exactly as printed.

Advice is taken from where it is printed, never retyped here: the comments of the shipped presets, `kit doctor`'s
fixes for the recorded hosts in fixtures/doctor, the planner's suggestions for presets that do not fit (as `kit plan`
and `kit validate` print them), and error hints. Two shapes are recognised:

- a command in backticks that starts with `kit ` (run as printed, arguments split as a shell splits them);
- a run of overrides (`SECTION.FIELD=VALUE`, one or more separated by blanks), run as
  `kit validate preset=NAME <the run>` for the preset it was printed for.

A fix must also fix what it was printed for: the doctor check, or the plan, passes once it is applied.
`kit render` runs as printed in an empty folder (no Docker needed); no advice here needs Docker (build, up), which
would be checked for parse and validate only.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import COMMANDS, cli
from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.core.datafiles import PRESETS_DIR
from kit.host.doctor import FAIL, PASS, CommandResult, HostFacts, evaluate

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
# An override as advice spells it: a dotted key, "=", a value up to a blank or punctuation that ends a clause.
OVERRIDE = re.compile(r"(?<![\w.=/-])[a-z_]+(?:\.[A-Za-z0-9_-]+)+=[^\s;,()`]+")
COMMAND = re.compile(r"`(kit [^`]+)`")


def override_runs(text: str) -> list[list[str]]:
    """The runs of overrides in ``text``: overrides separated only by blanks (or one pair of backticks) are one run."""
    runs: list[list[str]] = []
    end = None
    for match in OVERRIDE.finditer(text):
        if runs and end is not None and text[end:match.start()].strip(" `") == "" and \
                text[end:match.start()].count("`") == 0:
            runs[-1].append(match.group())
        else:
            runs.append([match.group()])
        end = match.end()
    return runs


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_printed(command: str, cwd: Path):
    """`kit ...` exactly as printed, in ``cwd`` (a render writes there)."""
    argv = shlex.split(command)
    assert argv[0] == "kit", command
    with contextlib.chdir(cwd):
        return CliRunner().invoke(cli, argv[1:], catch_exceptions=False)


def validate_with(preset: str, run: list[str]):
    return kit("validate", f"preset={preset}", *run)


# ------------------------------------------------------------------------------------------- preset comments


def preset_comments(name: str) -> str:
    """The comment text of a shipped preset, its lines joined (a piece of advice may wrap)."""
    texts = []
    for line in (PRESETS_DIR / f"{name}.yaml").read_text().splitlines():
        at = line.find("#")
        if at != -1 and (at == 0 or line[at - 1] == " ") and "yaml-language-server" not in line:
            texts.append(line[at + 1:].strip())
    return " ".join(texts)


def preset_advice() -> list[tuple[str, str, list[str]]]:
    """(preset, kind, argv) for every command and override run in the shipped presets' comments."""
    found = []
    for name in preset_names():
        text = preset_comments(name)
        for command in COMMAND.findall(text):
            found.append((name, "command", [command]))
        for run in override_runs(COMMAND.sub("", text)):
            found.append((name, "overrides", run))
    return found


PRESET_ADVICE = preset_advice()


def test_the_preset_comments_advice_is_found():
    # The extractor finds what the presets say (so the runs below are not vacuous), and every override or command a
    # comment names is in backticks, where a reader copies it from and where this test finds it.
    assert ("rtx3090x2-fp16", "overrides", ["image.vllm_version=0.16.0"]) in PRESET_ADVICE
    assert ("cpu-embed", "command", ["kit render preset=cpu --with-preset cpu-embed"]) in PRESET_ADVICE
    for name in preset_names():
        outside = re.sub(r"`[^`]*`", "", preset_comments(name))
        assert not OVERRIDE.search(outside), (name, OVERRIDE.search(outside).group())
        assert not re.search(rf"\bkit (?:{'|'.join(map(re.escape, COMMANDS))})\b", outside), (name, outside)


@pytest.mark.parametrize(("preset", "kind", "advice"), PRESET_ADVICE,
                         ids=[f"{p}:{' '.join(a)}" for p, _, a in PRESET_ADVICE])
def test_preset_comment_advice_runs_as_printed(preset, kind, advice, tmp_path):
    if kind == "command":
        result = run_printed(advice[0], tmp_path)
        if shlex.split(advice[0])[1] == "doctor":
            # `kit doctor` runs as printed; whether this host passes its checks (free disk, which the suite's own
            # image builds use up, or a GPU) is the host's answer, not the advice's: exit 1 lists them, 2 would be
            # a command that does not run as printed
            assert result.exit_code in (0, 1) and "docker engine" in result.output, (advice, result.output)
            return
    else:
        result = validate_with(preset, advice)
    assert result.exit_code == 0, (advice, result.output)


def test_the_old_driver_advice_of_rtx3090x2_fp16_fixes_the_driver_check():
    """The comment: on a 575-579 driver (too old for CUDA 13), vLLM 0.16.0, whose official image is CUDA 12.9. On the
    recorded 575.64.03 host the driver check fails as shipped and passes with the comment's overrides."""
    [run] = [a for p, kind, a in PRESET_ADVICE if p == "rtx3090x2-fp16" and kind == "overrides"]
    host = facts("nvidia-smi-1x-rtx4090.csv")
    before = {c.name: c for c in evaluate(host, load_preset("rtx3090x2-fp16")[2])}
    after = {c.name: c for c in evaluate(host, load_preset("rtx3090x2-fp16", run)[2])}
    assert before["nvidia driver"].status == FAIL and after["nvidia driver"].status == PASS


# ------------------------------------------------------------------------------------------- kit doctor


def facts(smi: str) -> HostFacts:
    return HostFacts(
        docker_info=CommandResult(["docker", "info"], 0, (FIXTURES / "docker-info-nvidia.json").read_text()),
        compose_version=CommandResult(["docker", "compose"], 0, "2.40.3\n"),
        nvidia_smi=CommandResult(["nvidia-smi"], 0, (FIXTURES / smi).read_text()),
        shm_bytes=64 << 20, disk_free={"/var/lib/docker": 500 << 30}, hf_home="/nonexistent/hf", hf_token_set=True)


# The shipped presets as they are, and one tweaked not to fit its GPU (so the memory plan check has fixes).
DOCTOR_PRESETS = [(name, []) for name in preset_names()] + [
    ("rtx4090-awq", ["engine.max_model_len=40960", "engine.max_num_seqs=256", "engine.gpu_memory_utilization=0.5"])]


def doctor_advice() -> list[tuple[str, list[str], str, str, list[str]]]:
    """(preset, its overrides, nvidia-smi fixture, check name, override run) for every override run in a fix that
    `kit doctor` prints for a preset on a recorded host (the CLI prints ``fix: <Check.fix>`` verbatim)."""
    found = []
    for smi in sorted(p.name for p in FIXTURES.glob("nvidia-smi-*.csv")):
        for name, tweak in DOCTOR_PRESETS:
            for check in evaluate(facts(smi), load_preset(name, tweak)[2]):
                if check.fix and check.status != PASS:
                    found += [(name, tweak, smi, check.name, run) for run in override_runs(check.fix)]
    return found


def test_every_override_doctor_prints_is_accepted_and_fixes_its_check():
    advice = doctor_advice()
    # The recorded hosts give the fixes this test is about: a driver too old for the image, a GPU other than the
    # preset's, a model that does not fit.
    assert {check for *_, check, _ in advice} >= {"nvidia driver", "gpus", "memory plan"}, advice
    assert ("rtx4090-awq", [], "nvidia-smi-1x-rtx4090.csv", "nvidia driver", ["image.vllm_version=0.16.0"]) in advice
    failures = []
    for preset, tweak, smi, check, run in advice:
        # Accepted: by `kit validate`, or, for the preset made not to fit (which validate refuses whatever the driver),
        # by `kit presets show`, which reads and validates the preset and its overrides without the memory check.
        whole = validate_with(preset, tweak).exit_code == 0
        result = validate_with(preset, [*tweak, *run]) if whole else kit("presets", "show", f"preset={preset}",
                                                                          *tweak, *run)
        if result.exit_code != 0:
            failures.append((preset, smi, run, "refused", result.output))
            continue
        fixed = {c.name: c for c in evaluate(facts(smi), load_preset(preset, [*tweak, *run])[2])}
        if fixed[check].status != PASS:
            failures.append((preset, smi, run, "does not fix", check, fixed[check].detail))
    assert not failures, failures


# ------------------------------------------------------------------------------------------- the planner

# Presets made not to fit, each with what makes it so.
NOT_FITTING = [
    ("rtx4090-awq", ["engine.max_model_len=40960", "engine.max_num_seqs=256", "engine.gpu_memory_utilization=0.5"]),
    ("rtx3090x2-fp16", ["engine.tensor_parallel_size=1", "hardware.count=1"]),
    ("a100x8", ["engine.tensor_parallel_size=1", "hardware.count=1", "engine.gpu_memory_utilization=0.3"]),
    ("rtx3090x2-fp16", ["engine.max_num_batched_tokens=65536"]),  # a token budget copied from a datacenter card
]


def test_max_model_len_auto_plans_the_longest_that_fits():
    """`auto` is vLLM's auto-fit: the model's own length when one request of it fits, else the longest that does,
    which is the planner's own "largest context that fits" fix for the same preset."""
    preset, tweak = NOT_FITTING[0]
    [longest] = [run for text in printed_tries(kit("plan", f"preset={preset}", *tweak).output)
                 for run in override_runs(text) if run[0].startswith("engine.max_model_len=")]
    auto = kit("plan", f"preset={preset}", *tweak, "engine.max_model_len=auto", "--json")
    assert auto.exit_code == 0, auto.output
    assert f"engine.max_model_len={json.loads(auto.stdout)['data']['inputs']['max_model_len']}" == longest[0]
    roomy = kit("plan", f"preset={preset}", "engine.max_model_len=auto", "--json")  # the whole 40960 fits
    assert json.loads(roomy.stdout)["data"]["inputs"]["max_model_len"] == 40960


def printed_tries(result_output: str) -> list[str]:
    return [line.split("try: ", 1)[1] for line in result_output.splitlines() if line.strip().startswith("try: ")]


@pytest.mark.parametrize(("preset", "tweak"), NOT_FITTING, ids=[p for p, _ in NOT_FITTING])
def test_every_fix_kit_plan_prints_is_accepted_and_fits(preset, tweak):
    before = kit("plan", f"preset={preset}", *tweak)
    assert before.exit_code == 1, before.output
    tries = printed_tries(before.output)
    runs = [run for text in tries for run in override_runs(text)]
    assert runs, tries
    for run in runs:
        after = kit("plan", f"preset={preset}", *tweak, *run)
        assert after.exit_code == 0, (run, after.output)
        assert validate_with(preset, [*tweak, *run]).exit_code == 0, run


@pytest.mark.parametrize(("preset", "tweak"), NOT_FITTING, ids=[p for p, _ in NOT_FITTING])
def test_the_fixes_kit_validate_hints_are_the_plans_and_each_fits(preset, tweak):
    result = validate_with(preset, tweak)
    assert result.exit_code == 1
    hints = [line.removeprefix("hint: ") for line in result.stderr.splitlines() if "does not fit" in line]
    runs = [run for hint in hints for run in override_runs(hint)]
    assert runs, result.stderr
    for run in runs:
        assert validate_with(preset, [*tweak, *run]).exit_code == 0, run


def test_a_plan_error_hint_spelt_as_an_override_is_accepted():
    # More than the model's own length: the planner's hint names the longest vLLM takes, as an override.
    result = validate_with("rtx4090-awq", ["engine.max_model_len=50000"])
    assert result.exit_code == 1
    [hint] = [line for line in result.stderr.splitlines() if line.startswith("hint: ")]
    [run] = override_runs(hint)
    assert run == ["engine.max_model_len=40960"]
    assert validate_with("rtx4090-awq", run).exit_code == 0


# ------------------------------------------------------------------------------------------- error hints


def test_error_hints_that_name_a_command_run_as_printed(tmp_path):
    """Hints that name a `kit` command, triggered and then run as printed."""
    cases = [
        ["validate", "preset=cpu", "hardware.gpu=zzzzzzzz"],  # unknown GPU, nothing close: "run `kit gpus`"
        ["render", "--out", str(tmp_path / "d")],  # no preset: "see `kit presets`"
    ]
    for args in cases:
        result = kit(*args)
        assert result.exit_code in (1, 2), result.output
        commands = COMMAND.findall(result.output)
        assert commands, result.output
        for command in commands:
            assert run_printed(command, tmp_path).exit_code == 0, command


def test_a_compatibility_hint_spelt_as_an_override_fixes_it():
    # A V100 with vLLM 0.33 (no sm_70 kernels): the hint names the newest pinned release that has them.
    tweak = ["hardware.gpu=v100-32gb", "engine.dtype=float16"]
    result = validate_with("rtx3090x2-fp16", tweak)
    assert result.exit_code == 1
    runs = [run for line in result.output.splitlines() for run in override_runs(line) if "vllm_version" in run[0]]
    assert runs, result.output
    for run in runs:
        fixed = validate_with("rtx3090x2-fp16", [*tweak, *run])
        assert "compute capability" not in fixed.output, (run, fixed.output)


def named_commands() -> list[tuple[str, str]]:
    """(module, command) for every `kit ...` in backticks in the kit's own strings (hints, help, headers)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "kit"
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= {(str(path.relative_to(root.parent)), m) for m in COMMAND.findall(node.value)}
    return sorted(found)


def test_every_kit_command_the_kit_names_exists_with_the_options_it_names():
    """Parse level, for what cannot run as printed here (placeholders such as NAME and DIR, or Docker): the
    command (and subcommand) exists and takes every option the text names."""
    import click

    from kit.cli.main import load_command

    commands = named_commands()
    assert len(commands) > 20, commands
    wrong = []
    for module, text in commands:
        words = text.split()[1:]
        command: click.Command = cli
        if words and not words[0].startswith("-"):
            if words[0] not in COMMANDS:
                wrong.append((module, text, "no such command"))
                continue
            command = load_command(words[0])
            if isinstance(command, click.Group) and len(words) > 1 and words[1] in command.commands:
                command = command.commands[words[1]]
        options = {opt for param in command.params for opt in param.opts} | {"--help", "-h"}
        if command is cli:
            options |= {"--version"}
        for word in words:
            name = word.split("=", 1)[0]
            if name.startswith("-") and name not in options:
                wrong.append((module, text, f"{name} is not an option of it"))
    assert not wrong, wrong


# ------------------------------------------------------------------------------------------- every hint's setting

# What the kit's strings name in advice: a setting spelt as an override (SECTION.FIELD=...) or an environment
# variable spelt as an assignment (NAME=...). Docstrings are documentation, not advice, and are not read.
NAMED_SETTING = re.compile(r"(?<![\w.=/-])([a-z_]+(?:\.[A-Za-z0-9_-]+)+)=")
NAMED_VARIABLE = re.compile(r"(?<![\w$])([A-Z][A-Z0-9]*_[A-Z0-9_]+)=")
KIT_ROOT = Path(__file__).resolve().parents[2] / "kit"
# Names the kit's strings spell with "=" that are no advice to the user, each with why.
NOT_ADVICE = {
    "com.docker.compose.project": "a container label the kit filters on (kit/run/stack.py)",
    "com.docker.compose.service": "a container label the kit filters on (kit/run/stack.py)",
    "DOCKER_BUILDKIT": "set by the kit for its own builds (kit/image/build.py)",
    "VLLM_USE_RUST_FRONTEND": "a note in kit/data/prune.yaml on what vLLM reads, not a setting of the kit",
}
TWO_NODES = ["hardware.nodes=2", "hardware.count=4", "engine.tensor_parallel_size=4", "engine.pipeline_parallel_size=2"]
# One preset and value per setting that advice names: the outcome (the render, or the refusal) must change with it.
SETTING_PROOFS: dict[str, tuple[str, list[str], str]] = {
    "cluster.head_address": ("a100x8", TWO_NODES, "10.0.0.7"),
    "cluster.network": ("a100x8", TWO_NODES, "bridge"),
    "engine.attention_backend": ("rtx4090-awq", [], "TRITON_ATTN"),
    "engine.dtype": ("rtx3090x2-fp16", [], "bfloat16"),
    "engine.enable_chunked_prefill": ("rtx4090-awq", [], "false"),
    "engine.max_num_batched_tokens": ("rtx4090-awq", [], "4096"),
    "engine.max_num_seqs": ("rtx4090-awq", [], "8"),
    "engine.max_model_len": ("rtx4090-awq", [], "4096"),
    "engine.quantization": ("rtx4090-awq", [], "awq"),
    "engine.tensor_parallel_size": ("rtx3090x2-fp16", [], "1"),
    "hardware.arch": ("cpu", [], "arm64"),
    "hardware.count": ("rtx3090x2-fp16", ["engine.tensor_parallel_size=1"], "1"),
    "hardware.gpu": ("rtx4090-awq", [], "a100-80gb"),
    "hardware.gpu_runtime": ("rtx4090-awq", [], "cdi"),
    "hardware.nodes": ("a100x8", TWO_NODES[1:], "2"),
    "image.cuda": ("rtx4090-awq", ["image.strategy=official"], "12.9"),
    "image.pin_digest": ("cpu", ["image.repository=registry.test/kit/cpu"], "sha256:" + "a" * 64),
    "image.pip_index_url": ("rtx4090-awq", [], "https://wheels.test/simple"),
    "image.repository": ("cpu", [], "registry.test/kit/cpu"),
    "image.strategy": ("rtx4090-awq", [], "official"),
    "image.vllm_version": ("cpu", [], "0.33.0"),
    "model.generate": ("cpu", [], "null"),
    "model.host_path": ("cpu", ["model.generate=null"], "./models/tiny"),
    "model.id": ("rtx4090-awq", [], "Qwen/Qwen3-4B-AWQ"),
    "model.revision": ("rtx4090-awq", [], "0123456789abcdef0123456789abcdef01234567"),
    "model.served_model_name": ("rtx4090-awq", [], "chat"),
    "runtime.port": ("cpu", [], "8123"),
    "runtime.require_api_key": ("cpu", [], "false"),
    "runtime.shm_size": ("rtx4090-awq", [], "4g"),  # required by default: keyless only by name, warned about
    "runtime.unsafe_engine_flags": ("rtx4090-awq", ["engine.logging_config=/etc/vllm/logging.json"],
                                    "[logging_config]"),
}


def _string_text(node) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join("{}" if isinstance(v, ast.FormattedValue) else _string_text(v) for v in node.values)
    return ""


def _data_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [text for item in items for text in _data_strings(item)]


def kit_strings() -> list[tuple[str, str]]:
    """(file, text) for every string in kit/ that is not a docstring, and every string of kit/data's YAML."""
    import yaml

    found = []
    for path in sorted(KIT_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        found += [(str(path.relative_to(KIT_ROOT.parent)), _string_text(node)) for node in ast.walk(tree)
                  if isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in docstrings]
    for path in sorted((KIT_ROOT / "data").glob("*.yaml")):
        found += [(str(path.relative_to(KIT_ROOT.parent)), text)
                  for text in _data_strings(yaml.safe_load(path.read_text()))]
    return found


def named_in_advice() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(settings, variables): each name -> the files whose strings spell it with "=", less NOT_ADVICE."""
    settings: dict[str, set[str]] = {}
    variables: dict[str, set[str]] = {}
    for where, text in kit_strings():
        for name in NAMED_SETTING.findall(text):
            settings.setdefault(name, set()).add(where)
        for name in NAMED_VARIABLE.findall(text):
            variables.setdefault(name, set()).add(where)
    return ({k: v for k, v in settings.items() if k not in NOT_ADVICE},
            {k: v for k, v in variables.items() if k not in NOT_ADVICE})


NAMED_SETTINGS, NAMED_VARIABLES = named_in_advice()


def test_every_setting_advice_names_has_a_proof():
    # The scan finds what the hints say today (so it is not vacuous), and a hint naming a setting no proof covers
    # fails here until one is added below.
    assert {"engine.quantization", "image.cuda", "image.pin_digest", "model.revision"} <= set(NAMED_SETTINGS)
    missing = {name: sorted(where) for name, where in NAMED_SETTINGS.items() if name not in SETTING_PROOFS}
    assert not missing, missing


def outcome(preset: str, overrides: list[str]) -> tuple[str, object]:
    """What a render of the preset comes to: its files, or the refusal's lines."""
    from kit.core.errors import KitError
    from kit.deploy.pipeline import prepare

    try:
        return "rendered", prepare(preset, overrides, allow_no_fit=True).files
    except KitError as error:
        return "refused", error.lines()


@pytest.mark.parametrize("name", sorted(SETTING_PROOFS))
def test_each_setting_advice_names_changes_the_outcome(name):
    preset, tweak, value = SETTING_PROOFS[name]
    before = outcome(preset, tweak)
    after = outcome(preset, [*tweak, f"{name}={value}"])
    assert before != after, f"{name}={value} changes nothing the kit does for {preset} {tweak}"
    assert after[0] == "rendered" or not any("is not a" in line and name in line for line in after[1]), after


def test_every_variable_advice_names_is_one_the_kit_reads():
    """An environment variable a hint tells the user to set is one the kit (or a service it renders) reads: its name
    is a string of its own in the code (an ``environ`` key, a value of the kit's env) or the data, or compose
    interpolates it (``${NAME``). A variable only vLLM reads would be advice the kit ignores."""
    assert {"HF_ENDPOINT", "WEBUI_PORT"} <= set(NAMED_VARIABLES)
    whole = {text for _, text in kit_strings()}
    unread = {name: sorted(where) for name, where in NAMED_VARIABLES.items()
              if name not in whole and not any(f"${{{name}" in text for text in whole)}
    assert not unread, unread


def test_a_misspelt_quantization_is_told_the_close_name_and_the_hint_works():
    result = validate_with("rtx4090-awq", ["engine.quantization=awq4"])
    assert result.exit_code == 1
    assert "did you mean awq?" in result.stderr and "image.vllm_version" not in result.stderr, result.stderr
    [run] = [run for line in result.stderr.splitlines() if "did you mean" in line
             for run in override_runs(line.partition("did you mean")[2])]
    assert run == ["engine.quantization=awq"]
    assert validate_with("rtx4090-awq", run).exit_code == 0


@pytest.mark.parametrize("path", ["/etc", "/srv/models/tiny"])
def test_a_host_path_in_model_id_is_offered_only_a_spelling_that_is_taken(path):
    result = validate_with("cpu", [f"model.id={path}"])
    assert result.exit_code == 1
    offered = re.findall(r"model=(\S+) sets both", result.stderr)
    for spelling in offered:
        assert kit("validate", "preset=cpu", f"model={spelling}").exit_code == 0, (spelling, result.stderr)
    assert bool(offered) == (path != "/etc"), result.stderr  # /etc is refused whatever the spelling


@pytest.mark.parametrize("tweak", [["engine.max_num_seqs=32", "engine.max_num_batched_tokens=8"],
                                   ["engine.max_num_seqs=4096"],
                                   ["engine.enable_chunked_prefill=false", "engine.max_num_batched_tokens=4096"]])
def test_a_batch_vllm_refuses_is_refused_and_each_printed_fix_is_accepted(tweak):
    """Token budgets vLLM refuses at start-up (SchedulerConfig.verify_max_model_len): `kit validate` refuses them,
    naming the field, and each override its hint prints, applied on its own, validates."""
    result = validate_with("rtx4090-awq", tweak)
    assert result.exit_code == 1
    [hint] = [line for line in result.stderr.splitlines() if line.startswith("hint: ")]
    runs = override_runs(hint)
    assert len(runs) == 2, hint
    for run in runs:
        assert validate_with("rtx4090-awq", [*tweak, *run]).exit_code == 0, (tweak, run)
