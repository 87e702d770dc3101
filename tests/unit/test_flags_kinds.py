"""kit.config.flags on the kinds of option no pinned vLLM snapshot has today (store_false, store_const, count, a fixed
number of values, an optional value, a boolean with no way to say false), from a made-up snapshot: each kind is
checked and turned into arguments the way argparse reads it back."""

from __future__ import annotations

import pytest

from kit.config import flags
from kit.config.flags import FlagError, FlagSnapshot, FlagSpec, check_engine, engine_to_argv

pytestmark = pytest.mark.unit

VERSION = "9.9.9"


def spec(dest: str, **fields) -> FlagSpec:
    return FlagSpec(**{"dest": dest, "options": (f"--{dest.replace('_', '-')}",), "kind": "store", "type": "str",
                       "nargs": None} | fields)


SPECS = [
    spec("no_stats", kind="store_false", type="bool", nargs=0, default=True),
    spec("stats_off", kind="store_false", type="bool", nargs=0, default=False),
    spec("fast", kind="store_true", type="bool", nargs=0, default=True),
    spec("preset_mode", kind="store_const", type="bool", nargs=0, const=3),
    spec("verbose", kind="count", type="int", nargs=0),
    spec("only_on", kind="boolean_optional", type="bool", nargs=0),
    spec("pair", type="int", nargs=2),
    spec("anything", nargs="*"),
    spec("profile", nargs="?", const="default"),
    spec("switch_or_name", nargs="?", const=True),
    spec("limit", type="int", optional=True),
    spec("ratio", type="float"),
    spec("extra", type="json", type_detail="json_or_str"),
]


@pytest.fixture(autouse=True)
def made_up_snapshot(monkeypatch):
    snapshot = FlagSnapshot(version=VERSION, package="vllm", generator_version=1, flags={s.dest: s for s in SPECS})
    monkeypatch.setattr(flags, "load_snapshot", lambda version, directory=None: snapshot)


def problems(engine: dict) -> list[str]:
    return [str(p) for p in check_engine(engine, VERSION)]


@pytest.mark.parametrize(("engine", "argv"), [
    ({"no_stats": False}, ["--no-stats"]),
    ({"no_stats": True}, []),
    ({"stats_off": False}, ["--stats-off"]),
    ({"preset_mode": True}, ["--preset-mode"]),
    ({"preset_mode": False}, []),
    ({"fast": True}, ["--fast"]),
    ({"verbose": 3}, ["--verbose"] * 3),
    ({"verbose": 0}, []),
    ({"only_on": True}, ["--only-on"]),
    ({"pair": [1, 2]}, ["--pair", "1", "2"]),
    ({"anything": []}, ["--anything"]),
    ({"anything": "one"}, ["--anything", "one"]),
    ({"profile": False}, []),
    ({"profile": "fast"}, ["--profile", "fast"]),
    ({"switch_or_name": True}, ["--switch-or-name"]),
    ({"limit": "None"}, ["--limit", "None"]),
    ({"ratio": "0.5"}, ["--ratio", "0.5"]),
    ({"extra": "plain text"}, ["--extra", "plain text"]),
    ({"extra": ["-a"]}, ["--extra", '["-a"]']),
    ({"limit": None, "verbose": 1, "fast": True}, ["--fast", "--verbose"]),
])
def test_each_kind_becomes_the_arguments_argparse_reads_back(engine, argv):
    assert problems(engine) == []
    assert engine_to_argv(engine, VERSION) == argv


@pytest.mark.parametrize(("engine", "problem"), [
    ({"no_stats": "no"}, "engine.no_stats: expects true or false, got 'no'"),
    ({"stats_off": True}, "engine.stats_off: is off by default and this vLLM has no option to turn it on"),
    ({"fast": False}, "engine.fast: is on by default and this vLLM has no option to turn it off"),
    ({"verbose": -1}, "engine.verbose: expects a count (0 or more), got -1"),
    ({"verbose": True}, "engine.verbose: expects a count (0 or more), got true"),
    ({"verbose": "2"}, "engine.verbose: expects a count (0 or more), got '2'"),
    ({"pair": [1]}, "engine.pair: needs exactly 2 values, got 1"),
    ({"pair": 1}, "engine.pair: needs exactly 2 values, got 1"),
    ({"profile": ["a"]}, "engine.profile: expects a single value, got [\"a\"]"),
    ({"profile": True}, "engine.profile: expects a value, got true"),
    ({"ratio": True}, "engine.ratio: expects a number, got true"),
    ({"ratio": "half"}, "engine.ratio: expects a number, got 'half'"),
    ({"ratio": [1.0]}, "engine.ratio: expects a single value, got [1.0]"),
    ({"extra": 3}, "engine.extra: expects a mapping (JSON object), got 3"),
])
def test_each_kind_refuses_what_argparse_would(engine, problem):
    assert problems(engine) == [problem]
    with pytest.raises(FlagError):
        engine_to_argv(engine, VERSION)


def test_an_optional_value_given_true_needs_a_const_of_true():
    """`--profile` alone means its const; true says that only where the const is true itself."""
    assert problems({"switch_or_name": True}) == [] and problems({"switch_or_name": False}) == []
    assert problems({"profile": False}) == [] and problems({"profile": None}) == []
    assert problems({"profile": True}) == ["engine.profile: expects a value, got true"]


def test_every_item_of_a_list_is_checked_on_its_own():
    assert problems({"pair": ["x", 2]})[0].startswith("engine.pair: ")
    assert len(problems({"pair": ["x", "y"]})) == 2


def test_a_boolean_with_no_false_option_cannot_be_turned_off():
    assert problems({"only_on": False}) == []  # argparse would take it; only the argv cannot say it
    with pytest.raises(FlagError) as info:
        engine_to_argv({"only_on": False}, VERSION)
    assert str(info.value) == "engine.only_on: this vLLM has no option to turn it off"
    assert info.value.field == "engine.only_on"
