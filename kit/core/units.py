"""Readers of sizes and units as other tools write them, one reader per fact (the house style's rule).

``ram_in_bytes``: a memory or ``/dev/shm`` size as Docker reads it (``--shm-size``, ``--memory``, compose's
``shm_size``). Light: the standard library only.
"""

from __future__ import annotations

import re

# Docker's size grammar for memory and /dev/shm (docker/go-units size.go, RAMInBytes -> parseSize, v0.5.0): a
# number, then an optional unit, either after one space or directly; units are case-insensitive, binary
# (k=1024 ... p=1024**5), may end in "b" or "ib" ("4g", "4G", "4gb", "4GiB"), a bare "b" is bytes, and the
# product is truncated to whole bytes. Go's ParseFloat reads the number: decimal with an optional sign and
# exponent, or a hexadecimal float with a p exponent, "_" between digits. The kit refuses Inf/NaN and sizes past
# int64, which Docker turns into garbage.
_RAM_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DIGITS = r"\d(?:_?\d)*"  # Go literals allow "_" between digits ("1_000")
_HEX_DIGITS = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*"
_GO_DECIMAL = re.compile(rf"[+-]?(?:{_DIGITS}\.?(?:{_DIGITS})?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
_GO_HEX = re.compile(rf"[+-]?0[xX](?:_?{_HEX_DIGITS}\.?(?:{_HEX_DIGITS})?|\.{_HEX_DIGITS})[pP][+-]?{_DIGITS}")
_INT64_MAX = (1 << 63) - 1


def ram_in_bytes(text: str | int) -> int:
    """A size as Docker reads ``--shm-size``, ``--memory`` and compose's ``shm_size``; ValueError otherwise."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError("a size is a string such as 10.24g, 4G, 4gb, 4096m or a number of bytes")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"invalid size {text!r}: negative")
        return text
    number, space, suffix = text.partition(" ")
    if not space:
        last = max((text.rfind(ch) for ch in "0123456789."), default=-1)
        if last == -1:
            raise ValueError(f"invalid size {text!r}: no number")
        number, suffix = text[: last + 1], text[last + 1 :]
    if _GO_DECIMAL.fullmatch(number):
        value = float(number)
    elif _GO_HEX.fullmatch(number):
        value = float.fromhex(number.replace("_", ""))
    else:
        raise ValueError(f"invalid size {text!r}: {number!r} is not a number")
    if value < 0 or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"invalid size {text!r}: must be a finite number >= 0")
    unit = suffix.lower()
    if unit in ("", "b"):
        return _whole_bytes(text, value)
    if len(unit) > 3 or unit[0] not in _RAM_UNITS or unit[1:] not in ("", "b", "ib"):
        raise ValueError(f"invalid size {text!r}: unknown unit {suffix!r} (use b, k, m, g, t, p, optionally "
                         "followed by b or ib)")
    return _whole_bytes(text, value * _RAM_UNITS[unit[0]])


def _whole_bytes(text: str, value: float) -> int:
    # Go truncates toward zero when it converts to int64; past int64 the result is garbage, so refuse.
    if value > _INT64_MAX:
        raise ValueError(f"invalid size {text!r}: larger than 8 EiB")
    return int(value)
