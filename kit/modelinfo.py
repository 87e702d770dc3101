"""What the planner needs to know about a model, read from its config.json.

``load_model_spec`` takes a local model directory, a path to a config.json, or a
Hugging Face id. Ids resolve from the bundled catalog (``kit/data/models/``), and
from the hub only when the caller allows it and ``huggingface_hub`` is installed.
Nothing here downloads weights: exact weight bytes come from a safetensors index
(``metadata.total_size``) or from the headers of local ``*.safetensors`` files.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kit.errors import PlanError

CATALOG_DIR = Path(__file__).parent / "data" / "models"

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
    # Exact checkpoint size when known (safetensors index or headers)
    weights_bytes: int | None = None
    source: str = ""  # where the config came from (path, catalog, hub)

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
        groups = qc.get("config_groups") or {}
        weights = next(iter(groups.values()), {}).get("weights", {}) if groups else {}
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


def _num_labels(cfg: dict[str, Any]) -> int | None:
    """transformers derives num_labels from id2label (PretrainedConfig); absent in generative configs."""
    if cfg.get("num_labels") is not None:
        return int(cfg["num_labels"])
    labels = cfg.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else None


def spec_from_config(cfg: dict[str, Any], *, name: str, source: str, weights_bytes: int | None = None) -> ModelSpec:
    """Build a ModelSpec from a config.json dict; a missing needed field is a PlanError naming it."""
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
        sliding_window=int(sliding) if sliding else None,
        layer_types=tuple(layer_types) if layer_types else None,
        weights_bytes=weights_bytes if weights_bytes is not None else cfg.get("_weights_bytes"),
        source=source,
    )


def safetensors_bytes(model_dir: Path) -> int | None:
    """Checkpoint bytes from the index's metadata.total_size, or by reading local file headers."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
            if total:
                return int(total)
        except (OSError, ValueError):
            pass
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        try:
            with file.open("rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(length))
        except (OSError, ValueError, struct.error):
            return None
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            total += end - start
    return total or None


def catalog_path(model_id: str) -> Path:
    return CATALOG_DIR / (model_id.replace("/", "--") + ".json")


def catalog_ids() -> list[str]:
    return sorted(p.stem.replace("--", "/", 1) for p in CATALOG_DIR.glob("*.json"))


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: cannot read ({exc.strerror})") from exc
    except ValueError as exc:
        raise PlanError(f"{path}: not valid JSON ({exc})") from exc


def _from_hub(model_id: str) -> ModelSpec | None:
    try:
        from huggingface_hub import hf_hub_download  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        config_path = Path(hf_hub_download(model_id, "config.json"))
    except Exception:  # offline, gated, missing: all mean "not from the hub"
        return None
    weights = None
    try:
        weights = safetensors_bytes(Path(hf_hub_download(model_id, "model.safetensors.index.json")).parent)
    except Exception:
        pass
    return spec_from_config(_load_json(config_path), name=model_id, source=f"hub:{model_id}", weights_bytes=weights)


TINY_MODEL_PREFIX = "kit:"
TINY_MODEL_REF = "kit:tiny-llama"


def load_model_spec(ref: str, *, allow_hub: bool = False) -> ModelSpec:
    """Resolve ``ref`` (directory, config.json path, HF id, or ``kit:<tiny model kind>``) to a ModelSpec."""
    if ref.startswith(TINY_MODEL_PREFIX):  # a test model the kit makes: its shape is known before it exists
        from kit.tinymodel import KINDS, shape_config

        kind = ref.removeprefix(TINY_MODEL_PREFIX)
        if kind not in KINDS:
            raise PlanError(f"{ref!r}: no such test model", hint=f"one of: kit:{', kit:'.join(sorted(KINDS))}")
        return spec_from_config(shape_config(kind), name=kind, source="kit.tinymodel")
    path = Path(ref).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise PlanError(f"{path}: no config.json in this directory", hint="point --model at a model directory or its config.json")
        return spec_from_config(_load_json(config), name=path.name, source=str(config), weights_bytes=safetensors_bytes(path))
    if path.is_file():
        return spec_from_config(_load_json(path), name=path.parent.name or path.stem, source=str(path),
                                weights_bytes=safetensors_bytes(path.parent))
    if ref.count("/") == 1 and not ref.startswith((".", "/", "~")):
        bundled = catalog_path(ref)
        if bundled.is_file():
            return spec_from_config(_load_json(bundled), name=ref, source=f"catalog:{bundled.name}")
        if allow_hub:
            spec = _from_hub(ref)
            if spec is not None:
                return spec
    raise PlanError(
        f"model {ref!r} is not a local path and not in the bundled catalog",
        hint=(
            "pass a local config: --model /path/to/model-dir or --model /path/to/config.json"
            + ("" if allow_hub else " (or allow hub look-ups where the hub is reachable)")
        ),
    )
