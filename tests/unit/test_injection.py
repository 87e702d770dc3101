"""No preset value can change the structure of a file the kit writes (issue 11, point 1).

The property: for every preset string field and override path, a hostile string either is refused with the
kit's one-line error, or renders files that parse (YAML, the Dockerfile's instruction list, requirements as
PEP 508) with the same structure as the render with a benign value at that path: the same YAML key paths and
scalar types, the same Dockerfile instructions with the same argument counts, the same requirement count.
bench/fuzz_render.py runs the same cases many more times and prints the figures.
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from kit.core.errors import KitError
from kit.core.safevalue import (
    UnsafeValue,
    check_argument,
    check_image_ref,
    check_repository,
    check_requirement,
    check_text,
    compose_escape,
    has_control,
    k8s_escape,
)
from kit.core.yamlwrite import dump_with_comments
from kit.deploy.pipeline import prepare
from tests.unit.test_hostile_inputs import HOSTILE_PIECES, hostile_text

pytestmark = pytest.mark.unit

# path -> a value the kit accepts there (the benign render the hostile one is compared with).
# Every string a preset holds, in the sections that reach a rendered file, and engine flags of each kind.
BENIGN = {
    "description": "a preset",
    "model.id": "org/model",
    "model.served_model_name": "served",
    "model.revision": "main",
    "image.base": "debian:12",
    "image.repository": "registry.example/team/vllm",
    "image.pip_index_url": "https://pypi.example/simple",
    "image.extra_pip": "extra-package==1.0",
    "image.cuda": "12.9",
    "runtime.shm_size": "4g",
    "runtime.bind_address": "127.0.0.1",
    "runtime.hf_cache_volume": "hf",
    "runtime.compile_cache_volume": "cc",
    "runtime.cpu_omp_threads_bind": "auto",
    "runtime.k8s_runtime_class": "nvidia",
    "runtime.unsafe_env.FOO": "bar",
    "hardware.l4t": "r36.4",
    "engine.tokenizer": "org/tokenizer",
    "engine.chat_template": "template.jinja",
    "engine.quantization": "awq",
    "engine.kv_cache_dtype": "auto",
    "engine.served_model_name": "x",
}
PATHS = sorted(BENIGN)
PRESETS = ["cpu", "a100x8"]
# (preset, target, fixed overrides, presets side by side): one node, Ray pair, Kubernetes, two servers in one stack.
TARGETS = [("cpu", "compose", [], ()), ("a100x8", "compose", [], ()), ("cpu", "k8s", [], ()),
           ("cpu", "compose", ["hardware.nodes=2", "cluster.network=bridge"], ()), ("cpu", "compose", [], ("cpu-embed",))]


def override(path: str, value: str) -> str:
    # A list field takes its item in a flow list, quoted as JSON (valid YAML), so the item arrives whole.
    return f"{path}=[{json.dumps(value)}]" if path == "image.extra_pip" else f"{path}={json.dumps(value)}"


# ---------------------------------------------------------------------------------------------- structure


def yaml_shape(value: object, path: str = "") -> list[str]:
    """Key paths with list indices, each leaf with its type: a value read as another type or a new key shows."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in yaml_shape(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [f"{path}[]#{len(value)}"] + [s for i, v in enumerate(value) for s in yaml_shape(v, f"{path}[{i}]")]
    return [f"{path}:{type(value).__name__}"]


def dockerfile_instructions(text: str) -> list[tuple[str, int]]:
    """(instruction, argument count) per instruction, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction is dropped by the parser
        pending += raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        rest = rest.strip()
        if rest.startswith("["):
            count = len(json.loads(rest))  # exec form: a JSON array or the file is broken
        else:
            count = len(shlex.split(rest, comments=False, posix=True))
        out.append((word.upper(), count))
        pending = ""
    assert not pending, "a Dockerfile ends inside a continued instruction"
    return out


def structure(files: dict[str, str]) -> dict[str, object]:
    shape: dict[str, object] = {}
    for rel, text in files.items():
        assert not any(c in text for c in "\u2028\u2029\x85\r\x0b\x0c"), f"{rel} holds a raw line break"
        if rel.endswith(".yaml"):
            shape[rel] = [yaml_shape(doc) for doc in yaml.safe_load_all(text)]
        elif rel == "Dockerfile":
            shape[rel] = dockerfile_instructions(text)
        elif rel.startswith("requirements"):
            lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
            for ln in lines:
                Requirement(ln)
            shape[rel] = len(lines)
        elif rel == ".env.example":
            shape[rel] = [ln.split("=", 1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")]
        else:
            shape[rel] = len(text.splitlines())
    return shape


def render_or_refusal(preset: str, overrides: list[str], target: str,
                      beside: tuple[str, ...] = ()) -> dict[str, str] | KitError:
    try:
        return prepare(preset, overrides, target=target, allow_no_fit=True, with_presets=list(beside)).files
    except KitError as exc:
        return exc


_BASELINES: dict[tuple, object] = {}


def baseline(preset: str, path: str, extra: list[str], target: str, beside: tuple[str, ...]) -> object:
    key = (preset, path, tuple(extra), target, beside)
    if key not in _BASELINES:
        found = render_or_refusal(preset, [*extra, override(path, BENIGN[path])], target, beside)
        _BASELINES[key] = found if isinstance(found, KitError) else structure(found)
    return _BASELINES[key]


def check_case(preset: str, target: str, extra: list[str], path: str, value: str, beside: tuple[str, ...] = ()) -> str:
    """'refused', 'same' or 'no-baseline'; fails (AssertionError) on a traceback or a structure change."""
    found = render_or_refusal(preset, [*extra, override(path, value)], target, beside)
    if isinstance(found, KitError):
        assert all("\n" not in line and line for line in found.lines()), found.lines()
        return "refused"
    shape = structure(found)
    base = baseline(preset, path, extra, target, beside)
    if isinstance(base, KitError):
        return "no-baseline"  # the field does not apply to this preset's benign render (e.g. l4t on cpu)
    assert shape == base, (preset, target, path, value)
    return "same"


# Most strings with a control are refused outright; printable hostile text (quotes, `$`, backticks, `#`, typed
# words, odd Unicode) is what gets rendered, so half the cases are drawn from it to exercise the structure check.
PRINTABLE_PIECES = [p for p in HOSTILE_PIECES if not has_control(p) and not p.startswith("-")]
printable_text = st.lists(st.one_of(st.sampled_from(PRINTABLE_PIECES), st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=8)), min_size=1, max_size=6).map("".join)
# An empty string means "not set" for the optional fields (no --revision, no index ARG): a choice, not an injection.
hostile_value = st.one_of(hostile_text, printable_text).filter(bool)
hostile_case = st.tuples(st.sampled_from(TARGETS), st.sampled_from(PATHS), hostile_value)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(case=hostile_case)
def test_no_preset_string_changes_a_rendered_files_structure(case):
    (preset, target, extra, beside), path, value = case
    check_case(preset, target, extra, path, value, beside)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("piece", ["a\u2028b", "a\u0085b", "a\nb", "a\x1bb", "a\u2029b"])
def test_every_line_break_is_refused_by_validate_and_render_alike(path, piece):
    found = render_or_refusal("cpu", [override(path, piece)], "compose")
    assert isinstance(found, KitError), (path, piece)
    assert len(found.lines()) == 1 and ".".join(path.split(".")[:2]) in found.lines()[0], found.lines()


@pytest.mark.parametrize("piece", ["yes", "no", "null", "~", "1e3", "0x1F", "0o17", ".inf", "on", "2024-01-01",
                                   "#c", " # c", "$HOME", "${X:?boom}", "$(id)", "`id`", "'q'", '"q"', "a: b",
                                   "- x", "[a]", "{a: 1}", "&a", "*a", "!!python/object:os.system", "|", ">"])
def test_typed_words_and_yaml_syntax_stay_strings_in_compose(piece):
    files = prepare("cpu", [override("runtime.unsafe_env.FOO", piece), override("model.served_model_name", "n" + piece)]).files
    doc = yaml.safe_load(files["compose.yaml"])
    server = doc["services"]["vllm"]
    assert server["environment"]["FOO"] == compose_escape(piece)
    assert compose_escape("n" + piece) in server["command"]
    assert structure(files) == structure(prepare("cpu", ["runtime.unsafe_env.FOO=bar", "model.served_model_name=nbar"]).files)


# ---------------------------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("ref", ["debian:12", "vllm/vllm-openai:v0.33.0-cu129", "localhost:5000/a/b:1",
                                 "registry.example/x@sha256:" + "a" * 64, "nvidia/cuda:13.0.2-base-ubuntu24.04",
                                 "[::1]:5000/img:tag", "a__b/c-d.e:T_1"])
def test_image_references_docker_takes_pass(ref):
    assert check_image_ref(ref) == ref


@pytest.mark.parametrize("ref", ["Debian:12", "a b:1", "-x:1", "x:-1", "x:1 --build-arg", "x:" + "t" * 129,
                                 "x@sha256:abc", "x:1\u2028", "", "x/:1", "x//y:1", "x:1@", "${X}:1"])
def test_image_references_docker_refuses_are_refused(ref):
    with pytest.raises(UnsafeValue):
        check_image_ref(ref)


def test_repository_takes_no_tag():
    assert check_repository("reg.example:5000/team/vllm") == "reg.example:5000/team/vllm"
    for bad in ("team/vllm:1", "team/Vllm", "-x", "team/vllm@sha256:" + "a" * 64):
        with pytest.raises(UnsafeValue):
            check_repository(bad)


@pytest.mark.parametrize("line", ["--index-url https://x", "-e .", "-r other.txt", "pkg", "pkg>=1", "pkg==1.*",
                                  "pkg @ https://x/p.whl", "pkg==1; python_version<'3'", "pkg==1 --hash=sha256:0",
                                  "pkg==1\u2028evil==2"])
def test_requirements_are_pinned_pep508_without_pip_options(line):
    with pytest.raises(UnsafeValue):
        check_requirement(line)


def test_a_pinned_requirement_with_extras_passes():
    assert str(check_requirement("ray[default]==2.49.1")) == "ray[default]==2.49.1"


def test_arguments_that_read_as_options_are_refused_but_negative_numbers_pass():
    assert check_argument("-1") == "-1" and check_argument("-0.5") == "-0.5"
    for bad in ("-x", "--help", "-", "--"):
        with pytest.raises(UnsafeValue):
            check_argument(bad)


@pytest.mark.parametrize("piece", HOSTILE_PIECES)
def test_check_text_refuses_exactly_what_ends_a_line_somewhere(piece):
    ends_a_line = any(c in piece for c in "\n\r\u2028\u2029\x85") or piece != "".join(piece.splitlines())
    controls = any(ord(c) < 32 or 127 <= ord(c) < 160 for c in piece)
    if ends_a_line or controls:
        with pytest.raises(UnsafeValue):
            check_text(piece)
    else:
        assert check_text(piece) == piece


def test_lone_surrogates_are_refused():
    # Found by bench/fuzz_render.py: a lone surrogate passed validation and failed to encode at render.
    with pytest.raises(UnsafeValue):
        check_text("a\ud800b")
    assert isinstance(render_or_refusal("cpu", [override("model.served_model_name", "a\udfffb")], "compose"),
                      KitError)


def test_escapes_for_compose_and_kubernetes():
    assert compose_escape("$HOME ${X} $$") == "$$HOME $${X} $$$$"
    assert k8s_escape("$(VAR) $X $$(Y)") == "$$(VAR) $$X $$$$(Y)"


def test_validate_and_render_refuse_the_same_values():
    # Validation runs the rules the renderers apply: a value refused at render is refused by `kit validate`.
    from kit.config.presetload import load_preset
    for path, bad in [("model.id", "--help"), ("engine.tokenizer", "-x"), ("image.base", "Debian:12"),
                      ("image.extra_pip", "--index-url=https://evil"), ("runtime.unsafe_env.FOO", "a\u2028b"),
                      ("model.served_model_name", "a\x85b"), ("image.repository", "x:1")]:
        with pytest.raises(KitError):
            load_preset("cpu", [override(path, bad)])


def test_a_preset_file_name_with_a_line_separator_is_refused_by_validate_as_by_render(tmp_path):
    # The file's name becomes the preset's name, which headers and labels carry.
    from kit.config.presetload import load_preset
    from kit.core.datafiles import PRESETS_DIR
    odd = tmp_path / "x\u2028services: {}.yaml"
    odd.write_text((PRESETS_DIR / "cpu.yaml").read_text())
    with pytest.raises(KitError, match="file name contains a line break"):
        load_preset(str(odd))


def test_compose_serialisation_reads_back_as_its_data_and_keeps_comments_fixed():
    doc = {"services": {"a": {"command": ["yes", "1e3", "#x", "a\\b", "\u00e9"], "environment": {"K": "~"}}}}
    text = dump_with_comments(doc, ["header"], {("services", "a", "command"): ["why"]})
    assert yaml.safe_load(text) == doc
    assert "  # why\n    command:" in text.replace("    # why", "  # why")
    with pytest.raises(UnsafeValue):
        dump_with_comments(doc, ["header\u2028services: {}"], {})

