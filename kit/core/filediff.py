"""What a write would change in a folder, as a unified diff (`kit render --diff`); reads, never writes."""

from __future__ import annotations

import difflib
from pathlib import Path

from kit.core.write import _read_regular, read_manifest, sha256_bytes


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def _one_file(rel: str, current: bytes | None, new: bytes | None) -> list[str]:
    before = f"a/{rel}" if current is not None else "/dev/null"
    after = f"b/{rel}" if new is not None else "/dev/null"
    return list(difflib.unified_diff(_lines(current), _lines(new), before, after))


def _joined(chunks: list[str]) -> str:
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in chunks)


def diff_files(files: dict[str, str], out_dir: Path) -> str:
    """A unified diff from the folder to ``files``: new files against /dev/null; a file the kit wrote before
    (the manifest lists it) that ``files`` no longer has, unedited, as removed. Empty when nothing changes."""
    chunks: list[str] = []
    exists = out_dir.is_dir()
    for rel in sorted(files):
        current = _read_regular(out_dir / rel) if exists else None
        new = files[rel].encode("utf-8")
        if current == new:
            continue
        chunks.extend(_one_file(rel, current, new))
    if exists:
        for rel, digest in sorted(read_manifest(out_dir).items()):
            if rel in files:
                continue
            current = _read_regular(out_dir / rel)
            if current is not None and sha256_bytes(current) == digest:
                chunks.extend(_one_file(rel, current, None))
    return _joined(chunks)


def diff_file_sets(before: dict[str, str], after: dict[str, str]) -> str:
    """A unified diff from one rendered set of files to another, in the same form as ``diff_files`` (a file only
    one set has is against /dev/null). Empty when the sets are the same."""
    chunks: list[str] = []
    for rel in sorted(set(before) | set(after)):
        old = before[rel].encode("utf-8") if rel in before else None
        new = after[rel].encode("utf-8") if rel in after else None
        if old != new:
            chunks.extend(_one_file(rel, old, new))
    return _joined(chunks)
