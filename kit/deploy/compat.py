"""Preset -> compatibility problems: the GPU, the image and the board against what vLLM needs.

Public entry point: ``check_compat(where, preset) -> (errors, warnings)``. The thresholds live in
``kit/data/compat.yaml`` (with their sources); this module only compares. Every problem names the preset
field to change and says how to change it.
"""

from __future__ import annotations

from typing import Any

from kit.config.preset import Preset
from kit.config.strategy import strategy_of
from kit.core.datafiles import gpu_catalog, load_yaml
from kit.core.errors import KitError, Problem
from kit.core.releaserules import quantization_method_gone, quantization_min_cc, quantization_spellings, \
    versioned  # noqa: F401
from kit.core.tables import CompatTable, compat_model, vllm_model
from kit.core.versions import cc_tuple
from kit.core.versions import version as pep440
from kit.memory.preset_plan import model_spec_for
from kit.memory.shape import parallelism_problems

FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")


def compat_table() -> CompatTable:
    """kit/data/compat.yaml, checked (kit/core/tables.py)."""
    return compat_model()


def cc_floor(cuda: str | None, vllm_version: str) -> str:
    """The lowest compute capability a vLLM build runs on: by the CUDA it was compiled with, then the release.

    ``cuda`` None means the release's default build (or the oldest row when the kit does not pin the release).
    """
    rows = compat_table().vllm_min_cc
    if cuda is None:
        release = vllm_model().versions.get(vllm_version)
        cuda = release.cuda if release is not None else rows[0].cuda
    chosen = rows[0].min_cc
    for row in rows:
        if cc_tuple(cuda) >= cc_tuple(row.cuda):
            chosen = row.min_cc
    return versioned(chosen, vllm_version)


def builds_running_on(have: tuple[int, int]) -> list[tuple[str, str, bool]]:
    """(vLLM release, CUDA, is the release's default build) of every pinned GPU build whose floor ``have`` meets.

    Newest release first, so the first row is the least backward step.
    """
    found = []
    versions = vllm_model().versions
    for release_name in sorted(versions, key=pep440, reverse=True):
        release = versions[release_name]
        builds = [(release.cuda, True)] + [(c, False) for c in release.official_variants]
        for cuda, default in builds:
            if have >= cc_tuple(cc_floor(cuda, release_name)):
                found.append((release_name, cuda, default))
    return found


def _floor_fix(have: tuple[int, int], vllm_version: str, need: str) -> str:
    """Which pin or image runs on a GPU below the build's floor, read from the version table."""
    # A build other than a release's default is vLLM's own image of that CUDA (official_variants): the slim
    # strategy installs only the default one's wheels, so the fix names the official strategy with it.
    same = [b for b in builds_running_on(have) if b[0] == vllm_version]
    if same:
        _, cuda, _ = same[0]
        return (f"use image.strategy=official image.cuda={cuda} (vLLM {vllm_version}'s CUDA {cuda} build still has "
                "kernels for this GPU)")
    older = [b for b in builds_running_on(have) if pep440(b[0]) < pep440(vllm_version)]
    if older:
        version, cuda, default = older[0]
        pin = f"image.vllm_version={version}" + ("" if default else f" image.strategy=official image.cuda={cuda}")
        return (f"use {pin} (its CUDA {cuda} build still compiles kernels for compute capability "
                f"{cc_floor(cuda, version)}), or a GPU with compute capability {need} or newer")
    return f"pick a GPU with compute capability {need} or newer, or image.strategy=cpu"


def _gpu_label(gpu: dict[str, Any]) -> str:
    return f"{gpu['name']} (compute capability {gpu['compute_capability']})"


# ----------------------------------------------------------------------------------------- GPU rules


def gpu_rules(gpu: dict[str, Any], *, vllm_version: str, dtype: str | None, checkpoint_dtype: str | None,
              quantization: str | None, quantization_set: bool, kv_cache_dtype: str | None,
              attention_backend: str | None = None, cuda: str | None = None) -> list[tuple[str, str, str, str]]:
    """Compare one GPU with the engine settings. Returns (severity, field, message, fix) rows.

    Pure: takes the catalog entry and plain values, so it can be tested for releases the presets do not pin.
    ``quantization_set`` says the method came from engine.quantization (else from the checkpoint); ``cuda`` is
    the CUDA of the build the image uses (None: the release's default build).
    """
    table = compat_table()
    have = cc_tuple(gpu["compute_capability"])
    label = _gpu_label(gpu)
    rows: list[tuple[str, str, str, str]] = []

    release = vllm_model().versions.get(vllm_version)
    build_cuda = cuda or (release.cuda if release is not None else None)
    floor = cc_floor(build_cuda, vllm_version)
    if have < cc_tuple(floor):
        build = f"vLLM {vllm_version}'s CUDA {build_cuda} build" if build_cuda else f"vLLM {vllm_version}"
        rows.append(("error", "hardware.gpu",
                     f"{build} is compiled for compute capability {floor} and newer; {label} is older "
                     "(it would fail with 'no kernel image is available for execution on the device')",
                     _floor_fix(have, vllm_version, floor)))
        return rows

    bf16 = table.dtype["bfloat16"]
    if have < cc_tuple(bf16.min_cc):
        fallback = bf16.fallback
        if dtype == "bfloat16":
            rows.append(("error", "engine.dtype",
                         f"bfloat16 needs compute capability {bf16.min_cc}; {label} has no bf16 and vLLM refuses it",
                         f"use engine.dtype={fallback} on a {gpu['name']} (compute capability "
                         f"{gpu['compute_capability']}; bf16 needs {bf16.min_cc})"))
        elif dtype in (None, "auto") and checkpoint_dtype in ("bfloat16", "bf16"):
            rows.append(("warning", "engine.dtype",
                         f"the checkpoint is bfloat16, which {label} lacks: vLLM falls back to {fallback}",
                         f"set engine.dtype={fallback} to say so (bf16-trained models can overflow in fp16)"))

    if quantization:
        rows += _quantization_rows(table, gpu, have, label, vllm_version, quantization, quantization_set)

    if kv_cache_dtype in FP8_KV:
        rule = table.kv_cache_dtype[kv_cache_dtype]
        if have < cc_tuple(rule.min_cc):
            rows.append(("error", "engine.kv_cache_dtype",
                         f"an fp8 KV cache needs compute capability {rule.min_cc} (no attention backend of "
                         f"vLLM {vllm_version} stores fp8 on older GPUs); {label} is older",
                         "remove engine.kv_cache_dtype (the KV cache then uses the model dtype)"))
        elif have < cc_tuple(rule.full_cc) and (attention_backend or "").upper() != rule.backend:
            rows.append(("warning", "engine.kv_cache_dtype",
                         f"{label} has no fp8 compute: the KV cache is stored in fp8 and converted on load, which only "
                         f"the {rule.backend} attention backend does below {rule.full_cc} (FlashAttention "
                         "cannot read it; the Triton backend fails with 'fp8e4nv not supported')",
                         f"set engine.attention_backend={rule.backend}, or remove engine.kv_cache_dtype"))
    return rows


def gone_method_rows(vllm_version: str, method: str, method_set: bool,
                     cpu: bool = False) -> list[tuple[str, str, str, str]]:
    """An error when ``vllm_version`` no longer has quantization ``method``, on any device: bitsandbytes and
    in-tree GGUF are gone from 0.32.0 on, for the CPU backend as much as for CUDA (compat.yaml `removed_in`).
    The older release suggested must have the build the preset needs (a CPU build for ``cpu``)."""
    gone = quantization_method_gone(method, vllm_version)
    if not gone:
        return []
    field = "engine.quantization" if method_set else "model.id"
    close = quantization_spellings(method, vllm_version) if method_set else []
    if close:  # a misspelling: no release has it, so no older release is the way out
        return [("error", field, f"{gone}; vLLM {vllm_version} refuses it (did you mean {close[0]}?)",
                 f"use engine.quantization={close[0]}")]
    versions = vllm_model().versions
    older = sorted((v for v in versions if quantization_method_gone(method, v) is None
                    and (not cpu or versions[v].cpu is not None)), key=pep440, reverse=True)
    return [("error", field, f"{gone}; vLLM {vllm_version} refuses it",
             ("pick a checkpoint in another format (AWQ, GPTQ, FP8 or unquantised)"
              + (f", or image.vllm_version={older[0]}" if older else "")))]


def _quantization_rows(table: CompatTable, gpu: dict[str, Any], have: tuple[int, int], label: str,
                       vllm_version: str, method: str, method_set: bool) -> list[tuple[str, str, str, str]]:
    rules = table.quantization
    field = "engine.quantization" if method_set else "model.id"
    gone = gone_method_rows(vllm_version, method, method_set)
    if gone:
        return gone
    rule = rules.get(method.lower())
    if rule is None:
        return []
    need = versioned(rule.min_cc, vllm_version)
    rows: list[tuple[str, str, str, str]] = []
    if have < cc_tuple(need):
        fallback = rule.fallback
        plain = rules.get(fallback) if fallback else None
        if plain and have >= cc_tuple(versioned(plain.min_cc, vllm_version)):
            fix = (f"use engine.quantization={fallback} (the non-Marlin {fallback} kernels run from compute capability "
                   f"{versioned(plain.min_cc, vllm_version)})")
        elif method_set:
            fix = "pick a checkpoint and method this GPU runs (gptq runs from 6.0), or a newer GPU"
        else:
            fix = "pick another checkpoint (e.g. the unquantised or a GPTQ one), or a newer GPU"
        rows.append(("error", field,
                     f"quantization {method} needs compute capability {need} in vLLM {vllm_version}; {label} is older "
                     f"(vLLM refuses it: 'Minimum capability: {need.replace('.', '')}')", fix))
    elif rule.full_cc and have < cc_tuple(rule.full_cc):
        rows.append(("warning", field, f"{method} on {label} {rule.weight_only}",
                     f"fine for memory; for FP8 speed use a GPU with compute capability {rule.full_cc}+ "
                     "(Ada, Hopper, Blackwell), or an AWQ/GPTQ checkpoint with Marlin kernels"))
    return rows


# -------------------------------------------------------------------------------------- image rules


def platform_rows(preset: Preset) -> list[tuple[str, str, str, str]]:
    return strategy_of(preset).platform_rows(preset)


def board_rows(preset: Preset) -> list[tuple[str, str, str, str]]:
    """The image against the board (Jetson: the wheel index and the vLLM pin against the L4T release); the
    strategy owns these rules."""
    return strategy_of(preset).board_rows(preset)


# ------------------------------------------------------------------------------------- entry point


def model_spec_or_none(preset: Preset):  # noqa: ANN201 - ModelSpec | None

    try:
        return model_spec_for(preset)
    except KitError:
        return None


def _build_cuda(preset: Preset) -> str | None:
    """The CUDA the image's vLLM is compiled with: the board's on Jetson, else image.cuda or the release's."""
    return strategy_of(preset).build_cuda(preset)


def release_rows(preset: Preset) -> list[tuple[str, str, str, str]]:
    """A release's known breakage the preset's strategy meets (compat.yaml `release_warnings`): warnings."""
    rules = compat_table().release_warnings.get(preset.image.vllm_version, [])
    strategy = preset.image.strategy
    return [("warning", "image.vllm_version", rule.message, rule.hint)
            for rule in rules if rule.strategies is None or strategy in rule.strategies]


def evidence_rows(preset: Preset) -> list[tuple[str, str, str, str]]:
    """The image the preset is built on, where nothing confirms that its tag exists (kit/data/image_evidence.yaml
    `confirmed: false`): a warning, so an unconfirmed tag is never rendered silently."""
    try:
        image = strategy_of(preset).base(preset).image
    except (KeyError, ValueError):
        return []  # the strategy's own checks refuse the preset
    entry = load_yaml("image_evidence.yaml")["images"].get(image)
    if entry is not None and entry.get("confirmed", True):
        return []
    # no entry: a release row from the user's config folder (every image the kit's own tables name has one)
    why = entry.get("unverified") if entry else "the kit has no evidence of it: a release row of your own names it"
    return [("warning", "image.vllm_version",
             f"{image}: nothing confirms that this tag exists ({why or 'no sighting recorded'}; "
             "kit/data/image_evidence.yaml)",
             f"check it before building: `docker manifest inspect {image}` (or pull it), or pass a base you have "
             "with --base-image")]


def check_compat(where: str, preset: Preset) -> tuple[list[Problem], list[Problem]]:
    """Errors and warnings for the GPU, parallelism, image platform and board rules."""
    eng, hw, img = preset.engine, preset.hardware, preset.image
    spec = model_spec_or_none(preset)
    rows: list[tuple[str, str, str, str]] = []
    if hw.gpu is not None:
        gpu = gpu_catalog()[hw.gpu]
        ckpt_quant = spec.quantization.method if spec is not None and spec.quantization else None
        extra = eng.model_extra or {}
        rows += gpu_rules(
            gpu,
            vllm_version=img.vllm_version,
            dtype={"half": "float16"}.get(eng.dtype or "", eng.dtype),
            checkpoint_dtype=spec.torch_dtype if spec is not None else None,
            quantization=eng.quantization or ckpt_quant,
            quantization_set=eng.quantization is not None,
            kv_cache_dtype=eng.kv_cache_dtype,
            attention_backend=extra.get("attention_backend"),
            cuda=_build_cuda(preset),
        )
    else:  # the CPU backend: no compute capability, but a method the release dropped is still refused
        method = eng.quantization or (spec.quantization.method if spec is not None and spec.quantization else None)
        if method:
            rows += gone_method_rows(img.vllm_version, method, eng.quantization is not None, cpu=True)
    if spec is not None:
        group = spec.quantization.group_size if spec.quantization else None
        for field, message, fix in parallelism_problems(spec, eng.tp, eng.pp, group):
            rows.append(("error", field, f"{message} (model {spec.name})", fix))
    rows += platform_rows(preset)
    rows += board_rows(preset)
    rows += release_rows(preset)
    rows += evidence_rows(preset)

    errors: list[Problem] = []
    warnings: list[Problem] = []
    for severity, field, message, fix in rows:
        (errors if severity == "error" else warnings).append(Problem(f"{where}: {field}", message, fix))
    return errors, warnings
