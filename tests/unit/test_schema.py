"""The checked-in JSON Schema matches the preset model, and every preset file uses and passes it."""

import json

import jsonschema
import pytest
import yaml

from kit.config.preset_files import preset_names
from kit.config.schema import SCHEMA_PATH, schema_text
from kit.core.datafiles import PRESETS_DIR


def test_schema_is_fresh():
    assert SCHEMA_PATH.read_text() == schema_text(), "presets/schema.json is stale: run `make schema`"


@pytest.mark.parametrize("name", preset_names())
def test_preset_points_at_and_passes_the_schema(name):
    text = (PRESETS_DIR / f"{name}.yaml").read_text()
    assert text.startswith("# yaml-language-server: $schema=schema.json\n")
    jsonschema.validate(yaml.safe_load(text), json.loads(SCHEMA_PATH.read_text()))


def test_schema_rejects_unknown_sections():
    schema = json.loads(SCHEMA_PATH.read_text())
    bad = yaml.safe_load((PRESETS_DIR / "cpu.yaml").read_text()) | {"hardwares": {}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
