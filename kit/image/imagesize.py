"""Where an image's bytes are: by layer, by Python distribution and by top-level directory, largest first.

Public entry point: ``image_sizes(ref) -> SizeBreakdown``. Layers come from the image history (the instruction
that made each); files from the flattened file system (``docker export``, streamed: what a container sees, so a
file a later layer deleted counts nowhere). A file belongs to the distribution whose dist-info RECORD lists it
(what pip uninstall would remove), byte-code to its source's; the rest are counted by top-level directory only.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

from kit.core.docker_engine import docker_client

from kit.image.imagediff import exported

NO_DIST = "(no distribution)"


@dataclass
class SizeBreakdown:
    image: str
    total: int  # bytes of regular files in the flattened file system
    files: int
    layers: list[dict] = field(default_factory=list)  # {size, created_by}, the image's order (base first)
    distributions: list[dict] = field(default_factory=list)  # {name, version, bytes, files}, largest first
    directories: list[dict] = field(default_factory=list)  # {path, bytes, files}, largest first

    def to_json(self) -> dict:
        return {"image": self.image, "total": self.total, "files": self.files, "layers": self.layers,
                "distributions": self.distributions, "directories": self.directories}


def _dist_info_name(folder: str) -> tuple[str, str]:
    """`vllm-0.33.0.dist-info` -> ("vllm", "0.33.0")."""
    stem = folder[: -len(".dist-info")]
    name, _, version = stem.partition("-")
    return name, version


def _source_of(path: str) -> str | None:
    """The module a byte-code file was compiled from (`pkg/__pycache__/mod.cpython-311.pyc` -> `pkg/mod.py`), or None.

    Byte-code belongs to its source's distribution (pip uninstall removes it with the source) whether or not the RECORD
    lists it: pip lists only the byte-code it compiled itself, and the kit's images compile with compileall after
    `pip install --no-compile` (images/python_venv.j2), as uv does by default."""
    head, marker, base = path.rpartition("/__pycache__/")
    if not marker or not base.endswith(".pyc"):
        return None
    return f"{head}/{base.split('.', 1)[0]}.py"


def breakdown_from_tar(stream, image: str = "", layers: list[dict] | None = None,  # noqa: ANN001 - a file object
                       progress: Callable[[str], None] | None = None) -> SizeBreakdown:
    """The breakdown of a flattened file system given as a tar stream (``docker export``, or a fixture)."""
    sizes: dict[str, int] = {}
    records: dict[str, str] = {}  # dist-info folder path -> RECORD text
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            path = member.name.removeprefix("./").strip("/")
            sizes[path] = member.size
            head, _, base = path.rpartition("/")
            if base == "RECORD" and head.endswith(".dist-info"):
                record = tar.extractfile(member)
                assert record is not None  # only regular files get this far
                records[head] = record.read().decode("utf-8", "replace")
            if progress and len(sizes) % 50000 == 0:
                progress(f"{image}: {len(sizes)} files read")
    owner: dict[str, str] = {}
    versions: dict[str, str] = {}
    for info, text in sorted(records.items()):
        site = info.rpartition("/")[0]
        name, version = _dist_info_name(info.rpartition("/")[2])
        versions[name] = version
        for line in text.splitlines():
            rel = line.rsplit(",", 2)[0]
            if rel:
                owner[os.path.normpath(f"{site}/{rel}" if site else rel)] = name
    by_dist: dict[str, list[int]] = {}
    by_dir: dict[str, list[int]] = {}
    for path, size in sizes.items():
        dist = owner.get(path) or owner.get(_source_of(path) or "", NO_DIST)
        for table, key in ((by_dist, dist), (by_dir, "/" + path.split("/")[0])):
            entry = table.setdefault(key, [0, 0])
            entry[0] += size
            entry[1] += 1
    return SizeBreakdown(
        image=image, total=sum(sizes.values()), files=len(sizes), layers=list(layers or []),
        distributions=[{"name": k, "version": versions.get(k, ""), "bytes": v[0], "files": v[1]}
                       for k, v in sorted(by_dist.items(), key=lambda kv: (-kv[1][0], kv[0]))],
        directories=[{"path": k, "bytes": v[0], "files": v[1]}
                     for k, v in sorted(by_dir.items(), key=lambda kv: (-kv[1][0], kv[0]))])


def layer_sizes(ref: str) -> list[dict]:
    """Each layer's size and the instruction that made it, base first (history lists newest first)."""
    history = docker_client().api.history(ref)
    return [{"size": int(h.get("Size") or 0), "created_by": " ".join(str(h.get("CreatedBy") or "").split())}
            for h in reversed(history)]


def image_sizes(ref: str, progress: Callable[[str], None] | None = None) -> SizeBreakdown:

    with exported(ref) as stream:
        result = breakdown_from_tar(stream, ref, progress=progress)
    result.layers = layer_sizes(ref)
    return result


def human(size: int) -> str:
    """Bytes as Docker prints image sizes (decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


def format_breakdown(result: SizeBreakdown, limit: int = 15) -> str:
    lines = [f"{result.image}: {human(result.total)} in {result.files} files"]
    lines.append("layers (base first):")
    lines += [f"  {human(layer['size']):>10}  {layer['created_by'][:100]}" for layer in result.layers
              if layer["size"]]
    lines.append("Python distributions:")
    lines += [f"  {human(d['bytes']):>10}  {d['name']} {d['version']}".rstrip()
              for d in result.distributions[:limit]]
    lines.append("top-level directories:")
    lines += [f"  {human(d['bytes']):>10}  {d['path']}" for d in result.directories[:limit]]
    return "\n".join(lines)
