"""`kit plan`: predict vLLM's start-up memory (weights, activations, KV cache) before deploying."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kit.cli.common import (
    FiniteFloatRange,
    VllmInteger,
    count_option_type,
    emit_json,
    preset_arguments,
    problem_json,
    split_args,
    standard_options,
)
from kit.core.errors import PlanError, shown

if TYPE_CHECKING:  # the planner (pydantic) loads when the command runs, not for --help or completion
    from collections.abc import Callable

    from kit.memory.fit import InputsAt
    from kit.memory.inputs import PlanInputs
    from kit.memory.plan import Plan

# A sanity cap, not a hardware fact: a thousand times the largest GPU or host memory in use today.
GPU_MEMORY_GIB_MAX = 1 << 20
KV_DTYPES = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
DTYPES = ["auto", "bfloat16", "float16", "float32", "half"]

# Each planner flag of `kit plan`, as (click parameter, flag, planner input, preset field): the field that
# kit.memory.preset_plan.plan_inputs_for reads for that input. Beside a preset, a flag the user gave becomes that
# override; --fit spells its answers with the same table. `--model` is the model swap of `model=`
# (kit.deploy.record.model_overrides).
PLAN_FLAGS = (
    ("gpu", "--gpu", "gpu_name", "hardware.gpu"),
    ("tp", "--tp", "tensor_parallel_size", "engine.tensor_parallel_size"),
    ("pp", "--pp", "pipeline_parallel_size", "engine.pipeline_parallel_size"),
    ("dtype", "--dtype", "dtype", "engine.dtype"),
    ("quantization", "--quantization", "quantization", "engine.quantization"),
    ("kv_cache_dtype", "--kv-cache-dtype", "kv_cache_dtype", "engine.kv_cache_dtype"),
    ("gpu_memory_utilization", "--gpu-memory-utilization", "gpu_memory_utilization", "engine.gpu_memory_utilization"),
    ("max_model_len", "--max-model-len", "max_model_len", "engine.max_model_len"),
    ("max_num_seqs", "--max-num-seqs", "max_num_seqs", "engine.max_num_seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens", "max_num_batched_tokens", "engine.max_num_batched_tokens"),
    ("enforce_eager", "--enforce-eager", "enforce_eager", "engine.enforce_eager"),
    ("vllm_version", "--vllm-version", "vllm_version", "image.vllm_version"),
    ("block_size", "--block-size", "block_size", "engine.block_size"),
    ("cpu_kvcache_space_gib", "--cpu-kvcache-space-gib", "cpu_kvcache_space_gib", "runtime.cpu_kvcache_space_gib"),
)
# Flags a preset has no field for: its hardware section decides. Given beside a preset they are usage errors.
NOT_WITH_PRESET = {
    "gpu_memory_gib": ("--gpu-memory-gib", "the preset's GPU (hardware.gpu) sets the memory; pick one with --gpu NAME"),
    "device": ("--device", "the preset's hardware.gpu decides (no GPU: the CPU backend)"),
    "approximate_version": ("--approximate-version", "a preset's image.vllm_version is always one of the kit's "
                            "releases"),
}


def plan_inputs_from_options(
    *,
    model: str,
    gpu: str | None = None,
    gpu_memory_gib: float | None = None,
    device: str = "cuda",
    tp: int = 1,
    pp: int = 1,
    dtype: str = "auto",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    enforce_eager: bool = False,
    vllm_version: str | None = None,
    block_size: int | None = None,
    cpu_kvcache_space_gib: float | None = None,
    hub: bool = True,
    approximate_version: bool = False,
) -> PlanInputs:
    """Build PlanInputs from CLI-shaped values (a preset can call this with its own fields)."""
    from pydantic import ValidationError

    from kit.config.modelinfo import load_model_spec
    from kit.memory.inputs import PlanInputs, find_gpu
    from kit.memory.rules import DEFAULT_VLLM_VERSION

    vllm_version = vllm_version or DEFAULT_VLLM_VERSION
    spec = load_model_spec(model, hub=hub)
    gpu_name = None
    if gpu:
        info = find_gpu(gpu)  # unknown names are a user error here, with the list of known ones
        gpu_name = info.key
        if gpu_memory_gib is None:
            gpu_memory_gib = info.memory_gib
    try:
        return PlanInputs(
            model=spec,
            device=device,
            gpu_memory_gib=gpu_memory_gib,
            gpu_name=gpu_name,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            dtype=dtype,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enforce_eager=enforce_eager,
            vllm_version=vllm_version,
            approximate_version=approximate_version,
            block_size=block_size,
            cpu_kvcache_space_gib=cpu_kvcache_space_gib,
        )
    except ValidationError as exc:  # a caller other than the CLI (whose options are range-checked) passed bad values
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PlanError(f"{field}: {first['msg']} (got {shown(first.get('input'))})") from None


def plan_heading(result: Plan) -> list[str]:
    i = result.inputs
    cpu = i["device"] == "cpu"
    where = i["gpu_name"] or ("cpu" if cpu else "GPU")
    if cpu:  # the CPU backend's KV cache is a fixed reservation; no GPU memory, no utilization applies
        space = i.get("cpu_kvcache_space_gib")
        memory = "-" if space is None else f"KV cache space {space:g} GiB, VLLM_CPU_KVCACHE_SPACE"
    else:
        memory = f"{i['gpu_memory_gib']:.2f} GiB" if i["gpu_memory_gib"] else "-"
    utilization = "" if cpu else f"utilization {i['gpu_memory_utilization']}, "
    return [
        f"{i['model']} on {where} ({memory}), TP={i['tensor_parallel_size']} PP={i['pipeline_parallel_size']}, "
        f"vLLM {i['vllm_version']}",
        f"dtype {i['dtype']}, quantization {i['quantization'] or 'none'}, KV cache {i['kv_cache_dtype']}, "
        f"{utilization}max_model_len {i['max_model_len']}, "
        f"max_num_seqs {i['max_num_seqs']}, max_num_batched_tokens {i['max_num_batched_tokens']}",
    ]


def plan_rows(result: Plan) -> list[tuple[str, str, str]]:
    """(quantity, value, note) per rank, as the human table shows them."""
    i = result.inputs
    gib = "{:.2f} GiB".format
    # A model that does not fit leaves a negative budget: say by how much, not "-3.20 GiB of KV cache".
    kv = (gib(result.kv_cache_gib), "") if result.kv_cache_gib >= 0 else \
        ("none", f"does not fit by {-result.kv_cache_gib:.2f} GiB")
    rows = [("weights", gib(result.weights_gib), ""), ("peak activation", gib(result.activation_gib), ""),
            ("non-torch", gib(result.non_torch_gib), ""),
            *((("CUDA graphs", gib(result.cuda_graph_gib), ""),) if i["device"] != "cpu" else ()),
            ("KV cache", *kv), ("KV cache tokens", f"{result.kv_cache_tokens:,}", ""),
            ("max concurrency", f"{result.max_concurrency:.2f} x", f"at {i['max_model_len']:,} tokens"),
            ("fits", "yes" if result.fits else "no", "")]
    if i.get("extensible_kv_cache"):  # vLLM 0.34+: sized after warm-up, with a margin kept free
        rows.insert(4, ("KV sizing margin", gib(result.kv_reserve_gib),
                        "kept free beyond the peak where the card, not the utilization, binds"))
    if result.fits and not result.holds_every_sequence:  # what `kit plan --fit` counts as the most sequences
        rows.insert(-1, ("sequences at once", f"{result.sequences_at_once:,}",
                         f"of max_num_seqs {i['max_num_seqs']:,}; vLLM starts, the rest wait for room"))
    if result.approximate.get("value"):
        rows.append(("approximate", "yes", result.approximate["reason"]))
    return rows


@click.command("plan")
@preset_arguments
@click.option("--model", metavar="ID|PATH", help="A Hugging Face id (the kit's catalog, the HF cache, then the hub "
              "unless HF_HUB_OFFLINE is set), a model folder or a config.json.")
@click.option("--gpu", metavar="NAME", help="GPU from the catalog (see `kit gpus`).")
@click.option("--gpu-memory-gib", type=FiniteFloatRange(0, GPU_MEMORY_GIB_MAX, min_open=True), metavar="X",
              help="Total GPU memory as CUDA reports it (host RAM with --device cpu).")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
@click.option("--tp", "--tensor-parallel-size", "tp", type=count_option_type(), default=1, show_default=True)
@click.option("--pp", "--pipeline-parallel-size", "pp", type=count_option_type(), default=1, show_default=True)
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True)
@click.option("--quantization", metavar="Q", help="awq, awq_marlin, gptq, gptq_marlin, fp8, ... (default: the checkpoint's)")
@click.option("--kv-cache-dtype", type=click.Choice(KV_DTYPES), default="auto", show_default=True)
@click.option("--gpu-memory-utilization", type=FiniteFloatRange(0, 1, min_open=True), help="Default: vLLM's for the version.")
@click.option("--max-model-len", type=VllmInteger("human_readable_int_or_auto"),
              help="As vLLM reads it: 16384, 16k, 16K, or auto (the model's length, or the longest that fits).")
@click.option("--max-num-seqs", type=count_option_type())
@click.option("--max-num-batched-tokens", type=VllmInteger("human_readable_int"))
@click.option("--enforce-eager", is_flag=True)
@click.option("--vllm-version", metavar="X.Y.Z", help="vLLM release to plan for (default: the kit's pinned one); "
              "a release outside the kit's tables is refused.")
@click.option("--approximate-version", is_flag=True, help="Plan a --vllm-version outside the kit's tables with the "
              "nearest older known release's rules, marked approximate.")
@click.option("--block-size", type=count_option_type())
@click.option("--cpu-kvcache-space-gib", type=FiniteFloatRange(0, GPU_MEMORY_GIB_MAX, min_open=True),
              help="VLLM_CPU_KVCACHE_SPACE (--device cpu only).")
@click.option("--explain", is_flag=True, help="Also list each figure's named terms (weights, activation, non-torch, "
              "CUDA graphs), with the vLLM source each follows and which are fitted residuals.")
@click.option("--fit", is_flag=True, help="Say what fits instead: the largest --max-model-len at --max-num-seqs, the "
              "most sequences at --max-model-len, the smallest --tp, a smaller precision (exit 0).")
@standard_options
def plan_command(args: tuple[str, ...], preset_option: str | None, model: str | None, gpu: str | None, gpu_memory_gib: float | None, device: str, tp: int, pp: int,
                 dtype: str, quantization: str | None, kv_cache_dtype: str, gpu_memory_utilization: float | None,
                 max_model_len: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                 enforce_eager: bool, vllm_version: str | None, approximate_version: bool, block_size: int | None,
                 cpu_kvcache_space_gib: float | None, explain: bool, fit: bool, as_json: bool) -> None:
    """Predict vLLM's memory at start: exit 0 if the model fits, 1 if not.

    kit plan preset=NAME [KEY=VALUE ...] [FLAGS] [--json], or standalone: kit plan --model ID (--gpu NAME |
    --gpu-memory-gib X) ... Beside a preset, each flag given becomes its override (--max-model-len N:
    engine.max_model_len=N, --model ID: model=ID). --fit answers what fits (exit 0).
    """
    from kit.memory import plan as planner

    ctx = click.get_current_context()
    if explain and fit:
        raise click.UsageError("--explain lists the terms of one plan; --fit searches many: give one")
    ref, overrides, extras = split_args(args, preset_option, extra_keys=("model",))
    if "model" in extras:
        if model is not None and model != extras["model"]:
            raise click.UsageError("the model is given twice (model= and --model)")
        model = extras["model"]
    if ref is not None:
        from kit.config.presetload import load_preset
        from kit.core.errors import KitError
        from kit.memory.preset_plan import as_preset_fixes, flags_as_overrides, plan_inputs_for

        from_flags = preset_overrides_from_flags(ctx, model, "model=" if "model" in extras else "--model")
        _, path, preset = load_preset(ref, overrides + [o for _, o in from_flags])
        if preset.hardware.gpu is not None and _given(ctx, "cpu_kvcache_space_gib"):
            raise click.UsageError(f"--cpu-kvcache-space-gib: sizes the CPU backend's KV cache; this preset runs on "
                                   f"hardware.gpu {preset.hardware.gpu}")
        applied = overrides + [o for _, o in from_flags]
        shown = overrides + [f"{o} ({flag})" for flag, o in from_flags]  # the text says where each came from
        preset_inputs = plan_inputs_for(preset)
        if preset_inputs is None:
            where = (f"model.host_path {preset.model.local_path}" if preset.model.is_local
                     else f"model.id {preset.model.id}")
            raise KitError(f"{path}: {where}: no config.json there",
                           hint="make or download the model there first, or point model= at a folder holding its "
                                "config.json (or at the config.json itself)")
        try:
            if fit:
                _report_fit(preset_fit_inputs(ref, applied), as_json,
                            preset_spelling, applied, shown,
                            hardware=preset_tp_refusal(ref, applied, preset))
                return
            result = planner.plan(preset_inputs)
        except KitError as exc:  # the user works in a preset: the fix is an override, not a vLLM flag
            raise type(exc)(exc.message, hint=flags_as_overrides(exc.hint), problems=exc.problems) from None
        _report(as_preset_fixes(result), as_json, applied, shown, explain=explain)
        return
    if model is None:
        raise click.UsageError("give preset=NAME or --model ID|PATH")
    if device == "cuda" and not gpu and gpu_memory_gib is None:
        raise click.UsageError("give --gpu NAME or --gpu-memory-gib X")
    if device == "cpu" and gpu:
        raise click.UsageError("--gpu names a GPU from the catalog; --device cpu plans the CPU backend "
                               "(its memory is --gpu-memory-gib, the host's RAM): give one")
    if device != "cpu" and cpu_kvcache_space_gib is not None:
        raise click.UsageError("--cpu-kvcache-space-gib: sizes the CPU backend's KV cache; add --device cpu")
    options = dict(
        model=model, gpu=gpu, gpu_memory_gib=gpu_memory_gib, device=device, tp=tp, pp=pp, dtype=dtype,
        quantization=quantization, kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, enforce_eager=enforce_eager, vllm_version=vllm_version,
        block_size=block_size, cpu_kvcache_space_gib=cpu_kvcache_space_gib, approximate_version=approximate_version,
    )
    at = standalone_fit_inputs(options)
    if fit:
        _report_fit(at, as_json, flag_spelling, None, None)
        return
    _report(planner.plan(at({})), as_json, explain=explain)


def standalone_fit_inputs(options: dict[str, Any]) -> InputsAt:
    """The inputs `kit plan --model ...` plans with a --fit change applied, the way it plans the flags it is given
    (``--max-model-len auto`` resolved again at each value)."""
    from kit.config.vllmint import AUTO
    from kit.memory.preset_plan import auto_fit_max_model_len

    params = {field: name for name, _, field, _ in PLAN_FLAGS}

    def at(change: dict[str, Any]) -> PlanInputs:
        given = dict(options)
        for field, value in change.items():
            given["model" if field == "model" else params[field]] = value
        auto = given["max_model_len"] == AUTO
        inputs = plan_inputs_from_options(**{**given, "max_model_len": None if auto else given["max_model_len"]})
        return auto_fit_max_model_len(inputs) if auto else inputs

    return at


def preset_fit_inputs(ref: str, overrides: list[str]) -> InputsAt:
    """The inputs `kit plan preset=REF OVERRIDES` plans with a --fit change applied: the preset loaded again with the
    change as the overrides --fit prints, so every answer is planned exactly as typing its advice would plan it."""
    from pydantic import ValidationError

    from kit.config.presetload import load_preset
    from kit.core.errors import KitError
    from kit.memory.preset_plan import plan_inputs_for

    def at(change: dict[str, Any]) -> PlanInputs:
        words = preset_spelling(change)
        _, path, changed = load_preset(ref, overrides + words)
        try:
            inputs = plan_inputs_for(changed)
        except ValidationError as exc:
            raise KitError(f"{' '.join(words)}: {exc.errors()[0]['msg']}") from None
        if inputs is None:
            raise KitError(f"{path}: {' '.join(words)}: the model's config.json is not known offline")
        return inputs

    return at


def preset_tp_refusal(ref: str, overrides: list[str], preset) -> Callable[[int], str | None]:  # noqa: ANN001
    """Why `kit validate` (and `kit render`) would refuse the preset at a tensor parallel size, where the asked size
    passes: its GPU layout (hardware.count, hardware.nodes, runtime.replicas) decides; --fit never changes it."""
    from kit.config.presetload import load_preset
    from kit.core.errors import KitError
    from kit.deploy.checks import parallel_layout_problems

    asked = {p.message for p in parallel_layout_problems("", preset)}

    def refusal(tp: int) -> str | None:
        try:
            _, _, changed = load_preset(ref, [*overrides, override_text("engine.tensor_parallel_size", tp)])
        except KitError as exc:
            return exc.message
        new = [p.message for p in parallel_layout_problems("", changed) if p.message not in asked]
        return new[0] if new else None

    return refusal


def _given(ctx: click.Context, name: str) -> bool:
    """The user gave this option (command line, environment, default map), as opposed to its default."""
    from click.core import ParameterSource

    source = ctx.get_parameter_source(name)
    return source is not None and source is not ParameterSource.DEFAULT


def override_text(field: str, value: object) -> str:
    """``field=value`` as an override that reads back as ``value`` (a string YAML would read otherwise is quoted)."""
    from kit.config.overrides import parse_override_value
    from kit.core.errors import KitError

    if isinstance(value, bool) or value is None:
        return f"{field}={'null' if value is None else str(value).lower()}"
    text = str(value)
    if isinstance(value, str):
        try:
            same = parse_override_value(text, field) == value
        except KitError:
            same = False
        if not same:
            text = "'" + value.replace("'", "''") + "'"
    return f"{field}={text}"


def preset_overrides_from_flags(ctx: click.Context, model: str | None, model_flag: str = "--model") -> list[
    tuple[str, str]
]:
    """(flag, override) for every planner flag the user gave beside a preset, and the model swap of ``model``; a
    flag with no preset field is a usage error, never ignored."""
    from kit.deploy.record import model_overrides

    for name, (flag, why) in NOT_WITH_PRESET.items():
        if _given(ctx, name):
            raise click.UsageError(f"{flag}: has no meaning with a preset: {why}")
    found = [(model_flag, override) for override in model_overrides(model)]
    for name, flag, _field, preset_field in PLAN_FLAGS:
        if _given(ctx, name):
            found.append((flag, override_text(preset_field, ctx.params[name])))
    return found


def flag_spelling(change: dict[str, object]) -> list[str]:
    """A --fit answer as the `kit plan` (and vLLM) flags that give it."""
    flags = {field: flag for _, flag, field, _ in PLAN_FLAGS}
    words = []
    for field, value in change.items():
        flag = "--model" if field == "model" else flags[field]
        words.append(f"drop {flag}" if value is None else flag if value is True else f"{flag} {value}")
    return words


def preset_spelling(change: dict[str, object]) -> list[str]:
    """A --fit answer as preset overrides (a tensor parallel size is one the preset's hardware allows as it is)."""
    from kit.deploy.record import model_overrides

    fields = {field: preset_field for _, _, field, preset_field in PLAN_FLAGS}
    words: list[str] = []
    for field, value in change.items():
        if field == "model":
            words += model_overrides(str(value))
            continue
        words.append(override_text(fields[field], value))
    return words


def term_rows(result: Plan) -> list[tuple[str, str, str, str]]:
    """(figure, term, GiB, note) per named term of the binding rank, as `kit plan --explain` shows them."""
    rows = []
    for term in result.terms:
        notes = []
        if term["phase"]:
            notes.append(f"{term['phase']} phase" + ("" if term["on_peak"] else ", not on the peak"))
        if term["fitted"]:
            notes.append("fitted")
        notes.append(str(term["source"]))
        rows.append((str(term["figure"]), str(term["name"]), f"{term['gib']:.3f}", "; ".join(notes)))
    return rows


def _report(result: Plan, as_json: bool, overrides: list[str] | None = None, shown: list[str] | None = None,
            explain: bool = False) -> None:
    if as_json:  # data: the plan; a model that does not fit is ok=false with vLLM's error as the problem
        hints = "; ".join(s["message"] for s in result.suggestions) or None
        data = result.to_json(explain=explain)
        if overrides is not None:  # planned from a preset: the command line's overrides, flags' included
            data["overrides"] = list(overrides)
        emit_json(data, ok=result.fits,
                  problems=None if result.fits else [problem_json(None, result.error or "does not fit", hints)])
    else:
        from kit.cli.output import table

        if shown:
            click.echo("overrides: " + ", ".join(shown))
        for line in plan_heading(result):
            click.echo(line)
        table(("quantity", "per rank", "note"), plan_rows(result), right=("per rank",), header=False)
        if explain:
            table(("figure", "term", "GiB", "phase, fitted, source"), term_rows(result), right=("GiB",),
                  title="terms per rank (activation: the terms without a phase plus the largest phase)")
    if not result.fits:
        click.secho(f"vLLM would refuse to start: {result.error}", fg="red", err=True)
        for suggestion in result.suggestions:
            click.echo(f"  try: {suggestion['message']}", err=True)
        raise SystemExit(1)


def _report_fit(at: InputsAt, as_json: bool, spell, overrides: list[str] | None,  # noqa: ANN001
                shown: list[str] | None, hardware: Callable[[int], str | None] | None = None) -> None:
    """`--fit`: the answers as one table, or the envelope (exit 0: the questions were answered)."""
    from kit.memory.fit import fit

    report = fit(at, hardware)
    if as_json:
        data = report.to_json()
        for question in ("max_model_len", "max_num_seqs", "tensor_parallel_size", "precision"):
            data[question]["apply"] = spell(data[question]["change"])
        for option in data["precision"]["options"]:
            option["apply"] = spell(option["change"])
        if overrides is not None:
            data["overrides"] = list(overrides)
        emit_json(data)
        return
    from kit.cli.output import table

    if shown:
        click.echo("overrides: " + ", ".join(shown))
    click.echo(plan_heading(report.asked)[0])
    i = report.asked.inputs
    click.echo(f"asked: max_model_len {i['max_model_len']:,}, max_num_seqs {i['max_num_seqs']:,}: "
               + ("fits" if report.asked.fits else "does not fit"))
    table(("question", "answer", "set", "why"), fit_rows(report, spell), header=True)
    if report.asked.approximate.get("value"):
        click.echo(f"approximate: {report.asked.approximate['reason']}")


def fit_rows(report, spell) -> list[tuple[str, str, str, str]]:  # noqa: ANN001 - FitReport, a spelling function
    """(question, answer, how to set it, why) for the human table."""
    i = report.asked.inputs
    block, seqs, length = i["block_size"], i["max_num_seqs"], i["max_model_len"]

    def how(change: dict) -> str:
        return " ".join(spell(change)) if change else "-"

    rows = []
    a = report.max_model_len
    if a.value is None:
        why = f"not one KV block fits at max_num_seqs {seqs:,}"
    elif a.limit == "model":
        why = f"the model's limit; at max_num_seqs {seqs:,} the KV cache holds {a.plan.kv_cache_tokens:,} tokens"
    else:
        why = f"at max_num_seqs {seqs:,}; one more block ({block} tokens) does not fit"
    rows.append(("largest max_model_len", "none" if a.value is None else f"{a.value:,}", how(a.change), why))
    a = report.max_num_seqs
    if not a.value:
        why = f"{report.asked.max_concurrency:.2f} x: one {length:,}-token sequence does not fit"
    elif a.limit == "max_num_batched_tokens":
        why = f"vLLM takes at most max_num_batched_tokens ({i['max_num_batched_tokens']:,}) sequences"
    else:
        # the plan at value + 1 starts too, holding fewer than value + 1 at once: say it as `kit plan` says it
        why = (f"{a.plan.max_concurrency:.2f} x {a.plan.inputs['max_model_len']:,} tokens held at once; at "
               f"{a.value + 1:,} the KV cache holds fewer than {a.value + 1:,} (vLLM starts; the rest wait)")
    rows.append((f"most sequences at {length:,} tokens", f"{a.value:,}", how(a.change), why))
    a = report.tensor_parallel_size
    if a.limit != "not_applicable":
        # a size refused (heads, vocabulary, the GPUs there are) says why; vLLM's out-of-memory text is long
        tried = [t for t in report.tried_tensor_parallel if not t.fits]
        # the first size the hardware refuses says why; the larger ones are refused alike (--json lists them)
        over = [t for t in tried if t.hardware_refused][1:]
        refused = [f"TP {t.tensor_parallel_size}: "
                   f"{t.error if t.error and (t.plan_refused or t.hardware_refused) else 'does not fit'}"
                   for t in tried if t not in over]
        count = a.value * i["pipeline_parallel_size"] if a.value else 0
        gpus = f"{count} GPU{'s' if count > 1 else ''}" if a.value else "none of 1, 2, 4, 8 fits here"
        rows.append(("smallest tensor parallel size", "none" if a.value is None else str(a.value), how(a.change),
                     "; ".join([gpus, *refused])))
    a = report.precision
    if a.limit != "not_applicable":
        fitting = {o.label for o in report.options if o.fits}
        # "X, fp8 KV cache" is news only where X alone does not fit
        also = [label for label in fitting - {a.value} if label.rpartition(", fp8 KV cache")[0] not in fitting]
        also.sort(key=[o.label for o in report.options].index)
        if not a.value:
            why = f"none of the {len(report.options)} options fits (--json lists them)"
        elif also:
            why = "also fits: " + "; ".join(also)
        else:
            why = "nothing less lossy fits" if len(report.options) > 1 else "the planner knows no other precision here"
        rows.append((f"precision at TP {i['tensor_parallel_size']}", a.value or "none", how(a.change), why))
    return rows


plan = plan_command  # the root group adds `kit.cli.plan.plan`
