"""`kit plan --fit` agrees with plain `kit plan` (issue 33, item 5).

Every answer of `--fit` on every shipped preset is typed back as printed (its `apply` overrides) into plain `kit plan`
and `kit validate`: the answer fits, and one step beyond does not (or is the bound of the search). The regression
cases are the contradictions seen before: advice that plain `kit plan` disagreed with, and tensor parallel sizes that
`kit validate` refuses or that need GPUs the hardware does not have.
"""

import json
from functools import lru_cache

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.preset_files import preset_names

pytestmark = pytest.mark.unit

PRESETS = sorted(preset_names())
QUESTIONS = ("max_model_len", "max_num_seqs", "tensor_parallel_size", "precision")


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


@lru_cache(maxsize=None)
def fit_of(*args: str) -> dict:
    code, env = run("plan", *args, "--fit")
    assert code == 0 and env["ok"], env["problems"]
    return env["data"]


def planned(preset: str, *overrides: str) -> tuple[int, dict]:
    """Plain `kit plan preset=NAME OVERRIDES --json`: (exit code, data)."""
    code, env = run("plan", f"preset={preset}", *overrides)
    return code, env["data"]


def validates(preset: str, *overrides: str) -> bool:
    result = CliRunner().invoke(cli, ["validate", f"preset={preset}", *overrides], catch_exceptions=False)
    return result.exit_code == 0


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("preset", PRESETS)
def test_every_fit_answer_plans_as_printed_and_one_step_beyond_does_not(preset, question):
    data = fit_of(f"preset={preset}")
    answer = data[question]
    asked = data["inputs"]
    if answer["limit"] == "not_applicable":  # the CPU backend: no TP, no fp8 choice
        assert asked["device"] == "cpu" and answer["value"] is None and question in ("tensor_parallel_size",
                                                                                     "precision")
        return
    code, at = planned(preset, *answer["apply"])
    if question == "max_model_len":
        block = asked["block_size"]
        if answer["value"] is None:
            assert not planned(preset, f"engine.max_model_len={block}")[1]["fits"]
            return
        assert code == 0 and at["fits"] and at["inputs"]["max_model_len"] == answer["value"]
        if answer["limit"] == "kv_cache":
            beyond_code, beyond = planned(preset, f"engine.max_model_len={answer['value'] + block}")
            assert beyond_code == 1 and not beyond["fits"]
        else:  # the model's own limit: one token more is refused outright
            assert answer["limit"] == "model"
            assert planned(preset, f"engine.max_model_len={answer['value'] + 1}")[0] == 1
    elif question == "max_num_seqs":
        if answer["value"] == 0:
            assert planned(preset, "engine.max_num_seqs=1")[1]["sequences_at_once"] == 0
            return
        assert code == 0 and at["fits"] and at["inputs"]["max_num_seqs"] == answer["value"]
        assert at["sequences_at_once"] >= answer["value"]
        if answer["limit"] == "kv_cache":
            # one sequence more: vLLM starts, and plain `kit plan` says fewer are held at once
            beyond_code, beyond = planned(preset, f"engine.max_num_seqs={answer['value'] + 1}")
            assert beyond_code == 0 and beyond["sequences_at_once"] < answer["value"] + 1
        else:  # the bound of the search: vLLM takes no more sequences than batched tokens
            assert answer["limit"] == "max_num_batched_tokens"
            assert answer["value"] == at["inputs"]["max_num_batched_tokens"]
    elif question == "tensor_parallel_size":
        assert not any(word.startswith("hardware.") for word in answer["apply"])  # never behind the user's back
        tried = answer["tried"]
        if answer["value"] is not None:
            assert code == 0 and at["fits"] and at["inputs"]["tensor_parallel_size"] == answer["value"]
            assert validates(preset, *answer["apply"])
            assert tried[-1]["tensor_parallel_size"] == answer["value"]
            tried = tried[:-1]
        for smaller in tried:  # every size tried before it: refused by validate, refused by the planner, or no fit
            tp = smaller["tensor_parallel_size"]
            assert not smaller["fits"]
            beyond_code, beyond = planned(preset, f"engine.tensor_parallel_size={tp}")
            if smaller["hardware_refused"]:
                assert not validates(preset, f"engine.tensor_parallel_size={tp}")
            elif not smaller["plan_refused"]:
                assert beyond_code == 1 and not beyond["fits"]
    else:
        options = answer["options"]
        if answer["value"] is None:
            assert not any(o["fits"] for o in options)
            return
        assert code == 0 and at["fits"]
        chosen = [o["label"] for o in options].index(answer["value"])
        for less_lossy in options[:chosen]:
            beyond_code, _ = planned(preset, *less_lossy["apply"])
            assert not less_lossy["fits"] and beyond_code == 1


# --------------------------------------------------------------------------- the contradictions of issue 33
def test_rtx4090_awq_most_sequences_agree_with_plain_plan():
    seqs = fit_of("preset=rtx4090-awq")["max_num_seqs"]
    assert seqs["limit"] == "kv_cache" and seqs["apply"] == [f"engine.max_num_seqs={seqs['value']}"]
    for beyond in (seqs["value"] + 1, 16):  # one more, and the preset's own 16: vLLM starts, fewer held at once
        code, at = planned("rtx4090-awq", f"engine.max_num_seqs={beyond}")
        assert code == 0 and at["fits"] and at["sequences_at_once"] == seqs["value"] < beyond
    table = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", f"engine.max_num_seqs={seqs['value'] + 1}"])
    row = next(line for line in table.stdout.splitlines() if line.startswith("sequences at once"))
    assert row.split()[3] == str(seqs["value"]) and f"of max_num_seqs {seqs['value'] + 1}" in row
    row = next(line for line in CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", "--fit"]).stdout.splitlines()
               if line.startswith("most sequences"))
    assert "does not fit" not in row and "vLLM starts" in row


def test_a100_40gb_most_sequences_agree_with_plain_plan():
    standalone = ("--model", "Qwen/Qwen3-8B", "--gpu", "a100-40gb")
    seqs = fit_of(*standalone)["max_num_seqs"]
    assert seqs["value"] == 3 and seqs["apply"] == ["--max-num-seqs 3"]
    code, three = run("plan", *standalone, "--max-num-seqs", "3")
    assert code == 0 and three["data"]["sequences_at_once"] >= 3
    code, four = run("plan", *standalone, "--max-num-seqs", "4")
    assert code == 0 and four["data"]["fits"] and four["data"]["sequences_at_once"] == 3


def test_a100x8_tensor_parallel_is_one_that_renders():
    tp = fit_of("preset=a100x8")["tensor_parallel_size"]
    assert tp["value"] == 8 and tp["apply"] == []  # the preset's own size: fewer GPUs would leave some unused
    assert validates("a100x8", *tp["apply"])
    refused = [t for t in tp["tried"] if t["hardware_refused"]]
    assert [t["tensor_parallel_size"] for t in refused] == [1, 2, 4]
    assert all("of the 8 GPUs" in t["error"] for t in refused)
    assert not validates("a100x8", "engine.tensor_parallel_size=1")


def test_a_jetson_is_never_offered_a_second_gpu():
    args = ("preset=orin", "model=Qwen/Qwen3-32B-AWQ", "hardware.gpu=jetson-agx-orin-32gb")
    data = fit_of(*args)
    assert not data["fits"]
    tp = data["tensor_parallel_size"]
    assert tp["value"] is None and tp["apply"] == []
    tried = {t["tensor_parallel_size"]: t for t in tp["tried"]}
    assert not tried[1]["hardware_refused"] and not tried[1]["fits"]
    assert tried[2]["hardware_refused"] and "host has 1" in tried[2]["error"]
    # standalone, with no preset to say how many GPUs there are, the GPU itself bounds it
    alone = fit_of("--model", "Qwen/Qwen3-32B-AWQ", "--gpu", "jetson-agx-orin-32gb", "--max-model-len", "2048")
    assert alone["tensor_parallel_size"]["value"] in (1, None) and "--tp 2" not in alone["tensor_parallel_size"]["apply"]
    # and `kit validate` refuses what --fit used to advise
    assert not validates("orin", "engine.tensor_parallel_size=2", "hardware.count=2")


def test_fit_plans_auto_max_model_len_as_plain_plan_does():
    standalone = ("--model", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--max-model-len", "auto")
    _, plain = run("plan", *standalone)
    data = fit_of(*standalone)
    assert data["inputs"]["max_model_len"] == plain["data"]["inputs"]["max_model_len"] < 40960
    assert data["fits"] is plain["data"]["fits"] is True
