"""What a write would change in a folder, as a unified diff (`kit render --diff`); reads, never writes."""

from __future__ import annotations

import difflib
from pathlib import Path

from kit.core.write import _read_regular, read_manifest, sha256_bytes


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


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
        before = f"a/{rel}" if current is not None else "/dev/null"
        chunks.extend(difflib.unified_diff(_lines(current), _lines(new), before, f"b/{rel}"))
    if exists:
        for rel, digest in sorted(read_manifest(out_dir).items()):
            if rel in files:
                continue
            current = _read_regular(out_dir / rel)
            if current is not None and sha256_bytes(current) == digest:
                chunks.extend(difflib.unified_diff(_lines(current), [], f"a/{rel}", "/dev/null"))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in chunks)
