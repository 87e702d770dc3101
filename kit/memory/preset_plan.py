"""Preset -> memory plan: the planner's inputs from a preset's hardware, model and engine sections."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from kit.config.hubfetch import draft_model
from kit.config.modelinfo import TINY_MODEL_PREFIX, load_model_spec
from kit.config.preset import Engine, Preset
from kit.core.datafiles import gpu_catalog
from kit.core.errors import KitError, Problem, shown
from kit.core.inputfiles import user_path
from kit.memory.inputs import DraftInputs, LoraInputs, PlanInputs, derived_max_model_len
from kit.memory.plan import Plan, largest_max_model_len, plan


def model_spec_for(preset: Preset, base_dir: Path | None = None):  # noqa: ANN201 - ModelSpec | None
    """The model's shape: a local directory if it exists, the generated test model's, or the catalog's."""
    model = preset.model
    if model.generate:
        return load_model_spec(TINY_MODEL_PREFIX + model.generate)
    if model.local_path is not None:
        candidates = [model.local_path]
        if base_dir is not None and not Path(model.local_path).is_absolute():
            candidates.insert(0, str(base_dir / model.local_path))
        for candidate in candidates:
            # user_path: a name the OS refuses (too long, an unknown ~user) is a KitError, not an OSError
            config, found = user_path(f"{candidate}/config.json")
            if found is not None and stat.S_ISREG(found.st_mode):
                return load_model_spec(str(config.parent))
        return None
    return load_model_spec(model.id, hub=True, revision=model.revision)


def lora_inputs_for(preset: Preset) -> LoraInputs | None:
    """LoRA sizing from engine flags: only with enable_lora, as vLLM builds its LoRAConfig (engine/arg_utils.py)."""
    eng = preset.engine.flags()
    if not eng.get("enable_lora"):
        return None
    keys = ("max_loras", "max_lora_rank", "max_cpu_loras", "fully_sharded_loras", "lora_dtype")
    return LoraInputs(**{k: eng[k] for k in keys if eng.get(k) is not None})


def draft_inputs_for(preset: Preset, base_dir: Path | None = None) -> DraftInputs | None:
    """The draft checkpoint named by engine.speculative_config, with its shape when known offline."""
    raw = preset.engine.flags().get("speculative_config")
    draft = draft_model(raw)
    if draft is None:
        return None
    ref = draft[0]
    method = raw.get("method") if isinstance(raw, dict) else None
    candidates = [ref]
    if base_dir is not None and ref.startswith(("./", "../")):
        candidates.insert(0, str(base_dir / ref))
    for candidate in candidates:
        try:
            return DraftInputs(ref=ref, method=method, spec=load_model_spec(candidate, hub=True, revision=draft[1]))
        except KitError:
            continue
    return DraftInputs(ref=ref, method=method)


def extensible_kv_cache_for(preset: Preset) -> bool | None:
    """engine.enable_extensible_kv_cache, or False where a flag that sizes the cache by hand turns it off
    (vllm/config/vllm.py `_resolve_extensible_kv_cache`, 0.34); None: the release's default."""
    eng = preset.engine.flags()
    if eng.get("kv_cache_memory_bytes") is not None or eng.get("num_gpu_blocks_override") is not None:
        return False
    wanted = eng.get("enable_extensible_kv_cache")
    return None if wanted is None else bool(wanted)


def disabled_kernels_for(preset: Preset) -> tuple[str, ...]:
    """runtime.env's VLLM_DISABLED_KERNELS as vLLM reads it (vllm/envs.py: the value split on ",")."""
    value = (preset.runtime.env or {}).get("VLLM_DISABLED_KERNELS", "")
    return tuple(name for name in value.split(",") if name)


def plan_inputs_for(preset: Preset, base_dir: Path | None = None) -> PlanInputs | None:
    spec = model_spec_for(preset, base_dir)
    if spec is None:
        return None
    eng, hw = preset.engine, preset.hardware
    common = dict(
        model=spec,
        tensor_parallel_size=eng.tp,
        pipeline_parallel_size=eng.pp,
        dtype=eng.dtype or "auto",
        quantization=eng.quantization,
        kv_cache_dtype=eng.kv_cache_dtype or "auto",
        max_model_len=None if eng.auto_max_model_len else eng.max_model_len,
        max_num_seqs=eng.max_num_seqs,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        enable_chunked_prefill=eng.enable_chunked_prefill,
        enforce_eager=bool(eng.enforce_eager),
        vllm_version=preset.image.vllm_version,
        block_size=eng.block_size,
        runner=eng.flags().get("runner", "auto"),
        convert=eng.flags().get("convert", "auto"),
        performance_mode=eng.flags().get("performance_mode") or "balanced",
        lora=lora_inputs_for(preset),
        draft=draft_inputs_for(preset, base_dir),
        extensible_kv_cache=extensible_kv_cache_for(preset),
        disabled_kernels=disabled_kernels_for(preset),
    )
    if hw.gpu is None:
        inputs = PlanInputs(device="cpu", cpu_kvcache_space_gib=preset.runtime.cpu_kvcache_space_gib or 1, **common)
    else:
        inputs = PlanInputs(device="cuda", gpu_name=hw.gpu, gpu_memory_gib=gpu_catalog()[hw.gpu]["memory_gib"],
                            gpu_memory_utilization=eng.gpu_memory_utilization, **common)
    return auto_fit_max_model_len(inputs) if eng.auto_max_model_len else inputs


def auto_fit_max_model_len(inputs: PlanInputs) -> PlanInputs:
    """``inputs`` planned as vLLM plans ``--max-model-len auto`` (-1): the model's derived length, or, when one
    request of it does not fit the KV cache, the longest that does (vllm/v1/core/kv_cache_utils.py
    ``_auto_fit_max_model_len`` at v0.16.0 to v0.32.0, vllm/v1/core/kv_cache_planning.py at v0.33.0: a binary search
    over lengths whose blocks fit, capped at the derived length). Where not even one block fits, the derived length
    is kept and the plan says it does not fit (vLLM: "Cannot auto-fit max_model_len")."""
    full = inputs.model_copy(update={"max_model_len": derived_max_model_len(inputs.model)})
    longest = largest_max_model_len(full)
    if longest <= 0 or longest >= derived_max_model_len(inputs.model):
        return full
    return full.model_copy(update={"max_model_len": longest})


def plan_preset(where: str, preset: Preset, base_dir: Path | None = None) -> tuple[Plan | None, list[Problem]]:
    """The plan, or None with a warning when the model's shape is unknown offline."""
    from pydantic import ValidationError

    # Without the model's config the kit cannot tell what auto comes to: vLLM decides it when it starts.
    auto = ("; engine.max_model_len auto is then vLLM's to resolve at start (the model's length, or the longest "
            "that fits)") if preset.engine.auto_max_model_len else ""
    try:
        inputs = plan_inputs_for(preset, base_dir)
    except KitError as exc:
        return None, [Problem(f"{where}: model.id", f"no memory plan: {exc.message}{auto}", exc.hint)]
    except ValidationError as exc:  # a value the planner cannot take (e.g. an unknown kv_cache_dtype)
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        field = f"engine.{name}" if name in type(preset.engine).model_fields else name or "engine"
        return None, [Problem(f"{where}: {field}", f"no memory plan: {first['msg']} (got {shown(first.get('input'))})")]
    if inputs is None:
        return None, [Problem(f"{where}: model.id",
                              f"no memory plan: the local model directory does not exist yet{auto}")]
    try:
        return as_preset_fixes(plan(inputs)), []
    except KitError as exc:
        about: str | None = getattr(exc, "field", None)  # a PlanError says which preset field it is about
        hint = flags_as_overrides(exc.hint)
        problems = [Problem(f"{where}: {about}", exc.message)] if about else None  # the hint is the error's
        raise KitError(f"{where}: {about + ': ' if about else ''}{exc.message}", hint=hint, problems=problems) from None


# A vLLM flag with its value, as the planner spells a fix for the command line ("--max-model-len 40960").
_FLAG_WITH_VALUE = re.compile(r"--([a-z0-9]+(?:-[a-z0-9]+)*)[ =]([^\s;,()]+)")


def flags_as_overrides(text: str | None, fields: frozenset[str] | set[str] = frozenset()) -> str | None:
    """A hint for someone working in a preset: `--max-model-len 4096` becomes `engine.max_model_len=4096`, the
    override they would type (the engine section names vLLM's flags in snake_case; docs/guide/presets.md). Only the
    engine's typed fields and ``fields`` are rewritten: a hint may also name an option of the kit's own."""
    if not text:
        return text

    def rewrite(match: re.Match[str]) -> str:
        field = match.group(1).replace("-", "_")
        return f"engine.{field}={match.group(2)}" if field in Engine.model_fields or field in fields else match.group(0)

    return _FLAG_WITH_VALUE.sub(rewrite, text)


def as_preset_fixes(result: Plan) -> Plan:
    """The plan with its suggested fixes spelled as preset overrides; more tensor parallelism also needs the GPUs."""
    if not result.suggestions:
        return result
    fixes = []
    for suggestion in result.suggestions:
        message = flags_as_overrides(suggestion["message"], set(suggestion["change"]))
        tp = suggestion["change"].get("tensor_parallel_size")
        if tp and message is not None:
            gpus = tp * int(result.inputs.get("pipeline_parallel_size") or 1)
            message = message.replace(f"engine.tensor_parallel_size={tp}",
                                      f"engine.tensor_parallel_size={tp} hardware.count={gpus}", 1)
        fixes.append({**suggestion, "message": message})
    return result.model_copy(update={"suggestions": fixes})


def summary_lines(result: Plan) -> list[str]:
    """A short summary for the rendered compose.yaml."""
    i = result.inputs
    lines = [
        f"weights {result.weights_gib:.2f} GiB/rank, KV cache {result.kv_cache_gib:.2f} GiB = "
        f"{result.kv_cache_tokens:,} tokens, max concurrency {result.max_concurrency:.1f}x at "
        f"{i['max_model_len']} tokens",
    ]
    if i.get("device") != "cpu":
        lines.append(
            f"per rank: activation {result.activation_gib:.2f} GiB, non-torch {result.non_torch_gib:.2f} GiB, "
            f"CUDA graphs {result.cuda_graph_gib:.2f} GiB, utilization {i['gpu_memory_utilization']}"
        )
    if "lora" in i or "draft" in i:
        lines.append(f"of the weights: LoRA buffers {result.lora_gib:.2f} GiB, draft model "
                     f"{result.draft_weights_gib:.2f} GiB")
    if result.approximate.get("value"):
        lines.append(f"approximate: {result.approximate.get('reason')}")
    return lines
