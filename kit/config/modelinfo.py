"""What the planner needs to know about a model, read from its config.json.

``load_model_spec`` takes a local model directory, a path to a config.json, or a Hugging Face id. An id resolves
from the bundled catalog (``kit/data/models/``, an offline cache of 17 models), then from the Hugging Face cache on
this machine, then, where the caller allows it, from the hub through ``huggingface_hub`` (kit/config/modelsource.py).
Keys a config.json leaves out are filled as transformers fills them for its ``model_type``
(kit/data/model_defaults.yaml). Nothing here downloads weights: the stored bytes come from the safetensors headers
(local files, or ranged reads of the hub's), an index's ``metadata.total_size`` where only the index is at hand.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kit.config import modelsource
from kit.config.modelfiles import (
    LOCAL_MODEL_HINT, StoredTensors, load_json, parse_json, safetensors_header_bytes, whole_number,
)
from kit.config.tinymodel import KINDS, shape_config
from kit.core.datafiles import DATA_DIR, load_yaml
from kit.core.errors import PlanError, shown
from kit.core.inputfiles import input_limits, open_regular, user_path

CATALOG_DIR = DATA_DIR / "models"

# Bytes per element of the dtype names found in config.json and safetensors headers.
DTYPE_BYTES = {
    "float32": 4, "float": 4, "f32": 4, "F32": 4,
    "bfloat16": 2, "bf16": 2, "BF16": 2,
    "float16": 2, "half": 2, "f16": 2, "F16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "int8": 1, "I8": 1, "uint8": 1, "U8": 1,
    "int16": 2, "I16": 2, "int32": 4, "I32": 4, "int64": 8, "I64": 8,
    "bool": 1, "BOOL": 1, "F64": 8, "float64": 8,
}
# safetensors dtypes that vLLM casts to the model dtype when it loads an unquantised checkpoint
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})


class QuantSpec(BaseModel):
    """The checkpoint's ``quantization_config``, reduced to what sizes memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str  # awq | gptq | fp8 | compressed-tensors | bitsandbytes | ...
    bits: int | None = None  # weight bits (4 for AWQ/GPTQ-int4, 8 for fp8/int8)
    group_size: int | None = None  # -1 or None: per channel
    zero_point: bool | None = None
    desc_act: bool | None = None
    weight_block_size: tuple[int, int] | None = None  # fp8 block quantisation
    modules_not_converted: tuple[str, ...] = ()


class ModelSpec(BaseModel):
    """The shape of a decoder model, as vLLM sizes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    architecture: str
    model_type: str | None = None
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    is_causal: bool = True  # False: bidirectional attention, which vLLM runs as encoder-only (no KV cache)
    num_labels: int | None = None  # classifiers: the head's outputs (1: a cross-encoder that /score can use)
    torch_dtype: str = "bfloat16"
    attention_bias: bool = False  # q/k/v biases (Qwen2)
    qk_norm: bool = False  # per-head q/k RMSNorm (Qwen3)
    rope_scaling: dict[str, Any] | None = None
    # Gemma-2's tanh cap on the logits (vllm/model_executor/layers/logits_processor.py forward: three steps, each a
    # new [rows, vocab] tensor, two alive at once)
    final_logit_softcapping: float | None = None
    quantization: QuantSpec | None = None
    # Mixture of experts
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None  # Qwen2-MoE style single shared expert
    first_k_dense_replace: int = 0  # DeepSeek: the first k layers are dense MLPs
    moe_layer_freq: int = 1
    # Multi-head latent attention (DeepSeek V2/V3)
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Sliding window / hybrid layouts
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    # Layers that are not attention (state-space, linear attention, short convolutions), as the config declares them:
    # what declared them, for the plan's "approximate" reason; None where the config declares none
    non_attention_layers: str | None = None
    # A vision encoder beside the language model (config.json has vision_config / a vision tower)
    has_vision: bool = False
    # The checkpoint's stored tensor bytes when known (safetensors headers, or an index's total_size), and the same
    # per safetensors dtype ("BF16", "I32", ...) where the headers were read: packed quantised weights, scales,
    # zeros and unquantised layers each as stored
    weights_bytes: int | None = None
    weights_bytes_by_dtype: tuple[tuple[str, int], ...] = ()
    # the transformers config file whose defaults filled the keys config.json leaves out (kit/data/model_defaults.yaml);
    # None: a model_type the kit has no row for, read as given
    config_defaults: str | None = None
    source: str = ""  # where the config came from (path, catalog, hub)

    def stored_bytes_as_loaded(self, dtype: str) -> int | None:
        """The checkpoint's stored tensor bytes as they land on the GPU when served in ``dtype`` (None: unknown).

        Floating-point tensors of an unquantised checkpoint are cast to ``dtype``; a quantised checkpoint's tensors
        (packed integers, scales, zeros, and the layers it left unquantised) load as stored. Without a per-dtype
        breakdown the total is used only when the checkpoint's dtype has the same width as ``dtype``."""
        if not self.weights_bytes:
            return None
        width = DTYPE_BYTES.get(dtype)
        if width is None:
            return None
        if self.quantization is not None:
            return self.weights_bytes
        if self.weights_bytes_by_dtype:
            total = 0
            for name, size in self.weights_bytes_by_dtype:
                stored = DTYPE_BYTES.get(name)
                total += size * width // stored if name in FLOAT_DTYPES and stored else size
            return total
        return self.weights_bytes if DTYPE_BYTES.get(self.torch_dtype) == width else None

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_hybrid(self) -> bool:
        """Sliding-window or mixed layer types: vLLM sizes these per group."""
        if self.layer_types and len(set(self.layer_types)) > 1:
            return True
        return self.sliding_window is not None


# Config keys by which hybrid and state-space checkpoints declare layers that keep no KV cache (transformers'
# configuration files: Jamba's attn_layer_period and mamba_*, Bamba's and Falcon-H1's attn_layer_indices and mamba_*,
# Nemotron-H's hybrid_override_pattern, Zamba2's layers_block_type, MiniMax's attn_type_list, Mamba's state_size,
# LFM2's conv_L_cache). An allow-list of what the planner lays out is kept by layer_types instead (kv.py _layer_kinds).
NON_ATTENTION_KEYS = ("attn_layer_period", "attn_layer_indices", "mamba_d_state", "mamba_expand", "mamba_n_heads",
                      "mamba_d_ssm", "ssm_state_size", "state_size", "hybrid_override_pattern", "layers_block_type",
                      "attn_type_list", "linear_attn_config", "conv_L_cache")
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


def _non_attention_layers(base: dict[str, Any]) -> str | None:
    """What in the config declares layers other than attention: layer_types' other kinds, else the keys above."""
    kinds = sorted({str(t) for t in base.get("layer_types") or () if t not in ATTENTION_LAYER_TYPES})
    if kinds:
        return "layer_types " + ", ".join(k[:30] for k in kinds[:4])
    keys = [k for k in NON_ATTENTION_KEYS if base.get(k) is not None]
    return "config keys " + ", ".join(keys[:4]) if keys else None


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def _quant_from_config(qc: dict[str, Any] | None) -> QuantSpec | None:
    if not qc:
        return None
    method = str(qc.get("quant_method") or qc.get("quant_type") or "").lower()
    if not method:
        return None
    bits = qc.get("bits") or qc.get("w_bit") or qc.get("num_bits")
    group = qc.get("group_size") or qc.get("q_group_size")
    block = qc.get("weight_block_size")
    not_converted = tuple(qc.get("modules_to_not_convert") or qc.get("ignore") or ())
    if method == "compressed-tensors":
        # One config group is the common case; read its weight scheme.
        groups: dict[str, dict[str, Any]] = qc.get("config_groups") or {}
        weights: dict[str, Any] = next(iter(groups.values()), {}).get("weights", {}) if groups else {}
        bits = weights.get("num_bits", bits)
        if weights.get("type") == "float" and bits == 8:
            pass  # FP8 weights
        group = weights.get("group_size", group)
        if weights.get("block_structure"):
            block = weights["block_structure"]
    elif method == "fp8":
        bits = 8
    elif method in ("bitsandbytes", "bnb"):
        bits = 4 if qc.get("load_in_4bit") else 8
    return QuantSpec(
        method=method,
        bits=int(bits) if bits is not None else None,
        group_size=int(group) if group is not None else None,
        zero_point=qc.get("zero_point"),
        desc_act=qc.get("desc_act"),
        weight_block_size=tuple(block) if block else None,
        modules_not_converted=not_converted,
    )


def _check_counts(section: dict[str, Any], bounds: dict[str, list[int]], where: str, *, fractions: bool = False) -> None:
    for key, (low, high) in bounds.items():
        value = section.get(key)
        if value is None:
            continue
        number = value if fractions and isinstance(value, float) and math.isfinite(value) else whole_number(value)
        if number is None:
            raise PlanError(f"{where}{key}: {shown(value)} is not a {'number' if fractions else 'whole number'}")
        if not low <= number <= high:
            raise PlanError(f"{where}{key}: {shown(value)} is outside {low}..{high}, the range the kit plans for")


def check_config_values(cfg: Any, source: str) -> None:
    """Refuse config.json values no real model has (layers 1e9, hidden 0, negative, nan, text for a number)
    before any arithmetic sees them; each error names the config file and the key."""
    if not isinstance(cfg, dict):
        raise PlanError(f"{source}: config.json is not a JSON object")
    for key, kind in (("text_config", dict), ("quantization_config", dict), ("rope_scaling", dict),
                      ("architectures", list), ("layer_types", list), ("torch_dtype", str), ("model_type", str)):
        for where, section in ((f"{source}: ", cfg), (f"{source}: text_config.", cfg.get("text_config"))):
            if isinstance(section, dict) and section.get(key) is not None and not isinstance(section[key], kind):
                raise PlanError(f"{where}{key}: expected a JSON {'object' if kind is dict else kind.__name__}, "
                                f"got {shown(section[key])}")
    for key in ("architectures", "layer_types"):
        if any(not isinstance(item, str) for item in cfg.get(key) or ()):
            raise PlanError(f"{source}: {key}: expected a list of names")
    limits = input_limits()
    text = cfg.get("text_config") or {}
    base = {**cfg, **text}
    _check_counts(base, limits["model_config"], f"{source}: ")
    quant = cfg.get("quantization_config") or base.get("quantization_config") or {}
    _check_counts(quant, limits["quantization_config"], f"{source}: quantization_config.")
    _check_counts(base.get("rope_scaling") or {}, limits["rope_scaling"], f"{source}: rope_scaling.", fractions=True)


def _num_labels(cfg: dict[str, Any]) -> int | None:
    """transformers derives num_labels from id2label (PretrainedConfig); absent in generative configs."""
    if cfg.get("num_labels") is not None:
        return int(cfg["num_labels"])
    labels = cfg.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else None


def config_defaults(model_type: Any) -> dict[str, Any] | None:
    """transformers' defaults for ``model_type`` (kit/data/model_defaults.yaml), a wrapper's text model's row for a
    multimodal wrapper; None for a model_type the table lacks."""
    rows = load_yaml("model_defaults.yaml")["model_types"]
    row = rows.get(model_type) if isinstance(model_type, str) else None
    if row is not None and row.get("text_model_type"):
        row = rows.get(row["text_model_type"])
    return row


def with_transformers_defaults(cfg: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``cfg`` with the keys it leaves out filled as transformers fills them for its model_type, and the config
    file those defaults come from (None: an unknown model_type, returned as given)."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    section = text if text is not None else cfg
    row = config_defaults(section.get("model_type") or cfg.get("model_type"))
    if row is None:
        return cfg, None
    filled = dict(section)
    for key in ("head_dim", "num_key_value_heads", "sliding_window", "final_logit_softcapping"):
        if key not in filled and row.get(key) is not None:
            filled[key] = row[key]
    if "tie_word_embeddings" not in cfg and "tie_word_embeddings" not in filled:
        filled["tie_word_embeddings"] = bool(row.get("tie_word_embeddings"))
    if row.get("sliding_switch") and not filled.get("use_sliding_window"):
        filled["sliding_window"] = None  # Qwen2/Qwen3: the window is in force only with use_sliding_window
    layers = whole_number(filled.get("num_hidden_layers"))
    if row.get("sliding_every") and filled.get("sliding_window") and "layer_types" not in filled and layers:
        every = whole_number(filled.get(row.get("sliding_every_key") or "")) or int(row["sliding_every"])
        every = every if every >= 1 else int(row["sliding_every"])
        filled["layer_types"] = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    return ({**cfg, "text_config": filled} if text is not None else filled), str(row["source"])


def spec_from_config(cfg: dict[str, Any], *, name: str, source: str, weights_bytes: int | None = None,
                     weights_by_dtype: dict[str, int] | None = None) -> ModelSpec:
    """Build a ModelSpec from a config.json dict; a missing, absurd or malformed field is a PlanError naming it."""
    check_config_values(cfg, source)
    cfg, defaults = with_transformers_defaults(cfg)
    try:
        spec = _spec_from_config(cfg, name=name, source=source, weights_bytes=weights_bytes)
        spec = spec.model_copy(update={
            "config_defaults": defaults,
            "weights_bytes_by_dtype": tuple(sorted((weights_by_dtype or {}).items())),
        })
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        # Shapes the checks above do not cover (e.g. a list where a mapping belongs deep in quantization_config).
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlanError(f"{source}: config.json has a value of an unexpected shape ({first[:120]})") from None
    if spec.is_mla and not spec.qk_rope_head_dim:
        raise PlanError(f"{source}: qk_rope_head_dim: missing, and a latent-attention model (kv_lora_rank "
                        f"{spec.kv_lora_rank}) stores its RoPE key beside the latent")
    if spec.head_dim < 1:
        raise PlanError(f"{source}: head_dim: hidden_size {spec.hidden_size} / num_attention_heads "
                        f"{spec.num_attention_heads} is below 1")
    return spec


def _spec_from_config(cfg: dict[str, Any], *, name: str, source: str, weights_bytes: int | None = None) -> ModelSpec:
    # Multimodal wrappers keep the language model under text_config.
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    base = {**cfg, **text} if text else cfg

    def need(*names: str) -> Any:
        value = _first(base, *names)
        if value is None:
            raise PlanError(
                f"{source}: config.json has no {names[0]!r}"
                + (f" (nor {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""),
                hint="pass the model's full config.json (--model /path/to/dir or /path/to/config.json)",
            )
        return value

    archs = cfg.get("architectures") or base.get("architectures") or []
    architecture = archs[0] if archs else str(need("model_type"))
    hidden = int(need("hidden_size", "n_embd", "d_model"))
    heads = int(need("num_attention_heads", "n_head"))
    kv_heads = int(_first(base, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads))
    head_dim = _first(base, "head_dim")
    head_dim = int(head_dim) if head_dim else hidden // heads
    kv_lora = base.get("kv_lora_rank")
    num_experts = _first(base, "num_local_experts", "num_experts", "n_routed_experts")
    intermediate = _first(base, "intermediate_size", "ffn_hidden_size", "n_inner")
    if intermediate is None:
        if num_experts:
            intermediate = base.get("moe_intermediate_size") or 0
        else:
            intermediate = need("intermediate_size")
    dtype = str(_first(base, "torch_dtype", "dtype", default=cfg.get("torch_dtype") or "bfloat16"))
    dtype = dtype.replace("torch.", "")
    layer_types = base.get("layer_types")
    sliding = base.get("sliding_window")
    if sliding is not None and base.get("use_sliding_window") is False:
        sliding = None  # Qwen2/Qwen3 ship a window but leave it switched off
    if layer_types and len(set(layer_types)) == 1 and layer_types[0] == "full_attention":
        sliding = None
    shared = base.get("n_shared_experts") or 0
    shared_inter = base.get("shared_expert_intermediate_size")
    return ModelSpec(
        name=name,
        architecture=architecture,
        model_type=base.get("model_type"),
        num_layers=int(need("num_hidden_layers", "n_layer", "num_layers")),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=int(intermediate),
        vocab_size=int(need("vocab_size")),
        max_position_embeddings=int(need("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")),
        tie_word_embeddings=bool(_first(cfg, "tie_word_embeddings", default=base.get("tie_word_embeddings", False))),
        torch_dtype=dtype,
        is_causal=base.get("is_causal") is not False,
        num_labels=_num_labels(cfg),
        attention_bias=bool(base.get("attention_bias") or base.get("model_type") in ("qwen2", "qwen2_moe")),
        qk_norm=base.get("model_type") in ("qwen3", "qwen3_moe"),
        rope_scaling=base.get("rope_scaling"),
        final_logit_softcapping=float(base["final_logit_softcapping"]) if base.get("final_logit_softcapping") else None,
        quantization=_quant_from_config(cfg.get("quantization_config") or base.get("quantization_config")),
        num_experts=int(num_experts) if num_experts else None,
        num_experts_per_tok=_first(base, "num_experts_per_tok", "moe_topk"),
        moe_intermediate_size=_first(base, "moe_intermediate_size") or (int(intermediate) if num_experts else None),
        num_shared_experts=int(shared) if shared else (1 if shared_inter else 0),
        shared_expert_intermediate_size=shared_inter,
        first_k_dense_replace=int(base.get("first_k_dense_replace") or 0),
        moe_layer_freq=int(base.get("moe_layer_freq") or base.get("decoder_sparse_step") or 1),
        kv_lora_rank=int(kv_lora) if kv_lora else None,
        q_lora_rank=base.get("q_lora_rank"),
        qk_rope_head_dim=base.get("qk_rope_head_dim"),
        qk_nope_head_dim=base.get("qk_nope_head_dim"),
        v_head_dim=base.get("v_head_dim"),
        has_vision=any(isinstance(cfg.get(key), dict) for key in VISION_KEYS),
        sliding_window=int(sliding) if sliding else None,
        layer_types=tuple(layer_types) if layer_types else None,
        non_attention_layers=_non_attention_layers(base),
        weights_bytes=weights_bytes if weights_bytes is not None else cfg.get("_weights_bytes"),
        source=source,
    )


def stored_tensors(model_dir: Path) -> StoredTensors | None:
    """The checkpoint's tensors as stored: from the headers of the local ``*.safetensors`` files (the index's shards
    when there is an index and they are all here), else from the index's metadata.total_size.

    Every read is bounded before it happens (kit/data/input_limits.yaml): the index's size, each header's
    8-byte length prefix against the format's cap, the kit's cap and the file's size, the shard count.
    """
    limits = input_limits()
    index = model_dir / "model.safetensors.index.json"
    index_total: int | None = None
    files = sorted(model_dir.glob("*.safetensors"))
    if index.is_file():
        data = load_json(index, limits["files"]["safetensors_index_max_bytes"])
        metadata = data.get("metadata") if isinstance(data, dict) else None
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if total is not None:
            number = whole_number(total)
            if number is None or number < 0:
                raise PlanError(f"{index}: metadata.total_size: {shown(total)} is not a byte count")
            index_total = number or None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        shards = sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
        present = {file.name for file in files}
        if shards and all(name in present for name in shards):
            files = [model_dir / name for name in shards]  # what vLLM loads; a consolidated copy beside it is not
        elif index_total:
            return StoredTensors(total=index_total)
    if not files:
        return None
    caps = limits["safetensors"]
    if len(files) > caps["shards_max"]:
        raise PlanError(f"{model_dir}: {len(files)} safetensors files, more than the {caps['shards_max']} the kit reads")
    budget = caps["headers_total_max_bytes"]
    stored = StoredTensors(total=0)
    for file in files:
        tensors, header_bytes = _safetensors_tensor_bytes(file, min(caps["header_read_max_bytes"], budget),
                                                          caps["format_header_max_bytes"])
        budget -= header_bytes
        stored = stored.add(tensors)
    return stored if stored.total else None


def _safetensors_tensor_bytes(file: Path, read_cap: int, format_cap: int) -> tuple[StoredTensors, int]:
    """(the tensors ``file`` holds, bytes of its header), reading only the bounded header."""
    with open_regular(file, str(file), error=PlanError, what="safetensors file") as (fd, size):
        prefix = os.pread(fd, 8, 0)
        if len(prefix) < 8:
            raise PlanError(f"{file}: shorter than a safetensors header ({size} bytes)")
        (length,) = struct.unpack("<Q", prefix)
        if length > format_cap:
            raise PlanError(f"{file}: header length {length} is beyond the safetensors format's {format_cap} bytes")
        if 8 + length > size:
            raise PlanError(f"{file}: header length {length} runs past the end of the file ({size} bytes)")
        if length > read_cap:
            raise PlanError(f"{file}: header of {length} bytes is more than the kit reads ({read_cap} bytes left)")
        raw = os.pread(fd, length, 8)
    return safetensors_header_bytes(parse_json(raw, str(file)), str(file), size - 8 - length), length


def catalog_path(model_id: str) -> Path:
    return CATALOG_DIR / (model_id.replace("/", "--") + ".json")


def catalog_ids() -> list[str]:
    return sorted(p.stem.replace("--", "/", 1) for p in CATALOG_DIR.glob("*.json"))


TINY_MODEL_PREFIX = "kit:"
# Where multimodal configs keep their vision encoder's settings (Qwen2.5-VL, LLaVA, Gemma 3, Llama 4, InternVL).
VISION_KEYS = ("vision_config", "vision_tower_config", "vision_encoder_config")


def spec_from_folder(folder: Path, config: Path, *, name: str, source: str) -> ModelSpec:
    """The spec of the model whose config.json is ``config``, its stored weights read from ``folder``."""
    stored = stored_tensors(folder)
    return spec_from_config(load_json(config), name=name, source=source,
                            weights_bytes=stored.total if stored else None,
                            weights_by_dtype=stored.by_dtype if stored else None)


def load_model_spec(ref: str, *, hub: bool = False, revision: str | None = None) -> ModelSpec:
    """Resolve ``ref`` (directory, config.json path, HF id, or ``kit:<tiny model kind>``) to a ModelSpec.

    An id is looked up in the bundled catalog, then the Hugging Face cache (HF_HUB_CACHE, HF_HOME), then, with
    ``hub``, on the hub itself (HF_ENDPOINT, HF_TOKEN; never with HF_HUB_OFFLINE set)."""
    if ref.startswith(TINY_MODEL_PREFIX):  # a test model the kit makes: its shape is known before it exists
        kind = ref.removeprefix(TINY_MODEL_PREFIX)
        if kind not in KINDS:
            raise PlanError(f"{shown(ref)}: no such test model", hint=f"one of: kit:{', kit:'.join(sorted(KINDS))}")
        return spec_from_config(shape_config(kind), name=kind, source="kit.config.tinymodel")
    path, found = user_path(ref, error=PlanError)
    if found is not None and stat.S_ISDIR(found.st_mode):
        config = path / "config.json"
        if not config.is_file():
            raise PlanError(f"{path}: no config.json in this directory", hint="point --model at a model directory or its config.json")
        return spec_from_folder(path, config, name=path.name, source=str(config))
    if found is not None:  # a file; a FIFO or device is refused when read
        return spec_from_folder(path.parent, path, name=path.parent.name or path.stem, source=str(path))
    if not modelsource.is_hub_id(ref):
        raise PlanError(f"model {shown(ref)}: no such file or folder, and not a Hugging Face id (org/name)",
                        hint=LOCAL_MODEL_HINT + ", or a hub id such as Qwen/Qwen3-8B")
    bundled = catalog_path(ref)
    if bundled.is_file():  # shapes do not change between a model's revisions
        return spec_from_config(load_json(bundled), name=ref, source=f"catalog:{bundled.name}")
    environ = dict(os.environ)
    snapshot = modelsource.cached_snapshot(ref, revision, environ)
    # A cached config.json alone (what a hub look-up leaves of a one-file checkpoint) does not say what the weights
    # store: the hub's headers do, so that the same command plans the same bytes on every run.
    if snapshot is not None and (not hub or modelsource.hub_offline(environ) or modelsource.has_weights(snapshot)):
        return spec_from_folder(snapshot, snapshot / "config.json", name=ref, source=f"hf-cache:{ref}")
    if not hub:
        raise PlanError(f"model {ref!r} is not a local path, not in the bundled catalog and not in the Hugging Face "
                        f"cache ({modelsource.hub_cache_dir(environ)})",
                        hint=LOCAL_MODEL_HINT + ", or download the model first")
    try:
        config, stored = modelsource.from_hub(ref, revision, environ)
    except modelsource.HubUnreachable:
        if snapshot is None:
            raise
        return spec_from_folder(snapshot, snapshot / "config.json", name=ref, source=f"hf-cache:{ref}")
    return spec_from_config(config, name=ref, source=f"hub:{ref}", weights_bytes=stored.total if stored else None,
                            weights_by_dtype=stored.by_dtype if stored else None)
