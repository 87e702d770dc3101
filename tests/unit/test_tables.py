"""The data tables' models (kit/core/tables.py, issue 38): the shipped kit/data/vllm.yaml and compat.yaml validate,
and a table with a misspelt key, a wrong type or a missing field is refused when it is loaded, each problem naming
the file and the field; a user's vllm.yaml row is checked by the same models and its errors name the user's file."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from kit.core import datafiles, tables
from kit.core.datafiles import load_yaml
from kit.core.errors import KitError
from kit.core.releaserules import quantization_min_cc, versioned
from kit.core.tables import CompatTable, Since, VersionRow, VllmTable, check_table, compat_model, vllm_model
from kit.core.tables import user_version_rows
from kit.core.userdata import UserDataError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
VLLM, COMPAT = "kit/data/vllm.yaml", "kit/data/compat.yaml"


def refused(model: type, data: object, where: str) -> list[str]:
    with pytest.raises(KitError) as caught:
        check_table(model, data, where)
    return caught.value.lines()


def test_the_shipped_tables_validate():
    assert isinstance(compat_model(), CompatTable) and isinstance(vllm_model(), VllmTable)
    # the models hold every key the files have, none filled in that the file lacks
    assert vllm_model().model_dump(exclude_unset=True) == load_yaml("vllm.yaml")
    assert compat_model().model_dump(exclude_unset=True) == load_yaml("compat.yaml")
    assert vllm_model().versions["0.34.0"].defaults.kv_sizing is not None
    assert compat_model().quantization["fp8"].full_cc == "8.9"


@pytest.mark.parametrize(("table", "model", "edit", "line"), [
    # a misspelt key
    (VLLM, VllmTable, lambda t: t["versions"]["0.33.0"]["defaults"].update(block_sise=16),
     f"{VLLM}: versions.0.33.0.defaults.block_sise: is not a field the kit knows (hint: did you mean block_size?)"),
    (VLLM, VllmTable, lambda t: t["rule_changes"]["0.0.0"]["memory_accounting"]["sampler"].update(fp32_cpy=True),
     f"{VLLM}: rule_changes.0.0.0.memory_accounting.sampler.fp32_cpy: is not a field the kit knows "
     "(hint: did you mean fp32_copy?)"),
    (COMPAT, CompatTable, lambda t: t["quantization"]["fp8"].update(ful_cc="8.9"),
     f"{COMPAT}: quantization.fp8.ful_cc: is not a field the kit knows (hint: did you mean full_cc?)"),
    # a wrong type
    (VLLM, VllmTable, lambda t: t["cuda"]["13.0"].update(python=3.12),
     f"{VLLM}: cuda.13.0.python: Input should be a valid string (got 3.12) (hint: YAML reads an unquoted number or "
     "true/false as one: quote the value)"),
    (VLLM, VllmTable, lambda t: t["versions"]["0.34.0"]["defaults"].update(block_size="sixty-four"),
     f"{VLLM}: versions.0.34.0.defaults.block_size: Input should be a valid integer (got 'sixty-four')"),
    (COMPAT, CompatTable, lambda t: t["quantization"]["fp8"]["min_cc"][1].update(value=7.5),
     f"{COMPAT}: quantization.fp8.min_cc.1.value: Input should be a valid string (got 7.5) (hint: YAML reads an "
     "unquoted number or true/false as one: quote the value)"),
    (COMPAT, CompatTable, lambda t: t["platforms"]["slim"].update(arches="amd64"),
     f"{COMPAT}: platforms.slim.arches: Input should be a valid list (got 'amd64')"),
    # a missing required field
    (VLLM, VllmTable, lambda t: t["versions"]["0.33.0"].pop("official_image"),
     f"{VLLM}: versions.0.33.0.official_image: is required"),
    (COMPAT, CompatTable, lambda t: t["dtype"]["bfloat16"].pop("fallback"),
     f"{COMPAT}: dtype.bfloat16.fallback: is required"),
    (COMPAT, CompatTable, lambda t: t.pop("jetson"), f"{COMPAT}: jetson: is required"),
])
def test_a_malformed_table_fails_naming_file_and_field(table, model, edit, line):
    data = copy.deepcopy(load_yaml(Path(table).name))
    edit(data)
    assert refused(model, data, table) == [line]


def test_every_problem_is_listed_and_a_scalar_of_no_union_member_once():
    data = copy.deepcopy(load_yaml("compat.yaml"))
    data["quantization"]["awq"]["min_cc"] = 7.5  # neither "7.5" nor {since, value} rows
    data["dtype"]["bfloat16"]["fallbak"] = "float16"
    lines = refused(CompatTable, data, COMPAT)
    assert lines == [f"{COMPAT}: dtype.bfloat16.fallbak: is not a field the kit knows (hint: did you mean fallback?)",
                     f"{COMPAT}: quantization.awq.min_cc: Input should be a valid string (got 7.5) (hint: YAML reads "
                     "an unquoted number or true/false as one: quote the value)"]


def test_a_broken_shipped_table_fails_at_load(monkeypatch):
    broken = copy.deepcopy(load_yaml("compat.yaml"))
    broken["platforms"]["slim"]["arch"] = ["amd64"]
    monkeypatch.setattr(tables, "load_yaml", lambda name: broken if name == "compat.yaml" else load_yaml(name))
    tables.compat_model.cache_clear()
    try:
        with pytest.raises(KitError, match=re.escape(f"{COMPAT}: platforms.slim.arch: is not a field")):
            tables.compat_model()
    finally:
        tables.compat_model.cache_clear()


def _user_table(tmp_path: Path, row: dict) -> Path:
    folder = tmp_path / "vllm-kit"
    folder.mkdir()
    (folder / "vllm.yaml").write_text(yaml.safe_dump({"versions": {"0.35.0": row}}), encoding="utf-8")
    return folder


def _row() -> dict:
    row = copy.deepcopy(load_yaml("vllm.yaml")["versions"]["0.33.0"])
    return {**row, "pip": "vllm==0.35.0", "official_image": "vllm/vllm-openai:v0.35.0"}


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda r: r["defaults"]["memory_accounting"].update(hidden_bufers=4),
     "versions.0.35.0.defaults.memory_accounting.hidden_bufers", "is not a field the kit knows"),
    (lambda r: r["jit_toolchain"].update(cuda_jit=13), "versions.0.35.0.jit_toolchain.cuda_jit",
     "Input should be a valid string (got 13)"),
    (lambda r: r["defaults"].update(kv_sizing={"margin_fraction": "x"}),
     "versions.0.35.0.defaults.kv_sizing.margin_fraction", "Input should be a valid number"),
    (lambda r: r["jit_toolchain"].pop("pip"), "versions.0.35.0.jit_toolchain.pip", "is required"),
])
def test_a_users_row_is_checked_by_the_same_models_naming_the_users_file(tmp_path, edit, field, message):
    row = _row()
    edit(row)
    folder = _user_table(tmp_path, row)
    with pytest.raises(UserDataError) as caught:
        user_version_rows(folder, load_yaml("vllm.yaml"))
    first = caught.value.lines()[0]
    assert first.startswith(f"{folder / 'vllm.yaml'}: {field}: {message}"), first
    assert "Releases the kit does not ship" in (caught.value.hint or "")  # where the README says what a row holds


def test_a_users_row_joins_the_typed_table(tmp_path):
    folder = _user_table(tmp_path, _row())
    typed = tables.vllm_model_with(folder)
    assert isinstance(typed.versions["0.35.0"], VersionRow) and typed.versions["0.35.0"].pip == "vllm==0.35.0"
    assert set(typed.versions) == set(datafiles._vllm_table_with(folder)["versions"])
    assert "0.35.0" not in tables.shipped_vllm_model().versions  # the shipped model is left as it is


def test_versioned_reads_model_rows_and_mappings():
    rows = [Since(since="0.0.0", value="8.0"), Since(since="0.32.0", value="7.5")]
    assert versioned(rows, "0.26.0") == "8.0" and versioned(rows, "0.33.0") == "7.5"
    assert versioned([{"since": "0.0.0", "value": "a"}], "0.1.0") == "a" and versioned("6.0", "0.1.0") == "6.0"


def test_the_fp8_floor_is_read_from_the_table():
    assert quantization_min_cc("fp8", "0.26.0") == "8.0" and quantization_min_cc("fp8", "0.33.0") == "7.5"
    # no compute-capability threshold is written into the planner's or the deploy checks' code
    literal = re.compile(r"[<>]=?\s*\(\d+,\s*\d+\)|cc_tuple\(\s*[\"']\d")
    for folder in ("kit/memory", "kit/deploy"):
        for path in sorted((REPO / folder).rglob("*.py")):
            code = [line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()]
            assert not [line for line in code if literal.search(line)], path
