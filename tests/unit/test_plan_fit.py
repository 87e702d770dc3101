"""`kit plan --fit` (kit/memory/fit.py) checked against the planner, and `kit plan`'s flags beside a preset.

Every answer is checked the way a user would: the answer fits, and one KV block more (one sequence more, the next
smaller tensor parallel size, the less lossy precision) does not.
"""

import json

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.modelinfo import load_model_spec
from kit.core.errors import PlanError
from kit.memory import fit as fitting
from kit.memory import plan as planner
from kit.memory import inputs as plan_inputs
from kit.memory.plan import PlanInputs, plan

pytestmark = pytest.mark.unit

ENVELOPE = {"ok", "command", "data", "problems", "warnings"}


def inputs(model: str, gpu: str | None = None, **kw) -> PlanInputs:
    if gpu:
        info = plan_inputs.find_gpu(gpu)
        kw.update(gpu_name=info.key, gpu_memory_gib=info.memory_gib)
    return PlanInputs(model=load_model_spec(model), **kw)


# (model, GPU, other inputs, what bounds the largest max_model_len): KV-bound and model-bound cases, dense, GQA, MoE,
# MLA, AWQ, pipeline stages, an older vLLM, and the CPU backend with its 128-token blocks.
CASES = [
    ("Qwen/Qwen3-8B", "rtx4090", {}, "kv_cache"),
    ("meta-llama/Llama-3.1-8B-Instruct", "rtx4090", {"max_num_seqs": 64, "max_model_len": 8192}, "kv_cache"),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100-80gb", {"tensor_parallel_size": 2}, "kv_cache"),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100-80gb", {"pipeline_parallel_size": 2, "max_model_len": 4096},
     "kv_cache"),
    ("Qwen/Qwen2.5-14B-Instruct", "rtx3090", {"tensor_parallel_size": 2, "max_model_len": 4096}, "kv_cache"),
    ("Qwen/Qwen3-30B-A3B", "a100-80gb", {"max_num_seqs": 32}, "model"),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "a100-40gb", {"gpu_memory_utilization": 0.85}, "kv_cache"),
    ("Qwen/Qwen3-8B-AWQ", "rtx4090", {"dtype": "float16", "quantization": "awq_marlin", "max_model_len": 8192,
                                      "max_num_seqs": 16, "gpu_memory_utilization": 0.9}, "model"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "h100-80gb", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
     "model"),
    ("Qwen/Qwen2.5-7B-Instruct", "a100-40gb", {"vllm_version": "0.19.0", "max_model_len": 16384}, "model"),
    ("kit:tiny-llama", None, {"device": "cpu", "cpu_kvcache_space_gib": 0.0005, "max_model_len": 256}, "kv_cache"),
]
IDS = [f"{m.split('/')[-1]}-{g or 'cpu'}-{i}" for i, (m, g, _, _) in enumerate(CASES)]


def holds(result, seqs: int) -> bool:
    """The KV cache holds ``seqs`` sequences of the plan's max_model_len at once, counted from its blocks."""
    i = result.inputs
    per_request = -(-i["max_model_len"] // i["block_size"])
    return result.fits and seqs * per_request <= round(result.max_concurrency * per_request)


@pytest.mark.parametrize("model, gpu, kw, limit", CASES, ids=IDS)
def test_largest_max_model_len_fits_and_one_block_more_does_not(model, gpu, kw, limit):
    asked = inputs(model, gpu, **kw)
    answer = fitting.max_model_len_fit(asked)
    block = plan(asked).inputs["block_size"]
    assert answer.limit == limit and answer.value is not None
    assert plan(asked.model_copy(update={"max_model_len": answer.value})).fits
    if limit == "kv_cache":
        assert answer.value % block == 0
        assert not plan(asked.model_copy(update={"max_model_len": answer.value + block})).fits
        assert not plan(asked.model_copy(update={"max_model_len": answer.value + 1})).fits
        # the planner's own arithmetic (vLLM's estimate_max_model_len) agrees with the search
        assert answer.value == planner.largest_max_model_len(asked)
    else:  # the model's own limit: one token more is refused outright
        assert answer.value == plan_inputs.derived_max_model_len(asked.model)
        with pytest.raises(PlanError, match="greater than the derived max_model_len"):
            plan(asked.model_copy(update={"max_model_len": answer.value + 1}))


@pytest.mark.parametrize("model, gpu, kw, limit", CASES, ids=IDS)
def test_most_sequences_fit_and_one_more_does_not(model, gpu, kw, limit):
    asked = inputs(model, gpu, **kw)
    answer = fitting.max_num_seqs_fit(asked)
    cap = plan(asked).inputs["max_num_batched_tokens"]
    if answer.value == 0:
        assert not holds(plan(asked.model_copy(update={"max_num_seqs": 1})), 1)
        return
    assert holds(plan(asked.model_copy(update={"max_num_seqs": answer.value})), answer.value)
    if answer.limit == "max_num_batched_tokens":
        assert answer.value == cap
    else:
        assert answer.limit == "kv_cache" and answer.value < cap
        assert not holds(plan(asked.model_copy(update={"max_num_seqs": answer.value + 1})), answer.value + 1)


def test_most_sequences_covers_none_some_and_the_batch_cap():
    assert fitting.max_num_seqs_fit(inputs("Qwen/Qwen3-8B", "rtx4090")).value == 0  # 40,960 tokens: 0.94 x
    some = fitting.max_num_seqs_fit(inputs("Qwen/Qwen3-8B", "rtx4090", max_model_len=4096))
    assert some.limit == "kv_cache" and 1 < some.value < 256
    capped = fitting.max_num_seqs_fit(inputs("Qwen/Qwen2.5-0.5B-Instruct", "h200", max_model_len=256,
                                             max_num_batched_tokens=512))
    assert capped.limit == "max_num_batched_tokens" and capped.value == 512


@pytest.mark.parametrize("model, gpu, kw", [
    ("Qwen/Qwen3-8B", "rtx4090", {}),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100-80gb", {"max_model_len": 32768}),
    ("Qwen/Qwen2.5-7B-Instruct", "t4", {"max_model_len": 8192}),  # 28 heads: TP 8 is refused, not tried
    ("Qwen/Qwen3-32B", "a100-40gb", {"max_model_len": 16384, "tensor_parallel_size": 8}),
], ids=["qwen3-8b-4090", "llama-70b-h100", "qwen2.5-7b-t4", "qwen3-32b-a100-40gb"])
def test_smallest_tensor_parallel_fits_and_the_next_smaller_does_not(model, gpu, kw):
    asked = inputs(model, gpu, **kw)
    answer, tried = fitting.tensor_parallel_fit(asked)
    assert answer.value is not None and answer.value > 1  # each case needs more than one GPU
    assert plan(asked.model_copy(update={"tensor_parallel_size": answer.value})).fits
    smaller = [tp for tp in fitting.TP_SIZES if tp < answer.value]
    assert [t.tensor_parallel_size for t in tried] == [*smaller, answer.value]
    for tp in smaller:
        try:
            assert not plan(asked.model_copy(update={"tensor_parallel_size": tp})).fits
        except PlanError:
            pass  # the planner refuses this size (heads, vocabulary): it cannot be the answer either


def test_tensor_parallel_sizes_the_heads_refuse_are_said():
    tiny_gpu = PlanInputs(model=load_model_spec("Qwen/Qwen2.5-7B-Instruct"), gpu_memory_gib=4, max_model_len=4096)
    answer, tried = fitting.tensor_parallel_fit(tiny_gpu)
    assert answer.value is None and answer.limit == "none_fits"
    refused = {t.tensor_parallel_size: t.error for t in tried}
    assert "attention heads (28) must be divisible" in refused[8]


@pytest.mark.parametrize("model, gpu, kw, expected", [
    ("Qwen/Qwen3-8B", "rtx4090", {}, "fp8 KV cache"),
    # vLLM 0.33.0's Fp8Config.get_min_capability() is 75: FP8 weights run on a T4 (7.5) as W8A16.
    ("Qwen/Qwen3-8B", "t4", {"max_model_len": 4096}, "FP8 weights"),
    # Before 0.32.0 the kit keeps FP8 at 8.0, so a T4 is offered the AWQ checkpoint.
    ("Qwen/Qwen3-8B", "t4", {"max_model_len": 4096, "vllm_version": "0.26.0"}, "Qwen/Qwen3-8B-AWQ"),
    # 2048: at 0.33 the V2 runner charges its CUDA graphs (64 layers) and a cold compile holds a copy of the
    # 5120-wide embedding, so 4096 needs fp8 KV beside AWQ on a 24 GiB card
    ("Qwen/Qwen3-32B", "rtx4090", {"max_model_len": 2048}, "Qwen/Qwen3-32B-AWQ"),
    ("Qwen/Qwen3-8B-AWQ", "rtx4090", {"max_model_len": 8192}, "as asked"),
], ids=["kv-fp8", "fp8-on-t4", "awq-on-t4-0.26", "awq-checkpoint", "as-asked"])
def test_precision_is_the_first_option_that_fits(model, gpu, kw, expected):
    asked = inputs(model, gpu, **kw)
    answer, options = fitting.precision_fit(asked)
    assert answer.value == expected
    labels = [o.label for o in options]
    chosen = labels.index(expected)
    assert plan(fitting.with_change(asked, options[chosen].change)).fits
    for option in options[:chosen]:  # every less lossy option does not fit, or the planner refuses it
        assert not option.fits and option.error
        try:
            assert not plan(fitting.with_change(asked, option.change)).fits
        except PlanError as exc:
            assert option.error == exc.message
    for option in options:
        if option.max_model_len is not None:  # each option's own longest context fits, one block more does not
            changed = fitting.with_change(asked, option.change)
            assert plan(changed.model_copy(update={"max_model_len": option.max_model_len})).fits


def test_precision_options_follow_what_the_planner_and_catalog_know():
    assert fitting.quantized_variants(load_model_spec("Qwen/Qwen3-8B")) == ["Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B-AWQ"]
    assert fitting.quantized_variants(load_model_spec("Qwen/Qwen3-8B-AWQ")) == []
    a100 = [label for label, _ in fitting.precision_options(inputs("Qwen/Qwen3-32B", "a100-80gb"))]
    assert "fp8 KV cache" not in a100 and "FP8 weights" in a100 and "Qwen/Qwen3-32B-AWQ" in a100  # no FP8 on 8.0
    _, options = fitting.precision_fit(inputs("Qwen/Qwen3-8B", "v100-16gb", max_model_len=4096))
    refused = {o.label: o.error for o in options}
    assert "Minimum capability" in refused["Qwen/Qwen3-8B-AWQ"]  # AWQ needs compute capability 7.5; a V100 is 7.0
    assert fitting.precision_options(inputs("kit:tiny-llama", device="cpu", cpu_kvcache_space_gib=1)) == []


def test_the_search_is_bounded():
    calls = []

    def ok(n: int) -> bool:
        calls.append(n)
        return n <= 12_345_678

    assert fitting.largest_true(ok, 1, 2**53) == 12_345_678
    assert len(calls) <= 55
    assert fitting.largest_true(lambda n: False, 1, 100) == 0
    assert fitting.largest_true(lambda n: True, 1, 100) == 100


def test_impossible_asked_inputs_are_the_planners_error():
    with pytest.raises(PlanError, match="greater than the derived"):
        fitting.fit(inputs("Qwen/Qwen3-8B", "rtx4090", max_model_len=10**6))


# --------------------------------------------------------------------------- the CLI
def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def envelope(*args: str) -> tuple[int, dict]:
    result = invoke(*args, "--json")
    env = json.loads(result.stdout)
    assert set(env) == ENVELOPE and env["ok"] is (result.exit_code == 0) and env["command"] == "plan"
    return result.exit_code, env


def test_max_model_len_beside_a_preset_is_planned_and_reported():
    result = invoke("plan", "preset=rtx4090-awq", "--max-model-len", "16384")
    assert result.exit_code == 0, result.output
    assert "max_model_len 16384," in result.stdout and "at 16,384 tokens" in result.stdout
    assert "overrides: engine.max_model_len=16384 (--max-model-len)" in result.stdout
    code, env = envelope("plan", "preset=rtx4090-awq", "--max-model-len", "16384")
    assert code == 0 and env["data"]["inputs"]["max_model_len"] == 16384
    assert env["data"]["overrides"] == ["engine.max_model_len=16384"]
    # the flag means what the override means: the same plan
    _, typed = envelope("plan", "preset=rtx4090-awq", "engine.max_model_len=16384")
    assert {k: v for k, v in typed["data"].items() if k != "overrides"} == \
        {k: v for k, v in env["data"].items() if k != "overrides"}


# A value for each planner flag, and what the plan's resolved inputs then say.
FLAG_VALUES = {
    "gpu": (["--gpu", "h100"], "gpu_name", "NVIDIA H100 80GB HBM3"),
    "tp": (["--tp", "2"], "tensor_parallel_size", 2),
    "pp": (["--pp", "2"], "pipeline_parallel_size", 2),
    "dtype": (["--dtype", "bfloat16"], "dtype", "bfloat16"),
    "quantization": (["--quantization", "awq"], "quantization", "awq"),
    "kv_cache_dtype": (["--kv-cache-dtype", "fp8"], "kv_cache_dtype", "fp8"),
    "gpu_memory_utilization": (["--gpu-memory-utilization", "0.8"], "gpu_memory_utilization", 0.8),
    "max_model_len": (["--max-model-len", "4096"], "max_model_len", 4096),
    "max_num_seqs": (["--max-num-seqs", "4"], "max_num_seqs", 4),
    "max_num_batched_tokens": (["--max-num-batched-tokens", "4096"], "max_num_batched_tokens", 4096),
    "enforce_eager": (["--enforce-eager"], "enforce_eager", True),
    "vllm_version": (["--vllm-version", "0.26.0"], "vllm_version", "0.26.0"),
    "block_size": (["--block-size", "32"], "block_size", 32),
}


@pytest.mark.parametrize("name", sorted(FLAG_VALUES))
def test_every_planner_flag_beside_a_preset_becomes_its_override(name):
    from kit.cli.plan import PLAN_FLAGS

    flag_args, key, value = FLAG_VALUES[name]
    _, env = envelope("plan", "preset=rtx4090-awq", *flag_args)
    assert env["data"]["inputs"][key] == value
    field = next(f for n, _, _, f in PLAN_FLAGS if n == name)
    assert [o.split("=")[0] for o in env["data"]["overrides"]] == [field]
    _, before = envelope("plan", "preset=rtx4090-awq")
    assert before["data"]["inputs"][key] != value  # the flag changed what was planned


def test_cpu_kv_space_and_model_beside_a_preset():
    code, env = envelope("plan", "preset=cpu", "--cpu-kvcache-space-gib", "3")
    assert code == 0 and env["data"]["inputs"]["cpu_kvcache_space_gib"] == 3.0
    assert env["data"]["overrides"] == ["runtime.cpu_kvcache_space_gib=3.0"]
    _, env = envelope("plan", "preset=rtx4090-awq", "--model", "Qwen/Qwen3-32B-AWQ")
    assert env["data"]["inputs"]["model"] == "Qwen/Qwen3-32B-AWQ"
    assert "model.id=Qwen/Qwen3-32B-AWQ" in env["data"]["overrides"]
    _, same = envelope("plan", "preset=rtx4090-awq", "model=Qwen/Qwen3-32B-AWQ")
    assert same["data"]["inputs"] == env["data"]["inputs"]


def test_every_plan_option_is_a_planner_flag_or_refused_beside_a_preset():
    from kit.cli.plan import NOT_WITH_PRESET, PLAN_FLAGS, plan_command

    known = {n for n, *_ in PLAN_FLAGS} | set(NOT_WITH_PRESET) | {"model"}
    not_planner = {"args", "preset_option", "fit", "explain", "as_json", "verbose"}  # what to print, not to plan
    assert {p.name for p in plan_command.params} - not_planner == known  # a new flag must be one or the other
    assert set(FLAG_VALUES) | {"cpu_kvcache_space_gib"} == {n for n, *_ in PLAN_FLAGS}


@pytest.mark.parametrize("args, flag", [
    (["preset=rtx4090-awq", "--gpu-memory-gib", "20"], "--gpu-memory-gib"),
    (["preset=rtx4090-awq", "--device", "cuda"], "--device"),
    (["preset=cpu", "--device", "cpu"], "--device"),
    (["preset=rtx4090-awq", "--cpu-kvcache-space-gib", "4"], "--cpu-kvcache-space-gib"),
    (["--model", "Qwen/Qwen3-8B", "--gpu", "h100", "--cpu-kvcache-space-gib", "4"], "--cpu-kvcache-space-gib"),
    (["preset=rtx4090-awq", "model=Qwen/Qwen3-8B", "--model", "Qwen/Qwen3-32B"], "model"),
], ids=lambda a: a if isinstance(a, str) else " ".join(a))
def test_a_flag_without_meaning_is_a_usage_error_naming_it(args, flag):
    result = CliRunner().invoke(cli, ["plan", *args])
    assert result.exit_code == 2 and flag in result.stderr, result.output
    code, env = envelope("plan", *args)
    assert code == 2 and flag in env["problems"][0]["message"]


def test_fit_json_envelope_and_its_advice_works_as_printed():
    standalone = ["--model", "Qwen/Qwen3-8B", "--gpu", "rtx4090"]
    code, env = envelope("plan", *standalone, "--fit")
    assert code == 0 and env["problems"] == []
    data = env["data"]
    assert {"inputs", "fits", "approximate", "max_model_len", "max_num_seqs", "tensor_parallel_size",
            "precision"} <= set(data)
    for question in ("max_model_len", "max_num_seqs", "tensor_parallel_size", "precision"):
        assert {"value", "change", "limit", "apply", "kv_cache_tokens", "max_concurrency"} <= set(data[question])
    assert data["fits"] is False and data["inputs"]["max_model_len"] == 40960
    report = fitting.fit(inputs("Qwen/Qwen3-8B", "rtx4090"))
    longest = report.max_model_len.value
    assert data["max_model_len"]["value"] == longest and 16384 < longest < 40960
    assert data["tensor_parallel_size"]["apply"] == ["--tp 2"]
    assert data["precision"]["apply"] == ["--kv-cache-dtype fp8"]
    assert [o["label"] for o in data["precision"]["options"]][:2] == ["as asked", "fp8 KV cache"]
    # each answer, typed as printed, plans and fits; one block more does not
    for question in ("max_model_len", "tensor_parallel_size", "precision"):
        words = [w for a in data[question]["apply"] for w in a.split(" ", 1)]
        assert invoke("plan", *standalone, *words).exit_code == 0, (question, words)
    assert invoke("plan", *standalone, "--max-model-len", str(longest + 16)).exit_code == 1


def test_fit_beside_a_preset_answers_in_overrides_that_work():
    code, env = envelope("plan", "preset=rtx4090-awq", "--fit", "--max-model-len", "32768")
    data = env["data"]
    assert code == 0 and data["overrides"] == ["engine.max_model_len=32768"]
    assert data["inputs"]["max_model_len"] == 32768 and data["inputs"]["max_num_seqs"] == 16
    seqs = data["max_num_seqs"]
    assert seqs["limit"] == "kv_cache" and seqs["apply"] == [f"engine.max_num_seqs={seqs['value']}"]
    ok = invoke("plan", "preset=rtx4090-awq", "engine.max_model_len=32768", *seqs["apply"], "--json")
    planned = json.loads(ok.stdout)["data"]
    assert ok.exit_code == 0 and int(planned["max_concurrency"]) >= seqs["value"]
    more = invoke("plan", "preset=rtx4090-awq", "engine.max_model_len=32768",
                  f"engine.max_num_seqs={seqs['value'] + 1}", "--json")
    assert json.loads(more.stdout)["data"]["max_concurrency"] < seqs["value"] + 1
    # more tensor parallelism needs GPUs the preset does not have: not offered, and hardware.count is left alone
    _, big = envelope("plan", "preset=rtx4090-awq", "--model", "Qwen/Qwen3-32B-AWQ", "--fit")
    tp = big["data"]["tensor_parallel_size"]
    assert tp["value"] is None and tp["apply"] == []
    refused = {t["tensor_parallel_size"]: t for t in tp["tried"]}
    assert refused[2]["hardware_refused"] and "hardware has 1" in refused[2]["error"]


def test_fit_table_has_one_row_per_question():
    result = invoke("plan", "--model", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--fit")
    assert result.exit_code == 0, result.output
    rows = {line.split("  ")[0]: line for line in result.stdout.splitlines()}
    longest = fitting.fit(inputs("Qwen/Qwen3-8B", "rtx4090")).max_model_len.value
    row = rows["largest max_model_len"]
    assert f"{longest:,}" in row and f"--max-model-len {longest}" in row
    assert rows["most sequences at 40,960 tokens"].split()[5] == "0"
    assert "--tp 2" in rows["smallest tensor parallel size"]
    assert "--kv-cache-dtype fp8" in rows["precision at TP 1"]
    assert "asked: max_model_len 40,960, max_num_seqs 256: does not fit" in result.stdout


def test_the_docs_example_is_the_real_output(repo):
    text = (repo / "docs" / "gpu-planning.md").read_text()
    command = "$ kit plan --model Qwen/Qwen3-8B --gpu rtx4090 --fit"
    shown = text.split(command + "\n", 1)[1].split("```", 1)[0].splitlines()
    result = invoke(*command.split()[2:])
    real = [line for line in result.stdout.splitlines() if line.strip() and not set(line.strip()) <= {"─"}]
    assert [line.strip() for line in shown if line.strip()] == [line.strip() for line in real]
