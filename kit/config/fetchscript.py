"""The in-image fetch script (kit/launch/fetch_files.py) as the kit ships it: its text, and its definitions where the
kit must judge as the fetch will (hubrevision.py's revision rule). Below hubfetch.py and hubrevision.py, which both
read it."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any


def fetch_script() -> str:
    return resources.files("kit.launch").joinpath("fetch_files.py").read_text(encoding="utf-8")


@functools.cache
def shipped_fetch_functions() -> dict[str, Any]:
    """The shipped fetch script's definitions, from its text as the render ships it: where the kit must judge as the
    fetch will (a revision), it runs the fetch's own rule rather than a copy. The script imports only the standard
    library at its top and runs nothing there but definitions (its main is behind ``__name__``)."""
    namespace: dict[str, Any] = {"__name__": "vllm_kit_fetch_files"}
    exec(compile(fetch_script(), "fetch_files.py", "exec"), namespace)  # noqa: S102 - the kit's own shipped file
    return namespace
