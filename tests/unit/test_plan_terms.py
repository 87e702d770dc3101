"""The planner by term: per-release rules read from kit/data/vllm.yaml only, each figure the sum (activation: the
peak) of named terms citing their source, and those terms against vLLM 0.33.0's own start-up logs."""

from __future__ import annotations

import copy
import json
import lzma
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from kit.config.modelinfo import load_model_spec
from kit.memory import inputs as plan_inputs
from kit.memory import rules, vllmlog
from kit.memory.plan import LoraInputs, PlanInputs, _compute, plan
from kit.memory.terms import peak_bytes, peak_phase

pytestmark = pytest.mark.unit

GIB = plan_inputs.GIB
DATA = Path(__file__).resolve().parents[2] / "kit" / "data"
MEMORY = Path(__file__).resolve().parents[2] / "kit" / "memory"
GPU_CASES = yaml.safe_load((DATA / "calibration.yaml").read_text())["gpu_cases"]
STARTED_033 = [c for c in GPU_CASES if str(c["inputs"].get("vllm_version")) == "0.33.0"
               and not c.get("expect_error") and not c.get("start_failed")]
# Held-out 0.33.0 starts whose planned peak is above the logged one by more than the 0.05 GiB the others meet
# (GiB allowed above): issue 24's real-size-weight 8B at 8192 batched tokens, cold compile cache.
# Over (safe side), GiB above vLLM's logged peak: the warm 8192-token forward pass is planned 0.06 GiB above its log.
OVER_CHARGED_033 = {"h200-033-q8-8k-graphs-16seqs-warm": 0.07}
# Under, GiB below the logged peak (none now: DeepSeek-V2-Lite's 0.18 GiB gap was MLA's profile-run workspace,
# traced from vLLM's source in test_mla_profile_workspace_follows_vllms_rows_rule below).
UNDER_CHARGED_033: dict[str, float] = {}
# 0.26.0's eager engines: no compile residual, so the logged peak is the forward pass or the sampler alone
EAGER_026 = [c for c in GPU_CASES if "vllm_version" not in c["inputs"] and c["inputs"].get("enforce_eager")
             and not c.get("expect_error") and not c.get("start_failed")]


def gpu_inputs(model: str, **kw) -> PlanInputs:
    kw.setdefault("gpu_name", "h200")
    return PlanInputs(model=load_model_spec(model), **kw)


# --------------------------------------------------------------------------- the rules reader
def test_rules_fold_releases_oldest_first_and_merge_mappings():
    assert rules.default_gpu_memory_utilization("0.19.0") == 0.90
    assert rules.default_gpu_memory_utilization("0.21.0") == 0.92
    assert rules.rules_for("0.19.0").cuda_graph_memory_profiled is False
    assert rules.rules_for("0.21.0").cuda_graph_memory_profiled is True
    # 0.32.0 records no accounting of its own: 0.26.0's measured figures, over the base entry's keys
    at_026, at_032 = (rules.rules_for(v).memory_accounting for v in ("0.26.0", "0.32.0"))
    assert at_032 == at_026 and at_026.hidden_buffers == 4
    assert at_026.cuda_graph_estimate == rules.rules_for("0.19.0").memory_accounting.cuda_graph_estimate
    at_033 = rules.rules_for("0.33.0").memory_accounting
    assert at_033.cuda_graph_estimate.base_gib != at_026.cuda_graph_estimate.base_gib
    # read-only: a caller cannot change what the next reader gets
    with pytest.raises(ValidationError):
        at_033.hidden_buffers = 99
    assert rules.rules_for("0.33.0").memory_accounting.hidden_buffers == 4


@pytest.mark.parametrize(("version", "memory", "name", "expected"), [
    ("0.8.0", 79.19, "NVIDIA H100 80GB HBM3", (2048, 256)),
    ("0.8.5", 79.19, "NVIDIA H100 80GB HBM3", (8192, 1024)),
    ("0.8.5", 95.0, "NVIDIA RTX PRO 6000", (2048, 256)),  # by name before 0.9
    ("0.9.0", 95.0, "NVIDIA RTX PRO 6000", (8192, 1024)),  # by memory from 0.9
    ("0.9.0", 79.15, "NVIDIA A100 80GB", (2048, 256)),
    ("0.26.0", 178.0, "NVIDIA B200", (8192, 1024)),
    ("0.32.0", 178.0, "NVIDIA B200", (16384, 1024)),
])
def test_batch_defaults_follow_the_memory_tiers_of_each_release(version, memory, name, expected):
    assert rules.batch_defaults(rules.parse_version(version), "cuda", memory, name, "serve") == expected
    # The CPU backend: the GPU tiers' small tier before 0.32, its own defaults from 0.32 (128 sequences).
    cpu = (2048, 128) if rules.parse_version(version) >= rules.parse_version("0.32.0") else (2048, 256)
    assert rules.batch_defaults(rules.parse_version(version), "cpu", None, "", "serve") == cpu


def test_a_changed_vllm_yaml_changes_the_plan(monkeypatch):
    """The figures come from the data file: raise 0.33.0's one-GPU non-torch figure there and the plan follows."""
    from kit.core import datafiles

    table = copy.deepcopy(datafiles.vllm_table())
    table["versions"]["0.33.0"]["defaults"]["memory_accounting"]["non_torch_gib_single"] += 1.0
    table["versions"]["0.33.0"]["defaults"]["gpu_memory_utilization"] = 0.5
    args = {"gpu_memory_gib": 139.8, "max_model_len": 8192, "enforce_eager": True}
    before = plan(gpu_inputs("Qwen/Qwen3-8B", **args))
    monkeypatch.setattr(datafiles, "vllm_table", lambda: table)
    rules._entries.cache_clear()
    rules._rules_at.cache_clear()
    try:
        after = plan(gpu_inputs("Qwen/Qwen3-8B", **args))
    finally:
        monkeypatch.undo()
        rules._entries.cache_clear()
        rules._rules_at.cache_clear()
    assert after.non_torch_gib - before.non_torch_gib == pytest.approx(1.0)
    assert after.inputs["gpu_memory_utilization"] == 0.5 and before.inputs["gpu_memory_utilization"] == 0.92


def test_no_per_release_constant_is_left_in_the_planner_code():
    """Release comparisons live in kit/data/vllm.yaml: no module of kit/memory compares a version with a literal."""
    for path in MEMORY.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"release_at_least|_at_least\(|SINCE\b", text), path.name
        assert not re.search(r"\(0, [1-9]\d*(, \d+)?\)", text), path.name  # a (0, 21)-style release tuple
        assert not re.search(r"""parse_version\(["']\d""", text), path.name


# The planner's modules in their one-way order: each imports only modules before it (vllmlog reads logs, apart).
MEMORY_ORDER = ["rules", "inputs", "shape", "terms", "weights", "kv", "activation", "nontorch", "cudagraph",
                "adapters", "plan", "preset_plan", "fit"]


def test_planner_modules_import_only_earlier_ones():
    import ast

    assert {p.stem for p in MEMORY.glob("*.py")} - {"__init__", "vllmlog"} == set(MEMORY_ORDER)
    for index, name in enumerate(MEMORY_ORDER):
        tree = ast.parse((MEMORY / f"{name}.py").read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("kit.memory."):
                    imported.add(node.module.removeprefix("kit.memory."))
                elif node.module == "kit.memory":
                    imported |= {alias.name for alias in node.names}
        later = imported & set(MEMORY_ORDER[index:])
        assert not later, f"kit/memory/{name}.py imports {sorted(later)}, which come after it"


# --------------------------------------------------------------------------- terms add up to the figures
PLANS = {
    "dense 0.33 graphs": dict(model="Qwen/Qwen3-8B", gpu_memory_gib=139.8, max_model_len=8192),
    "dense 0.19 tp2": dict(model="meta-llama/Llama-3.1-8B-Instruct", gpu_memory_gib=79.19, max_model_len=8192,
                           tensor_parallel_size=2, vllm_version="0.19.0"),
    "moe 0.26": dict(model="Qwen/Qwen3-30B-A3B", gpu_memory_gib=139.8, max_model_len=8192, vllm_version="0.26.0"),
    "pp2 0.33": dict(model="Qwen/Qwen3-8B", gpu_memory_gib=47.4, max_model_len=8192, pipeline_parallel_size=2),
    "lora 0.33": dict(model="Qwen/Qwen3-8B", gpu_memory_gib=47.4, max_model_len=8192, lora=LoraInputs(max_loras=4)),
    "pooling 0.33": dict(model="Qwen/Qwen3-8B", gpu_memory_gib=47.4, max_model_len=8192, runner="pooling"),
}


@pytest.mark.parametrize("name", PLANS)
def test_every_figure_is_its_terms(name):
    raw = dict(PLANS[name])
    inputs = gpu_inputs(raw.pop("model"), **raw)
    _, stages, _ = _compute(inputs)
    for stage in stages:
        by_figure = {f: [t for t in stage.terms if t.figure == f] for f in ("weights", "activation", "non_torch",
                                                                           "cuda_graph")}
        assert sum(t.bytes for t in by_figure["weights"]) == pytest.approx(stage.weights, rel=1e-12)
        assert peak_bytes(by_figure["activation"]) == pytest.approx(stage.activation, rel=1e-12)
        assert sum(t.bytes for t in by_figure["non_torch"]) == pytest.approx(stage.non_torch, rel=1e-12)
        assert sum(t.bytes for t in by_figure["cuda_graph"]) == pytest.approx(stage.cuda_graph, rel=1e-12)
        for term in stage.terms:
            assert term.name and term.source and term.bytes >= 0, term
            # a term that is not a fitted residual follows a named source: a file, or a shape of the config
            assert term.fitted or re.search(r"\w\.(py|cpp|json)\b", term.source) or "[" in term.source, term
    result = plan(inputs)
    shown = result.to_json(explain=True)["terms"]  # the binding rank's terms
    assert [t["name"] for t in shown] in [[t.name for t in s.terms] for s in stages]
    assert sum(t["gib"] for t in shown if t["figure"] == "weights") == pytest.approx(result.weights_gib, abs=1e-3)
    assert "terms" not in result.to_json()  # plain JSON keeps its keys


def test_pooling_runner_has_no_sampler_terms_and_pp_only_the_last_stage_samples():
    pooled = _compute(gpu_inputs("Qwen/Qwen3-8B", gpu_memory_gib=47.4, max_model_len=8192, runner="pooling"))[1]
    assert not [t for t in pooled[0].terms if t.phase == "sampler"]
    staged = _compute(gpu_inputs("Qwen/Qwen3-8B", gpu_memory_gib=47.4, max_model_len=8192,
                                 pipeline_parallel_size=2))[1]
    assert not [t for t in staged[0].terms if t.phase == "sampler"]
    assert [t.name for t in staged[1].terms if t.phase == "sampler"] == [
        "logits", "logits fp32 copy", "top-k masked logits", "top-k probabilities", "sampler buffers (fitted)"]


def test_033_sampler_terms_scale_with_rows_vocab_and_dtype():
    """[rows, vocab] per buffer: rows = min(max_num_seqs, max_num_batched_tokens), the logits in the model dtype."""
    def sampler(**kw):
        _, stages, _ = _compute(gpu_inputs("Qwen/Qwen3-8B", gpu_memory_gib=139.8, max_model_len=8192,
                                           enforce_eager=True, **kw))
        return {t.name: t.bytes for t in stages[0].terms if t.phase == "sampler"}

    base = sampler(max_num_seqs=256, max_num_batched_tokens=8192)
    vocab = load_model_spec("Qwen/Qwen3-8B").vocab_size
    assert base["logits"] == 256 * vocab * 2 and base["logits fp32 copy"] == 256 * vocab * 4
    assert base["top-k masked logits"] == base["top-k probabilities"] == 256 * vocab * 4
    # max_num_seqs left to vLLM (1024 on this card) is capped at the 512-token budget: 512 dummy requests at most
    capped = sampler(max_num_batched_tokens=512)
    assert capped["logits fp32 copy"] == 512 * vocab * 4
    as_fp32 = sampler(max_num_seqs=256, max_num_batched_tokens=8192, dtype="float32")
    assert as_fp32["logits"] == 2 * base["logits"] and as_fp32["logits fp32 copy"] == base["logits fp32 copy"]


# --------------------------------------------------------------------------- against vLLM 0.33.0's logs
def _log(entry: dict) -> vllmlog.StartupLog:
    with lzma.open(DATA / "calibration" / entry["log"], "rt", encoding="utf-8") as handle:
        return vllmlog.parse(handle.read())


@pytest.mark.parametrize("entry", STARTED_033, ids=[c["id"] for c in STARTED_033])
def test_033_logged_peak_is_the_planned_peak_of_traced_terms(entry):
    """vLLM 0.33.0's logged peak activation is the planner's peak: the dummy sampler run where its [rows, vocab]
    buffers outweigh the forward pass (then the terms read from the source, not the fitted residual, are at least
    95 % of it), the forward pass otherwise, and the forward pass with inductor's buffers on a cold compile cache."""
    log = _log(entry)
    raw = dict(entry["inputs"])
    raw.setdefault("gpu_name", "h200")
    inputs = PlanInputs(model=load_model_spec(raw.pop("model")), gpu_memory_gib=log.total_gib, **raw)
    _, stages, _ = _compute(inputs)
    activation = [t for t in stages[0].terms if t.figure == "activation"]
    planned, logged = peak_bytes(activation) / GIB, log.peak_activation_gib
    if entry["id"] in OVER_CHARGED_033:
        assert logged - 0.05 <= planned <= logged + OVER_CHARGED_033[entry["id"]]
        return
    if entry["id"] in UNDER_CHARGED_033:
        assert logged - UNDER_CHARGED_033[entry["id"]] <= planned < logged
        return
    assert planned == pytest.approx(logged, abs=0.05)
    phase = peak_phase(activation)
    if not inputs.enforce_eager and not inputs.compile_cache_warm:
        # a cold compile: inductor's buffers beside the forward pass, and the cold run's floor as a phase of its own;
        # the peak is the larger of the forward pass with them, the floor and the sampler phase
        cold = [t for t in activation if t.name.startswith("torch.compile, cold")]
        assert {t.phase for t in cold} == {"mlp" if entry["inputs"]["model"] != "Qwen/Qwen3-30B-A3B" else "moe",
                                             "compile"}
        assert phase in {"mlp", "moe", "compile", "sampler"}
    if phase == "sampler":
        sampler = [t for t in activation if t.phase == "sampler"]
        traced = sum(t.bytes for t in sampler if not t.fitted)
        assert traced / sum(t.bytes for t in sampler) >= 0.95


def test_033_sampler_phase_sets_the_peak_of_a_wide_batch():
    """Eager at 256 rows of a 152k vocabulary: the sampler phase, not the forward pass, is the peak."""
    entry = next(c for c in STARTED_033 if c["id"] == "h200-033-qwen3-8b-fp8-24g")
    log = _log(entry)
    raw = dict(entry["inputs"])
    raw.setdefault("gpu_name", "h200")
    inputs = PlanInputs(model=load_model_spec(raw.pop("model")), gpu_memory_gib=log.total_gib, **raw)
    _, stages, _ = _compute(inputs)
    assert peak_phase([t for t in stages[0].terms if t.figure == "activation"]) == "sampler"


def _activation_026(entry: dict) -> tuple[list, vllmlog.StartupLog]:
    log = _log(entry)
    raw = dict(entry["inputs"])
    inputs = PlanInputs(model=load_model_spec(raw.pop("model")), gpu_name="h200", gpu_memory_gib=log.total_gib,
                        vllm_version="0.26.0", **raw)
    return [t for t in _compute(inputs)[1][0].terms if t.figure == "activation"], log


@pytest.mark.parametrize("entry", EAGER_026, ids=[c["id"] for c in EAGER_026])
def test_026_eager_peaks_match_the_terms(entry):
    """vLLM 0.26.0 eager engines (no compile residual): the planned peak matches the logged one within 0.04 GiB."""
    activation, log = _activation_026(entry)
    assert peak_bytes(activation) / GIB == pytest.approx(log.peak_activation_gib, abs=0.04)


def test_026_logs_check_both_the_forward_pass_and_the_sampler_phase():
    """The eager runs exercise both phases: 2048-16384 batched tokens of 7-14B models peak in the MLP's buffers,
    Qwen2.5-0.5B's 256 rows of a 151936-entry vocabulary in the sampler's."""
    phases = {entry["id"]: peak_phase(_activation_026(entry)[0]) for entry in EAGER_026}
    assert phases["h200-qwen3-8b-long-context"] == phases["h200-qwen2.5-14b-48g"] == "mlp"
    assert phases["h200-qwen2.5-0.5b-bf16"] == "sampler"


# --------------------------------------------------------------------------- kit plan --explain
def test_cli_explain_prints_the_terms_by_name_and_in_json():
    from kit.cli.main import cli

    args = ["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "h200", "--max-model-len", "8192", "--explain"]
    human = CliRunner().invoke(cli, args, env={"COLUMNS": "250"})
    assert human.exit_code == 0, human.output
    for name in ("MLP gate_up output", "logits fp32 copy", "top-k probabilities", "sampler per-request state",
                 "graphs (fitted)", "parameters"):
        assert name in human.stdout, name
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)["data"]
    names = {t["name"]: t for t in data["terms"]}
    assert names["MLP gate_up output"]["on_peak"] is False and names["logits"]["on_peak"] is True
    assert names["torch.compile, cold cache: MLP buffers (fitted count)"]["fitted"] is True
    activation = [t for t in data["terms"] if t["figure"] == "activation" and t["on_peak"]]
    assert sum(t["gib"] for t in activation) == pytest.approx(data["activation_gib"], abs=0.01)
    plain = json.loads(CliRunner().invoke(cli, args[:-1] + ["--json"]).stdout)["data"]
    assert "terms" not in plain
    both = CliRunner().invoke(cli, [*args, "--fit"])
    assert both.exit_code == 2 and "--explain" in both.stderr


def test_cli_explain_beside_a_preset():
    from kit.cli.main import cli

    result = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", "--explain", "--json"])
    data = json.loads(result.stdout)["data"]
    assert result.exit_code in (0, 1) and data["terms"], result.output
    assert {t["figure"] for t in data["terms"]} >= {"weights", "activation", "non_torch"}
    weights = sum(t["gib"] for t in data["terms"] if t["figure"] == "weights")
    assert weights == pytest.approx(data["weights_gib"], abs=0.01)


def test_lora_sizes_default_to_the_release_rules():
    args = {"gpu_memory_gib": 47.4, "max_model_len": 8192}
    defaulted = plan(gpu_inputs("Qwen/Qwen3-8B", lora=LoraInputs(), **args))
    spelled = plan(gpu_inputs("Qwen/Qwen3-8B", lora=LoraInputs(max_loras=1, max_lora_rank=16), **args))
    assert rules.rules_for("0.33.0").lora_defaults.model_dump() == {"max_loras": 1, "max_lora_rank": 16}
    assert defaulted.inputs["lora"]["max_loras"] == 1 and defaulted.inputs["lora"]["max_lora_rank"] == 16
    assert defaulted.lora_gib == spelled.lora_gib > 0
    wider = plan(gpu_inputs("Qwen/Qwen3-8B", lora=LoraInputs(max_lora_rank=32), **args))
    assert wider.lora_gib == pytest.approx(2 * defaulted.lora_gib)


def test_033_graphs_charge_piecewise_and_full_rates_and_moe_stages_more():
    """vLLM 0.33 measures one profiling capture (every piecewise graph and the two largest full graphs) and adds
    (count - 2) x the second full sample (cudagraph_utils.py profile_cudagraph_memory): 0.91 GiB charged for a dense
    8B's 51 piecewise + 51 full graphs (q8fp8-80g-graphs.log.xz), 0.66 for 51 + 35 (256 seqs, planned 0.67: the
    least-squares fit over the fit set), and 1.23 for Qwen3-30B-A3B's 51 + 51 (moe-q30a3b-80g-graphs.log.xz): the
    stage with fused-MoE layers takes cuda_graph_estimate.moe_scale."""
    def graph_gib(model: str, seqs: int) -> tuple[float, list[str]]:
        _, stages, _ = _compute(gpu_inputs(model, gpu_memory_gib=139.8, vllm_version="0.33.0", max_num_seqs=seqs,
                                           max_num_batched_tokens=8192, max_model_len=8192))
        terms = [t for t in stages[0].terms if t.figure == "cuda_graph"]
        return sum(t.bytes for t in terms) / GIB, [t.name for t in terms]
    moe, moe_names = graph_gib("Qwen/Qwen3-30B-A3B", 1024)
    dense, dense_names = graph_gib("Qwen/Qwen3-8B", 1024)
    fewer, fewer_names = graph_gib("Qwen/Qwen3-8B", 256)
    assert moe_names == dense_names == ["graph pool, 51 piecewise graphs (fitted)",
                                        "graph pool, 49 of 51 full graphs, extrapolated past the 2 sampled (fitted)"]
    assert fewer_names[1] == "graph pool, 33 of 35 full graphs, extrapolated past the 2 sampled (fitted)"
    assert dense == pytest.approx(0.91, abs=0.01) and fewer == pytest.approx(0.66, abs=0.015)
    assert moe == pytest.approx(1.23, abs=0.01)


def test_033_cold_compile_peak_is_at_least_the_floor_and_grows_with_the_forward_pass():
    """Cold compile on 0.33, from the model's shapes: a floor the size of the vocabulary-wide weight ([vocab, hidden]
    in the model dtype, + 0.03 GiB), whatever the forward pass (Qwen3-8B at 2048 tokens: 1.19 GiB logged), and
    2.5 x [tokens, intermediate] beside the forward pass (q8-8k-graphs-16seqs at 8192: 1.29 logged); a warm cache
    charges neither. Phi-3.5's small vocabulary and MLP keep its cold run small (0.20 GiB logged, not 1.19)."""
    def peak(tokens: int, model: str = "Qwen/Qwen3-8B", **kw) -> float:
        _, stages, _ = _compute(gpu_inputs(model, gpu_memory_gib=139.8, vllm_version="0.33.0",
                                           max_num_seqs=16, max_num_batched_tokens=tokens, max_model_len=8192, **kw))
        return peak_bytes([t for t in stages[0].terms if t.figure == "activation"]) / GIB
    assert peak(2048) == pytest.approx(151936 * 4096 * 2 / GIB + 0.03)
    assert peak(8192) == pytest.approx(peak(8192, compile_cache_warm=True) + 2.5 * 8192 * 12288 * 2 / GIB)
    assert peak(8192) == pytest.approx(1.29, abs=0.02)
    assert peak(8192, compile_cache_warm=True) < 1.0 and peak(2048, compile_cache_warm=True) < 0.3
    phi = peak(2048, "microsoft/Phi-3.5-mini-instruct")
    assert phi == pytest.approx(0.20, abs=0.03) and phi < peak(2048) / 4
    assert peak(2048, "Qwen/Qwen2.5-14B-Instruct") == pytest.approx(1.49, abs=0.03)

def test_033_marlin_leaves_more_non_torch_memory_than_machete():
    """AWQ/GPTQ where Machete does not run logged 0.03-0.06 GiB more non-torch memory than the plan without it
    (h200-vllm-0.33.0-families, Machete disabled: the H200 ran Humming); Marlin on 8.x takes the same term, Machete
    (9.0) and unquantised models none."""
    def non_torch(model: str, gpu: str, **kw) -> list[str]:
        _, stages, _ = _compute(gpu_inputs(model, gpu_name=gpu, vllm_version="0.33.0", max_model_len=4096, **kw))
        return [t.name for t in stages[0].terms if t.figure == "non_torch"]
    assert "Marlin/Humming kernels (fitted)" in non_torch("Qwen/Qwen3-8B-AWQ", "rtx4090")
    assert "Marlin/Humming kernels (fitted)" in non_torch("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", "rtx4090")
    assert "Marlin/Humming kernels (fitted)" not in non_torch("Qwen/Qwen3-8B-AWQ", "h200")
    assert "Marlin/Humming kernels (fitted)" not in non_torch("Qwen/Qwen3-8B", "rtx4090")


def test_033_dense_graph_pools_grow_with_the_layers():
    """A piecewise graph is a piece per layer and a full graph every layer's kernels, so both rates scale with the
    layers: Qwen3-32B (64 layers) was charged 1.15 GiB where Qwen3-8B (36) was charged 0.66 at the same capture
    sizes (h200-vllm-0.33.0-check, planned 1.20 by this rule); Qwen2 keeps its measured factor on the full rate
    (full_rate_by_model_type: Qwen2.5-7B was charged 0.65-0.71 GiB at 28 layers); tensor parallelism leaves each
    rank every layer's graphs."""
    def graph_gib(model: str, tp: int = 1) -> tuple[float, float]:
        _, stages, _ = _compute(gpu_inputs(model, gpu_memory_gib=139.8, vllm_version="0.33.0", max_num_seqs=256,
                                           max_num_batched_tokens=2048, max_model_len=8192, tensor_parallel_size=tp))
        piecewise, full = (t.bytes / GIB for t in stages[0].terms if t.figure == "cuda_graph")
        return piecewise, full
    pw8, full8 = graph_gib("Qwen/Qwen3-8B")
    assert pw8 + full8 == pytest.approx(0.66, abs=0.015)
    pw32, full32 = graph_gib("Qwen/Qwen3-32B")
    assert (pw32, full32) == (pytest.approx(pw8 * 64 / 36), pytest.approx(full8 * 64 / 36))
    assert pw32 + full32 == pytest.approx(1.15, abs=0.06)
    pw14, full14 = graph_gib("Qwen/Qwen2.5-14B-Instruct")
    assert (pw14, full14) == (pytest.approx(pw8 * 48 / 36), pytest.approx(full8 * 48 / 36 * 1.27))
    pw7, full7 = graph_gib("Qwen/Qwen2.5-7B-Instruct")
    # 0.65, 0.69 and 0.71 logged (Marlin, fp16, Machete): the factor is least squares over the 7B and the 14B (0.95
    # logged, 1.07 planned), so the 7B stays 0.03-0.09 GiB under
    assert pw7 + full7 == pytest.approx(0.62, abs=0.01)
    assert graph_gib("Qwen/Qwen2.5-14B-Instruct", tp=2) == (pytest.approx(pw14), pytest.approx(full14))


def test_033_a_graph_charge_never_measured_for_the_architecture_is_approximate_where_it_matters():
    """vLLM's CUDA-graph charge per layer is an architecture's (Qwen2.5 twice Qwen3's): a compiled plan for an
    architecture no start measured says so, with the GiB it may take more, when that is over 3 % of its KV cache;
    a measured architecture, an eager engine or a cache the spread cannot move stays a plain plan."""
    def reason(model: str, gpu: str, **kw) -> str:
        result = plan(gpu_inputs(model, gpu_name=gpu, vllm_version="0.33.0", max_model_len=4096, **kw))
        assert result.fits
        return result.approximate["reason"] or ""
    gemma = reason("google/gemma-2-9b-it", "rtx4090")
    assert "gemma2's was not measured" in gemma and "GiB more than planned" in gemma
    assert "CUDA graphs" not in reason("google/gemma-2-9b-it", "rtx4090", enforce_eager=True)
    assert "CUDA graphs" not in reason("google/gemma-2-9b-it", "h100-80gb")  # 0.55 GiB beside ~50 GiB of cache
    for measured in ("Qwen/Qwen3-8B", "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"):
        assert "CUDA graphs" not in reason(measured, "rtx4090")


def test_033_an_architecture_with_no_graph_factor_is_planned_at_the_largest_recorded():
    """Each dense architecture measured with graphs keeps its own full-graph factor (Qwen3 1.0, Llama 1.19, Qwen2
    1.27, Phi-3 0.91); one with none is planned at the largest recorded (`unmeasured_full_rate: largest`), the side
    that promises less KV than vLLM may give, not at the reference Qwen3's. The approximate note counts the spread
    beyond what is planned."""
    def full_gib(model: str) -> float:
        _, stages, _ = _compute(gpu_inputs(model, gpu_memory_gib=139.8, vllm_version="0.33.0", max_num_seqs=256,
                                           max_num_batched_tokens=2048, max_model_len=8192))
        return [t.bytes for t in stages[0].terms if t.figure == "cuda_graph"][1] / GIB
    per_layer = {m: full_gib(m) / load_model_spec(m).num_layers for m in (
        "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
        "microsoft/Phi-3.5-mini-instruct", "google/gemma-2-9b-it", "mistralai/Mistral-7B-Instruct-v0.3")}
    qwen3 = per_layer["Qwen/Qwen3-8B"]
    assert per_layer["meta-llama/Llama-3.1-8B-Instruct"] == pytest.approx(qwen3 * 1.19)
    assert per_layer["microsoft/Phi-3.5-mini-instruct"] == pytest.approx(qwen3 * 0.91)
    for unmeasured in ("google/gemma-2-9b-it", "mistralai/Mistral-7B-Instruct-v0.3"):
        assert per_layer[unmeasured] == pytest.approx(qwen3 * 1.27) == pytest.approx(per_layer["Qwen/Qwen2.5-7B-Instruct"])
    # an RTX 4090 at 4,096 tokens captures what the 256-sequence, 2,048-token engines above do
    result = plan(gpu_inputs("google/gemma-2-9b-it", gpu_name="rtx4090", vllm_version="0.33.0", max_model_len=4096))
    more = float(result.approximate["reason"].split("may take up to ")[1].split(" GiB")[0])
    gemma_full = per_layer["google/gemma-2-9b-it"] * load_model_spec("google/gemma-2-9b-it").num_layers
    # up to 2 x the reference rate where 1.27 x is planned: 0.73 / 1.27 of the planned full graphs more
    assert more == pytest.approx(gemma_full * (2.0 / 1.27 - 1.0), abs=0.006)


# --------------------------------------------------------------------------- MLA's profile-run workspace
@pytest.mark.parametrize(("max_model_len", "max_num_seqs", "tp", "rows"), [
    (8192, 256, 1, 65536),   # 8 x 8192 = 64 Ki rows, at the cap
    (32768, 256, 1, 65536),  # 8 x 32768 capped at 64 Ki
    (1000, 256, 1, 16384),   # 4 seqs' blocks: 4 x 256 x 16 beats 8 x 1000
    (1001, 16, 1, 8016),     # 8 x 1001 = 8008, rounded up to the block size (16)
    (8192, 256, 2, 65536),   # tensor parallel: the rows stay, the heads halve
])
def test_mla_profile_workspace_follows_vllms_rows_rule(max_model_len, max_num_seqs, tp, rows):
    """vLLM allocates [rows, heads / TP, qk_nope_head_dim + v_head_dim] in the profile run of a latent-attention
    model (mla_attention.py), rows = min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 64 Ki)."""
    model = load_model_spec("deepseek-ai/DeepSeek-V2-Lite-Chat")
    inputs = gpu_inputs("deepseek-ai/DeepSeek-V2-Lite-Chat", vllm_version="0.33.0", dtype="bfloat16",
                        max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=2048,
                        tensor_parallel_size=tp, enforce_eager=True, gpu_memory_gib=139.8)
    result = plan(inputs)
    [term] = [dict(t) for t in result.terms if dict(t)["name"] == "MLA prefill workspace (profile run)"]
    heads = model.num_attention_heads / tp
    expected = rows * heads * (model.qk_nope_head_dim + model.v_head_dim) * 2
    assert term["gib"] == pytest.approx(expected / GIB, abs=1e-4)
    assert term["phase"] == "attention"
    # a dense model has none
    dense = plan(gpu_inputs("Qwen/Qwen3-8B", vllm_version="0.33.0", dtype="bfloat16", max_model_len=8192,
                                    enforce_eager=True, gpu_memory_gib=139.8))
    assert not [t for t in dense.terms if dict(t)["name"].startswith("MLA")]


def test_the_full_graph_term_is_found_by_its_rule_not_its_place():
    """The approximate-plan caveat reads the full graphs' term (kit/memory/cudagraph.py full_graph_bytes): found by
    the rule that made it whatever the order of the terms, and absent where a release charges one rate for all."""
    from kit.memory.cudagraph import FULL_GRAPH_SOURCE, full_graph_bytes

    def graph_terms(version, model="Qwen/Qwen3-8B"):
        _, stages, _ = _compute(gpu_inputs(model, gpu_memory_gib=139.8, max_model_len=8192,
                                           max_num_seqs=64, vllm_version=version))
        return [t for t in stages[0].terms if t.figure == "cuda_graph"]

    terms = graph_terms("0.33.0")
    [full] = [t for t in terms if t.source.startswith(FULL_GRAPH_SOURCE)]
    assert full.bytes > 0 and full_graph_bytes(terms) == full_graph_bytes(list(reversed(terms))) == full.bytes
    one_rate = graph_terms("0.26.0", "Qwen/Qwen3-30B-A3B")  # 0.26 charges the MoE runner's graphs at one rate
    assert one_rate and full_graph_bytes(one_rate) is None
