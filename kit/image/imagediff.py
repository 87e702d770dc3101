"""Compare two images by content: every file's path, type, mode, owner and sha256, ignoring timestamps.

Public entry point: ``diff_images(a, b) -> ImageDiff``. The file system is read from ``docker export`` of a
created (never started) container, streamed, so a multi-GB image needs no disk space. The image config is
compared too (environment, entrypoint, user, labels, platform), without its creation times.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kit.core.docker_engine import docker_client, local_image

CONFIG_KEYS = ("Env", "Entrypoint", "Cmd", "User", "WorkingDir", "Labels", "ExposedPorts", "Volumes", "Shell")
# Docker writes these into every container it creates; they are not the image's.
CONTAINER_FILES = {".dockerenv", "etc/hostname", "etc/hosts", "etc/resolv.conf"}


@dataclass(frozen=True)
class Entry:
    kind: str  # file | dir | symlink | hardlink | other
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str = ""
    link: str = ""


class _ChunkReader(io.RawIOBase):
    """A file object over the export stream's chunks, for tarfile's streaming mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # noqa: ANN001
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


def _kind(member: tarfile.TarInfo) -> str:
    if member.isfile():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"


@contextlib.contextmanager
def exported(ref: str) -> Iterator[io.BufferedReader]:
    """The image's flattened file system as a tar stream (``docker export`` of a created, never started container)."""
    local_image(ref)
    client = docker_client()
    container = client.containers.create(ref, entrypoint=["/kit-never-runs"], command=[], network_disabled=True)
    try:
        yield io.BufferedReader(_ChunkReader(iter(container.export(chunk_size=1 << 20))), buffer_size=1 << 20)
    finally:
        container.remove(force=True)


def image_manifest(ref: str, progress: Callable[[str], None] | None = None) -> dict[str, Entry]:
    """{path: Entry} for every file in the image, from its flattened file system."""
    with exported(ref) as stream:
        return manifest_from_tar(stream, ref, progress)


def manifest_from_tar(stream, label: str = "", progress: Callable[[str], None] | None = None) -> dict[str, Entry]:  # noqa: ANN001
    manifest: dict[str, Entry] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            path = member.name.removeprefix("./").strip("/")
            if not path or path in CONTAINER_FILES:
                continue
            sha = ""
            if member.isfile():
                digest = hashlib.sha256()
                fh = tar.extractfile(member)
                assert fh is not None  # member.isfile()
                for block in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023
                    digest.update(block)
                sha = digest.hexdigest()
            manifest[path] = Entry(_kind(member), member.mode, member.uid, member.gid,
                                   member.size if member.isfile() else 0, sha, member.linkname)
            if progress and len(manifest) % 20000 == 0:
                progress(f"{label}: {len(manifest)} files read")
    return manifest


def config_of(ref: str) -> dict:
    attrs = local_image(ref).attrs
    config = attrs.get("Config") or {}
    summary = {key: config.get(key) for key in CONFIG_KEYS}
    summary["Platform"] = f"{attrs.get('Os')}/{attrs.get('Architecture')}"
    return summary


def image_facts(ref: str) -> dict:
    attrs = local_image(ref).attrs
    return {"id": attrs["Id"], "created": attrs.get("Created"), "repo_digests": attrs.get("RepoDigests") or [],
            "layers": (attrs.get("RootFS") or {}).get("Layers") or []}


@dataclass
class ImageDiff:
    a: dict
    b: dict
    files_a: int
    files_b: int
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # path -> the fields that differ
    config: dict[str, tuple] = field(default_factory=dict)

    @property
    def same_content(self) -> bool:
        return not (self.only_a or self.only_b or self.changed or self.config)

    @property
    def same_id(self) -> bool:
        return self.a["id"] == self.b["id"]

    @property
    def same_layers(self) -> list[bool]:
        return [x == y for x, y in zip(self.a["layers"], self.b["layers"], strict=False)]  # the shared prefix

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "files": [self.files_a, self.files_b], "same_id": self.same_id,
                "same_content": self.same_content, "only_a": self.only_a, "only_b": self.only_b,
                "changed": self.changed, "config": {k: list(v) for k, v in self.config.items()},
                "same_layers": self.same_layers}


def diff_images(a: str, b: str, progress: Callable[[str], None] | None = None) -> ImageDiff:
    facts_a, facts_b = image_facts(a), image_facts(b)
    config_a, config_b = config_of(a), config_of(b)
    config = {k: (config_a[k], config_b[k]) for k in config_a if config_a[k] != config_b[k]}
    if progress:
        progress(f"reading {a}")
    files_a = image_manifest(a, progress)
    if progress:
        progress(f"reading {b}")
    files_b = image_manifest(b, progress) if facts_a["id"] != facts_b["id"] else files_a
    changed = {}
    for path in sorted(files_a.keys() & files_b.keys()):
        x, y = files_a[path], files_b[path]
        if x != y:
            changed[path] = [name for name in ("kind", "mode", "uid", "gid", "size", "sha256", "link")
                             if getattr(x, name) != getattr(y, name)]
    return ImageDiff(facts_a, facts_b, len(files_a), len(files_b), sorted(files_a.keys() - files_b.keys()),
                     sorted(files_b.keys() - files_a.keys()), changed, config)
