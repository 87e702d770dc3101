"""The test session gives back the images it made: the engine's images are recorded when the session starts, and
when it ends (after every xdist worker has finished) what the session added under the kit's names is removed.

The fixtures already remove most of what they build; this sweep catches the rest (a tag a `kit` subprocess made, a
builder stage left dangling, a fixture that failed before its cleanup ran). The selection is one pure function over
two snapshots of the engine's image list (`/images/json?all=1`, the shape the Docker SDK's ``api.images(all=True)``
returns), so it is tested on real data structures without an engine (tests/unit/test_image_sweep.py).

Rules (``leftovers``):
- An image ID the engine had when the session started is never removed, whatever it is tagged with now. A tag the
  session put on such an image is taken off only when another tag stays on it (removing the last tag of an image
  deletes the image).
- A tag the session made is removed when its repository has the kit's name (``vllm-kit/...``, also behind a
  registry host such as a local test registry's) and is not one kept across sessions (``KEPT_REPOSITORIES``: the
  base images setup makes, and the content-addressed stand-ins the tests build once and reuse).
- An untagged image the session made is removed when the kit made it: a kit label (``io.vllm-kit.*``), or a parent
  chain that reaches an image carrying the kit's name (a builder stage on the kit's base image).
- An image is removed only with every image built on it (its children): a parent still in use stays.
- A tag that existed before the session is left alone, even when it now names another image.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

KIT_NAMESPACE = "vllm-kit/"
KIT_LABEL_PREFIX = "io.vllm-kit."
# Kept across sessions on purpose: the base images `scripts/setup-host.sh` imports (the suite cannot make them), and
# the stand-ins the suite builds once per content and reuses (tests/integration/conftest.py, test_monitoring.py).
KEPT_REPOSITORIES = frozenset({"vllm-kit/base", "vllm-kit/base-arm64", "vllm-kit/standin-haproxy",
                               "vllm-kit/standin-prometheus"})
NO_TAG = "<none>:<none>"


@dataclass(frozen=True)
class Image:
    id: str
    parent: str
    tags: frozenset[str]
    labels: Mapping[str, str]


def snapshot(rows: Iterable[Mapping]) -> dict[str, Image]:
    """The engine's image list (``api.images(all=True)`` rows) as {id: Image}."""
    return {row["Id"]: Image(row["Id"], row.get("ParentId") or "",
                             frozenset(t for t in row.get("RepoTags") or () if t != NO_TAG),
                             dict(row.get("Labels") or {})) for row in rows}


def repository(tag: str) -> str:
    """``host:5000/vllm-kit/cpu:0.32.0`` -> ``vllm-kit/cpu`` (the registry host dropped, as Docker reads it)."""
    name = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return name


def kit_named(tag: str) -> bool:
    return repository(tag).startswith(KIT_NAMESPACE)


def kept_across_sessions(tag: str, kept: frozenset[str] = KEPT_REPOSITORIES) -> bool:
    return repository(tag) in kept


@dataclass
class Sweep:
    """What to remove: ``untag`` (tags to take off, children before parents), ``delete`` (image IDs, children
    first), and ``kept`` (the session's kit tags that stay, with why)."""

    untag: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.untag or self.delete)


def kit_made(image_id: str, before: Mapping[str, Image], after: Mapping[str, Image]) -> bool:
    """The image, or an image it was built on, carries a kit label or the kit's name."""
    seen: set[str] = set()
    current = after.get(image_id) or before.get(image_id)
    while current is not None and current.id not in seen:
        seen.add(current.id)
        if any(k.startswith(KIT_LABEL_PREFIX) for k in current.labels) or any(map(kit_named, current.tags)):
            return True
        current = after.get(current.parent) or before.get(current.parent)
    return False


def session_kit_tags(before: Mapping[str, Image], after: Mapping[str, Image], kept: frozenset[str],
                     sweep: Sweep) -> dict[str, set[str]]:
    """{image ID: the tags the session put on it under the kit's names}, less those kept across sessions (noted)."""
    tags_before = {t for image in before.values() for t in image.tags}
    found: dict[str, set[str]] = {}
    for image in after.values():
        for tag in sorted(image.tags - tags_before):
            if not kit_named(tag):
                continue
            if kept_across_sessions(tag, kept):
                sweep.kept[tag] = "kept across sessions"
            else:
                found.setdefault(image.id, set()).add(tag)
    return found


def leftovers(before: Mapping[str, Image], after: Mapping[str, Image],
              kept: frozenset[str] = KEPT_REPOSITORIES) -> Sweep:
    """The images and tags the session made under the kit's names, by the rules in this module's docstring."""
    sweep = Sweep()
    session_tags = session_kit_tags(before, after, kept, sweep)
    children: dict[str, set[str]] = {}
    for image in after.values():
        if image.parent:
            children.setdefault(image.parent, set()).add(image.id)
    # New images that the sweep would leave with no tag and that the kit made are candidates for deletion...
    candidates = {i for i, image in after.items()
                  if i not in before and not image.tags - session_tags.get(i, set())
                  and (i in session_tags or kit_made(i, before, after))}
    # ...but an image goes only with all its children: drop candidates with a child that stays, until none changes.
    changed = True
    while changed:
        stays = {i for i in candidates if children.get(i, set()) - candidates}
        candidates -= stays
        changed = bool(stays)

    for image_id, tags in session_tags.items():
        image = after[image_id]
        if image_id in candidates or image.tags - tags:
            sweep.untag.extend(sorted(tags))  # the image goes, or another tag stays on it
        else:
            for tag in tags:
                sweep.kept[tag] = ("its image was on the engine before the session" if image_id in before
                                   else "an image built on it stays")
    sweep.delete = sorted(candidates, key=lambda i: (-depth(i, after), i))
    image_of = {tag: image_id for image_id, tags in session_tags.items() for tag in tags}
    sweep.untag.sort(key=lambda tag: (-depth(image_of[tag], after), tag))
    return sweep


def depth(image_id: str, images: Mapping[str, Image]) -> int:
    """How many ancestors ``image_id`` has on this engine (children sort before their parents by it)."""
    count, seen, current = 0, {image_id}, images.get(image_id)
    while current is not None and current.parent in images and current.parent not in seen:
        seen.add(current.parent)
        current = images[current.parent]
        count += 1
    return count


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # not reached


class EngineRecord:
    """The controller's record of the engine's images when the session started (None: no engine answers)."""

    def __init__(self) -> None:
        self.client = None
        self.before: dict[str, Image] = {}
        # The base images the suite is pointed at stay too, whatever they are named.
        self.kept = KEPT_REPOSITORIES | {repository(os.environ[name]) for name in ("KIT_BASE_IMAGE", "KIT_ARM64_BASE_IMAGE")
                                         if os.environ.get(name)}

    @classmethod
    def start(cls) -> EngineRecord | None:
        if os.environ.get("KIT_TEST_KEEP_IMAGES", "").strip() not in ("", "0"):
            return None
        try:
            import docker

            client = docker.from_env(timeout=10)  # an engine that hangs must not hold up a unit-test run
            rows = client.api.images(all=True)
            client.api.timeout = 300
        except Exception:  # noqa: BLE001 - no SDK, no engine: nothing to give back
            return None
        record = cls()
        record.client, record.before = client, snapshot(rows)
        return record

    def finish(self) -> str:
        """Remove the session's leftovers; one line saying what went and the bytes freed."""
        from docker.errors import APIError, NotFound

        client = self.client
        sweep = leftovers(self.before, snapshot(client.api.images(all=True)), self.kept)
        if not sweep:
            return "images: the session left none behind" + kept_note(sweep)
        layers_before = client.df().get("LayersSize") or 0
        removed: list[str] = []
        failed: list[str] = []
        for tag in sweep.untag:
            try:
                client.api.remove_image(tag, noprune=True)
                removed.append(tag)
            except NotFound:
                pass
            except APIError as exc:
                failed.append(f"{tag} ({str(exc.explanation or exc)[:80]})")
        for image_id in sweep.delete:
            try:
                client.api.remove_image(image_id, noprune=True)
            except NotFound:
                pass  # went with its last tag
            except APIError as exc:  # in use by a container, or a child appeared meanwhile: it stays
                failed.append(f"{image_id[7:19]} ({str(exc.explanation or exc)[:80]})")
        freed = max(0, layers_before - (client.df().get("LayersSize") or 0))
        left = snapshot(client.api.images(all=True))
        gone = sum(1 for image_id in sweep.delete if image_id not in left)
        line = (f"images: removed {len(removed)} tag(s) and {gone} image(s) the session made, "
                f"{human_bytes(freed)} freed")
        if removed:
            line += f" ({', '.join(removed)})"
        if failed:
            line += f"; could not remove {', '.join(failed)}"
        return line + kept_note(sweep)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def kept_note(sweep: Sweep) -> str:
    return f"; kept {', '.join(f'{t} ({why})' for t, why in sorted(sweep.kept.items()))}" if sweep.kept else ""
