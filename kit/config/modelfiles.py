"""A model's files as the kit reads them, below the two readers (modelinfo.py: a local folder, the catalog;
modelsource.py: the Hugging Face cache and the hub): JSON read within the kit's limits, and the stored tensor bytes a
safetensors header describes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kit.core.errors import PlanError, shown
from kit.core.inputfiles import decode_utf8, input_limits, read_capped

LOCAL_MODEL_HINT = "give --model (beside a preset: model=) a model folder or its config.json"


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is one (4096 or 4096.0); None for bools, fractions, nan, inf, text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


class StoredTensors(BaseModel):
    """A checkpoint's stored tensor bytes: the total, and per safetensors dtype where the headers were read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    by_dtype: dict[str, int] = {}

    def add(self, other: StoredTensors) -> StoredTensors:
        by_dtype = dict(self.by_dtype)
        for name, size in other.by_dtype.items():
            by_dtype[name] = by_dtype.get(name, 0) + size
        return StoredTensors(total=self.total + other.total, by_dtype=by_dtype)


def safetensors_header_bytes(header: Any, where: str, data_size: int | None) -> StoredTensors:
    """The tensors a parsed safetensors header describes, per dtype; each tensor's data_offsets must lie within
    ``data_size`` (None: the data is not at hand, e.g. a header read from the hub)."""
    if not isinstance(header, dict):
        raise PlanError(f"{where}: the safetensors header is not a JSON object")
    by_dtype: dict[str, int] = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        start, end = ((whole_number(offsets[0]), whole_number(offsets[1]))
                      if isinstance(offsets, list) and len(offsets) == 2 else (None, None))
        if start is None or end is None or not 0 <= start <= end or (data_size is not None and end > data_size):
            raise PlanError(f"{where}: tensor {shown(key)}: data_offsets {shown(offsets)} do not lie within the file")
        dtype = meta.get("dtype")
        name = dtype if isinstance(dtype, str) and dtype.isalnum() and len(dtype) <= 16 else "unknown"
        by_dtype[name] = by_dtype.get(name, 0) + end - start
    return StoredTensors(total=sum(by_dtype.values()), by_dtype=by_dtype)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes, where: str) -> Any:
    """JSON text; NaN/Infinity (Python's extension), bad UTF-8 or nesting past the parser's depth are errors."""
    text = decode_utf8(raw, where, error=PlanError)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise PlanError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:
        raise PlanError(f"{where}: not valid JSON ({str(exc)[:120]})") from None


def load_json(path: Path, limit: int | None = None) -> Any:
    limit = limit or input_limits()["files"]["model_config_max_bytes"]
    return parse_json(read_capped(path, str(path), limit, error=PlanError, what="JSON file"), str(path))
