"""The JSON Schema for preset files, generated from the preset model. ``python -m kit.config.schema`` rewrites it."""

from __future__ import annotations

import json
import sys

from kit.config.preset import Preset
from kit.core.datafiles import PRESETS_DIR, checkout_root
from kit.core.write import atomic_write

# The copy the installed kit reads; `main` writes the checkout's presets/schema.json, the source of it.
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

    root = checkout_root()
    if root is None:  # an installed copy would be overwritten by the next install; the checkout is the source
        print("error: python -m kit.config.schema rewrites presets/schema.json in a checkout of vllm-kit; "
              "this kit is installed from a wheel", file=sys.stderr)
        return 1
    target = root / "presets" / "schema.json"
    atomic_write(target, schema_text())
    print(f"wrote {target.relative_to(root)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
