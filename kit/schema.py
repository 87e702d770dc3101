"""The JSON Schema for preset files, generated from the preset model. ``python -m kit.schema`` rewrites it."""

from __future__ import annotations

import json
import sys

from kit.datafiles import PRESETS_DIR
from kit.preset import Preset

SCHEMA_PATH = PRESETS_DIR / "schema.json"


def preset_schema() -> dict:
    schema = Preset.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "vllm-kit preset"
    schema.setdefault("properties", {})["$schema"] = {"type": "string"}
    return schema


def schema_text() -> str:
    return json.dumps(preset_schema(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    from kit.write import atomic_write

    atomic_write(SCHEMA_PATH, schema_text())
    print(f"wrote {SCHEMA_PATH.relative_to(PRESETS_DIR.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
