"""Pinned inputs: a lock file per rendered preset, and builds that use only what it pins.

Public entry points: ``make_lock()`` (render + base image + wheelhouse -> ``Lock``) and ``build_locked()``
(``Lock`` -> image, or one clear error on drift). The lock (``vllm-kit.lock.json``, next to the render) pins:

- the render it belongs to: sha256 of the rendered Dockerfile and requirements.txt, the preset, overrides;
- the base image by digest (a repo digest, or the local image ID for never-pushed imported images: see
  kit/image/registry.py) and, for the official strategy, the official vLLM image it is;
- every Python package: name, version, wheel file and sha256 (pip's report gives the index's hash; the
  wheel on disk must agree, and the build installs with ``--require-hashes --no-index``).

A locked build is tagged under a temporary tag, checked (installed versions and architecture against the
lock), and only then given the release tags, so a failed or drifted build never carries them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kit.config.strategy import strategy_for
from kit.core.docker_engine import docker_client
from kit.core.errors import BuildError, KitError, Problem
from kit.core.safepaths import open_nofollow, work_folder
from kit.core.versions import version
from kit.deploy.pipeline import Prepared
from kit.image.build import (
    BuildRequest,
    BuildResult,
    build_image,
    prepare_build_context,
    wheels_for_lock,
)
from kit.image.registry import BaseDigest, resolve_base_digest
from kit.image.wheelhouse import (
    ARCH_MACHINE,
    LOCK_NAME,
    REPORT_NAME,
    BaseProbe,
    build_wheelhouse,
    probe_base_image,
    target_for,
)

LOCK_FILE = "vllm-kit.lock.json"
LOCK_VERSION = 1
Progress = Callable[[str], None]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LockedBase(_Strict):
    ref: str = Field(description="The base as the render names it")
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    kind: Literal["repo-digest", "image-id"]
    pinned: str = Field(description="What the build's FROM receives")


class LockedPackage(_Strict):
    name: str
    version: str
    file: str = Field(description="A wheel's file name in the wheelhouse: no directory part")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("file")
    @classmethod
    def _inside_wheelhouse(cls, value: str) -> str:
        # The build reads wheelhouse/<file>; "../x.whl", "/x.whl" or "sub/x.whl" would pull a file from
        # elsewhere into the image under the lock's authority.
        if (not value or value in (".", "..") or "/" in value or "\\" in value or "\x00" in value
                or not value.endswith(".whl")):
            raise ValueError("must be a wheel's file name inside the wheelhouse (no directory, no ..)")
        return value


class LockedTarget(_Strict):
    python: str
    glibc: str
    machine: str


class Lock(_Strict):
    lock_version: int = LOCK_VERSION
    preset: str
    overrides: list[str] = Field(default_factory=list)
    base_image_option: str | None = None
    offline: bool = Field(False, description="Made with --offline (the base's digest from the local image, no hub "
                                             "asked): `kit lock` again takes --offline too")
    vllm_version: str
    strategy: str
    platform: str
    inputs: dict[str, str] = Field(description="sha256 of the rendered files the image is built from")
    base: LockedBase
    vllm_image: LockedBase | None = Field(None, description="Official strategy: the official image, by digest")
    target: LockedTarget | None = None
    packages: list[LockedPackage] = Field(default_factory=list)
    excluded: list[str] = Field(default_factory=list)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def render_inputs(files: dict[str, str]) -> dict[str, str]:
    """The rendered files an image is built from (compose.yaml and flags are not in the image)."""
    return {name: hashlib.sha256(files[name].encode()).hexdigest() for name in ("Dockerfile", "requirements.txt")}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked_base(found: BaseDigest) -> LockedBase:
    # validated by the model (kind: repo-digest or image-id), not only declared
    return LockedBase.model_validate({"ref": found.ref, "digest": found.digest, "kind": found.kind, "pinned": found.pinned})


# ------------------------------------------------------------------------------------------- making a lock


def _report_hashes(wheelhouse: Path) -> dict[str, str]:
    """{normalised name: sha256} from pip's resolver report (the index's hashes)."""
    report = wheelhouse / REPORT_NAME
    if not report.is_file():
        return {}
    data = json.loads(report.read_text())
    hashes = {}
    for item in data.get("install", []):
        sha = ((item.get("download_info") or {}).get("archive_info") or {}).get("hashes", {}).get("sha256")
        if sha:
            hashes[_normalise(item["metadata"]["name"])] = sha
    return hashes


def _wheelhouse_fits(prepared: Prepared, wheelhouse: Path, header: str) -> bool:
    """Whether the wheelhouse was resolved for these requirements and this target (then no new resolve)."""
    lock, report = wheelhouse / LOCK_NAME, wheelhouse / REPORT_NAME
    if not (lock.is_file() and report.is_file()):
        return False
    if header not in lock.read_text().splitlines()[0]:
        return False
    requested = set()
    for item in json.loads(report.read_text()).get("install", []):
        if item.get("requested"):
            requested.add(f"{_normalise(item['metadata']['name'])}=={item['metadata']['version']}")
    wanted = set()
    for req in prepared.deployment.image.requirements:
        name, _, version = req.partition("==")
        wanted.add(f"{_normalise(name.split('[')[0])}=={version}")
    return requested == wanted


def require_wheelhouse(preset_name: str, requirements: list[str], wheelhouse: Path | None) -> None:
    """Refused before anything is resolved or written: an image that installs wheels is locked from a wheelhouse."""
    if requirements and wheelhouse is None:
        raise KitError(f"preset {preset_name}: locking its Python packages needs --wheelhouse DIR",
                       hint="the wheels are downloaded there and hashed")


def make_lock(prepared: Prepared, *, overrides: list[str], base_image_option: str | None, offline: bool,
              wheelhouse: Path | None, python_version: str | None = None, glibc: str | None = None,
              refresh: bool = False, progress: Progress | None = None) -> Lock:
    say = progress or (lambda _m: None)
    d = prepared.deployment
    require_wheelhouse(prepared.name, d.image.requirements, wheelhouse)
    say(f"resolving the base image {d.image.base_image} ({'local image' if offline else 'registry'})")
    base = _locked_base(resolve_base_digest(d.image.base_image, offline=offline))
    packages: list[LockedPackage] = []
    excluded: list[str] = []
    target = None
    if d.image.requirements:
        assert wheelhouse is not None
        t = target_for(d, python_version, glibc)
        target = LockedTarget(python=t.python_version, glibc=t.glibc, machine=t.machine)
        header = f"CPython {t.python_version}, glibc {t.glibc}, {t.machine}."
        if refresh or not _wheelhouse_fits(prepared, wheelhouse, header):
            build_wheelhouse(d, wheelhouse, python_version=python_version, glibc=glibc, progress=say)
        else:
            say(f"wheelhouse {wheelhouse} already resolved for these requirements ({header[:-1]})")
        index_hashes = _report_hashes(wheelhouse)
        for wheel in wheels_for_lock(wheelhouse):
            name, version = wheel.name.split("-")[:2]
            key = _normalise(name)
            sha = sha256_file(wheel)
            if key in index_hashes and index_hashes[key] != sha:
                raise KitError(f"{wheel}: sha256 {sha[:16]}... differs from the index's {index_hashes[key][:16]}...",
                               hint="the download is corrupt or was replaced; delete it and lock again")
            packages.append(LockedPackage(name=key, version=version, file=wheel.name, sha256=sha))
        locked_names = {p.name for p in packages}
        excluded = sorted(n for n in index_hashes if n not in locked_names)
    vllm_image = base if strategy_for(d.image.strategy).vllm_image else None
    return Lock(preset=prepared.name, overrides=list(overrides), base_image_option=base_image_option, offline=offline,
                vllm_version=d.image.vllm_version, strategy=d.image.strategy, platform=d.image.platform,
                inputs=render_inputs(prepared.files), base=base, vllm_image=vllm_image, target=target,
                packages=packages, excluded=excluded)


def write_lock(lock: Lock, path: Path) -> None:
    text = json.dumps(lock.model_dump(exclude_none=True), indent=2, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_lock(path: Path) -> Lock:
    if not path.is_file():
        raise KitError(f"{path}: no lock file", hint="make one with `kit lock preset=NAME --out DIR`")
    try:
        return Lock.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise KitError(f"{path}: not a vllm-kit lock file ({first})", hint="make it again with `kit lock`") from None


# ------------------------------------------------------------------------------------------- checking drift


def lock_drift(lock: Lock, prepared: Prepared, where: str) -> list[Problem]:
    """Every way the lock does not match this preset and render."""
    d = prepared.deployment
    made_with = f"the lock was made for preset {lock.preset}" + (
        f" with {' '.join(lock.overrides)}" if lock.overrides else "") + (
        f" --base-image {lock.base_image_option}" if lock.base_image_option else "")
    problems = []
    for field, locked, now in (("preset", lock.preset, prepared.name), ("vllm_version", lock.vllm_version, d.image.vllm_version),
                               ("strategy", lock.strategy, d.image.strategy), ("platform", lock.platform, d.image.platform),
                               ("base.ref", lock.base.ref, d.image.base_image)):
        if locked != now:
            problems.append(Problem(f"{where}: {field}", f"locked {locked}, the preset now gives {now}", made_with))
    current = render_inputs(prepared.files)
    for name, sha in sorted(lock.inputs.items()):
        if current.get(name) != sha:
            problems.append(Problem(f"{where}: inputs.{name}", "the rendered file changed since the lock",
                                    "run `kit lock` again and review the difference"))
    if lock.lock_version != LOCK_VERSION:
        problems.append(Problem(f"{where}: lock_version", f"{lock.lock_version} is not {LOCK_VERSION}"))
    return problems


@dataclass(frozen=True)
class StaleLock:
    """A locked folder (`kit lock` wrote its LOCK_FILE) whose render no longer matches the lock: `kit build --locked`
    refuses it until `kit lock` runs again, so a command that prints build steps prints that first."""

    path: Path
    fields: tuple[str, ...]  # what drifted (lock_drift's fields), or "unreadable"
    # `kit lock` again needs --offline: the lock was made so, or it pinned a never-pushed local base by image ID
    # (only --offline pins that again; the one sign of it in a lock older than Lock.offline)
    offline: bool


def stale_lock(out_dir: Path, prepared: Prepared) -> StaleLock | None:
    """The folder's lock when ``prepared`` (the render just made for it) has drifted from it; None for a folder with no
    lock, or one the render still matches. Reads files only (no engine, no registry)."""
    path = out_dir / LOCK_FILE
    if not path.is_file():
        return None
    try:
        lock = read_lock(path)
    except KitError:
        return StaleLock(path, ("unreadable",), offline=False)
    problems = lock_drift(lock, prepared, str(path))
    if not problems:
        return None
    return StaleLock(path, tuple(p.where.rpartition(": ")[2] for p in problems),
                     offline=lock.offline or lock.base.kind == "image-id")


def verify_wheels(lock: Lock, wheelhouse: Path, where: str) -> list[Path]:
    """The locked wheels, each present and matching its sha256; else every problem at once."""
    problems, wheels = [], []
    root = wheelhouse.resolve()
    for pkg in lock.packages:
        path = wheelhouse / pkg.file
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            problems.append(Problem(f"{where}: packages.{pkg.name}",
                                    f"{pkg.file} is a link to a file outside {wheelhouse}",
                                    "put the wheel itself in the wheelhouse (`kit lock` fills it)"))
            continue
        if not path.is_file():
            problems.append(Problem(f"{where}: packages.{pkg.name}", f"missing wheel {pkg.file} in {wheelhouse}",
                                    "fill the wheelhouse again with `kit lock`"))
            continue
        sha = sha256_file(path)
        if sha != pkg.sha256:
            problems.append(Problem(f"{where}: packages.{pkg.name}",
                                    f"hash mismatch: {pkg.file} is sha256:{sha[:16]}..., locked sha256:{pkg.sha256[:16]}..."))
        wheels.append(path)
    if problems:
        raise KitError(f"{where}: the wheelhouse does not match the lock", problems=problems)
    return wheels


def locked_requirements_text(lock: Lock) -> str:
    lines = [f"# From {LOCK_FILE} (preset {lock.preset}): installed with --no-deps --no-index --require-hashes."]
    lines += [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in lock.packages]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- building


@dataclass(frozen=True)
class LockedBuild:
    result: BuildResult
    image_id: str
    tags: list[str]
    machine: str
    checked_packages: int


VERIFY_SCRIPT = (
    "import importlib.metadata as m, json, platform; "
    "print(json.dumps({'machine': platform.machine(), "
    "'packages': {d.metadata['Name']: d.version for d in m.distributions()}}))"
)


def installed_in(image: str, python: str) -> dict:
    out = docker_client().containers.run(image, [python, "-c", VERIFY_SCRIPT], entrypoint=[], remove=True,
                                         network_disabled=True, environment={"PYTHONDONTWRITEBYTECODE": "1"})
    return json.loads(out.decode().strip().splitlines()[-1])


def check_installed(lock: Lock, found: dict) -> list[str]:
    problems = []
    want_machine = ARCH_MACHINE[lock.platform.split("/")[1]]
    if found["machine"] != want_machine:
        problems.append(f"architecture {found['machine']}, locked {want_machine}")
    installed = {_normalise(k): v for k, v in found["packages"].items()}
    for pkg in lock.packages:
        if installed.get(pkg.name) != pkg.version:
            problems.append(f"{pkg.name} is {installed.get(pkg.name, 'missing')}, locked {pkg.version}")
    for name in lock.excluded:
        if name in installed:
            problems.append(f"{name} is installed but the lock leaves it out")
    return problems


def base_mismatch(client, lock: Lock, image_id: str) -> list[str]:  # noqa: ANN001 - a docker client
    """Whether the built image stands on the locked base: the base's layers are the first layers of the image.

    The build's FROM received the pinned reference; this proves the result, whatever a FROM or a build arg
    in the Dockerfile did with it. For a base locked by image ID the local base must still have that ID."""
    from docker.errors import ImageNotFound

    try:
        base = client.images.get(lock.base.pinned)
    except ImageNotFound:
        return [f"the locked base {lock.base.pinned} is gone from the engine"]
    problems = []
    if lock.base.kind == "image-id" and base.id != lock.base.digest:
        problems.append(f"the base is {base.id}, locked {lock.base.digest}")
    base_layers = (base.attrs.get("RootFS") or {}).get("Layers") or []
    built_layers = (client.images.get(image_id).attrs.get("RootFS") or {}).get("Layers") or []
    if not base_layers or built_layers[: len(base_layers)] != base_layers:
        problems.append(f"the image is not built on the locked base {lock.base.digest[:19]}... (its first layers differ)")
    return problems


# BuildKit reads `FROM sha256:<id>` as a repository named "sha256" and asks a registry for it; the classic builder
# takes the image ID. A base locked by its image ID is named for BuildKit by a local tag that spells the ID out.
LOCKED_BASE_REPOSITORY = "vllm-kit/locked-base"


def build_base(client, lock: Lock, builder: str) -> str:  # noqa: ANN001 - a docker client
    """The base as the build's BASE_IMAGE: the lock's pin, or for BuildKit and a base locked by image ID, the tag
    LOCKED_BASE_REPOSITORY:sha256-<id> put on that image here (it costs no disk, and is kept: removing an image's
    last tag would remove the image). base_mismatch still checks the built image's layers against the locked base."""
    if builder != "buildkit" or lock.base.kind != "image-id":
        return lock.base.pinned
    tag = lock.base.digest.replace(":", "-")
    client.api.tag(lock.base.digest, LOCKED_BASE_REPOSITORY, tag)
    return f"{LOCKED_BASE_REPOSITORY}:{tag}"


def target_mismatch(target: LockedTarget, probed: BaseProbe) -> str | None:
    """Why the locked wheels cannot install on the base the probe read, or None: another Python (the cp tags), or a
    glibc older than the one the wheels were resolved for (their manylinux tags)."""
    if target.python != probed.python_version:
        return (f"target.python: the wheels are for CPython {target.python}, the base runs Python "
                f"{probed.python_version} ({probed.python_from})")
    if version(probed.glibc) < version(target.glibc):
        return f"target.glibc: the wheels are for glibc {target.glibc}, the base has {probed.glibc}"
    return None


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def build_locked(prepared: Prepared, out_dir: Path, *, lock_path: Path, wheelhouse: Path | None,
                 offline: bool = False, no_cache: bool = False, extra_tags: list[str] | None = None,
                 progress: Progress | None = None) -> LockedBuild:
    from docker.errors import ImageNotFound

    say = progress or (lambda _m: None)
    d = prepared.deployment
    where = str(lock_path)
    lock = read_lock(lock_path)
    problems = lock_drift(lock, prepared, where)
    if problems:
        raise KitError(f"{where}: does not match preset {prepared.name}", problems=problems)
    client = docker_client()
    pinned = lock.base.pinned
    try:
        client.images.get(pinned)
    except ImageNotFound:
        if offline or lock.base.kind == "image-id":
            raise KitError(f"{where}: base.digest {lock.base.digest}: no such image on this engine "
                           f"({lock.base.ref} changed or was removed since the lock)",
                           hint="restore that base (or push it to a registry and lock its repo digest), "
                                "or run `kit lock` again") from None
        say(f"{pinned} is not local; the build pulls it by digest")
    if lock.packages and lock.target is not None:  # wheels for another Python would fail in pip, mid-build
        try:
            probed = probe_base_image(pinned)
        except KitError as exc:  # a base that runs no shell here: pip in the build is the check that remains
            say(f"the base's Python was not read ({exc}); the build's pip checks the wheels")
            probed = None
        mismatch = target_mismatch(lock.target, probed) if probed is not None else None
        if mismatch:
            raise KitError(f"{where}: {mismatch} (base {lock.base.ref}, {pinned})",
                           hint="run `kit lock` again: it reads the base's own Python and glibc")
    wheels: list[Path] = []
    if lock.packages:
        if wheelhouse is None:
            raise KitError(f"{where}: the lock pins {len(lock.packages)} wheels; pass --wheelhouse DIR")
        wheels = verify_wheels(lock, wheelhouse, where)
        say(f"{len(wheels)} wheels match their locked sha256")
    context = prepare_build_context(out_dir, work_folder(out_dir) / "build-context", None)
    if wheels:
        (context / "wheels").mkdir()
        for wheel in wheels:
            _link_or_copy(wheel, context / "wheels" / wheel.name)
        (context / "wheels" / LOCK_NAME).write_text(locked_requirements_text(lock))
    building = f"{d.image.image_repository}:kit-building-{secrets.token_hex(4)}"
    # Every strategy checks hashes: the venv's pip reads PIP_REQUIRE_HASHES itself, the official image's uv is
    # given --require-hashes by the Dockerfile when the arg is set.
    extra = {"PIP_REQUIRE_HASHES": "1"} if wheels else {}
    request = BuildRequest(context_dir=context, tags=[building], base_image=build_base(client, lock, d.image.builder),
                           no_cache=no_cache,
                           offline=bool(wheels), platform=d.image.platform if d.image.platform != "linux/amd64" else None,
                           extra_args=extra, builder=d.image.builder)
    result = build_image(request, work_folder(out_dir), progress=say)
    try:
        found = installed_in(building, d.serve.python)
        mismatches = check_installed(lock, found) + base_mismatch(client, lock, result.image_id)
        if mismatches:
            raise BuildError(f"built image does not match {where}: {'; '.join(mismatches[:5])}",
                             hint=f"the release tags were not applied; log: {result.log_path}")
    except BaseException:
        client.api.remove_image(building)
        raise
    release = [prepared.image_ref, f"{d.image.image_repository}:{d.image.vllm_version}", *(extra_tags or [])]
    image = client.images.get(result.image_id)
    for tag in release:
        repo, _, name = tag.rpartition(":")
        image.tag(repo, name)
    client.api.remove_image(building)
    image.reload()
    record = {"image_id": image.id, "tags": sorted(image.tags), "lock_sha256": sha256_file(lock_path),
              "base": pinned, "machine": found["machine"], "packages_checked": len(lock.packages)}
    with open_nofollow(work_folder(out_dir) / "locked-build.json") as handle:
        handle.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return LockedBuild(result, image.id, sorted(image.tags), found["machine"], len(lock.packages))
