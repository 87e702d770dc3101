"""Rendered files -> image. Two steps: ``prepare_build_context()`` (no Docker; testable) and
``build_image()`` (the Docker SDK). The exact equivalent ``docker build`` command and the full log are
kept next to the output so a failure can be re-run by hand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kit.core.docker_engine import docker_client
from kit.image.buildkit import Trace, Vertex, context_stream, wheelhouse_image
from kit.core.safepaths import WORK_DIR, open_nofollow, refuse_link
from kit.core.errors import BuildError, KitError
from kit.core.secretrules import redact
from kit.deploy.deployment import BUILD_FILES, FETCH_FILE
from kit.image.wheelhouse import LOCK_NAME

# The kit's own working folder inside a rendered directory (build contexts, build records, router context).
KIT_DIR = WORK_DIR  # the deployment folder's work folder (kit/core/safepaths.py)

CONTEXT_FILES = ("Dockerfile", "requirements.txt", FETCH_FILE, ".dockerignore")
OPTIONAL_CONTEXT_FILES = BUILD_FILES  # rendered for images that prune or lay out a CUDA_HOME
STEPS_FILE = "steps.txt"  # the build's step table, beside build.log and build.sh
# The slim Dockerfile's build argument naming the wheelhouse image (images/slim.Dockerfile.j2; scratch without one).
WHEELHOUSE_ARG = "KIT_WHEELHOUSE"
STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# pip's own progress lines in a RUN step (one per wheel, then the install), passed on as progress.
PIP_PROGRESS = ("Collecting ", "Processing ", "Downloading ", "Installing collected packages", "Successfully installed")


@dataclass(frozen=True)
class BuildStep:
    """One Dockerfile instruction as the classic builder ran it: its wall time (from its `Step N/M` line to the
    next one, or to the end of the build) and whether it came from the layer cache."""

    number: int
    instruction: str
    seconds: float
    cached: bool


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    tags: list[str]
    size_bytes: int
    labels: dict[str, str]
    seconds: float
    log_path: Path
    script_path: Path
    cached_steps: int = 0
    total_steps: int = 0
    steps: tuple[BuildStep, ...] = ()
    wheelhouse_image: str = ""  # the wheels as a local image, mounted by a BuildKit build (kit/image/buildkit.py)


@dataclass
class BuildRequest:
    """One build, as both the SDK call and the equivalent `docker build` command read it (they cannot drift)."""

    context_dir: Path
    tags: list[str]
    base_image: str | None = None
    no_cache: bool = False
    offline: bool = False  # PIP_NO_INDEX=1: wheels from the build context only
    platform: str | None = None
    extra_args: dict[str, str] = field(default_factory=dict)
    dockerfile: str = "Dockerfile"  # relative to the context, as the Engine API takes it
    target: str | None = None  # a stage of a multi-stage Dockerfile (None: the last)
    pull: bool = False  # pull a newer base first (off: the base is pinned or local)
    builder: str = "classic"  # or "buildkit": the Engine's BuildKit (kit/image/buildkit.py), for the slim image

    def buildargs(self) -> dict[str, str]:
        args = dict(self.extra_args)
        if self.base_image:
            args["BASE_IMAGE"] = self.base_image
        if self.offline:
            args["PIP_NO_INDEX"] = "1"
        for key, value in args.items():
            # The classic builder records build args in the image's history (`docker history`): a credential
            # passed this way ships inside every copy of the image.
            if redact(value) != value:
                raise BuildError(f"build arg {key}: holds a credential, which would be stored in the image's history",
                                 hint="give the build a URL without credentials (a wheelhouse builds offline)")
        return args

    def command(self) -> list[str]:
        """The `docker build` argv that does what ``build_image``'s SDK call does, for re-running by hand.

        The SDK posts to the Engine's /build endpoint, which is the classic builder; the CLI picks BuildKit by
        default, so the script sets DOCKER_BUILDKIT=0 (see ``script()``), or 1 for an image BuildKit builds.
        rm/forcerm (the classic builder's) and pull are stated, not left to the CLI's defaults."""
        argv = ["docker", "build"]
        if self.builder == "classic":
            argv += ["--rm", "--force-rm"]
        argv.append(f"--pull={'true' if self.pull else 'false'}")
        if self.no_cache:
            argv.append("--no-cache")
        if self.platform:
            argv += ["--platform", self.platform]
        if self.target:
            argv += ["--target", self.target]
        for key, value in sorted(self.buildargs().items()):
            argv += ["--build-arg", f"{key}={value}"]
        for tag in self.tags:
            argv += ["-t", tag]
        argv += ["-f", str(self.context_dir / self.dockerfile), str(self.context_dir)]
        return argv

    @property
    def env(self) -> str:
        """The variable that makes the CLI use the same builder."""
        return "DOCKER_BUILDKIT=1" if self.builder == "buildkit" else "DOCKER_BUILDKIT=0"

    def script(self) -> str:
        """build.sh: the same builder, the same arguments, quoted for the shell."""
        if self.builder == "buildkit":
            which = ("# the Engine's BuildKit, as `kit build` asked for it (DOCKER_BUILDKIT=1; the CLI needs its buildx\n"
                     "# plugin for that, which Docker's own packages ship)")
        else:
            which = "# the classic builder the Docker SDK drives (DOCKER_BUILDKIT=0)"
        wheels = ""
        if WHEELHOUSE_ARG in self.extra_args:
            wheels = (f"# {WHEELHOUSE_ARG} is the wheelhouse as a local image `kit build` made (it makes it again "
                      "when it is gone).\n")
        return ("#!/bin/sh\n"
                "# The build `kit build` ran, for re-running by hand:\n"
                f"{which}, with the same build args, platform, tags, cache and pull flags,\n"
                "# target, Dockerfile and context. `kit build` adds its other tags after the first with `docker tag`.\n"
                f"{wheels}"
                "set -eu\n"
                f"{self.env} {redact(shlex.join(self.command()))}\n")


def prepare_build_context(rendered_dir: Path, context_dir: Path, wheelhouse: Path | None = None,
                          requirements: list[str] | None = None) -> Path:
    """Lay out a build context: the rendered Dockerfile and requirements, plus the wheelhouse as wheels/.

    Wheels are hard-linked where the filesystem allows (a 3 GB wheelhouse costs no copy). With ``requirements`` (the
    image's, Deployment.image.requirements) the wheelhouse must have been resolved for them: the build installs its
    lock, not requirements.txt, so a package it was not resolved for would be missing from the image, silently.
    """
    for name in CONTEXT_FILES:
        if not (rendered_dir / name).is_file():
            raise KitError(f"{rendered_dir / name}: missing; run `kit render` first")
    if wheelhouse is not None and requirements is not None:
        require_wheelhouse_for(wheelhouse, requirements, rendered_dir)
    if os.path.islink(context_dir):
        raise refuse_link(context_dir, "the build context")
    if context_dir.exists():
        shutil.rmtree(context_dir)
    context_dir.mkdir(parents=True)
    for name in CONTEXT_FILES:
        shutil.copy2(rendered_dir / name, context_dir / name)
    for name in OPTIONAL_CONTEXT_FILES:
        if (rendered_dir / name).is_file():
            shutil.copy2(rendered_dir / name, context_dir / name)
    if wheelhouse is not None:
        wheels = wheels_for_lock(wheelhouse)
        target = context_dir / "wheels"
        target.mkdir()
        for source in [*wheels, wheelhouse / LOCK_NAME]:
            try:
                os.link(source, target / source.name)
            except OSError:
                shutil.copy2(source, target / source.name)
    return context_dir


def _lock_python(lock_text: str) -> tuple[int, int] | None:
    """The CPython a `kit wheelhouse` lock was resolved for, from its header (``... CPython 3.11, glibc ...``)."""
    found = re.search(r"CPython (\d+)\.(\d+)", lock_text.split("\n", 2)[0])
    return (int(found.group(1)), int(found.group(2))) if found else None


def _runs_on(wheel: Path, python: tuple[int, int] | None) -> bool:
    """Whether ``wheel`` installs on that CPython (its interpreter tags; abi3 from its minimum up)."""
    if python is None:
        return True
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(wheel.name)[3]
    except InvalidWheelFilename:
        return False
    major, minor = python
    for tag in tags:
        kind, digits = tag.interpreter[:2], tag.interpreter[2:]
        if not digits.startswith(str(major)) or not digits[1:].isdigit() and digits[1:] != "":
            continue
        low = int(digits[1:]) if digits[1:] else 0
        # py3 / py37: pure Python from that version up; cp311: that CPython; cp38-abi3: the stable ABI from 3.8 up
        if kind == "py" and low <= minor or kind == "cp" and (low == minor or tag.abi == "abi3" and low <= minor):
            return True
    return False


def wheels_for_lock(wheelhouse: Path) -> list[Path]:
    """The wheels the wheelhouse's lock names, for the Python it was resolved for. A shared wheelhouse may hold other
    versions too, and other Pythons' builds of the same pin (filled for cp311 and cp312): those are left out."""
    lock = wheelhouse / LOCK_NAME
    hint = "fill it with `kit wheelhouse preset=NAME --wheelhouse DIR` for the same preset"
    if not lock.is_file():
        raise KitError(f"--wheelhouse {wheelhouse}: no {LOCK_NAME} there", hint=hint)
    text = lock.read_text()
    python = _lock_python(text)
    wanted = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            wanted[re.sub(r"[-_.]+", "-", name).lower()] = version
    found = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        key = re.sub(r"[-_.]+", "-", name).lower()
        if wanted.get(key) == version and _runs_on(wheel, python):
            found[key] = wheel
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise KitError(f"--wheelhouse {wheelhouse}: no wheel for {', '.join(missing[:5])}"
                       + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""), hint=hint)
    return [found[k] for k in sorted(found)]


def _lock_pins(lock_text: str) -> dict[str, str]:
    """{PEP 503 name: version} of a `kit wheelhouse` lock (kit/image/wheelhouse.py writes one NAME==VERSION a line)."""
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in lock_text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.split()[0] if version.strip() else ""
    return pins


def _left_out(lock_text: str) -> set[str]:
    """The names the lock's header says were left out on purpose (the image's exclude_packages that resolved)."""
    from packaging.utils import canonicalize_name

    found = re.search(r"Left out on purpose: (.*)\.$", lock_text, re.MULTILINE)
    if found is None or found.group(1) == "nothing":
        return set()
    return {canonicalize_name(name) for name in found.group(1).split(", ")}


def wheelhouse_gaps(wheelhouse: Path, requirements: list[str]) -> list[str]:
    """The requirements (each name==version, as presets pin them) that the wheelhouse's lock does not install at that
    version, each with what the lock has instead. The lock is the record to compare with: it is what the offline build
    installs (with --no-deps), whatever the wheelhouse was filled for (its header names a preset and a vLLM release;
    the same pins serve another preset). A name its header leaves out on purpose counts as there: the base has it."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    text = (wheelhouse / LOCK_NAME).read_text()
    pins, left_out = _lock_pins(text), _left_out(text)
    gaps = []
    for line in requirements:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name in left_out:
            continue
        version = pins.get(name)
        if version is None:
            gaps.append(f"{line} (not in it)")
        elif not requirement.specifier.contains(version, prereleases=True):
            gaps.append(f"{line} (it has {name}=={version})")
    return gaps


def require_wheelhouse_for(wheelhouse: Path, requirements: list[str], out_dir: Path) -> None:
    """Refuse a wheelhouse not resolved for the image's requirements, before any build; a missing lock is left to
    wheels_for_lock, which says how to fill it."""
    if not (wheelhouse / LOCK_NAME).is_file():
        return
    gaps = wheelhouse_gaps(wheelhouse, requirements)
    if gaps:
        raise KitError(f"{wheelhouse / LOCK_NAME}: not resolved for {', '.join(gaps)}; the image would be built "
                       "without them", hint="fill it again for this deployment (wheels already there are reused): "
                       f"`kit wheelhouse --out {shlex.quote(str(out_dir))} --wheelhouse {shlex.quote(str(wheelhouse))}`")


def _wheels_as_image(request: BuildRequest, progress: Callable[[str], None] | None) -> tuple[BuildRequest, BuildStep]:
    """A BuildKit build's wheels go to it as a local image named by a build argument, not in the context
    (kit/image/buildkit.py says why); the context's wheels/ is dropped. Returns the request and the step's figure."""
    began = time.monotonic()
    if progress:
        progress("step: (the wheelhouse as an image)")
    wheels = request.context_dir / "wheels"
    ref, imported = wheelhouse_image(docker_client(), wheels, request.tags[0].rpartition(":")[0])
    shutil.rmtree(wheels)
    step = BuildStep(0, f"(the wheelhouse as an image: {'imported' if imported else 'there'}, {ref})",
                     time.monotonic() - began, not imported)
    return replace(request, extra_args={**request.extra_args, WHEELHOUSE_ARG: ref}), step


def _failing_step(lines: list[str]) -> str:
    for line in reversed(lines):
        m = STEP_RE.match(line.strip())
        if m:
            return f"step {m.group(1)}/{m.group(2)}: {m.group(3)}"
    return "before the first step"


def build_image(request: BuildRequest, log_dir: Path,
                progress: Callable[[str], None] | None = None) -> BuildResult:
    """Build with the Docker SDK, streaming the log to ``log_dir/build.log`` and steps to ``progress``."""
    log_dir.mkdir(parents=True, exist_ok=True)  # callers pass a safepaths.work_folder, made without following links
    log_path = log_dir / "build.log"
    script_path = log_dir / "build.sh"
    began = time.monotonic()
    before: list[BuildStep] = []
    if request.builder == "buildkit" and (request.context_dir / "wheels").is_dir():
        request, step = _wheels_as_image(request, progress)
        before.append(step)
    with open_nofollow(script_path) as script:
        script.write(request.script())
        os.fchmod(script.fileno(), 0o755)
    if request.builder == "buildkit":
        result = _build_buildkit(request, log_path, script_path, progress, before, began)
        return replace(result, wheelhouse_image=request.extra_args.get(WHEELHOUSE_ARG, ""))
    if request.builder != "classic":
        raise KitError(f"builder {request.builder!r}: the kit drives \"classic\" or \"buildkit\"")
    client = docker_client()
    lines: list[str] = []
    image_id = None
    cached = total = 0
    started = time.monotonic()
    # (number, instruction, start, cached) per step; a step's time runs until the next step starts.
    timeline: list[list] = []
    with open_nofollow(log_path) as log:
        log.write(redact("$ DOCKER_BUILDKIT=0 " + shlex.join(request.command())) + "\n")
        stream = client.api.build(
            path=str(request.context_dir),
            tag=request.tags[0],
            dockerfile=request.dockerfile,
            buildargs=request.buildargs(),
            nocache=request.no_cache,
            pull=request.pull,
            rm=True,
            forcerm=True,
            decode=True,
            platform=request.platform,
            target=request.target,
        )
        for chunk in stream:
            if "stream" in chunk:
                for line in redact(chunk["stream"]).splitlines():
                    log.write(line + "\n")
                    lines.append(line)
                    m = STEP_RE.match(line.strip())
                    if m:
                        total = int(m.group(2))
                        timeline.append([int(m.group(1)), m.group(3), time.monotonic(), False])
                        if progress:
                            progress(f"step {m.group(1)}/{m.group(2)}: {m.group(3)[:100]}")
                    elif line.strip() == "---> Using cache":
                        cached += 1
                        if timeline:
                            timeline[-1][3] = True
                    elif progress and line.strip().startswith(PIP_PROGRESS):
                        # pip inside the build: installing the wheels is the long step (minutes for torch);
                        # without these lines it would look stuck. The full output is in build.log.
                        progress(f"    pip: {line.strip()[:100]}")
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                log.write(redact("ERROR: " + chunk["error"]) + "\n")
                raise BuildError(
                    f"build failed at {_failing_step(lines)}: {chunk['error'].strip().splitlines()[-1][:300]}",
                    hint=f"full log: {log_path}; re-run by hand: {script_path}",
                )
    if image_id is None:
        raise BuildError("build produced no image", hint=f"full log: {log_path}")
    ended = time.monotonic()
    ends = [step[2] for step in timeline[1:]] + [ended]
    # Step 0: before the first step line, the SDK tars the context (the wheelhouse too) and the engine reads it.
    steps = tuple([BuildStep(0, "(send the build context)", (timeline[0][2] if timeline else ended) - started, False)]
                  + [BuildStep(number, instruction, end - start, was_cached)
                     for (number, instruction, start, was_cached), end in zip(timeline, ends, strict=True)])
    return _result(request, image_id, started, log_path, script_path, cached, total, steps)


def _result(request: BuildRequest, image_id: str, started: float, log_path: Path, script_path: Path, cached: int,
            total: int, steps: tuple[BuildStep, ...]) -> BuildResult:
    """The built image with the request's other tags added; its steps and seconds go beside the log (steps.txt)."""
    with open_nofollow(log_path.parent / STEPS_FILE) as handle:
        handle.write(step_table(steps) + "\n")
    image = docker_client().images.get(image_id)
    for tag in request.tags[1:]:
        repo, _, tag_name = tag.rpartition(":")
        image.tag(repo, tag_name)
    image.reload()
    return BuildResult(
        image_id=image.id,
        tags=sorted(image.tags),
        size_bytes=int(image.attrs.get("Size", 0)),
        labels=dict(image.labels or {}),
        seconds=time.monotonic() - started,
        log_path=log_path,
        script_path=script_path,
        cached_steps=cached,
        total_steps=total,
        steps=steps,
    )


# BuildKit's own steps that are not the Dockerfile's, as the step table names them.
SEND_STEP = "[internal] load remote build context"
BUILDKIT_STEPS = {SEND_STEP: "(send the build context)",
                  "copy /context /": "(unpack the build context)",
                  "exporting to image": "(export the image)"}


def _build_buildkit(request: BuildRequest, log_path: Path, script_path: Path,
                    progress: Callable[[str], None] | None, before: list[BuildStep], began: float) -> BuildResult:
    """The Engine's BuildKit (``version=2``, kit/image/buildkit.py): the context streamed as the request's body, the
    trace read for the steps, their output and their cache hits."""
    client = docker_client()
    params: dict[str, object] = {"version": "2", "t": request.tags[0], "dockerfile": request.dockerfile,
                                 "buildargs": json.dumps(request.buildargs()), "nocache": request.no_cache,
                                 "pull": request.pull}
    if request.platform:
        params["platform"] = request.platform
    if request.target:
        params["target"] = request.target
    trace = Trace()
    image_id = None
    error = None
    wall_started = time.time()
    numbers: dict[str, int] = {}
    with open_nofollow(log_path) as log:
        log.write(redact(f"$ {request.env} " + shlex.join(request.command())) + "\n")
        response = client.api._post(client.api._url("/build"), params=params, data=context_stream(request.context_dir),
                                    headers={"Content-Type": "application/x-tar"}, stream=True, timeout=None)
        client.api._raise_for_status(response)
        for raw in response.iter_lines():
            if not raw:
                continue
            chunk = json.loads(raw)
            if chunk.get("id") == "moby.buildkit.trace":
                fresh, output = trace.read(chunk["aux"])
                for vertex in fresh:
                    numbers[vertex.digest] = len(numbers) + 1
                    log.write(redact(f"#{numbers[vertex.digest]} {vertex.name}") + "\n")
                    if progress and (vertex.name in BUILDKIT_STEPS or vertex.name.startswith("[")):
                        progress(f"step: {BUILDKIT_STEPS.get(vertex.name, vertex.name)[:100]}")
                for vertex, line in output:
                    log.write(redact(f"#{numbers.get(vertex.digest, 0)} {line}") + "\n")
                    if progress and line.strip().startswith(PIP_PROGRESS):
                        progress(f"    pip: {redact(line.strip())[:100]}")
            elif chunk.get("id") == "moby.image.id":
                image_id = chunk["aux"]["ID"]
            elif "error" in chunk:
                error = chunk["error"]
                log.write(redact("ERROR: " + error) + "\n")
    if error is not None:
        failed = trace.failed()
        where = f"step {failed.name[:200]}" if failed else "before the first step"
        raise BuildError(f"build failed at {where}: {redact(error.strip().splitlines()[-1])[:300]}",
                         hint=f"full log: {log_path}; re-run by hand: {script_path}")
    if image_id is None:
        raise BuildError("build produced no image", hint=f"full log: {log_path}")
    dockerfile_steps = trace.steps()
    named = [v for v in trace.vertexes.values() if v.name in BUILDKIT_STEPS]
    ordered = sorted([*named, *dockerfile_steps], key=lambda v: (v.started is None, v.started or 0.0))

    def seconds(v: Vertex) -> float:
        # BuildKit starts the context's step when the Engine has the whole body: its time is the send, from the request
        end = v.completed or v.started or 0.0
        return max(0.0, end - (wall_started if v.name == SEND_STEP else v.started or end))

    trace_steps = [BuildStep(0, BUILDKIT_STEPS.get(v.name, v.name), seconds(v), v.cached) for v in ordered]
    steps = tuple(replace(step, number=number) for number, step in enumerate([*before, *trace_steps]))
    cached = sum(1 for v in dockerfile_steps if v.cached)
    return _result(request, image_id, began, log_path, script_path, cached, len(dockerfile_steps), steps)


def step_table(steps: tuple[BuildStep, ...] | list[BuildStep], width: int = 90) -> str:
    """The build's steps and seconds, one line each, for `make bench` and `kit build`'s log readers."""
    lines = []
    for step in steps:
        instruction = " ".join(step.instruction.split())
        if len(instruction) > width:
            instruction = instruction[:width - 3] + "..."
        lines.append(f"  {step.number:>3}  {step.seconds:7.1f} s  {'cache' if step.cached else '     '}  {instruction}")
    return "\n".join(lines)
