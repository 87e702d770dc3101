"""Audit hook for the floor measurement (scripts/floor/record_floor.py puts this folder first on PYTHONPATH).

Python starts every interpreter of the server (API server, EngineCore, torch.compile's workers) with this file
when FLOOR_AUDIT_DIR is set, and each process appends every path it opens, and every program it starts, to
FLOOR_AUDIT_DIR/audit.<pid>.txt. /proc/<pid>/maps only shows what stays mapped: a .py file read once at import
shows only here. Standard library only; does nothing without FLOOR_AUDIT_DIR.
"""

import os
import sys

_DIR = os.environ.get("FLOOR_AUDIT_DIR")

if _DIR:
    _state = {"pid": None, "fd": -1, "busy": False}
    _seen: set = set()

    def _emit(kind: str, value) -> None:
        if isinstance(value, int):
            return  # an fd being wrapped: its path was recorded when it was opened
        try:
            text = os.fsdecode(value)
        except (TypeError, ValueError):
            return
        line = f"{kind}\t{text}\n"
        if line in _seen and _state["pid"] == os.getpid():
            return
        _state["busy"] = True  # our own os.open/os.write raise audit events too
        try:
            if _state["pid"] != os.getpid():  # first event, or a forked child: a file of its own
                _state["pid"] = os.getpid()
                _seen.clear()
                _state["fd"] = os.open(os.path.join(_DIR, f"audit.{os.getpid()}.txt"),
                                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _seen.add(line)
            os.write(_state["fd"], line.encode("utf-8", "surrogateescape"))
        except OSError:
            pass
        finally:
            _state["busy"] = False

    def _hook(event: str, args) -> None:
        if _state["busy"]:
            return
        if event == "open":
            _emit("open", args[0])
        elif event == "subprocess.Popen":
            _emit("exec", args[0])
            if args[1]:
                _emit("exec", args[1][0] if not isinstance(args[1], (str, bytes)) else args[1])
        elif event in ("os.exec", "os.posix_spawn"):
            _emit("exec", args[0])
        elif event == "ctypes.dlopen":
            if args[0]:
                _emit("dlopen", args[0])

    sys.addaudithook(_hook)
