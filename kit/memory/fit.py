"""`kit plan --fit`: what fits on a GPU, found by asking the planner (kit/memory/plan.py) and nothing else.

The questions users ask of a model, a GPU and a tensor parallel size:

- The largest ``max_model_len`` at a given ``max_num_seqs``. vLLM's rule, which the planner's ``fits`` follows
  (v1 ``kv_cache_utils``: "To serve at least one request with the model's max seq len"): the KV cache of every
  rank must hold one request of ``max_model_len`` tokens, i.e. ``ceil(max_model_len / block_size)`` blocks; the
  other sequences wait for room. So the answer is a whole number of blocks, or the model's own limit.
- The most sequences of ``max_model_len`` tokens the KV cache holds at once, with ``max_num_seqs`` set to that
  number (a larger ``max_num_seqs`` costs sampler and CUDA-graph memory, so the count is searched, not divided),
  and at most ``max_num_batched_tokens`` (vLLM refuses more sequences than batched tokens).
- The smallest tensor parallel size of 1, 2, 4 and 8 that fits (the planner refuses those the heads do not divide).
- The least lossy precision that fits at the given size: an fp8 KV cache, FP8 weights quantised at load, a
  quantised checkpoint of the model from the catalog (``kit/data/models``), with and without an fp8 KV cache.

Every answer is a bounded binary search (or a short scan) over ``plan(...).fits``; tests check that each answer
fits and that one block (one sequence, the next smaller size) more does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from kit.config.modelinfo import ModelSpec
from kit.core.errors import PlanError
from kit.memory.inputs import PlanInputs, derived_max_model_len, find_gpu
from kit.memory.plan import Plan, plan

TP_SIZES = (1, 2, 4, 8)


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
    error: str | None  # vLLM's start-up error, or why the planner refuses the size
    plan_refused: bool = False  # the planner refuses the size (a divisibility rule), so it was not planned


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
        from kit.config.modelinfo import load_model_spec

        update["model"] = load_model_spec(update["model"])
    return inputs.model_copy(update=update)


def changed_from(asked: Plan, change: dict[str, Any]) -> dict[str, Any]:
    """``change`` less what the asked plan has already (TP 1 when TP 1 was asked is no change)."""
    return {k: v for k, v in change.items() if asked.inputs.get(k, object()) != v}


def _planned(inputs: PlanInputs, change: dict[str, Any]) -> Plan | None:
    """The plan with ``change`` applied, or None where the planner refuses those inputs."""
    try:
        return plan(with_change(inputs, change), suggest=False)
    except PlanError:
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


def kv_blocks(result: Plan) -> int:
    """KV cache blocks of the binding rank, as the plan's concurrency was computed from them."""
    i = result.inputs
    per_request = -(-i["max_model_len"] // i["block_size"])
    return round(result.max_concurrency * per_request)


def max_model_len_fit(inputs: PlanInputs) -> Answer:
    """The largest max_model_len that fits at the inputs' max_num_seqs (a multiple of the block size, or the
    model's derived limit)."""
    asked = plan(inputs, suggest=False)  # impossible inputs are the caller's error, raised here
    block = asked.inputs["block_size"]
    derived = derived_max_model_len(inputs.model)

    def length(blocks: int) -> int:
        return min(blocks * block, derived)

    def ok(blocks: int) -> bool:
        at = _planned(inputs, {"max_model_len": length(blocks)})
        return at is not None and at.fits

    blocks = largest_true(ok, 1, -(-derived // block))
    if blocks < 1:
        return Answer(value=None, change={}, limit="none_fits")
    value = length(blocks)
    return Answer(value=value, change={"max_model_len": value}, limit="model" if value == derived else "kv_cache",
                  plan=_planned(inputs, {"max_model_len": value}))


def max_num_seqs_fit(inputs: PlanInputs) -> Answer:
    """The most sequences of the inputs' max_model_len that the KV cache holds at once, max_num_seqs set to it."""
    asked = plan(inputs, suggest=False)
    length, block = asked.inputs["max_model_len"], asked.inputs["block_size"]
    per_request = -(-length // block)
    cap = asked.inputs["max_num_batched_tokens"]  # "max_num_batched_tokens must be >= max_num_seqs" (vLLM)

    def ok(seqs: int) -> bool:
        at = _planned(inputs, {"max_num_seqs": seqs})
        return at is not None and at.fits and seqs * per_request <= kv_blocks(at)

    seqs = largest_true(ok, 1, cap)
    if seqs < 1:
        return Answer(value=0, change={}, limit="none_fits", plan=asked)
    return Answer(value=seqs, change={"max_num_seqs": seqs},
                  limit="max_num_batched_tokens" if seqs == cap else "kv_cache",
                  plan=_planned(inputs, {"max_num_seqs": seqs}))


def tensor_parallel_fit(inputs: PlanInputs) -> tuple[Answer, list[Tried]]:
    """The smallest tensor parallel size in TP_SIZES that fits, with each size tried up to it."""
    if inputs.device == "cpu":
        return Answer(value=None, change={}, limit="not_applicable"), []
    tried: list[Tried] = []
    for tp in TP_SIZES:
        try:
            at = plan(inputs.model_copy(update={"tensor_parallel_size": tp}), suggest=False)
        except PlanError as exc:
            tried.append(Tried(tensor_parallel_size=tp, fits=False, error=exc.message, plan_refused=True))
            continue
        tried.append(Tried(tensor_parallel_size=tp, fits=at.fits, error=at.error))
        if at.fits:
            return Answer(value=tp, change={"tensor_parallel_size": tp}, limit="first_that_fits", plan=at), tried
    return Answer(value=None, change={}, limit="none_fits"), tried


def quantized_variants(model: ModelSpec) -> list[str]:
    """Catalog checkpoints that are a quantised copy of ``model`` (its id plus a suffix: -AWQ, -FP8, -GPTQ-Int4),
    8-bit before 4-bit; none for a model that is quantised already."""
    from kit.config.modelinfo import catalog_ids, load_model_spec

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


def precision_fit(inputs: PlanInputs) -> tuple[Answer, list[Option]]:
    """Every precision option planned at the inputs' sizes; the answer is the first (least lossy) that fits."""
    options: list[Option] = []
    for label, change in precision_options(inputs):
        changed = with_change(inputs, change)
        try:
            at = plan(changed, suggest=False)
        except PlanError as exc:
            options.append(Option(label=label, change=change, fits=False, error=exc.message, max_model_len=None))
            continue
        longest = max_model_len_fit(changed).value
        options.append(Option(label=label, change=change, fits=at.fits, error=at.error, max_model_len=longest,
                              plan=at))
    first = next((o for o in options if o.fits), None)
    if first is None:
        limit = "not_applicable" if not options else "none_fits"
        return Answer(value=None, change={}, limit=limit), options
    return Answer(value=first.label, change=first.change, limit="first_that_fits", plan=first.plan), options


def fit(inputs: PlanInputs) -> FitReport:
    """Answer every question for ``inputs`` (their max_model_len, max_num_seqs and tensor parallel size are the
    ones asked about; unset ones are vLLM's defaults). Raises PlanError for inputs the planner refuses."""
    asked = plan(inputs, suggest=False)

    def delta(answer: Answer) -> Answer:
        return answer.model_copy(update={"change": changed_from(asked, answer.change)})

    tp, tried = tensor_parallel_fit(inputs)
    precision, options = precision_fit(inputs)
    return FitReport(asked=asked, max_model_len=delta(max_model_len_fit(inputs)),
                     max_num_seqs=delta(max_num_seqs_fit(inputs)), tensor_parallel_size=delta(tp),
                     tried_tensor_parallel=tried, precision=precision, options=options)
