"""BuildKit through the Engine's own API, with no buildx and no session.

The Engine's ``POST /build`` runs BuildKit when asked for ``version=2``. Without a client session, the Engine serves
the request's body to BuildKit as the build context (a tar it fetches over an internal URL): cache and bind mounts,
parallel stages and the Engine's image store all work, and nothing but the Docker socket is needed. What BuildKit
reports comes back as JSON lines whose ``moby.buildkit.trace`` entries carry a protobuf ``StatusResponse``
(moby/buildkit ``api/services/control/control.proto``): the steps (vertexes) with their start, end and cache hit,
and each step's output. This module writes the context and reads those messages; ``build.py`` drives the build.

The wheels do not travel in the context. Sent there, a 3.5 GB wheelhouse was written four times per build (the
request's body, BuildKit's fetch of it, its unpacking, the COPY into the inputs stage) and hashed again for the
mount's cache key: about 45 s on 2 cores. Instead the wheelhouse becomes a local image once (``wheelhouse_image``,
the Engine's import: one write), which the Dockerfile mounts by the ``KIT_WHEELHOUSE`` build argument; BuildKit keeps
the content hash of an image's layer, so a later build from the same wheelhouse reads the wheels where they lie.

The context is written as a GNU tar whose first member has a short name: BuildKit tells a tar from a Dockerfile by
reading the first header of the body alone, and an extended header first (Python's default pax format adds one for
a fractional mtime; GNU's for a name over 100 characters) makes it take the whole body for a Dockerfile.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kit.core.errors import BuildError

if TYPE_CHECKING:  # the docker package is imported where the Engine is reached (kit/core/docker_engine.py)
    from docker import DockerClient

CHUNK = 1 << 20


# ------------------------------------------------------------------------------------------------ the context


def _members(context_dir: Path) -> Iterator[Path]:
    """Every path under the context, parents first, in sorted order (two builds send the same bytes)."""
    for root, dirs, files in os.walk(context_dir):
        dirs.sort()
        base = Path(root)
        for name in sorted(dirs + files):
            yield base / name


def context_stream(context_dir: Path, prefix: str = "") -> Iterator[bytes]:
    """The context folder as a tar, in chunks, written by a thread into a pipe: a 3 GB wheelhouse is streamed, never
    written to a temporary file. Owners are root's and times whole seconds. With ``prefix``, the folder's files go
    under that folder of the tar (its own header first)."""
    read_fd, write_fd = os.pipe()
    failure: list[Exception] = []

    def write() -> None:
        try:
            with os.fdopen(write_fd, "wb") as sink, \
                    tarfile.open(fileobj=sink, mode="w|", format=tarfile.GNU_FORMAT) as tar:
                for path in [context_dir] * bool(prefix) + list(_members(context_dir)):
                    name = (Path(prefix) / path.relative_to(context_dir)).as_posix()
                    info = tar.gettarinfo(str(path), arcname=name)
                    info.mtime = int(info.mtime)  # a float would add a pax header (see the module's note)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    if info.isfile():
                        with open(path, "rb") as handle:
                            tar.addfile(info, handle)
                    else:
                        tar.addfile(info)
        except (OSError, tarfile.TarError) as error:  # raised by the reader; a broken pipe: the reader stopped first
            failure.append(error)

    writer = threading.Thread(target=write, name="build-context", daemon=True)
    writer.start()
    with os.fdopen(read_fd, "rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk
    writer.join()
    if failure and not isinstance(failure[0], BrokenPipeError):
        raise BuildError(f"{context_dir}: the build context could not be sent: {failure[0]}")


# ------------------------------------------------------------------------------------------------ the wheelhouse

WHEELHOUSE_REPOSITORY = "vllm-kit/wheelhouse"
# Which image repository's builds made a wheelhouse image: a newer one for the same repository replaces it.
WHEELHOUSE_LABEL = "org.vllm-kit.wheelhouse-for"


def wheelhouse_key(wheels_dir: Path) -> str:
    """The wheelhouse image's tag: a digest of the files pip will read, by name. A wheel counts by its size and
    modification time (one written again gets a new time; hashing 3.5 GB would cost what the image saves), any other
    file (the lock) by its content. A locked build's pip checks every wheel's sha256 itself."""
    digest = hashlib.sha256()
    for path in sorted(wheels_dir.iterdir()):
        stat = path.stat()
        if path.suffix == ".whl":
            mark = f"{stat.st_size} {stat.st_mtime_ns}"
        else:
            mark = hashlib.sha256(path.read_bytes()).hexdigest()
        digest.update(f"{path.name}\0{mark}\n".encode())
    return digest.hexdigest()[:16]


def wheelhouse_image(client: DockerClient, wheels_dir: Path, owner: str) -> tuple[str, bool]:
    """The wheels as a local image (``WHEELHOUSE_REPOSITORY:key``, the files under /wheels), imported unless there;
    returns it and whether it was imported. Older wheelhouse images ``owner``'s builds made are removed (one a
    repository: each holds the whole wheelhouse); one in use stays."""
    from docker.errors import APIError

    key = wheelhouse_key(wheels_dir)
    ref = f"{WHEELHOUSE_REPOSITORY}:{key}"
    if client.images.list(name=ref):
        return ref, False
    response = client.api._post(client.api._url("/images/create"),
                                params={"fromSrc": "-", "repo": WHEELHOUSE_REPOSITORY, "tag": key,
                                        "changes": [f"LABEL {WHEELHOUSE_LABEL}={json.dumps(owner)}"]},
                                data=context_stream(wheels_dir, prefix="wheels"),
                                headers={"Content-Type": "application/x-tar"}, stream=True, timeout=None)
    client.api._raise_for_status(response)
    for raw in response.iter_lines():
        message = json.loads(raw) if raw else {}
        if "error" in message:
            raise BuildError(f"{wheels_dir}: the wheels could not be made an image: {message['error']}")
    for image in client.images.list(name=WHEELHOUSE_REPOSITORY, filters={"label": f"{WHEELHOUSE_LABEL}={owner}"}):
        if ref not in image.tags:
            try:
                client.images.remove(image.id)
            except APIError:  # in use by a build that is running, or removed meanwhile
                pass
    return ref, True


# ------------------------------------------------------------------------------------------------ the trace


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message: varints as ints, length-delimited fields as bytes; fixed-width
    fields (none in the messages read here) are skipped."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield number, data[at:at + size]
            at += size
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"protobuf wire type {wire}")


def _timestamp(data: bytes) -> float:
    """google.protobuf.Timestamp: seconds (1), nanos (2)."""
    seconds = nanos = 0
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            seconds = value
        elif number == 2 and isinstance(value, int):
            nanos = value
    return seconds + nanos / 1e9


@dataclass
class Vertex:
    """One step of the solve (control.proto ``Vertex``): a Dockerfile instruction is named ``[stage N/M] INSTR``."""

    digest: str
    name: str = ""
    cached: bool = False
    started: float | None = None
    completed: float | None = None
    error: str = ""


@dataclass
class Trace:
    """What the build's trace messages said so far: the vertexes, in the order first seen."""

    vertexes: dict[str, Vertex] = field(default_factory=dict)

    def read(self, aux: str) -> tuple[list[Vertex], list[tuple[Vertex, str]]]:
        """Fold one trace message in; returns the vertexes that started with it and the output lines it carried."""
        started: list[Vertex] = []
        lines: list[tuple[Vertex, str]] = []
        for number, value in _fields(base64.b64decode(aux)):
            if number == 1 and isinstance(value, bytes):
                vertex, fresh = self._vertex(value)
                if fresh:
                    started.append(vertex)
            elif number == 3 and isinstance(value, bytes):
                lines.extend(self._log(value))
        return started, lines

    def _vertex(self, data: bytes) -> tuple[Vertex, bool]:
        """Fold one Vertex message into the vertex of its digest; True when it is the message that started it."""
        found: dict[int, int | bytes] = dict(_fields(data))  # each field read here occurs once (2, inputs, repeats)
        digest = found.get(1)
        key = digest.decode() if isinstance(digest, bytes) else ""
        vertex = self.vertexes.setdefault(key, Vertex(key))
        was_started = vertex.started is not None
        for number, value in found.items():
            if number == 4 and value:
                vertex.cached = True
            elif isinstance(value, bytes):
                if number == 3:
                    vertex.name = value.decode(errors="replace")
                elif number == 5:
                    vertex.started = _timestamp(value)
                elif number == 6:
                    vertex.completed = _timestamp(value)
                elif number == 7:
                    vertex.error = value.decode(errors="replace")
        return vertex, not was_started and vertex.started is not None

    def _log(self, data: bytes) -> list[tuple[Vertex, str]]:
        digest, message = "", b""
        for number, value in _fields(data):
            if number == 1 and isinstance(value, bytes):
                digest = value.decode()
            elif number == 4 and isinstance(value, bytes):
                message = value
        vertex = self.vertexes.setdefault(digest, Vertex(digest))
        return [(vertex, line) for line in message.decode(errors="replace").splitlines() if line.strip()]

    def steps(self) -> list[Vertex]:
        """The Dockerfile's own instructions (``[stage N/M] ...``), in the order they started."""
        named = [v for v in self.vertexes.values() if v.name.startswith("[") and not v.name.startswith("[internal]")]
        return sorted(named, key=lambda v: (v.started is None, v.started or 0.0))

    def failed(self) -> Vertex | None:
        return next((v for v in self.vertexes.values() if v.error), None)
