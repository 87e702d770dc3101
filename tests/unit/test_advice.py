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

import contextlib
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import COMMANDS, cli
from kit.config.preset import PRESETS_DIR, load_preset, preset_names
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
    assert ("rtx4090-awq", "overrides", ["image.strategy=official", "image.cuda=12.9"]) in PRESET_ADVICE
    assert ("cpu-embed", "command", ["kit render preset=cpu --with-preset cpu-embed"]) in PRESET_ADVICE
    assert ("a100x8", "overrides", ["image.cuda=12.9"]) in PRESET_ADVICE
    for name in preset_names():
        outside = re.sub(r"`[^`]*`", "", preset_comments(name))
        assert not OVERRIDE.search(outside), (name, OVERRIDE.search(outside).group())
        assert not re.search(rf"\bkit (?:{'|'.join(map(re.escape, COMMANDS))})\b", outside), (name, outside)


@pytest.mark.parametrize(("preset", "kind", "advice"), PRESET_ADVICE,
                         ids=[f"{p}:{' '.join(a)}" for p, _, a in PRESET_ADVICE])
def test_preset_comment_advice_runs_as_printed(preset, kind, advice, tmp_path):
    if kind == "command":
        result = run_printed(advice[0], tmp_path)
    else:
        result = validate_with(preset, advice)
    assert result.exit_code == 0, (advice, result.output)


def test_the_old_driver_advice_of_rtx4090_awq_fixes_the_driver_check():
    """The comment: on a driver >= 575 (too old for CUDA 13), use the official CUDA 12.9 image. On the recorded
    575.64.03 host the driver check fails as shipped and passes with the comment's overrides."""
    [run] = [a for p, kind, a in PRESET_ADVICE if p == "rtx4090-awq" and kind == "overrides"]
    host = facts("nvidia-smi-1x-rtx4090.csv")
    before = {c.name: c for c in evaluate(host, load_preset("rtx4090-awq")[2])}
    after = {c.name: c for c in evaluate(host, load_preset("rtx4090-awq", run)[2])}
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
    assert ("rtx4090-awq", [], "nvidia-smi-1x-rtx4090.csv", "nvidia driver",
            ["image.strategy=official", "image.cuda=12.9"]) in advice
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
