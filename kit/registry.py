"""Image references and registries: resolve a digest (local or remote), push and read back a digest.

Public entry points: ``resolve_base_digest(ref, offline)`` and ``push_image(source, registry, repository, tag)``.

A ``docker import``ed image has no repo digest (it never came from a registry). Offline, the kit then pins
its image ID: the sha256 of the image's config, which names every layer's content (diff_ids), so it is a
content digest too, but it only resolves on an engine that has the image. Pushing the base to a registry
gives it a repo digest (the manifest's sha256) that any engine can pull by.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from kit.docker_engine import docker_client
from kit.errors import KitError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])


@dataclass(frozen=True)
class BaseDigest:
    ref: str  # as the render names it, e.g. vllm-kit/base:bookworm
    digest: str  # sha256:...
    kind: str  # "repo-digest" (a registry manifest) | "image-id" (local config digest)
    pinned: str  # what FROM receives: repo@sha256:... or sha256:<image id>


def split_registry(ref: str) -> tuple[str | None, str]:
    """(registry host or None, the rest), by Docker's rule: a first part with '.' or ':' or 'localhost'."""
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, ref


def repository_of(ref: str) -> str:
    """The reference without tag or digest."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name


def short_error(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return " ".join(str(text).split())[:240]


def resolve_base_digest(ref: str, *, offline: bool) -> BaseDigest:
    """The digest to pin ``ref`` by: from the local image (offline) or from its registry."""
    from docker.errors import APIError, ImageNotFound

    client = docker_client()
    if "@" in ref:
        repo, digest = ref.split("@", 1)
        return BaseDigest(ref, digest, "repo-digest", ref)
    if offline:
        try:
            image = client.images.get(ref)
        except ImageNotFound:
            raise KitError(f"base image {ref}: not on this engine (--offline resolves digests from local images)",
                           hint="build or load it first, or lock without --offline to ask its registry") from None
        repo_digests = image.attrs.get("RepoDigests") or []
        own = [r for r in repo_digests if repository_of(r) == repository_of(ref)]
        if own or repo_digests:
            pinned = (own or repo_digests)[0]
            return BaseDigest(ref, pinned.split("@", 1)[1], "repo-digest", pinned)
        # Imported (or locally built) and never pushed: pin the content-addressed image ID.
        return BaseDigest(ref, image.id, "image-id", image.id)
    try:
        data = client.images.get_registry_data(ref)
    except (APIError, OSError) as exc:
        registry = split_registry(ref)[0] or "the default registry"
        raise KitError(f"base image {ref}: registry {registry} unreachable or refused: {short_error(exc)}",
                       hint="use --offline to pin the local image instead") from None
    digest = data.id
    return BaseDigest(ref, digest, "repo-digest", f"{repository_of(ref)}@{digest}")


def manifest_digest(registry: str, name: str, tag: str, *, timeout: float = 30) -> str:
    """``Docker-Content-Digest`` of ``/v2/<name>/manifests/<tag>`` (plain HTTP only for loopback registries)."""
    host = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry.split("]")[0] + "]"
    scheme = "http" if host in LOOPBACK_HOSTS else "https"
    url = f"{scheme}://{registry}/v2/{name}/manifests/{tag}"
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            digest = response.headers.get("Docker-Content-Digest", "")
    except (urllib.error.URLError, OSError) as exc:
        raise KitError(f"registry {registry} unreachable: {short_error(exc)}") from None
    if not DIGEST_RE.match(digest):
        raise KitError(f"registry {registry}: no Docker-Content-Digest for {name}:{tag}")
    return digest


@dataclass(frozen=True)
class Pushed:
    ref: str  # registry/name:tag
    digest: str  # the manifest digest, as the registry reports it
    pinned: str  # registry/name@sha256:...
    image_id: str


def push_image(source: str, registry: str, repository: str, tag: str,
               progress: Callable[[str], None] | None = None) -> Pushed:
    """Tag ``source`` as ``registry/repository:tag``, push it, and read its digest back from the registry API."""
    from docker.errors import APIError, ImageNotFound

    client = docker_client()
    try:
        image = client.images.get(source)
    except ImageNotFound:
        raise KitError(f"image {source} is not built", hint="run `kit build` for the same preset first") from None
    name = split_registry(repository)[1]
    target = f"{registry}/{name}"
    image.tag(target, tag)
    pushed_digest = None
    try:
        seen: set[str] = set()
        for chunk in client.api.push(target, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise KitError(f"push to {registry} failed: {' '.join(chunk['error'].split())[:240]}",
                               hint="is the registry running and reachable from the Docker engine?")
            aux = chunk.get("aux") or {}
            pushed_digest = aux.get("Digest", pushed_digest)
            status, layer = chunk.get("status", ""), chunk.get("id", "")
            if progress and status in ("Pushed", "Layer already exists", "Mounted from") and layer not in seen:
                seen.add(layer)
                progress(f"{layer}: {status.lower()}")
        digest = manifest_digest(registry, name, tag)
    except APIError as exc:
        client.api.remove_image(f"{target}:{tag}")
        raise KitError(f"push to {registry} failed: {short_error(exc)}") from None
    except KitError:
        client.api.remove_image(f"{target}:{tag}")
        raise
    if pushed_digest and pushed_digest != digest:
        raise KitError(f"{target}:{tag}: the engine pushed {pushed_digest} but the registry serves {digest}")
    return Pushed(f"{target}:{tag}", digest, f"{target}@{digest}", image.id)
