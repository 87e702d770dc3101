"""YAML's typed words through the one writer (kit/core/yamlwrite.py): a string any YAML 1.1 or 1.2 reader would
take as a number, bool, null, date or time, or read differently (padding, indicators), is quoted, through the
compose path and the Kubernetes path alike, as an env value and as an argument; each reads back as the string.

PyYAML reads YAML 1.1. A YAML 1.2 reader (ruamel.yaml) is used when the venv has one; without it the test asserts
the quoting itself (a quoted scalar is a string in every version), which covers the 1.2-only forms (1e3, 0o17).
"""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from kit.core.yamlwrite import plain_ok, yaml_text
from kit.deploy.pipeline import prepare
from tests.unit.test_injection import override

pytestmark = pytest.mark.unit

# Every form some YAML version types or reads otherwise, in the spellings a preset could carry.
TYPED = [
    # numbers: YAML 1.2 (exponent without a dot, 0o octal), YAML 1.1 (underscores, 0 octal, sexagesimal), both
    "1e3", "1E3", "-1e-3", "0x1F", "0o17", "017", "0b101", "1_000", "+1", "-1", "1.5", ".5", "1.",
    ".inf", "-.inf", "+.INF", ".Inf", ".nan", ".NaN", ".NAN", "inf", "nan",
    # null and bools, in any case
    "null", "Null", "NULL", "~", "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
    "y", "Y", "n", "N", "true", "True", "TRUE", "tRuE", "false", "False", "FALSE",
    # dates and times (YAML 1.1 timestamps; 12:30 is a 1.1 base-60 integer)
    "2026-12-01", "2026-12-01T10:30:00Z", "2026-12-01 10:30:00", "12:30", "1:20:30",
    # text a plain scalar would not carry whole
    "", " ", " lead", "trail ", "a #b", "#a", "a: b", "a:", "*a", "&a", "!a", "%a", "@a", "`a", "-", "- a", "?",
    "? a", "|", ">", "[a]", "{a}", "'a'", '"a"', "=", "<<", ",a",
]
# A served model name is refused when empty or when it starts with a dash (vLLM would read an option), so those
# travel as env values only.
AS_ARG = [v for v in TYPED if v.strip() and not v.startswith("-")]
ENV = "KIT_TYPED"


def _yaml12_loader():
    if importlib.util.find_spec("ruamel") is None or importlib.util.find_spec("ruamel.yaml") is None:
        return None
    from ruamel.yaml import YAML  # type: ignore[import-not-found]

    reader = YAML(typ="safe", pure=True)
    reader.version = (1, 2)
    return reader.load


YAML12 = _yaml12_loader()


def _scalars(node: yaml.Node) -> list[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        return [node]
    if isinstance(node, yaml.SequenceNode):
        return [s for item in node.value for s in _scalars(item)]
    if isinstance(node, yaml.MappingNode):
        return [s for pair in node.value for item in pair for s in _scalars(item)]
    return []


def assert_reads_back(text: str, value: str, nodes: list[yaml.Node] | None = None) -> None:
    """The scalars that hold ``value`` (``nodes``, else every scalar of that text) are quoted, so a string in YAML
    1.1 and 1.2, and the readers at hand read the file alike."""
    holding = nodes if nodes is not None else [
        s for s in _scalars(yaml.compose(text, Loader=yaml.SafeLoader)) if s.value == value]
    assert holding, f"{value!r} is not in the file"
    assert all(isinstance(s, yaml.ScalarNode) and s.value == value for s in holding)
    assert all(s.style in ('"', "'") for s in holding), f"{value!r} written plain"
    if YAML12 is not None:
        assert YAML12(text) == yaml.safe_load(text)


def _ours(node: yaml.Node) -> list[yaml.Node]:
    """The nodes the test put a value in: the env value of ENV (compose's mapping, k8s's name/value item) and the
    argument after --served-model-name."""
    found: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        pairs = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        if ENV in pairs:
            found.append(pairs[ENV])
        if getattr(pairs.get("name"), "value", None) == ENV and "value" in pairs:
            found.append(pairs["value"])
        for _, v in node.value:
            found += _ours(v)
    elif isinstance(node, yaml.SequenceNode):
        items = node.value
        for i, item in enumerate(items):
            if getattr(item, "value", None) == "--served-model-name" and i + 1 < len(items):
                found.append(items[i + 1])
            found += _ours(item)
    return found


def rendered(target: str, *overrides: str) -> tuple[str, dict]:
    """(the server's file, the server container/service) of the cpu preset rendered for ``target``."""
    files = prepare("cpu", list(overrides), target=target).files
    if target == "compose":
        text = files["compose.yaml"]
        return text, yaml.safe_load(text)["services"]["vllm"]
    text = files["k8s/deployment.yaml"]
    [server] = [c for c in yaml.safe_load(text)["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    return text, server


def env_of(server: dict, target: str) -> object:
    if target == "compose":
        return server["environment"][ENV]
    return {e["name"]: e.get("value") for e in server["env"]}[ENV]


def args_of(server: dict, target: str) -> list[str]:
    if target == "compose":
        return [*server["entrypoint"], *server["command"]]
    return [*server.get("command", []), *server.get("args", [])]


@pytest.mark.parametrize("target", ["compose", "k8s"])
@pytest.mark.parametrize("value", TYPED)
def test_a_typed_word_reaches_compose_and_k8s_as_the_same_env_value(value, target):
    text, server = rendered(target, override(f"runtime.unsafe_env.{ENV}", value))
    assert env_of(server, target) == value
    nodes = [n for n in _ours(yaml.compose(text, Loader=yaml.SafeLoader)) if n.value == value]
    assert len(nodes) == 1  # the env value (the served name stays the preset's)
    assert_reads_back(text, value, nodes)


@pytest.mark.parametrize("target", ["compose", "k8s"])
@pytest.mark.parametrize("value", AS_ARG)
def test_a_typed_word_reaches_compose_and_k8s_as_the_same_argument(value, target):
    text, server = rendered(target, override(f"runtime.unsafe_env.{ENV}", value), override("model.served_model_name", value))
    args = args_of(server, target)
    assert args[args.index("--served-model-name") + 1] == value and env_of(server, target) == value
    nodes = _ours(yaml.compose(text, Loader=yaml.SafeLoader))
    assert len(nodes) == 2  # the env value and the argument
    assert_reads_back(text, value, nodes)


@pytest.mark.parametrize("value", TYPED)
def test_the_writer_quotes_each_typed_word(value):
    assert not plain_ok(value)
    text = yaml_text({"env": {"X": value}, "args": [value], value: "key"})
    assert yaml.safe_load(text) == {"env": {"X": value}, "args": [value], value: "key"}
    assert_reads_back(text, value)


@pytest.mark.parametrize("value", ["vllm", "serve", "Recreate", "model-fetch", "hf_cache", "yesterday", "nullable",
                                   "onion", "e3", "x1e3"])
def test_simple_names_stay_plain(value):
    # Names that merely start like a typed word are not one: they stay readable, and still read back.
    assert plain_ok(value)
    assert yaml_text({"k": value}) == f"k: {value}\n"
