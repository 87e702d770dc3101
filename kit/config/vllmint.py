"""vLLM's integer grammar for `vllm serve` flags: the kit's one reader of a vLLM integer.

vLLM reads an integer flag with one of three converters; which flag takes which is a per-version fact that the
flag snapshots record (kit/data/flags/vllm-X.json: ``"type": "int"`` and ``type_detail``, the converter's name):

- ``human_readable_int`` (``--max-num-batched-tokens``, ``--kv-cache-memory-bytes``, ...): a number with a
  suffix, lower case decimal (``k`` 10**3, ``m`` 10**6, ``g`` 10**9, ``t`` 10**12; decimals allowed, the product
  truncated: ``25.6k`` is 25600), upper case binary (``K`` 2**10 ... ``T`` 2**40; whole numbers only); otherwise
  Python's ``int()`` of the stripped text.
- ``human_readable_int_or_auto`` (``--max-model-len``): the same, and ``-1`` or ``auto`` (any case) for -1, vLLM's
  "auto-fit": the model's own maximum length if one request of it fits in the KV cache, else the longest that does.
- ``int``: argparse's ``type=int``, Python's ``int()`` (surrounding blanks, a sign and ``_`` between digits pass;
  ``1e3``, ``0x10`` and ``16k`` do not).

Source: vllm/utils/argparse_utils.py ``human_readable_int``, ``human_readable_int_or_auto`` at v0.26.0, v0.32.0
and v0.33.0 (the same text in all three); at v0.16.0 the same two functions live in vllm/engine/arg_utils.py.
vllm/engine/arg_utils.py ``_compute_kwargs`` picks the converter per field (the snapshots record its choice).
"""

from __future__ import annotations

import re

CONVERTERS = ("int", "human_readable_int", "human_readable_int_or_auto")
AUTO = -1  # what human_readable_int_or_auto returns for "auto" and "-1"

_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

EXAMPLES = {
    "int": "an integer such as 16384",
    "human_readable_int": "an integer such as 16384, or with a suffix: 16k (16000), 25.6k, 16K (16384), 1M",
    "human_readable_int_or_auto": "an integer such as 16384, or with a suffix: 16k (16000), 25.6k, 16K (16384), 1M; "
                                  "or auto (-1: the longest that fits)",
}


def converter_of(type_detail: str | None) -> str:
    """The converter a snapshot entry of type int names (its ``type_detail``); plain ``int`` otherwise."""
    return type_detail if type_detail in CONVERTERS else "int"


def read_vllm_int(text: str, converter: str = "int") -> int:
    """``text`` as vLLM's ``converter`` reads it; otherwise ValueError, whose message says what the flag takes."""
    if converter not in CONVERTERS:
        raise ValueError(f"unknown vLLM integer converter {converter!r}")
    shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
    value = text.strip() if converter != "int" else text
    if converter == "human_readable_int_or_auto" and (value == "-1" or value.lower() == "auto"):
        return AUTO
    if converter != "int":
        match = _SUFFIXED.fullmatch(value)
        if match:
            number, suffix = match.groups()
            if suffix in _DECIMAL:
                product = float(number) * _DECIMAL[suffix]
                if product == float("inf"):
                    raise ValueError(f"expects {EXAMPLES[converter]}, got {shown}: too large")
                return int(product)
            if "." in number:  # vLLM: "Decimals are not allowed with binary suffixes like K. Did you mean ..."
                raise ValueError(f"expects {EXAMPLES[converter]}, got {shown}: decimals are not allowed with binary "
                                 f"suffixes like {suffix} (did you mean {number}{suffix.lower()}?)")
            return int(number) * _BINARY[suffix]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"expects {EXAMPLES[converter]}, got {shown}") from None
