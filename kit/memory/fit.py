"""`kit plan --fit`: what fits on a GPU, found by asking the planner (kit/memory/plan.py) and nothing else.

The questions users ask of a model, a GPU and a tensor parallel size:

- The largest ``max_model_len`` at a given ``max_num_seqs``. vLLM's rule, which the planner's ``fits`` follows
  (v1 ``kv_cache_utils``: "To serve at least one request with the model's max seq len"): the KV cache of every
  rank must hold one request of ``max_model_len`` tokens, i.e. ``ceil(max_model_len / block_size)`` blocks; the
  other sequences wait for room. So the answer is a whole number of blocks, or the model's own limit.
- The most sequences of ``max_model_len`` tokens the KV cache holds at once, with ``max_num_seqs`` set to that
  number (a larger ``max_num_seqs`` costs sampler and CUDA-graph memory, so the count is searched, not divided),
  and at most ``max_num_batched_tokens`` (vLLM refuses more sequences than batched tokens). vLLM starts with more
  (the rest wait for room): the plan says how many it holds at once (``Plan.sequences_at_once``), and this answer
  is the largest ``max_num_seqs`` whose own plan holds them all.
- The smallest tensor parallel size of 1, 2, 4 and 8 that fits, among those the hardware allows (a GPU that is one
  per host, and what the caller refuses: a preset's hardware.count); the planner refuses those the heads or the
  vocabulary do not divide.
- The least lossy precision that fits at the given size: an fp8 KV cache, FP8 weights quantised at load, a
  quantised checkpoint of the model from the catalog (``kit/data/models``), with and without an fp8 KV cache.

Every answer is a bounded binary search (or a short scan) over plans made by ``at(change)``: the caller's way to the
very inputs plain ``kit plan`` would plan with that change (beside a preset: the preset loaded with the change as
overrides, so ``max_model_len: auto``, batch defaults and CUDA-graph sizes are resolved again at each value). Tests
check that each answer fits and that one block (one sequence, the next smaller size) more does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from kit.config.modelinfo import ModelSpec, catalog_ids, load_model_spec
from kit.core.errors import KitError, PlanError
from kit.memory.inputs import PlanInputs, derived_max_model_len, find_gpu, resolve_gpu
from kit.memory.plan import Plan, plan

TP_SIZES = (1, 2, 4, 8)
# The planner inputs plain `kit plan` uses with a change applied ({}: as asked); raises KitError where it refuses.
InputsAt = Callable[[dict[str, Any]], PlanInputs]
# Why the caller's hardware does not allow a tensor parallel size (None: it does).
HardwareRefusal = Callable[[int], str | None]


class Answer(BaseModel):
    """One question's answer: ``value`` (None: nothing fits), the planner inputs that give it, what bounds it."""

    model_config = ConfigDict(frozen=True)

    value: int | str | None
    change: dict[str, Any]  # planner inputs to set for the answer ({}: as asked, or nothing fits)
    # (fit() leaves out what was asked already: TP 1 when TP 1 was asked)
    # what bounds it: kv_cache, model (its derived max_model_len), max_num_batched_tokens; first_that_fits (TP and
    # precision, tried in order); none_fits; not_applicable (the CPU backend has no TP or fp8 choice)
    limit: str
    plan: Plan | None = None  # the plan at the answer


class Option(BaseModel):
    """One way to make the model smaller, planned at the asked max_model_len and max_num_seqs."""

    model_config = ConfigDict(frozen=True)

    label: str
    change: dict[str, Any]
    fits: bool
    error: str | None  # why the planner refuses it (a GPU without FP8, a checkpoint that does not split)
    max_model_len: int | None  # the largest that fits with this option (None: none)
    plan: Plan | None = None


class Tried(BaseModel):
    model_config = ConfigDict(frozen=True)

    tensor_parallel_size: int
    fits: bool
    error: str | None  # vLLM's start-up error, why the planner refuses the size, or why the hardware does not allow it
    plan_refused: bool = False  # the planner refuses the size (a divisibility rule), so it was not planned
    hardware_refused: bool = False  # more GPUs than the host or the preset has, or fewer than it maps: not planned


class FitReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    asked: Plan  # the plan of the inputs as given
    max_model_len: Answer
    max_num_seqs: Answer
    tensor_parallel_size: Answer
    tried_tensor_parallel: list[Tried]
    precision: Answer
    options: list[Option]

    def to_json(self) -> dict[str, Any]:
        def answer(a: Answer) -> dict[str, Any]:
            at = a.plan
            return {"value": a.value, "change": dict(a.change), "limit": a.limit,
                    "kv_cache_tokens": at.kv_cache_tokens if at else None,
                    "max_concurrency": round(at.max_concurrency, 2) if at else None}

        return {
            "inputs": dict(self.asked.inputs),
            "fits": self.asked.fits,
            "approximate": dict(self.asked.approximate),
            "max_model_len": answer(self.max_model_len),
            "max_num_seqs": answer(self.max_num_seqs),
            "tensor_parallel_size": {**answer(self.tensor_parallel_size),
                                     "tried": [t.model_dump() for t in self.tried_tensor_parallel]},
            "precision": {**answer(self.precision),
                          "options": [{"label": o.label, "change": dict(o.change), "fits": o.fits, "error": o.error,
                                       "max_model_len": o.max_model_len} for o in self.options]},
        }


def with_change(inputs: PlanInputs, change: dict[str, Any]) -> PlanInputs:
    """``inputs`` with ``change`` applied: planner input names, and ``model`` as a catalog id (JSON-friendly)."""
    update = dict(change)
    if isinstance(update.get("model"), str):
        update["model"] = load_model_spec(update["model"])
    return inputs.model_copy(update=update)


def changed_from(asked: Plan, change: dict[str, Any]) -> dict[str, Any]:
    """``change`` less what the asked plan has already (TP 1 when TP 1 was asked is no change)."""
    return {k: v for k, v in change.items() if asked.inputs.get(k, object()) != v}


def inputs_at(inputs: PlanInputs) -> InputsAt:
    """``at`` for a caller with planner inputs alone (no preset, no ``auto`` to resolve again)."""
    return lambda change: with_change(inputs, change)


def _planned(at: InputsAt, change: dict[str, Any]) -> Plan | None:
    """The plan with ``change`` applied, or None where the planner (or the preset) refuses those inputs."""
    try:
        return plan(at(change), suggest=False)
    except KitError:
        return None


def largest_true(ok: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high] with ok(n), for an ``ok`` true up to some n and false above it; low - 1 when
    ok(low) is false. At most log2(high - low) + 2 calls."""
    if high < low or not ok(low):
        return low - 1
    while low < high:  # ok(low) holds throughout
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def max_model_len_fit(inputs: PlanInputs, at: InputsAt | None = None) -> Answer:
    """The largest max_model_len that fits at the inputs' max_num_seqs (a multiple of the block size, or the
    model's derived limit)."""
    at = at or inputs_at(inputs)
    asked = plan(inputs, suggest=False)  # impossible inputs are the caller's error, raised here
    block = asked.inputs["block_size"]
    derived = derived_max_model_len(inputs.model)

    def length(blocks: int) -> int:
        return min(blocks * block, derived)

    def ok(blocks: int) -> bool:
        found = _planned(at, {"max_model_len": length(blocks)})
        return found is not None and found.fits

    blocks = largest_true(ok, 1, -(-derived // block))
    if blocks < 1:
        return Answer(value=None, change={}, limit="none_fits")
    value = length(blocks)
    return Answer(value=value, change={"max_model_len": value}, limit="model" if value == derived else "kv_cache",
                  plan=_planned(at, {"max_model_len": value}))


def max_num_seqs_fit(inputs: PlanInputs, at: InputsAt | None = None) -> Answer:
    """The largest max_num_seqs whose own plan holds that many sequences of its max_model_len at once."""
    at = at or inputs_at(inputs)
    asked = plan(inputs, suggest=False)
    cap = asked.inputs["max_num_batched_tokens"]  # "max_num_batched_tokens must be >= max_num_seqs" (vLLM)

    def ok(seqs: int) -> bool:
        found = _planned(at, {"max_num_seqs": seqs})
        return found is not None and found.holds_every_sequence

    seqs = largest_true(ok, 1, cap)
    if seqs < 1:
        return Answer(value=0, change={}, limit="none_fits", plan=asked)
    return Answer(value=seqs, change={"max_num_seqs": seqs},
                  limit="max_num_batched_tokens" if seqs == cap else "kv_cache",
                  plan=_planned(at, {"max_num_seqs": seqs}))


def host_refusal(inputs: PlanInputs, tp: int) -> str | None:
    """Why one host with this GPU cannot run ``tp`` x pipeline parallel ranks (kit/data/gpus.yaml ``per_host``)."""
    gpu = resolve_gpu(inputs)
    ranks = tp * inputs.pipeline_parallel_size
    if gpu is not None and gpu.per_host is not None and ranks > gpu.per_host:
        return f"{ranks} GPUs, but a {gpu.name} host has {gpu.per_host}"
    return None


def tensor_parallel_fit(inputs: PlanInputs, at: InputsAt | None = None,
                        hardware: HardwareRefusal | None = None) -> tuple[Answer, list[Tried]]:
    """The smallest tensor parallel size in TP_SIZES that the hardware allows and that fits, with each size tried up
    to it. ``hardware`` says why the caller's hardware does not allow a size (a preset's hardware.count)."""
    if inputs.device == "cpu":
        return Answer(value=None, change={}, limit="not_applicable"), []
    at = at or inputs_at(inputs)
    tried: list[Tried] = []
    for tp in TP_SIZES:
        refused = host_refusal(inputs, tp) or (hardware(tp) if hardware else None)
        if refused:
            tried.append(Tried(tensor_parallel_size=tp, fits=False, error=refused, hardware_refused=True))
            continue
        try:
            found = plan(at({"tensor_parallel_size": tp}), suggest=False)
        except KitError as exc:
            tried.append(Tried(tensor_parallel_size=tp, fits=False, error=exc.message, plan_refused=True))
            continue
        tried.append(Tried(tensor_parallel_size=tp, fits=found.fits, error=found.error))
        if found.fits:
            return Answer(value=tp, change={"tensor_parallel_size": tp}, limit="first_that_fits", plan=found), tried
    return Answer(value=None, change={}, limit="none_fits"), tried


def quantized_variants(model: ModelSpec) -> list[str]:
    """Catalog checkpoints that are a quantised copy of ``model`` (its id plus a suffix: -AWQ, -FP8, -GPTQ-Int4),
    8-bit before 4-bit; none for a model that is quantised already."""
    if model.quantization is not None:
        return []
    found = []
    for ref in catalog_ids():
        if ref.startswith(model.name + "-"):
            spec = load_model_spec(ref)
            if spec.quantization is not None:
                found.append((-(spec.quantization.bits or 0), ref))
    return [ref for _, ref in sorted(found)]


def precision_options(inputs: PlanInputs) -> list[tuple[str, dict[str, Any]]]:
    """(label, planner change) for each way to a smaller model the planner knows, least lossy first."""
    if inputs.device == "cpu":
        return []  # the CPU backend ignores an fp8 KV cache; its weights are planned as given
    gpu = None
    if inputs.gpu_name:
        try:
            gpu = find_gpu(inputs.gpu_name)
        except PlanError:
            gpu = None
    kv_fp8 = inputs.kv_cache_dtype == "auto" and (gpu is None or gpu.fp8)  # as the planner's own fixes offer it
    options: list[tuple[str, dict[str, Any]]] = [("as asked", {})]
    if kv_fp8:
        options.append(("fp8 KV cache", {"kv_cache_dtype": "fp8"}))
    if inputs.model.quantization is None and inputs.quantization is None:
        options.append(("FP8 weights", {"quantization": "fp8"}))
        if kv_fp8:
            options.append(("FP8 weights, fp8 KV cache", {"quantization": "fp8", "kv_cache_dtype": "fp8"}))
    for ref in quantized_variants(inputs.model):
        # the checkpoint names its own method: a --quantization given for the original goes
        swap: dict[str, Any] = {"model": ref, **({"quantization": None} if inputs.quantization else {})}
        options.append((ref, swap))
        if kv_fp8:
            options.append((f"{ref}, fp8 KV cache", {**swap, "kv_cache_dtype": "fp8"}))
    return options


def precision_fit(inputs: PlanInputs, at: InputsAt | None = None) -> tuple[Answer, list[Option]]:
    """Every precision option planned at the inputs' sizes; the answer is the first (least lossy) that fits."""
    at = at or inputs_at(inputs)
    options: list[Option] = []
    for label, change in precision_options(inputs):
        def option_at(more: dict[str, Any], change: dict[str, Any] = change) -> PlanInputs:
            return at({**change, **more})

        try:
            changed = option_at({})
            found = plan(changed, suggest=False)
        except KitError as exc:
            options.append(Option(label=label, change=change, fits=False, error=exc.message, max_model_len=None))
            continue
        found_len = max_model_len_fit(changed, option_at).value
        longest = found_len if isinstance(found_len, int) else None  # an int, or None where none fits
        options.append(Option(label=label, change=change, fits=found.fits, error=found.error, max_model_len=longest,
                              plan=found))
    first = next((o for o in options if o.fits), None)
    if first is None:
        limit = "not_applicable" if not options else "none_fits"
        return Answer(value=None, change={}, limit=limit), options
    return Answer(value=first.label, change=first.change, limit="first_that_fits", plan=first.plan), options


def fit(inputs: PlanInputs | InputsAt, hardware: HardwareRefusal | None = None) -> FitReport:
    """Answer every question for ``inputs``, or for ``at({})`` where given the caller's ``at`` (their max_model_len,
    max_num_seqs and tensor parallel size are the ones asked about; unset ones are vLLM's defaults). Raises
    KitError for inputs the planner refuses."""
    at = inputs_at(inputs) if isinstance(inputs, PlanInputs) else inputs
    asked_inputs = at({})
    asked = plan(asked_inputs, suggest=False)

    def delta(answer: Answer) -> Answer:
        return answer.model_copy(update={"change": changed_from(asked, answer.change)})

    tp, tried = tensor_parallel_fit(asked_inputs, at, hardware)
    precision, options = precision_fit(asked_inputs, at)
    return FitReport(asked=asked, max_model_len=delta(max_model_len_fit(asked_inputs, at)),
                     max_num_seqs=delta(max_num_seqs_fit(asked_inputs, at)), tensor_parallel_size=delta(tp),
                     tried_tensor_parallel=tried, precision=precision, options=options)
