"""`kit plan`: predict vLLM's start-up memory (weights, activations, KV cache) before deploying."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kit.cli.common import (
    FiniteFloatRange,
    count_option_type,
    emit_json,
    preset_arguments,
    problem_json,
    split_args,
    standard_options,
)
from kit.core.errors import PlanError, shown

if TYPE_CHECKING:  # the planner (pydantic) loads when the command runs, not for --help or completion
    from kit.memory.plan import Plan, PlanInputs

# A sanity cap, not a hardware fact: a thousand times the largest GPU or host memory in use today.
GPU_MEMORY_GIB_MAX = 1 << 20
KV_DTYPES = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
DTYPES = ["auto", "bfloat16", "float16", "float32", "half"]


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
    allow_hub: bool = False,
) -> PlanInputs:
    """Build PlanInputs from CLI-shaped values (a preset can call this with its own fields)."""
    from pydantic import ValidationError

    from kit.config.modelinfo import load_model_spec
    from kit.memory.plan import DEFAULT_VLLM_VERSION, PlanInputs, find_gpu

    vllm_version = vllm_version or DEFAULT_VLLM_VERSION
    spec = load_model_spec(model, allow_hub=allow_hub)
    gpu_name = None
    if gpu:
        info = find_gpu(gpu)  # unknown names are a user error here, with the list of known ones
        gpu_name = info.key
        if gpu_memory_gib is None:
            gpu_memory_gib = info.memory_gib
    try:
        return PlanInputs(
            model=spec,
            device=device,  # type: ignore[arg-type]
            gpu_memory_gib=gpu_memory_gib,
            gpu_name=gpu_name,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            dtype=dtype,  # type: ignore[arg-type]
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enforce_eager=enforce_eager,
            vllm_version=vllm_version,
            block_size=block_size,
            cpu_kvcache_space_gib=cpu_kvcache_space_gib,
        )
    except ValidationError as exc:  # a caller other than the CLI (whose options are range-checked) passed bad values
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PlanError(f"{field}: {first['msg']} (got {shown(first.get('input'))})") from None


def plan_heading(result: Plan) -> list[str]:
    i = result.inputs
    where = i["gpu_name"] or ("cpu" if i["device"] == "cpu" else "GPU")
    memory = f"{i['gpu_memory_gib']:.2f} GiB" if i["gpu_memory_gib"] else "-"
    return [
        f"{i['model']} on {where} ({memory}), TP={i['tensor_parallel_size']} PP={i['pipeline_parallel_size']}, "
        f"vLLM {i['vllm_version']}",
        f"dtype {i['dtype']}, quantization {i['quantization'] or 'none'}, KV cache {i['kv_cache_dtype']}, "
        f"utilization {i['gpu_memory_utilization']}, max_model_len {i['max_model_len']}, "
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
            ("non-torch", gib(result.non_torch_gib), ""), ("CUDA graphs", gib(result.cuda_graph_gib), ""),
            ("KV cache", *kv), ("KV cache tokens", f"{result.kv_cache_tokens:,}", ""),
            ("max concurrency", f"{result.max_concurrency:.2f} x", f"at {i['max_model_len']:,} tokens"),
            ("fits", "yes" if result.fits else "no", "")]
    if result.approximate.get("value"):
        rows.append(("approximate", "yes", result.approximate["reason"]))
    return rows


@click.command("plan")
@preset_arguments
@click.option("--model", metavar="ID|PATH", help="HF id from the catalog, a model dir or a config.json.")
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
@click.option("--max-model-len", type=count_option_type())
@click.option("--max-num-seqs", type=count_option_type())
@click.option("--max-num-batched-tokens", type=count_option_type())
@click.option("--enforce-eager", is_flag=True)
@click.option("--vllm-version", metavar="X.Y.Z", help="vLLM release to plan for (default: the kit's pinned one).")
@click.option("--block-size", type=count_option_type())
@click.option("--cpu-kvcache-space-gib", type=FiniteFloatRange(0, GPU_MEMORY_GIB_MAX, min_open=True), help="VLLM_CPU_KVCACHE_SPACE.")
@standard_options
def plan_command(args: tuple[str, ...], preset_option: str | None, model: str | None, gpu: str | None, gpu_memory_gib: float | None, device: str, tp: int, pp: int,
                 dtype: str, quantization: str | None, kv_cache_dtype: str, gpu_memory_utilization: float | None,
                 max_model_len: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                 enforce_eager: bool, vllm_version: str | None, block_size: int | None,
                 cpu_kvcache_space_gib: float | None, as_json: bool) -> None:
    """Predict vLLM's memory at start: exit 0 if the model fits, 1 if not.

    kit plan preset=NAME [KEY=VALUE ...] [--json], or standalone: kit plan --model ID (--gpu NAME | --gpu-memory-gib X) ...
    """
    from kit.memory import plan as planner

    ref, overrides, _ = split_args(args, preset_option)
    if ref is not None:
        from kit.config.preset import load_preset
        from kit.core.errors import KitError
        from kit.memory.preset_plan import as_preset_fixes, flags_as_overrides, plan_inputs_for

        _, path, preset = load_preset(ref, overrides)
        preset_inputs = plan_inputs_for(preset)
        if preset_inputs is None:
            raise KitError(f"{path}: model.id {preset.model.id}: no config.json there",
                           hint="make or download the model first, or plan with --model /path/to/config.json")
        try:
            result = planner.plan(preset_inputs)
        except KitError as exc:  # the user works in a preset: the fix is an override, not a vLLM flag
            raise type(exc)(exc.message, hint=flags_as_overrides(exc.hint), problems=exc.problems) from None
        _report(as_preset_fixes(result), as_json)
        return
    if model is None:
        raise click.UsageError("give preset=NAME or --model ID|PATH")
    if device == "cuda" and not gpu and gpu_memory_gib is None:
        raise click.UsageError("give --gpu NAME or --gpu-memory-gib X")
    inputs = plan_inputs_from_options(
        model=model, gpu=gpu, gpu_memory_gib=gpu_memory_gib, device=device, tp=tp, pp=pp, dtype=dtype,
        quantization=quantization, kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        enforce_eager=enforce_eager, vllm_version=vllm_version, block_size=block_size,
        cpu_kvcache_space_gib=cpu_kvcache_space_gib,
    )
    _report(planner.plan(inputs), as_json)


def _report(result: Plan, as_json: bool) -> None:
    if as_json:  # data: the plan; a model that does not fit is ok=false with vLLM's error as the problem
        hints = "; ".join(s["message"] for s in result.suggestions) or None
        emit_json(result.to_json(), ok=result.fits,
                  problems=None if result.fits else [problem_json(None, result.error or "does not fit", hints)])
    else:
        from kit.cli.output import table

        for line in plan_heading(result):
            click.echo(line)
        table(("quantity", "per rank", "note"), plan_rows(result), right=("per rank",), header=False)
    if not result.fits:
        click.secho(f"vLLM would refuse to start: {result.error}", fg="red", err=True)
        for suggestion in result.suggestions:
            click.echo(f"  try: {suggestion['message']}", err=True)
        raise SystemExit(1)


plan = plan_command  # the root group adds `kit.cli.plan.plan`
