"""Image references and registries: resolve a digest (local or remote), push and read back a digest.

Public entry points: ``resolve_base_digest(ref, offline)`` and ``push_image(source, registry, repository, tag)``.

Every registry question goes through the Docker engine (the SDK's push stream and its distribution inspect), with
the credentials the Docker client holds (``docker login``, credential helpers), so private registries and Docker
Hub answer the kit as they answer ``docker pull``; the kit never speaks the registry's HTTP API itself.

A ``docker import``ed image has no repo digest (it never came from a registry). Offline, the kit then pins
its image ID: the sha256 of the image's config, which names every layer's content (diff_ids), so it is a
content digest too, but it only resolves on an engine that has the image. Pushing the base to a registry
gives it a repo digest (the manifest's sha256) that any engine can pull by.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kit.core.docker_engine import docker_client, local_image
from kit.core.errors import KitError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


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
    from docker.errors import ImageNotFound

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
    digest = registry_digest(ref, hint="use --offline to pin the local image instead")
    return BaseDigest(ref, digest, "repo-digest", f"{repository_of(ref)}@{digest}")


def registry_digest(ref: str, *, hint: str | None = None) -> str:
    """The manifest digest the registry serves for ``ref``, asked through the engine (``GET /distribution/<ref>/json``)
    with the Docker client's credentials for that registry."""
    from docker.errors import APIError

    try:
        data = docker_client().images.get_registry_data(ref)
    except (APIError, OSError) as exc:
        registry = split_registry(ref)[0] or "the default registry"
        raise KitError(f"image {ref}: registry {registry} unreachable or refused: {short_error(exc)}",
                       hint=hint or "`docker login` to it if it needs credentials") from None
    if not DIGEST_RE.match(data.id or ""):
        raise KitError(f"image {ref}: the registry reported no manifest digest")
    return data.id


@dataclass(frozen=True)
class Pushed:
    ref: str  # registry/name:tag
    digest: str  # the manifest digest, as the registry reports it
    pinned: str  # registry/name@sha256:...
    image_id: str


def push_image(source: str, registry: str, repository: str, tag: str,
               progress: Callable[[str], None] | None = None) -> Pushed:
    """Tag ``source`` as ``registry/repository:tag``, push it, and read back the digest the registry serves.

    The push stream's aux record carries the digest of the manifest the engine pushed; the registry is then asked
    for the tag's digest (through the engine) and the two must agree, so what the kit records is what pulls get."""
    from docker.errors import APIError

    image = local_image(source, hint="it is not built: run `kit build` with the same preset and overrides first")
    client = docker_client()
    name = split_registry(repository)[1]
    target = f"{registry}/{name}"
    image.tag(target, tag)
    pushed_digest = None
    try:
        seen: set[str] = set()
        # auth_config None: the SDK sends the Docker client's credentials for this registry (docker login).
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
        digest = registry_digest(f"{target}:{tag}")
    except APIError as exc:
        client.api.remove_image(f"{target}:{tag}")
        raise KitError(f"push to {registry} failed: {short_error(exc)}") from None
    except KitError:
        client.api.remove_image(f"{target}:{tag}")
        raise
    if not pushed_digest:
        client.api.remove_image(f"{target}:{tag}")
        raise KitError(f"push to {registry}: the engine reported no digest for {target}:{tag}")
    if pushed_digest != digest:
        raise KitError(f"{target}:{tag}: the engine pushed {pushed_digest} but the registry serves {digest}")
    return Pushed(f"{target}:{tag}", digest, f"{target}@{digest}", image.id)
