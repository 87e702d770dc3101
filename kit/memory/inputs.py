"""The planner's inputs, and their resolution: every default vLLM would fill in, filled in from the release's rules.

PlanInputs (what the caller knows) -> resolve() -> Resolved (what vLLM will run with), echoed back in the plan. The
per-release defaults (batch sizes by memory tier, gpu_memory_utilization, block sizes, the CPU backend's KV cache)
come from kit/data/vllm.yaml through kit/memory/rules.py.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.config.pooling import pooling_profile
from kit.core.datafiles import gpu_catalog as raw_catalog  # the one (cached) reader of gpus.yaml
from kit.core.errors import PlanError
from kit.core.gpus import gpu_key, unknown_gpu_hint
from kit.core.releaserules import quantization_method_gone, quantization_min_cc
from kit.core.tables import Rules
from kit.core.versions import Version, cc_tuple
from kit.memory.rules import DEFAULT_VLLM_VERSION, batch_defaults, cuda_graphs_charged_by, parse_version, rules_for, version_gate

GIB = 1 << 30


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
    per_host: int | None = Field(default=None, ge=1)  # the most one host can have, where the hardware fixes it
    sm_count: int | None = None  # streaming multiprocessors (FlashInfer's sampler needs more than 16)
    source: str = ""

    @property
    def cc(self) -> tuple[int, int]:
        return cc_tuple(self.compute_capability)


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GpuInfo]:
    return {key: GpuInfo(key=key, **entry) for key, entry in raw_catalog().items()}


def find_gpu(name: str) -> GpuInfo:
    """Look a GPU up by key, alias or marketing name (kit/core/gpus.py normalises it)."""
    key = gpu_key(name)
    if key is None:
        raise PlanError(f"unknown GPU {name!r}", hint=f"{unknown_gpu_hint(name)} (or give --gpu-memory-gib)",
                        field="hardware.gpu")
    return gpu_catalog()[key]


class LoraInputs(BaseModel):
    """--enable-lora and its sizing flags; None: vLLM's default at the release (kit/data/vllm.yaml `lora_defaults`,
    filled in by kit.memory.adapters.resolved_lora)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_loras: int | None = Field(default=None, ge=1)
    max_lora_rank: int | None = Field(default=None, ge=1)
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
    # --enable-chunked-prefill / --no-enable-chunked-prefill; None: vLLM's default (on, for the models the kit plans)
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool = False
    # a restart with the first start's compile cache kept (the kit's cache volume): no cold-compile buffers
    compile_cache_warm: bool = False
    vllm_version: str = DEFAULT_VLLM_VERSION
    # A release outside the kit's tables (planned_versions()) is refused unless this is set; then it is planned with
    # the rules of the nearest older release the tables know, and the plan says so (approximate).
    approximate_version: bool = False
    block_size: int | None = Field(default=None, ge=1)  # 16 on GPU, 128 on the CPU backend
    cpu_kvcache_space_gib: float | None = Field(default=None, gt=0)
    entrypoint: Literal["serve", "llm"] = "serve"  # `vllm serve` (API server) or the offline LLM class
    runner: Literal["auto", "generate", "pooling"] = "auto"  # --runner (pooling: embeddings, scores)
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced"  # --performance-mode
    convert: Literal["auto", "none", "embed", "classify"] = "auto"  # --convert
    lora: LoraInputs | None = None  # None: LoRA not enabled
    draft: DraftInputs | None = None  # None: no draft checkpoint
    # --enable-extensible-kv-cache / --no-enable-extensible-kv-cache (vLLM 0.34+); None: the release's default
    # (kit/data/vllm.yaml `kv_sizing`). kv_cache_memory_bytes or num_gpu_blocks_override also turn it off.
    extensible_kv_cache: bool | None = None
    # VLLM_DISABLED_KERNELS: kernel class names vLLM skips when it picks one (vllm/envs.py, split on ","; read at
    # 0.33.0 in kernels/linear/__init__.py `choose_mp_linear_kernel`), e.g. MacheteLinearKernel,HummingLinearKernel
    # makes an H200 run AWQ/GPTQ through Marlin. A preset sets it in runtime.env.
    disabled_kernels: tuple[str, ...] = ()



QUANT_FAMILY = {
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
    major, _, minor = str(quantization_min_cc(family, vllm_version)).partition(".")
    return int(major) * 10 + int(minor or 0)


class Resolved(BaseModel):
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
    compile_cache_warm: bool
    vllm_version: str
    block_size: int
    cpu_kvcache_space_gib: float | None
    entrypoint: str
    cuda_graph_charged: bool
    gpu_sm_count: int | None = None  # None: the GPU is not in the catalog
    performance_mode: str = "balanced"
    runner: str = "generate"
    pooling_task: str | None = None  # embed | classify with the pooling runner
    encoder_only: bool = False  # encoder-only attention: vLLM keeps no KV cache
    extensible_kv_cache: bool = False  # sized after warm-up and CUDA-graph capture (vLLM 0.34+, kv_sizing)
    disabled_kernels: tuple[str, ...] = ()  # VLLM_DISABLED_KERNELS


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


def resolve_gpu(inputs: PlanInputs) -> GpuInfo | None:
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


def _resolve_quant(inputs: PlanInputs) -> tuple[str | None, float | None, int | None, bool]:
    """(method, weight bits, group size, runtime-quantised?)"""
    ckpt = inputs.model.quantization
    wanted = inputs.quantization.lower() if inputs.quantization else None
    if wanted in (None, "none", ""):
        if ckpt is None:
            return None, None, None, False
        return ckpt.method, ckpt.bits, ckpt.group_size, False
    family = QUANT_FAMILY.get(wanted, wanted)
    if ckpt is not None:
        if QUANT_FAMILY.get(ckpt.method, ckpt.method) != family:
            raise PlanError(
                f"Quantization method specified in the model config ({ckpt.method}) does not match the "
                f"quantization method specified in the `quantization` argument ({wanted}).",
                hint=f"drop --quantization (the checkpoint is {ckpt.method}) or pick an unquantised checkpoint",
                field="engine.quantization",
            )
        return wanted, ckpt.bits, ckpt.group_size, False
    if family == "fp8":
        return "fp8", 8, None, True  # on-the-fly FP8 of a 16-bit checkpoint
    if family == "bitsandbytes":
        return "bitsandbytes", 4, 64, True
    raise PlanError(
        f"--quantization {wanted} needs a checkpoint quantised with {wanted}; {inputs.model.name} has no quantization_config",
        hint="use a pre-quantised checkpoint (e.g. an -AWQ or -GPTQ-Int4 repo) or --quantization fp8",
        field="engine.quantization",
    )



def batch_sizes(inputs: PlanInputs, rules: Rules, version: Version, memory: float | None, gpu: GpuInfo | None,
                max_len: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM settles them (vllm/engine/arg_utils.py
    `_set_default_max_num_seqs_and_batched_tokens_args`, read at 0.32.0 and 0.33.0): the release's defaults for what
    was not given, doubled by --performance-mode throughput; a defaulted token budget raised to max_model_len with
    chunked prefill off and capped at max_num_seqs x max_model_len; a defaulted max_num_seqs capped at the budget.
    Then what SchedulerConfig.verify_max_model_len refuses, refused here with the field to change."""
    tokens_default, seqs_default = batch_defaults(version, inputs.device, memory,
                                                  gpu.name if gpu else inputs.gpu_name or "", inputs.entrypoint,
                                                  inputs.tensor_parallel_size * inputs.pipeline_parallel_size)
    double = 2 if inputs.performance_mode == "throughput" and rules.throughput_doubles_batch_defaults else 1
    chunked = inputs.enable_chunked_prefill is not False
    seqs = inputs.max_num_seqs or seqs_default * double
    tokens = inputs.max_num_batched_tokens
    if tokens is None:
        tokens = tokens_default * double
        if not chunked:
            tokens = max(max_len, tokens)
        if rules.batch_default_caps:
            tokens = min(seqs * max_len, tokens)
    if inputs.max_num_seqs is None and rules.batch_default_caps:
        seqs = min(seqs, tokens)
    if not chunked and tokens < max_len:
        raise PlanError(
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_len}). This effectively limits "
            "the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please "
            "increase max_num_batched_tokens or decrease max_model_len.",
            hint=f"with chunked prefill off one batch holds a whole prompt: engine.max_num_batched_tokens={max_len}, "
                 "or engine.enable_chunked_prefill=true", field="engine.max_num_batched_tokens")
    if tokens < seqs and (inputs.max_num_seqs is not None or rules.batch_default_caps):
        given = "engine.max_num_batched_tokens" if inputs.max_num_batched_tokens else "engine.max_num_seqs"
        raise PlanError(
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs}).",
            hint=f"vLLM refuses this at start-up: engine.max_num_batched_tokens={seqs}, or engine.max_num_seqs={tokens}"
                 + ("" if inputs.max_num_batched_tokens else f" ({tokens} is this release's default token budget here)"),
            field=given)
    return tokens, seqs


def resolve(inputs: PlanInputs) -> tuple[Resolved, GpuInfo | None, list[str]]:
    notes: list[str] = []
    version = parse_version(inputs.vllm_version)
    rules = rules_for(version)
    version_note = version_gate(inputs.vllm_version, inputs.approximate_version)
    if version_note:
        notes.append(version_note)
    gpu = resolve_gpu(inputs)
    memory = inputs.gpu_memory_gib if inputs.gpu_memory_gib is not None else (gpu.memory_gib if gpu else None)
    if inputs.device == "cuda" and memory is None:
        raise PlanError("no GPU memory to plan against", hint="give --gpu NAME or --gpu-memory-gib X")
    quant, bits, _group, _runtime = _resolve_quant(inputs)
    family = QUANT_FAMILY.get(quant or "", quant)
    if inputs.device == "cuda" and quant:
        gone = quantization_method_gone(quant, str(version), registry=False)
        if gone:
            raise PlanError(f"{gone}: vLLM {inputs.vllm_version} refuses it",
                            hint="use a checkpoint in another format (AWQ, GPTQ, FP8 or unquantised)",
                            field="engine.quantization")
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
    dtype = _resolve_dtype(inputs, gpu, QUANT_FAMILY.get(quant or "", quant))
    kv_dtype = inputs.kv_cache_dtype
    if inputs.device == "cpu" and kv_dtype.startswith("fp8") and rules.cpu_fp8_kv_falls_back:
        kv_dtype = "auto"  # "CPU backend doesn't support KV cache quantization fallback to auto."
        notes.append("the CPU backend ignores an fp8 KV cache and falls back to the model dtype")
    kv_bytes = 1 if kv_dtype.startswith("fp8") else DTYPE_BYTES[dtype if kv_dtype == "auto" else kv_dtype]
    sizing = rules.kv_sizing
    wanted = (sizing.extensible_default if sizing else None) if inputs.extensible_kv_cache is None \
        else inputs.extensible_kv_cache
    # vllm/config/vllm.py `_resolve_extensible_kv_cache` (0.34): CUDA (and ROCm) only
    extensible = inputs.device == "cuda" and sizing is not None and bool(wanted)
    default_util = rules.gpu_memory_utilization if extensible or sizing is None else sizing.utilization_when_off
    util = inputs.gpu_memory_utilization or float(default_util)
    derived = derived_max_model_len(inputs.model)
    max_len = inputs.max_model_len or derived
    if inputs.max_model_len and inputs.max_model_len > derived:
        raise PlanError(
            f"User-specified max_model_len ({inputs.max_model_len}) is greater than the derived max_model_len "
            f"({derived}, from max_position_embeddings={inputs.model.max_position_embeddings} in the model config)",
            hint=f"use --max-model-len {derived} or less (the model's own length: the kit plans no longer context)",
            field="engine.max_model_len",
        )
    tokens, seqs = batch_sizes(inputs, rules, version, memory, gpu, max_len)
    if inputs.device == "cpu":
        block = inputs.block_size or int(rules.cpu_block_size)
    else:
        block = inputs.block_size or int(rules.block_size)
    cpu_space = inputs.cpu_kvcache_space_gib
    if inputs.device == "cpu" and cpu_space is None:
        cpu_space = rules.cpu_kvcache_space_default_gib  # None: sized from host RAM
    charged = inputs.device == "cuda" and not inputs.enforce_eager and cuda_graphs_charged_by(inputs.model, version)
    pooling = pooling_profile({"runner": inputs.runner, "convert": inputs.convert}, inputs.model)
    resolved = Resolved(
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
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        enforce_eager=inputs.enforce_eager or inputs.device == "cpu",
        compile_cache_warm=inputs.compile_cache_warm,
        vllm_version=".".join(str(p) for p in (version.release + (0, 0))[:3]),  # "0.19" reads "0.19.0"
        block_size=block,
        cpu_kvcache_space_gib=cpu_space,
        entrypoint=inputs.entrypoint,
        cuda_graph_charged=charged,
        gpu_sm_count=gpu.sm_count if gpu else None,
        performance_mode=inputs.performance_mode,
        runner=pooling.runner,
        pooling_task=pooling.task,
        encoder_only=pooling.encoder_only,
        extensible_kv_cache=extensible,
        disabled_kernels=tuple(inputs.disabled_kernels),
    )
    return resolved, gpu, notes


