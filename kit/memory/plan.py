"""Predict how vLLM will size memory at start, before anyone rents a GPU.

The model follows vLLM's own start-up (v1 engine, ``gpu_worker.determine_available_memory``
and ``kv_cache_utils``):

    requested = total * gpu_memory_utilization
    kv        = requested - (weights + peak activation + non-torch [+ CUDA graph estimate, >= 0.21])
    blocks    = kv // (block_size * KV bytes per token)       (per rank; the engine takes the minimum)

Weights come from parameter counts and the quantisation's packing (or the checkpoint's
exact bytes when known). Peak activation is the larger of the forward pass over
``max_num_batched_tokens`` dummy tokens and the dummy sampler run over ``max_num_seqs``
rows of full-vocabulary logits; MoE layers add fused-MoE buffers on top. The constants
are physical (bytes per element of each buffer), not fitted to single logs.

Pure: reads only the data files under ``kit/data``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.core.errors import PlanError
from kit.core.versions import release_at_least
from kit.core.versions import version as version_of

GIB = 1 << 30
DEFAULT_VLLM_VERSION = "0.33.0"

# --------------------------------------------------------------------------- version facts
# vLLM behaviour that changed between releases, as (first version, value). Sources: vLLM's
# vllm/engine/arg_utils.py, vllm/config/cache.py and vllm/platforms/cpu.py (upstream), and the start-up
# logs in kit/data/calibration.yaml.
GPU_UTILIZATION_DEFAULT = [((0, 0), 0.90), ((0, 21), 0.92)]  # 0.92 arrived with CUDA-graph profiling (date unverified)
CUDA_GRAPH_CHARGED_SINCE = (0, 21)  # "CUDA graph memory profiling is enabled (default since v0.21.0)"
BIG_GPU_BATCH_DEFAULTS_SINCE = (0, 9)  # >= 70 GiB and not A100: 8192 batched tokens / 1024 seqs for the API server
# >= 160 GiB (B200/B300): 16384 batched tokens for the API server too (vllm/engine/arg_utils.py get_batch_defaults,
# read in the 0.32.0 and 0.33.0 wheels; the first release with it is not verified, so it applies from 0.32)
HUGE_GPU_BATCH_DEFAULTS_SINCE = (0, 32)
CPU_KV_AUTO_SINCE = (0, 13)  # VLLM_CPU_KVCACHE_SPACE unset: 4 GiB before, sized from RAM after (vllm PR #29604)
CPU_BLOCK_128_SINCE = (0, 10)  # CPU backend default block_size 128 (16 before, without IPEX)
NEW_ERROR_TEXT_SINCE = (0, 13)  # "model's" wording and the CPU-backend note

# Bytes held per element of [rows, vocab] logits during the dummy sampler run: the bf16
# logits, their fp32 copy, the sorted copy with int64 indices for top-k/top-p and the
# softmax. (vLLM v0.19 logs on H100: 15.2-15.5 B/element across Llama, Qwen, Gemma vocabularies.)
SAMPLER_BYTES_PER_LOGIT = 15
NON_TORCH_GIB_SINGLE = 0.25  # CUDA context growth, cuBLAS workspaces (v0.19 logs: 0.24-0.25 GiB)
NON_TORCH_GIB_TP = 2.1  # NCCL + custom all-reduce buffers with TP > 1 (v0.19 logs: 2.06-2.17 GiB)
NON_TORCH_GIB_PP_ONLY = 0.1  # PP without TP (v0.19 logs: 0.07 GiB)
CUDA_GRAPH_BASE_GIB = 0.3  # graph pool estimate: fixed part ...
CUDA_GRAPH_PER_GRAPH_GIB = 0.005  # ... plus per captured graph (logs: 0.36-0.78 GiB for 2-86 graphs)
CPU_PROCESS_OVERHEAD_GIB = 1.0  # RSS beyond weights when the CPU backend sizes KV from RAM (approximate)


def parse_version(text: str) -> Version:
    try:
        return version_of(text)
    except InvalidVersion:
        raise PlanError(f"vllm_version {text[:40]!r} is not a version", hint="write it like 0.19.0") from None


def _at_least(version: Version, since: tuple[int, ...]) -> bool:
    return release_at_least(version, since)


def _versioned(table: list[tuple[tuple[int, int], Any]], version: Version) -> Any:
    value = table[0][1]
    for since, candidate in table:
        if _at_least(version, since):
            value = candidate
    return value


def default_gpu_memory_utilization(vllm_version: str) -> float:
    return _versioned(GPU_UTILIZATION_DEFAULT, parse_version(vllm_version))


# --------------------------------------------------------------------------- GPU catalog
class GpuInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    name: str
    aliases: list[str] = []
    memory_gib: float
    compute_capability: str
    bf16: bool
    fp8: bool
    arch: Literal["amd64", "arm64"]
    kind: Literal["consumer", "workstation", "datacenter", "embedded"]
    unified_memory: bool = False
    source: str = ""

    @property
    def cc(self) -> tuple[int, int]:
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GpuInfo]:
    from kit.core.datafiles import gpu_catalog as raw_catalog  # the one (cached) reader of gpus.yaml

    return {key: GpuInfo(key=key, **entry) for key, entry in raw_catalog().items()}


def find_gpu(name: str) -> GpuInfo:
    """Look a GPU up by key, alias or marketing name (kit/core/gpus.py normalises it)."""
    from kit.core.gpus import gpu_key, unknown_gpu_hint

    key = gpu_key(name)
    if key is None:
        raise PlanError(f"unknown GPU {name!r}", hint=f"{unknown_gpu_hint(name)} (or give --gpu-memory-gib)")
    return gpu_catalog()[key]


# --------------------------------------------------------------------------- inputs and result
class LoraInputs(BaseModel):
    """--enable-lora and its sizing flags (vLLM's defaults at v0.33.0: max_loras 1, max_lora_rank 16)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_loras: int = Field(default=1, ge=1)
    max_lora_rank: int = Field(default=16, ge=1)
    max_cpu_loras: int | None = Field(default=None, ge=1)  # host memory, not the GPU (default: max_loras)
    fully_sharded_loras: bool = False
    lora_dtype: Literal["auto", "bfloat16", "float16"] = "auto"


class DraftInputs(BaseModel):
    """A speculative draft checkpoint (--speculative-config with a model of its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: str
    method: str | None = None
    spec: ModelSpec | None = None  # None: its shape is not known offline


class PlanInputs(BaseModel):
    """What the planner needs; ``None`` means "vLLM's default for this version"."""

    # nan passes every gt/le check (it compares false) and inf overflows the arithmetic: refuse both.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: ModelSpec
    device: Literal["cuda", "cpu"] = "cuda"
    gpu_memory_gib: float | None = Field(default=None, gt=0)  # total as CUDA reports it; host RAM on cpu
    gpu_name: str | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    dtype: Literal["auto", "bfloat16", "float16", "float32", "half", "float"] = "auto"
    quantization: str | None = None  # None: whatever the checkpoint says
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"] = "auto"
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    enforce_eager: bool = False
    vllm_version: str = DEFAULT_VLLM_VERSION
    # A release outside the kit's tables (planned_versions()) is refused unless this is set; then it is planned with
    # the rules of the nearest older release the tables know, and the plan says so (approximate).
    approximate_version: bool = False
    block_size: int | None = Field(default=None, ge=1)  # 16 on GPU, 128 on the CPU backend
    cpu_kvcache_space_gib: float | None = Field(default=None, gt=0)
    entrypoint: Literal["serve", "llm"] = "serve"  # `vllm serve` (API server) or the offline LLM class
    runner: Literal["auto", "generate", "pooling"] = "auto"  # --runner (pooling: embeddings, scores)
    convert: Literal["auto", "none", "embed", "classify"] = "auto"  # --convert
    lora: LoraInputs | None = None  # None: LoRA not enabled
    draft: DraftInputs | None = None  # None: no draft checkpoint


class Plan(BaseModel):
    """Predicted start-up memory of one rank (the one with the least KV cache)."""

    model_config = ConfigDict(frozen=True)

    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    fits: bool
    error: str | None
    suggestions: list[dict[str, Any]]
    inputs: dict[str, Any]
    approximate: dict[str, Any]
    lora_gib: float = 0.0  # LoRA weight buffers, part of weights_gib
    draft_weights_gib: float = 0.0  # the draft model's weights, part of weights_gib

    def to_json(self) -> dict[str, Any]:
        return {
            "weights_gib": round(self.weights_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cuda_graph_gib": round(self.cuda_graph_gib, 2),
            "kv_cache_gib": round(self.kv_cache_gib, 2),
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "fits": self.fits,
            "error": self.error,
            "suggestions": [dict(s) for s in self.suggestions],
            "inputs": dict(self.inputs),
            "approximate": dict(self.approximate),
            # only when planned, so plans without LoRA or a draft keep their keys
            **({"lora_gib": round(self.lora_gib, 3)} if "lora" in self.inputs else {}),
            **({"draft_weights_gib": round(self.draft_weights_gib, 3)} if "draft" in self.inputs else {}),
        }


# --------------------------------------------------------------------------- resolution
_QUANT_FAMILY = {
    "awq": "awq", "awq_marlin": "awq",
    "gptq": "gptq", "gptq_marlin": "gptq", "gptq_marlin_24": "gptq",
    "fp8": "fp8", "compressed-tensors": "compressed-tensors", "compressed_tensors": "compressed-tensors",
    "bitsandbytes": "bitsandbytes", "modelopt": "modelopt",
}


# Lowest compute capability (major*10+minor) vLLM accepts per quantisation family. AWQ/GPTQ switch to
# their Marlin kernels from 8.0 by themselves; FP8 below 8.9 runs weight-only through Marlin.
# The methods whose compute-capability floor the planner enforces; the floors themselves, per release, are
# kit/data/compat.yaml `quantization` (the one table; FP8 is 7.5 from 0.32.0, 8.0 before).
QUANT_MIN_CAPABILITY = frozenset({"awq", "gptq", "fp8", "compressed-tensors"})


def _quant_min_capability(family: str, vllm_version: str) -> int:
    from kit.core.releaserules import quantization_min_cc

    major, _, minor = str(quantization_min_cc(family, vllm_version)).partition(".")
    return int(major) * 10 + int(minor or 0)


class _Resolved(BaseModel):
    """Inputs with every default filled in, echoed back in the plan."""

    model_config = ConfigDict(frozen=True)

    model: str
    device: str
    gpu_name: str | None
    gpu_memory_gib: float | None
    compute_capability: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    dtype: str
    quantization: str | None
    weight_bits: float | None
    kv_cache_dtype: str
    kv_cache_bytes: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    vllm_version: str
    block_size: int
    cpu_kvcache_space_gib: float | None
    entrypoint: str
    cuda_graph_charged: bool
    runner: str = "generate"
    pooling_task: str | None = None  # embed | classify with the pooling runner
    encoder_only: bool = False  # encoder-only attention: vLLM keeps no KV cache


def derived_max_model_len(model: ModelSpec) -> int:
    """vLLM's derived max_model_len: max_position_embeddings, stretched by most RoPE scalings."""
    length = model.max_position_embeddings
    scaling = model.rope_scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    factor = scaling.get("factor")
    if factor and kind not in (None, "su", "longrope", "llama3", "mrope", "default"):
        if kind == "yarn" and scaling.get("original_max_position_embeddings"):
            length = int(scaling["original_max_position_embeddings"])
        length = int(length * float(factor))
    return length


def _resolve_gpu(inputs: PlanInputs) -> GpuInfo | None:
    if inputs.gpu_name:
        try:
            return find_gpu(inputs.gpu_name)
        except PlanError:
            return None  # a name the catalog lacks: the memory figure still plans
    return None


def _resolve_dtype(inputs: PlanInputs, gpu: GpuInfo | None, quant: str | None) -> str:
    aliases = {"half": "float16", "float": "float32"}
    if inputs.dtype != "auto":
        return aliases.get(inputs.dtype, inputs.dtype)
    config = inputs.model.torch_dtype
    config = aliases.get(config, config)
    bf16_ok = inputs.device == "cpu" or gpu is None or gpu.bf16
    if config == "float32":
        # vLLM serves float32 checkpoints in the platform's preferred 16-bit type.
        return "bfloat16" if bf16_ok else "float16"
    if config == "bfloat16" and not bf16_ok:
        return "float16"  # "Your device ... doesn't support torch.bfloat16. Falling back to torch.float16"
    if quant in ("awq", "gptq") and config not in ("float16", "bfloat16"):
        return "float16"
    return config if config in ("float16", "bfloat16") else "bfloat16"


def _resolve_quant(inputs: PlanInputs, gpu: GpuInfo | None) -> tuple[str | None, float | None, int | None, bool]:
    """(method, weight bits, group size, runtime-quantised?)"""
    ckpt = inputs.model.quantization
    wanted = inputs.quantization.lower() if inputs.quantization else None
    if wanted in (None, "none", ""):
        if ckpt is None:
            return None, None, None, False
        return ckpt.method, ckpt.bits, ckpt.group_size, False
    family = _QUANT_FAMILY.get(wanted, wanted)
    if ckpt is not None:
        if _QUANT_FAMILY.get(ckpt.method, ckpt.method) != family:
            raise PlanError(
                f"Quantization method specified in the model config ({ckpt.method}) does not match the "
                f"quantization method specified in the `quantization` argument ({wanted}).",
                hint=f"drop --quantization (the checkpoint is {ckpt.method}) or pick an unquantised checkpoint",
            )
        return wanted, ckpt.bits, ckpt.group_size, False
    if family == "fp8":
        return "fp8", 8, None, True  # on-the-fly FP8 of a 16-bit checkpoint
    if family == "bitsandbytes":
        return "bitsandbytes", 4, 64, True
    raise PlanError(
        f"--quantization {wanted} needs a checkpoint quantised with {wanted}; {inputs.model.name} has no quantization_config",
        hint="use a pre-quantised checkpoint (e.g. an -AWQ or -GPTQ-Int4 repo) or --quantization fp8",
    )


def _batch_defaults(inputs: PlanInputs, version: Version, gpu: GpuInfo | None,
                    memory_gib: float | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM's EngineArgs.get_batch_defaults picks them."""
    name = (gpu.name if gpu else inputs.gpu_name or "").lower()
    big = False
    if inputs.device == "cuda" and memory_gib is not None:
        if _at_least(version, BIG_GPU_BATCH_DEFAULTS_SINCE):
            big = memory_gib >= 70 and "a100" not in name
        elif _at_least(version, (0, 8, 5)):
            big = "h100" in name or "h200" in name
    if big and memory_gib is not None and memory_gib >= 160 and _at_least(version, HUGE_GPU_BATCH_DEFAULTS_SINCE):
        return (16384, 1024)
    if inputs.entrypoint == "llm":
        return (16384, 1024) if big else (8192, 256)
    return (8192, 1024) if big else (2048, 256)


def planned_versions() -> list[str]:
    """The releases the kit's tables describe: the pinned ones (kit/data/vllm.yaml `versions`) and those whose real
    start-ups the planner was checked on (kit/data/calibration.yaml). Oldest first."""
    from kit.core.datafiles import load_yaml, vllm_table

    known = {str(v) for v in vllm_table()["versions"]}
    for point in load_yaml("calibration.yaml").get("cases") or []:
        if isinstance(point, dict) and (point.get("inputs") or {}).get("vllm_version"):
            known.add(str(point["inputs"]["vllm_version"]))
    return sorted(known, key=version_of)


def version_gate(text: str, approximate: bool) -> str | None:
    """Refuse a release outside the kit's tables, or (``approximate``) say which known release's rules stand in.

    Returns the note for the plan's `approximate` reason, or None when the release is in the tables."""
    version = parse_version(text)
    known = planned_versions()
    if any(version_of(k) == version for k in known):
        return None
    older = [k for k in known if version_of(k) < version]
    where = ("older than the oldest" if not older else
             "newer than the newest" if version > version_of(known[-1]) else "between two")
    if not approximate:
        raise PlanError(f"vLLM {text[:40]} is not in the kit's tables ({where} of the releases it knows: "
                        f"{', '.join(known)}); its defaults and memory rules are unknown, so it is not planned",
                        hint=f"plan for one of {', '.join(known)}, or add --approximate-version to plan with the "
                             "rules of the nearest older release, marked approximate")
    nearest = f"the nearest older known release, {older[-1]}" if older else f"the oldest known, {known[0]}, a later one"
    return (f"vLLM {text[:40]} is not in the kit's tables ({where} of the releases it knows): planned with rules and "
            f"defaults borrowed from the rows the kit has for other releases ({nearest}), which it may not follow")


def _resolve(inputs: PlanInputs) -> tuple[_Resolved, GpuInfo | None, list[str]]:
    notes: list[str] = []
    version = parse_version(inputs.vllm_version)
    version_note = version_gate(inputs.vllm_version, inputs.approximate_version)
    if version_note:
        notes.append(version_note)
    gpu = _resolve_gpu(inputs)
    memory = inputs.gpu_memory_gib if inputs.gpu_memory_gib is not None else (gpu.memory_gib if gpu else None)
    if inputs.device == "cuda" and memory is None:
        raise PlanError("no GPU memory to plan against", hint="give --gpu NAME or --gpu-memory-gib X")
    quant, bits, _group, _runtime = _resolve_quant(inputs, gpu)
    family = _QUANT_FAMILY.get(quant or "", quant)
    if inputs.device == "cuda" and quant:
        from kit.core.releaserules import quantization_method_gone

        gone = quantization_method_gone(quant, str(version), registry=False)
        if gone:
            raise PlanError(f"{gone}: vLLM {inputs.vllm_version} refuses it",
                            hint="use a checkpoint in another format (AWQ, GPTQ, FP8 or unquantised)")
    if inputs.device == "cuda" and gpu is not None and family in QUANT_MIN_CAPABILITY:
        need = _quant_min_capability(family, str(version))
        have = gpu.cc[0] * 10 + gpu.cc[1]
        if have < need:
            raise PlanError(
                f"The quantization method {quant} is not supported for the current GPU. "
                f"Minimum capability: {need}. Current capability: {have}.",
                hint=f"{gpu.name} is compute capability {gpu.compute_capability}; use an unquantised checkpoint "
                "or a newer GPU",
            )
    dtype = _resolve_dtype(inputs, gpu, _QUANT_FAMILY.get(quant or "", quant))
    kv_dtype = inputs.kv_cache_dtype
    if inputs.device == "cpu" and kv_dtype.startswith("fp8") and _at_least(version, CPU_KV_AUTO_SINCE):
        kv_dtype = "auto"  # "CPU backend doesn't support KV cache quantization fallback to auto."
        notes.append("the CPU backend ignores an fp8 KV cache and falls back to the model dtype")
    kv_bytes = 1 if kv_dtype.startswith("fp8") else DTYPE_BYTES[dtype if kv_dtype == "auto" else kv_dtype]
    util = inputs.gpu_memory_utilization or default_gpu_memory_utilization(inputs.vllm_version)
    derived = derived_max_model_len(inputs.model)
    max_len = inputs.max_model_len or derived
    if inputs.max_model_len and inputs.max_model_len > derived:
        raise PlanError(
            f"User-specified max_model_len ({inputs.max_model_len}) is greater than the derived max_model_len "
            f"({derived}, from max_position_embeddings={inputs.model.max_position_embeddings} in the model config)",
            hint=f"use --max-model-len {derived} or less (vLLM allows more only with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
        )
    mnbt_default, seqs_default = _batch_defaults(inputs, version, gpu, memory)
    if inputs.device == "cpu":
        block = inputs.block_size or (128 if _at_least(version, CPU_BLOCK_128_SINCE) else 16)
    else:
        block = inputs.block_size or 16
    cpu_space = inputs.cpu_kvcache_space_gib
    if inputs.device == "cpu" and cpu_space is None and not _at_least(version, CPU_KV_AUTO_SINCE):
        cpu_space = 4.0  # "VLLM_CPU_KVCACHE_SPACE ... is not set, using 4 by default."
    charged = inputs.device == "cuda" and not inputs.enforce_eager and cuda_graphs_charged_by(inputs.model, version)
    from kit.config.pooling import pooling_profile

    pooling = pooling_profile({"runner": inputs.runner, "convert": inputs.convert}, inputs.model)
    resolved = _Resolved(
        model=inputs.model.name,
        device=inputs.device,
        gpu_name=gpu.name if gpu else inputs.gpu_name,
        gpu_memory_gib=memory,
        compute_capability=gpu.compute_capability if gpu else None,
        tensor_parallel_size=inputs.tensor_parallel_size,
        pipeline_parallel_size=inputs.pipeline_parallel_size,
        dtype=dtype,
        quantization=quant,
        weight_bits=bits,
        kv_cache_dtype=kv_dtype,
        kv_cache_bytes=kv_bytes,
        gpu_memory_utilization=util,
        max_model_len=max_len,
        max_num_seqs=inputs.max_num_seqs or seqs_default,
        max_num_batched_tokens=inputs.max_num_batched_tokens or mnbt_default,
        enforce_eager=inputs.enforce_eager or inputs.device == "cpu",
        vllm_version=".".join(str(p) for p in (version.release + (0, 0))[:3]),  # "0.19" reads "0.19.0"
        block_size=block,
        cpu_kvcache_space_gib=cpu_space,
        entrypoint=inputs.entrypoint,
        cuda_graph_charged=charged,
        runner=pooling.runner,
        pooling_task=pooling.task,
        encoder_only=pooling.encoder_only,
    )
    return resolved, gpu, notes


def _runner_rule(version: Version) -> dict[str, Any] | None:
    """The V2-model-runner rule of the newest vllm.yaml release at or below ``version`` that records one."""
    from kit.core.datafiles import vllm_table

    best: tuple[tuple[int, int, int], dict[str, Any]] | None = None
    for name, entry in (vllm_table().get("versions") or {}).items():
        rule = (entry.get("defaults") or {}).get("model_runner_v2")
        ver = parse_version(name)
        if rule and ver <= version and (best is None or ver > best[0]):
            best = (ver, rule)
    return best[1] if best else None


def model_runner_for(model: ModelSpec, version: Version) -> str:
    """"V2" where vLLM picks its V2 model runner, else "V1" (kit/data/vllm.yaml `model_runner_v2`, per release)."""
    rule = _runner_rule(version)
    if rule is None:
        return "V1"
    if model.is_hybrid:
        return "V2" if rule.get("hybrid") else "V1"
    if model.is_moe:
        every = rule.get("moe") == "all"
        return "V2" if every or model.architecture in rule.get("moe_architectures", []) else "V1"
    return "V2" if rule.get("dense") else "V1"


def cuda_graphs_charged_by(model: ModelSpec, version: Version) -> bool:
    """Whether the model runner vLLM picks subtracts its CUDA-graph estimate from the KV budget (from 0.21): V1
    always; V2 where the release's rule says so (0.26's V2 runner estimated 0, 0.32's and 0.33's capture and charge)."""
    if not _at_least(version, CUDA_GRAPH_CHARGED_SINCE):
        return False
    if model_runner_for(model, version) == "V1":
        return True
    return bool((_runner_rule(version) or {}).get("charges_cuda_graphs"))


def memory_accounting(version: Version) -> dict[str, Any] | None:
    """The measured start-up accounting of the newest vllm.yaml release at or below ``version`` that records one
    (`defaults.memory_accounting`), or None before the first measured release (the physical model below applies)."""
    from kit.core.datafiles import vllm_table

    best: tuple[Version, dict[str, Any]] | None = None
    for name, entry in (vllm_table().get("versions") or {}).items():
        rule = (entry.get("defaults") or {}).get("memory_accounting")
        ver = parse_version(name)
        if rule and ver <= version and (best is None or ver > best[0]):
            best = (ver, rule)
    return best[1] if best else None


# --------------------------------------------------------------------------- parallelism
def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: equal shares, the remainder going to the stages before the last."""
    per = num_layers // pp
    sizes = [per] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges


def padded_vocab(vocab: int) -> int:
    return -(-vocab // 64) * 64


def parallelism_problems(model: ModelSpec, tp: int, pp: int, group_size: int | None = None) -> list[tuple[str, str, str]]:
    """Every divisibility rule vLLM enforces at start that ``tp`` x ``pp`` breaks, as (field, message, fix)."""
    tp_field, pp_field = "engine.tensor_parallel_size", "engine.pipeline_parallel_size"
    found: list[tuple[str, str, str]] = []
    if model.num_attention_heads % tp:
        found.append((tp_field,
                      f"Total number of attention heads ({model.num_attention_heads}) must be divisible by "
                      f"tensor parallel size ({tp}).",
                      f"use a divisor of {model.num_attention_heads}"))
    if not model.is_mla:
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            found.append((tp_field,
                          f"{model.num_kv_heads} KV heads cannot be split or replicated evenly over tensor parallel "
                          f"size {tp}",
                          f"use a divisor or a multiple of {kv}"))
    if padded_vocab(model.vocab_size) % tp:
        found.append((tp_field,
                      f"vocabulary ({model.vocab_size}, padded to {padded_vocab(model.vocab_size)}) is not divisible "
                      f"by tensor parallel size ({tp})",
                      "use a power of two"))
    for label, size in (("intermediate_size", model.intermediate_size if not model.is_moe or model.first_k_dense_replace else 0),
                        ("moe_intermediate_size", model.moe_intermediate_size or 0)):
        if size and size % tp:
            found.append((tp_field, f"{label} ({size}) is not divisible by tensor parallel size ({tp})",
                          f"use a divisor of {size}"))
        elif size and group_size and group_size > 0 and (size // tp) % group_size:
            found.append((tp_field,
                          f"{label} per rank ({size} / {tp} = {size // tp}) is not a multiple of the quantisation "
                          f"group size ({group_size}): the quantised weights cannot be split this way",
                          "use a smaller tensor parallel size"))
    if pp > model.num_layers:
        found.append((pp_field,
                      f"pipeline parallel size ({pp}) is larger than the number of layers ({model.num_layers})",
                      f"at most {model.num_layers}"))
    return found


def check_parallelism(model: ModelSpec, tp: int, pp: int, group_size: int | None = None) -> None:
    """The divisibility rules vLLM enforces at start, as a PlanError naming the field (the first one broken)."""
    for field, message, fix in parallelism_problems(model, tp, pp, group_size):
        raise PlanError(message, hint=f"{field}: {fix}")


# --------------------------------------------------------------------------- weights
def _linear_bytes_per_param(r: _Resolved, model: ModelSpec) -> float:
    """Bytes per weight element of a quantised linear layer, scales and zeros included."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    method = _QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if method is None:
        return dtype_bytes
    q = model.quantization
    bits = r.weight_bits or 8
    group = (q.group_size if q else None) or 0
    if method in ("awq", "gptq"):
        # packed int32 weights + fp16 scale + packed zero point per group and output column
        zero_bytes = bits / 8
        if method == "awq" and _machete_repacks(r):
            # Machete stores AWQ's zero points pre-multiplied by the scales, in the activation dtype
            # (vllm/model_executor/kernels/linear/mixed_precision/machete.py:110-118, transform_w_zp, v0.26.0)
            zero_bytes = dtype_bytes
        per_group = (2 + zero_bytes) / group if group > 0 else 0.0
        return bits / 8 + per_group
    if method == "fp8":
        return 1.0  # scales are per tensor, per channel or per 128x128 block: negligible
    if method == "bitsandbytes":
        return bits / 8 + 4 / 64  # fp32 absmax per 64 weights
    if method in ("compressed-tensors", "modelopt"):
        return bits / 8 + (2 / group if group > 0 else 0.0)
    return bits / 8


# vLLM picks Machete for AWQ/GPTQ checkpoints on compute capability 9.0 only (machete.py:35 can_implement:
# "Machete requires compute capability of 90"); the H200 logs at 0.26.0 say "Using MacheteLinearKernel".
MACHETE_CAPABILITY = "9.0"
MACHETE_SINCE = (0, 6)  # Machete arrived in vLLM 0.6 (date unverified); logged at 0.26.0


def _machete_repacks(r: _Resolved) -> bool:
    return r.compute_capability == MACHETE_CAPABILITY and _at_least(parse_version(r.vllm_version), MACHETE_SINCE)


# PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp: round_size, get_allocation_size,
# should_split): blocks are multiples of 512 B; a request of 10 MiB or more gets a new segment rounded up to
# 2 MiB, and the segment's tail is split off as a free block only when it is larger than 1 MiB, so a tail of
# 1 MiB or less stays with the tensor and torch.cuda.memory_allocated() counts it. vLLM's "Model loading took"
# is that counter's growth over load_model (vllm/v1/worker/gpu/model_runner.py:282-306 with vllm/utils/mem_utils.py:86
# DeviceMemoryProfiler; vllm/platforms/cuda.py:351-356: max_memory_allocated right after reset_peak_memory_stats;
# all at v0.26.0).
ALLOC_MIN_BLOCK = 512
ALLOC_SPLIT_TAIL = 1 << 20
ALLOC_OWN_SEGMENT = 10 << 20
ALLOC_SEGMENT_ROUND = 2 << 20
# vLLM wraps load_model in max_split_size_mb:20 (vllm/v1/worker/gpu_worker.py:273-294 and :429,
# "20 MiB is the minimum PyTorch allows", PR #41268 merged 2026-04-30; read at v0.26.0, absent from the 0.19 logs
# in kit/data/calibration.yaml). The allocator never splits a block of that size or more, so a weight of 20 MiB
# or more keeps its whole 2 MiB-rounded segment (Qwen2.5-7B's o_proj: 24.5 MiB in 26 MiB).
LOAD_MAX_SPLIT = 20 << 20
LOAD_MAX_SPLIT_SINCE = (0, 26)  # the first release known to have it; 0.20-0.25 unverified


def allocator_block_bytes(size: float, max_split: float | None = None) -> float:
    """Bytes torch.cuda.memory_allocated() counts for one fresh tensor of ``size`` bytes."""
    block = -(-int(size) // ALLOC_MIN_BLOCK) * ALLOC_MIN_BLOCK
    if block < ALLOC_OWN_SEGMENT:
        return block  # packed into shared 2 MiB / 20 MiB segments and split to the block
    segment = -(-block // ALLOC_SEGMENT_ROUND) * ALLOC_SEGMENT_ROUND
    if max_split is not None and block >= max_split:
        return segment
    return segment if segment - block <= ALLOC_SPLIT_TAIL else block


def _allocator_slack_bytes(r: _Resolved, model: ModelSpec, tp: int, layers: range, first: bool, last: bool,
                           pp: int) -> float:
    """Segment tails the caching allocator leaves with the big tensors of one rank (embedding, lm_head, and each
    dense layer's fused qkv, o, gate_up and down matrices, which vLLM allocates one by one). MoE experts, MLA
    and other quantisation layouts are left out: their tails are a smaller share of the weights."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    max_split = LOAD_MAX_SPLIT if _at_least(parse_version(r.vllm_version), LOAD_MAX_SPLIT_SINCE) else None

    def slack(elements: float, element_bytes: float = dtype_bytes) -> float:
        size = elements * element_bytes
        return allocator_block_bytes(size, max_split) - size

    h = model.hidden_size
    vocab_rank = padded_vocab(model.vocab_size) / tp
    total = 0.0
    if first:
        total += slack(vocab_rank * h)
    if last and (not model.tie_word_embeddings or (pp > 1 and not first)):
        total += slack(vocab_rank * h)
    method = _QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if model.is_mla or model.is_moe or method not in (None, "awq", "gptq", "fp8"):
        return total
    # the matrix itself: model dtype, or the packed int32 / fp8 weight of a quantised layer (scales and zero
    # points are small, or under 10 MiB and packed into shared segments)
    linear_bytes = dtype_bytes if method is None else (r.weight_bits or 8) / 8
    hd, heads_rank = model.head_dim, model.num_attention_heads / tp
    kv_rank = max(model.num_kv_heads // tp, 1)
    inter_rank = model.intermediate_size / tp
    per_layer = sum(slack(elements, linear_bytes) for elements in (
        (heads_rank + 2 * kv_rank) * hd * h, h * heads_rank * hd, 2 * inter_rank * h, h * inter_rank))
    return total + len(layers) * per_layer


class _Counts(BaseModel):
    """Parameter counts of one rank of one pipeline stage."""

    linear: float = 0  # quantisable matmul weights
    dense16: float = 0  # embeddings, lm_head, routers: kept in the model dtype
    small: float = 0  # norms and biases (model dtype)


def _moe_layers_in(model: ModelSpec, layers: range) -> int:
    """How many of ``layers`` are MoE layers (index >= first_k_dense_replace and a multiple of moe_layer_freq),
    counted arithmetically: the planner's cost must not grow with the layer count."""
    if not model.is_moe or not layers:
        return 0
    freq = max(model.moe_layer_freq, 1)
    low = max(layers.start, model.first_k_dense_replace)
    first_moe = -(-low // freq) * freq
    return 0 if first_moe >= layers.stop else (layers.stop - 1 - first_moe) // freq + 1


def _stage_counts(model: ModelSpec, tp: int, layers: range, first: bool, last: bool, pp: int) -> _Counts:
    """Parameter counts of one rank: every layer's attention is alike, and MLPs are MoE or dense, so one of
    each is counted and multiplied (constant cost whatever the layer count)."""
    h, nh, hd = model.hidden_size, model.num_attention_heads, model.head_dim
    heads_rank = nh / tp
    attn_linear = attn_small = 0.0
    if model.is_mla:
        nope, rope = model.qk_nope_head_dim or 128, model.qk_rope_head_dim or 64
        v = model.v_head_dim or 128
        if model.q_lora_rank:
            attn_linear += h * model.q_lora_rank + model.q_lora_rank * heads_rank * (nope + rope)
            attn_small += model.q_lora_rank
        else:
            attn_linear += h * heads_rank * (nope + rope)
        attn_linear += h * (model.kv_lora_rank + rope)  # kv_a_proj_with_mqa, replicated
        attn_linear += model.kv_lora_rank * heads_rank * (nope + v)
        attn_linear += heads_rank * v * h
        attn_small += model.kv_lora_rank
    else:
        kv_rank = max(model.num_kv_heads // tp, 1)
        q_out, kv_out = heads_rank * hd, 2 * kv_rank * hd
        attn_linear += h * (q_out + kv_out) + q_out * h
        if model.attention_bias:
            attn_small += q_out + kv_out
        if model.qk_norm:
            attn_small += 2 * hd
    moe_linear = moe_dense16 = 0.0
    if model.is_moe:
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        moe_linear += model.num_experts * 3 * h * n
        moe_dense16 += h * model.num_experts  # router
        if model.shared_expert_intermediate_size:
            moe_linear += 3 * h * model.shared_expert_intermediate_size / tp
            moe_dense16 += h  # shared expert gate
        elif model.num_shared_experts:
            moe_linear += model.num_shared_experts * 3 * h * n
    dense_linear = 3 * h * model.intermediate_size / tp
    moe_layers = _moe_layers_in(model, layers)
    dense_layers = len(layers) - moe_layers
    c = _Counts(
        linear=len(layers) * attn_linear + moe_layers * moe_linear + dense_layers * dense_linear,
        dense16=moe_layers * moe_dense16,
        small=len(layers) * (attn_small + 2 * h),
    )
    vocab_rank = padded_vocab(model.vocab_size) / tp
    if first:
        c.dense16 += vocab_rank * h
    if last:
        c.small += h
        if not model.tie_word_embeddings or (pp > 1 and not first):
            c.dense16 += vocab_rank * h
    return c


def _rope_cache_bytes(model: ModelSpec, dtype_bytes: int) -> float:
    rotary = model.qk_rope_head_dim if model.is_mla else model.head_dim
    return derived_max_model_len(model) * rotary * dtype_bytes


def _stage_weight_bytes(r: _Resolved, model: ModelSpec, counts: _Counts, rope: bool) -> float:
    dtype_bytes = DTYPE_BYTES[r.dtype]
    total = counts.linear * _linear_bytes_per_param(r, model) + (counts.dense16 + counts.small) * dtype_bytes
    if rope:
        total += _rope_cache_bytes(model, dtype_bytes)
    return total


def _exact_scale(r: _Resolved, model: ModelSpec) -> float:
    """Ratio of the checkpoint's exact bytes to our count of the whole model, when they describe the same thing."""
    if not model.weights_bytes:
        return 1.0
    if r.quantization and model.quantization is None:
        return 1.0  # quantised at load: the checkpoint's bytes are not what lands on the GPU
    ckpt_dtype = model.torch_dtype if model.torch_dtype in DTYPE_BYTES else "bfloat16"
    if model.quantization is None and DTYPE_BYTES[ckpt_dtype] != DTYPE_BYTES[r.dtype]:
        return 1.0
    whole = _stage_counts(model, 1, range(model.num_layers), True, True, 1)
    estimate = _stage_weight_bytes(r, model, whole, rope=False)
    ratio = model.weights_bytes / estimate if estimate else 1.0
    return ratio if 0.8 < ratio < 1.25 else 1.0  # a wildly different figure means a different checkpoint layout


# --------------------------------------------------------------------------- activations, KV
def _stage_activation_bytes(r: _Resolved, model: ModelSpec, layers: range, last: bool) -> float:
    tokens = r.max_num_batched_tokens
    tp = r.tensor_parallel_size
    act = DTYPE_BYTES[r.dtype]
    h = model.hidden_size
    moe_layers = _moe_layers_in(model, layers)
    has_dense, has_moe = moe_layers < len(layers), moe_layers > 0
    # Forward pass: residual + normed hidden state, then the MLP's gate_up output and activation.
    dense = tokens * (2 * h + 3 * model.intermediate_size / tp) * act if has_dense else 0.0
    q_heads = model.num_attention_heads / tp
    attn = tokens * (h + q_heads * model.head_dim * 3) * act
    forward = max(dense, attn)
    moe = 0.0
    if has_moe:
        # fused_moe's intermediate caches: [tokens, topk, 2N], [tokens*topk, N], [tokens, topk, H]
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        topk = model.num_experts_per_tok or 1
        moe = tokens * topk * (3 * n + h) * act
        forward = max(forward, tokens * 2 * h * act)
    sampler = 0.0
    # A pooling runner profiles with a dummy pooler run ([tokens, hidden] at most), not the sampler, so no
    # vocabulary-wide logits (vllm/v1/worker/gpu_model_runner.py at 0.32.0: _dummy_pooler_run vs _dummy_sampler_run).
    if last and r.runner != "pooling":
        rows = min(r.max_num_seqs, r.max_num_batched_tokens)
        sampler = rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return moe + max(forward, sampler)


# From vLLM 0.26 the activation and non-torch terms are measured per release (kit/data/vllm.yaml
# `defaults.memory_accounting`, fitted on the release's calibration runs in kit/data/calibration/): the profiled
# peak is the MLP's gate_up output and activation plus `hidden_buffers` hidden-size buffers per batched token,
# a fixed part, and the dummy sampler's `sampler_bytes_per_logit` per row of full-vocabulary logits;
# torch.compile's first (cold-cache) profile run holds `compile_cold_gib` more (a warm cache gives it back; the plan
# charges the first start). 0.26.0 on an H200 (14 engines): 4 buffers, 0.03 GiB fixed, 2.2 B per logit (the V2
# runner's dummy sampler skips top-k/top-p, "the sampler may skip top_k, top_p" in vllm/v1/worker/gpu/model_runner.py),
# +0.75 GiB compiled (Qwen3-8B bf16 +0.45, Qwen3-8B-AWQ +0.95 over eager), non-torch 0.22-0.24 GiB on one GPU.
ACCOUNTING_026_SINCE = (0, 26)  # first release measured this way; 0.21-0.25 not measured


def _measured_activation_bytes(r: _Resolved, model: ModelSpec, layers: range, last: bool,
                               rule: dict[str, Any]) -> float:
    tokens = r.max_num_batched_tokens
    tp = r.tensor_parallel_size
    act = DTYPE_BYTES[r.dtype]
    h = model.hidden_size
    moe_layers = _moe_layers_in(model, layers)
    has_dense, has_moe = moe_layers < len(layers), moe_layers > 0
    buffers = rule.get("hidden_buffers", 4)
    dense = tokens * (buffers * h + 3 * model.intermediate_size / tp) * act if has_dense else 0.0
    attn = tokens * (h + model.num_attention_heads / tp * model.head_dim * 3) * act
    forward = max(dense, attn)
    moe = 0.0
    if has_moe:
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        topk = model.num_experts_per_tok or 1
        moe = tokens * topk * (3 * n + h) * act * rule.get("moe_cache_scale", 1.0)
        forward = max(forward, tokens * 2 * h * act)
    sampler = 0.0
    if last and r.runner != "pooling":  # a pooling runner profiles its pooler, not the sampler (see above)
        rows = min(r.max_num_seqs, r.max_num_batched_tokens)
        sampler = rows * model.vocab_size * rule["sampler_bytes_per_logit"]
    compiled = 0.0 if r.enforce_eager else rule.get("compile_cold_gib", 0.0) * GIB
    return moe + max(forward, sampler) + rule.get("activation_fixed_gib", 0.0) * GIB + compiled


def _sampler_state_bytes(r: _Resolved, model: ModelSpec, rule: dict[str, Any] | None) -> float:
    """The V2 runner's persistent per-request sampler state, allocated after the weights are measured and before
    the profile run, so vLLM counts it in "consumed" memory (weights + non-torch) and the KV budget pays for it:
    0.33's PenaltiesState (vllm/v1/worker/gpu/sample/penalties.py) holds `output_bin_counts` [max_num_reqs, vocab]
    int32 and `prompt_bin_mask` [max_num_reqs, vocab/32] int32 on the GPU."""
    per_entry = (rule or {}).get("sampler_state_bytes_per_vocab_entry", 0.0)
    if not per_entry or r.runner == "pooling" or r.device != "cuda":
        return 0.0
    return r.max_num_seqs * model.vocab_size * per_entry


def _stage_activation_bytes_026(r: _Resolved, model: ModelSpec, layers: range, last: bool) -> float:
    """0.26.0's accounting (kept for callers that name the release)."""
    rule = memory_accounting(parse_version("0.26.0"))
    assert rule is not None
    return _measured_activation_bytes(r, model, layers, last, rule)


def kv_bytes_per_token_per_layer(model: ModelSpec, tp: int, kv_bytes: int) -> int:
    """Bytes of KV cache one token takes in one layer on one rank."""
    if model.is_mla:
        # compressed latent + decoupled RoPE key, shared by all heads: no factor 2, not split by TP
        return (model.kv_lora_rank + (model.qk_rope_head_dim or 0)) * kv_bytes
    kv_rank = max(model.num_kv_heads // tp, 1)  # split, or replicated when fewer KV heads than ranks
    return 2 * kv_rank * model.head_dim * kv_bytes


def _cuda_graph_count(max_num_seqs: int) -> int:
    """Graphs vLLM captures by default: piecewise for every size up to 512, full ones up to max_num_seqs."""
    largest = min(512, 2 * max_num_seqs)
    sizes = [1, 2, 4] + list(range(8, 257, 8)) + list(range(272, 513, 16))
    piecewise = [s for s in sizes if s <= largest]
    full = [s for s in piecewise if s <= max_num_seqs]
    return len(piecewise) + len(full)


def _error_text(version: Version, max_len: int, needed: float, available: float, estimate: int) -> str:
    new = _at_least(version, NEW_ERROR_TEXT_SINCE)
    based = f"Based on the available memory, the estimated maximum model length is {estimate}. " if estimate > 0 else ""
    if new:
        return (
            f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / GIB:.2f} GiB). {based}Try increasing `gpu_memory_utilization` (which also controls "
            f"CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine."
        )
    return (
        f"To serve at least one request with the models's max seq len ({max_len}), "
        f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({available / GIB:.2f} GiB). {based}Try increasing `gpu_memory_utilization` or decreasing "
        f"`max_model_len` when initializing the engine."
    )


NO_MEMORY_ERROR = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
)


# --------------------------------------------------------------------------- LoRA and speculative decoding
@lru_cache(maxsize=1)
def _lora_embedding_modules() -> dict[str, list[str]]:
    from kit.core.datafiles import load_yaml

    return load_yaml("lora.yaml")["embedding_modules"]


def lora_buffer_bytes(model: ModelSpec, r: _Resolved, lora: LoraInputs, layers: int, first: bool, last: bool) -> float:
    """Bytes of the LoRA A/B buffers vLLM preallocates on one rank (kit/data/lora.yaml has the shapes' sources).

    Per decoder layer and LoRA slot, with rank R, hidden H, per-rank q/kv/MLP widths q, kv, I:
      qkv_proj (3 slices)  A 3*R*H         B R*(q + 2*kv)
      o_proj               A R*q           B R*H
      gate_up_proj (2)     A 2*R*H         B R*2*I
      down_proj            A R*I           B R*H
    fully_sharded_loras divides the column layers' A rank and the row layers' B output by TP.
    embed_tokens (first stage) A V*R, B H*R and lm_head (last stage) A R*H, B V*R where the architecture has them.
    """
    tp = r.tensor_parallel_size
    rank, h = lora.max_lora_rank, model.hidden_size
    col_a_rank = rank / tp if lora.fully_sharded_loras else rank
    row_b_out = h / tp if lora.fully_sharded_loras else h
    q = model.num_attention_heads * model.head_dim / tp
    kv = max(model.num_kv_heads // tp, 1) * model.head_dim
    inter = model.intermediate_size / tp
    per_layer = (3 * col_a_rank * h + rank * (q + 2 * kv)
                 + rank * q + rank * row_b_out
                 + 2 * col_a_rank * h + rank * 2 * inter
                 + rank * inter + rank * row_b_out)
    elements = per_layer * layers
    embedding = _lora_embedding_modules().get(model.architecture, [])
    if first and "embed_tokens" in embedding:
        elements += model.vocab_size * rank + h * rank
    if last and "lm_head" in embedding:
        elements += rank * h + model.vocab_size * rank
    dtype = r.dtype if lora.lora_dtype == "auto" else lora.lora_dtype
    return lora.max_loras * elements * DTYPE_BYTES[dtype]


# Draft methods whose checkpoints are a few layers that reuse the target's embedding and lm_head when their own
# checkpoint lacks them (vllm/v1/spec_decode/llm_base_proposer.py at v0.33.0: _maybe_share_embeddings,
# _maybe_share_lm_head; the EAGLE family in vllm/config/speculative.py EagleModelTypes).
_SHARING_DRAFTS = ("eagle", "eagle3", "dflash")


def draft_terms(r: _Resolved, draft: DraftInputs) -> tuple[float, int, list[str]]:
    """(weight bytes on one rank, KV bytes per token, approximation notes) of a draft model.

    The drafter is loaded inside the target's load_model (vllm/v1/worker/gpu_model_runner.py), so its weights
    count in "Model loading took"; its attention layers get KV cache specs beside the target's, and layers of one
    type share one block pool whose block holds every layer's page (vllm/v1/core/kv_cache_planning.py,
    UniformTypeKVCacheSpecs): the draft's per-token KV adds to the target's and both get the same token count.
    """
    spec = draft.spec
    if spec is None:
        return 0.0, 0, [f"draft model {draft.ref}: its shape is unknown offline, so its weights and KV cache are "
                        "not counted"]
    tp = r.tensor_parallel_size
    if spec.weights_bytes:
        weights = spec.weights_bytes / tp  # exact checkpoint bytes, split by TP (norms are replicated: negligible)
    else:
        quant = spec.quantization
        own = r.model_copy(update={"quantization": quant.method if quant else None,
                                   "weight_bits": quant.bits if quant else None})
        counts = _stage_counts(spec, tp, range(spec.num_layers), True, True, 1)
        weights = _stage_weight_bytes(own, spec, counts, rope=True)
    per_token = kv_bytes_per_token_per_layer(spec, tp, r.kv_cache_bytes) * spec.num_layers
    notes = []
    if (draft.method or "") in _SHARING_DRAFTS:
        notes.append(f"{draft.method} draft {draft.ref}: counted with its own embedding and lm_head; vLLM shares the "
                     "target's when the draft checkpoint lacks them, so the weights are an upper bound")
    return weights, per_token, notes


def _lora_notes(model: ModelSpec, lora: LoraInputs) -> list[str]:
    notes = []
    if model.is_moe or model.is_mla:
        notes.append("LoRA buffers of MoE experts and MLA projections are not counted (dense layers only)")
    if model.architecture not in _lora_embedding_modules():
        notes.append(f"LoRA on embed_tokens/lm_head not counted: {model.architecture} is not in kit/data/lora.yaml")
    return notes


class _Stage(BaseModel):
    weights: float
    activation: float
    non_torch: float
    cuda_graph: float
    kv_bytes: float
    per_token: int  # KV bytes per token on this rank (all its layers)
    num_layers: int
    lora: float = 0.0  # LoRA buffers, included in weights
    draft_weights: float = 0.0  # draft model weights (last stage), included in weights


def _compute(inputs: PlanInputs) -> tuple[_Resolved, list[_Stage], list[str]]:
    r, gpu, notes = _resolve(inputs)
    model = inputs.model
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    group = model.quantization.group_size if model.quantization else None
    check_parallelism(model, tp, pp, group if r.quantization and model.quantization else None)
    scale = _exact_scale(r, model)
    stages: list[_Stage] = []
    ranges = pp_layer_ranges(model.num_layers, pp)
    for i, layers in enumerate(ranges):
        first, last = i == 0, i == len(ranges) - 1
        counts = _stage_counts(model, tp, layers, first, last, pp)
        pooled_head_dropped = r.runner == "pooling" and last and not model.tie_word_embeddings
        weights = (_stage_weight_bytes(r, model, counts, rope=False) * scale
                   + _rope_cache_bytes(model, DTYPE_BYTES[r.dtype])
                   + _allocator_slack_bytes(r, model, tp, layers, first, last and not pooled_head_dropped, pp))
        if pooled_head_dropped:
            # vLLM's pooling adapter never allocates the LM head (model_executor/models/adapters.py at 0.32.0:
            # ParallelLMHead becomes a missing layer), so an untied head's weights are not loaded.
            weights -= padded_vocab(model.vocab_size) / tp * model.hidden_size * DTYPE_BYTES[r.dtype]
        per_token = kv_bytes_per_token_per_layer(model, tp, r.kv_cache_bytes) * len(layers)
        if r.encoder_only:
            per_token = 0  # encoder-only attention keeps no KV cache (kit/data/pooling.yaml)
        extras = {"lora": 0.0, "draft_weights": 0.0}
        if inputs.lora is not None:
            extras["lora"] = lora_buffer_bytes(model, r, inputs.lora, len(layers), first, last)
        if inputs.draft is not None and last:
            extras["draft_weights"], draft_per_token, draft_notes = draft_terms(r, inputs.draft)
            per_token += draft_per_token
            notes = notes + [n for n in draft_notes if n not in notes]
        weights += extras["lora"] + extras["draft_weights"]
        if r.device == "cpu":
            if r.cpu_kvcache_space_gib is not None:
                kv = r.cpu_kvcache_space_gib * GIB
            else:
                if r.gpu_memory_gib is None:
                    raise PlanError(
                        f"vLLM {r.vllm_version} sizes the CPU KV cache from host memory, and none was given",
                        hint="give --cpu-kvcache-space-gib G (VLLM_CPU_KVCACHE_SPACE) or the host RAM as --gpu-memory-gib",
                    )
                kv = r.gpu_memory_gib * GIB * r.gpu_memory_utilization - weights - CPU_PROCESS_OVERHEAD_GIB * GIB
            stages.append(_Stage(weights=weights, activation=0, non_torch=0, cuda_graph=0, kv_bytes=kv,
                                 per_token=per_token, num_layers=len(layers), **extras))
            continue
        rule = memory_accounting(parse_version(r.vllm_version))
        if rule is not None:
            activation = _measured_activation_bytes(r, model, layers, last, rule)
            single = rule["non_torch_gib_single"]
        else:
            activation = _stage_activation_bytes(r, model, layers, last)
            single = NON_TORCH_GIB_SINGLE
        non_torch = (NON_TORCH_GIB_TP if tp > 1 else NON_TORCH_GIB_PP_ONLY if pp > 1 else single) * GIB
        non_torch += _sampler_state_bytes(r, model, rule)
        graph = 0.0
        if r.cuda_graph_charged:
            estimate = (rule or {}).get("cuda_graph_estimate") or {}
            graph = (estimate.get("base_gib", CUDA_GRAPH_BASE_GIB)
                     + estimate.get("per_graph_gib", CUDA_GRAPH_PER_GRAPH_GIB) * _cuda_graph_count(r.max_num_seqs)) * GIB
        requested = r.gpu_memory_gib * GIB * r.gpu_memory_utilization
        kv = requested - weights - activation - non_torch - graph
        stages.append(_Stage(weights=weights, activation=activation, non_torch=non_torch, cuda_graph=graph,
                             kv_bytes=kv, per_token=per_token, num_layers=len(layers), **extras))
    if inputs.lora is not None:
        notes = notes + _lora_notes(model, inputs.lora)
    return r, stages, notes


def _blocks(stage: _Stage, block: int) -> int:
    if stage.kv_bytes <= 0 or stage.per_token == 0:
        return 0
    return int(stage.kv_bytes // (block * stage.per_token))


# The model families whose parameter layout the planner counts (dense GQA decoders, Qwen/Mixtral MoE, DeepSeek
# MLA) and was checked against (kit/data/models, kit/data/calibration.yaml, tests/unit/test_plan.py). Others are
# planned as a generic decoder and the plan says so.
PLANNED_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
})
# Quantisation families whose weight packing _linear_bytes_per_param models.
PLANNED_QUANT_FAMILIES = frozenset({"awq", "gptq", "fp8", "bitsandbytes", "compressed-tensors", "modelopt"})


def _unknown_inputs(model: ModelSpec, r: _Resolved) -> list[str]:
    """What the planner does not know and sized by assumption: said in the plan, never silently."""
    reasons = []
    if model.architecture not in PLANNED_ARCHITECTURES:
        reasons.append(f"architecture {model.architecture[:60]} is not one the planner models: sized as a generic "
                       "decoder (attention and MLP per layer)")
    family = _QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if family is not None and family not in PLANNED_QUANT_FAMILIES:
        reasons.append(f"quantization method {r.quantization[:40]} is unknown to the planner: linear weights sized "
                       f"as {r.weight_bits or 8:g}-bit without scales")
    if model.torch_dtype not in DTYPE_BYTES:
        reasons.append(f"torch_dtype {model.torch_dtype[:40]} is unknown to the planner: weights sized as {r.dtype}")
    return reasons


def _approximate(model: ModelSpec, r: _Resolved, gpu_unified: bool, notes: list[str]) -> dict[str, Any]:
    reasons = list(notes) + _unknown_inputs(model, r)
    if model.is_hybrid:
        reasons.append(
            "sliding-window / hybrid attention: vLLM gives sliding-window layers their own KV groups; "
            "this plan sizes every layer as full attention (tokens are a lower bound)"
        )
    if r.device == "cpu" and r.cpu_kvcache_space_gib is None:
        reasons.append("CPU KV cache sized from host RAM minus an estimated process footprint")
    if gpu_unified:
        reasons.append("unified memory: the CPU shares this memory, and vLLM refuses to start when free memory "
                       "is below the requested fraction")
    return {"value": bool(reasons), "reason": "; ".join(reasons) if reasons else None}


def _echo_inputs(r: _Resolved, inputs: PlanInputs) -> dict[str, Any]:
    echo = r.model_dump()
    if inputs.lora is not None:
        echo["lora"] = inputs.lora.model_dump()
        echo["lora"]["max_cpu_loras_note"] = "adapters beyond max_loras are cached in host memory, not on the GPU"
    if inputs.draft is not None:
        echo["draft"] = {"model": inputs.draft.ref, "method": inputs.draft.method,
                         "known": inputs.draft.spec is not None}
    return echo


def _evaluate(inputs: PlanInputs) -> tuple[Plan, _Resolved, list[_Stage]]:
    r, stages, notes = _compute(inputs)
    version = parse_version(r.vllm_version)
    block = r.block_size
    blocks = [_blocks(s, block) for s in stages]
    binding_index = min(range(len(stages)), key=lambda i: (blocks[i], stages[i].kv_bytes))
    binding = stages[binding_index]
    num_blocks = blocks[binding_index]
    max_len = r.max_model_len
    blocks_per_request = -(-max_len // block)
    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    if max_len % block == 0:
        tokens = num_blocks * block
    else:
        tokens = int(concurrency * max_len)  # vLLM logs max_concurrency * max_model_len
    error = None
    kv_gib = binding.kv_bytes / GIB
    if r.encoder_only:
        # No KV cache at all: nothing is reserved for it, and concurrency is the scheduler's max_num_seqs.
        tokens, concurrency, kv_gib = 0, float(r.max_num_seqs), 0.0
        if binding.kv_bytes < 0:
            error = NO_MEMORY_ERROR
    elif binding.kv_bytes <= 0 or num_blocks == 0:
        error = NO_MEMORY_ERROR
    else:
        for stage in stages:
            page = block * stage.per_token
            needed = blocks_per_request * page
            if needed > stage.kv_bytes:
                estimate = int(stage.kv_bytes // page) * block
                estimate = min(estimate, max_len)
                error = _error_text(version, max_len, needed, stage.kv_bytes, estimate)
                break
    gpu = _resolve_gpu(inputs)
    plan = Plan(
        weights_gib=binding.weights / GIB,
        activation_gib=binding.activation / GIB,
        non_torch_gib=binding.non_torch / GIB,
        cuda_graph_gib=binding.cuda_graph / GIB,
        kv_cache_gib=kv_gib,
        kv_cache_tokens=max(tokens, 0),
        max_concurrency=max(concurrency, 0.0),
        fits=error is None,
        error=error,
        suggestions=[],
        inputs=_echo_inputs(r, inputs),
        lora_gib=binding.lora / GIB,
        draft_weights_gib=binding.draft_weights / GIB,
        approximate=_approximate(inputs.model, r, bool(gpu and gpu.unified_memory), notes),
    )
    return plan, r, stages


def largest_max_model_len(inputs: PlanInputs) -> int:
    """The largest max_model_len whose one request fits the KV cache (vLLM's estimate_max_model_len)."""
    r, stages, _ = _compute(inputs)
    block = r.block_size
    lengths = [int(s.kv_bytes // (block * s.per_token)) * block if s.kv_bytes > 0 and s.per_token else 0
               for s in stages]
    return max(min(lengths), 0)


def _fits(inputs: PlanInputs) -> bool:
    try:
        return _evaluate(inputs)[0].fits
    except PlanError:
        return False


def _suggest(inputs: PlanInputs, r: _Resolved) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    model = inputs.model
    # 1. shorter context
    longest = min(largest_max_model_len(inputs), r.max_model_len)
    if longest >= r.block_size:
        change = {"max_model_len": longest}
        if _fits(inputs.model_copy(update=change)):
            out.append({"kind": "max_model_len", "change": change,
                        "message": f"--max-model-len {longest} (the largest context that fits)"})
    # 2. a larger memory fraction
    if r.device == "cuda":
        util = round(r.gpu_memory_utilization + 0.01, 2)
        while util <= 0.98:
            change = {"gpu_memory_utilization": util}
            if _fits(inputs.model_copy(update=change)):
                out.append({"kind": "gpu_memory_utilization", "change": change,
                            "message": f"--gpu-memory-utilization {util} (needs an otherwise idle GPU)"})
                break
            util = round(util + 0.01, 2)
    # 3. fp8 KV cache
    gpu = _resolve_gpu(inputs)
    if r.device == "cuda" and r.kv_cache_dtype == "auto" and (gpu is None or gpu.fp8):
        change = {"kv_cache_dtype": "fp8"}
        if _fits(inputs.model_copy(update=change)):
            out.append({"kind": "kv_cache_dtype", "change": change,
                        "message": "--kv-cache-dtype fp8 (halves the KV cache per token)"})
    # 4. more tensor parallelism
    if r.device == "cuda":
        for tp in (2, 4, 8):
            if tp <= r.tensor_parallel_size:
                continue
            change = {"tensor_parallel_size": tp}
            if _fits(inputs.model_copy(update=change)):
                out.append({"kind": "tensor_parallel_size", "change": change,
                            "message": f"--tensor-parallel-size {tp} ({tp * r.pipeline_parallel_size} GPUs)"})
                break
    # 5. a quantised model
    if r.device == "cuda" and model.quantization is None and r.quantization is None:
        cc_ok = gpu is None or gpu.cc >= (8, 0)
        change = {"quantization": "fp8"}
        if cc_ok and _fits(inputs.model_copy(update=change)):
            out.append({"kind": "quantization", "change": change,
                        "message": "--quantization fp8 (weights quantised to FP8 at load)"})
        out.append({"kind": "quantized_checkpoint", "change": {},
                    "message": "a 4-bit AWQ/GPTQ checkpoint of this model takes about a quarter of the weight memory"})
    return out


def plan(inputs: PlanInputs, *, suggest: bool = True) -> Plan:
    """Predict vLLM's start-up memory for ``inputs``; raises PlanError for impossible inputs.

    ``suggest=False`` leaves out the fixes of a plan that does not fit (each is a search of its own): for callers
    that search themselves (kit/memory/fit.py)."""
    result, resolved, _ = _evaluate(inputs)
    if result.fits or not suggest:
        return result
    return result.model_copy(update={"suggestions": _suggest(inputs, resolved)})
