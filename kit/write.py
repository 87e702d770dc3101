"""Write rendered files: compare with disk, refuse to clobber user edits, write atomically.

A manifest (``.vllm-kit.json``) records the hash of every file as the kit last wrote it, so a file
that differs from that hash was edited by the user and is kept unless ``force``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError, Problem

MANIFEST = ".vllm-kit.json"


@dataclass(frozen=True)
class FileResult:
    path: str
    status: str  # create | identical | changed | conflict | forced


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_manifest(out_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
        files = data.get("files", {})
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError):
        return {}


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plan_writes(files: dict[str, str], out_dir: Path, force: bool = False) -> list[FileResult]:
    """Decide each file's fate without writing anything."""
    manifest = read_manifest(out_dir)
    results = []
    for rel, text in sorted(files.items()):
        target = out_dir / rel
        if not target.exists():
            results.append(FileResult(rel, "create"))
            continue
        try:
            current = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            current = None
        if current == text:
            results.append(FileResult(rel, "identical"))
        elif current is not None and manifest.get(rel) == sha256_text(current):
            results.append(FileResult(rel, "changed"))  # still as the kit wrote it: safe to update
        else:
            results.append(FileResult(rel, "forced" if force else "conflict"))
    return results


def write_files(files: dict[str, str], out_dir: Path, *, force: bool = False, dry_run: bool = False) -> list[FileResult]:
    """All or nothing: if any file would clobber a user's edit (without force), nothing is written."""
    if out_dir.exists() and not out_dir.is_dir():
        raise KitError(f"--out {out_dir}: not a directory")
    results = plan_writes(files, out_dir, force)
    conflicts = [r for r in results if r.status == "conflict"]
    if conflicts:
        raise KitError(
            f"{out_dir}: files changed since the kit wrote them",
            problems=[
                Problem(str(out_dir / r.path), "changed since the kit wrote it (or not written by the kit); not overwritten",
                        "keep your edit in the preset instead, or re-run with --force to overwrite")
                for r in conflicts
            ],
        )
    if dry_run:
        return results
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.status != "identical":
            atomic_write(out_dir / r.path, files[r.path])
    manifest = read_manifest(out_dir)
    manifest.update({rel: sha256_text(text) for rel, text in files.items()})
    atomic_write(out_dir / MANIFEST, json.dumps({"files": dict(sorted(manifest.items()))}, indent=2) + "\n")
    return results
