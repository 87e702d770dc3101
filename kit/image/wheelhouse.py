"""Deployment -> wheelhouse: every Python package the image needs, downloaded on the host.

With it, `kit build --wheelhouse DIR` builds with no network inside the build (the air-gapped build).
Two steps with the host's pip (its index, proxy and CA configuration): resolve the image's requirements
for the image's Python and platform (``pip install --dry-run --report``), write the resolved pins less the
excluded packages to ``requirements.lock.txt``, then download exactly those wheels (``--no-deps``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from kit.core.docker_engine import docker_client
from kit.core.errors import DockerUnavailable, KitError
from kit.core.secretrules import redact
from kit.deploy.deployment import Deployment

LOCK_NAME = "requirements.lock.txt"
# pip's resolver report, kept beside the lock: `kit lock` takes each wheel's index-provided sha256 from it.
REPORT_NAME = "pip-report.json"
# glibc of each base family, for the manylinux tags pip may pick (a wheel built for a newer glibc fails).
GLIBC_BY_BASE = (
    ("ubuntu24.04", "2.39"),
    ("ubuntu22.04", "2.35"),
    ("bookworm", "2.36"),
    ("l4t", "2.35"),
)
DEFAULT_GLIBC = "2.35"
ARCH_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Target:
    python_version: str  # "3.11"
    glibc: str  # "2.36"
    machine: str  # x86_64 | aarch64

    def pip_args(self) -> list[str]:
        major, minor = (int(x) for x in self.glibc.split("."))
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 4, -1)]
        tags += [f"manylinux2014_{self.machine}", f"linux_{self.machine}"]
        args = ["--python-version", self.python_version, "--implementation", "cp", "--only-binary=:all:"]
        for tag in tags:
            args += ["--platform", tag]
        return args


@dataclass(frozen=True)
class WheelhouseResult:
    directory: Path
    lock_path: Path
    packages: dict[str, str]
    excluded: list[str]
    total_bytes: int
    seconds: float


def target_for(d: Deployment, python_version: str | None = None, glibc: str | None = None) -> Target:
    base = d.image.base_image.lower()
    table_glibc = next((g for key, g in GLIBC_BY_BASE if key in base), None)
    if table_glibc is None:
        table_glibc = next((g for key, g in GLIBC_BY_BASE if key in d.image.base_image_default.lower()), DEFAULT_GLIBC)
    machine = ARCH_MACHINE[d.image.platform.split("/")[1]]
    return Target(python_version or d.image.python_version, glibc or table_glibc, machine)


# The python3 a distribution's own package gives, where a base has none: the image's runtime step installs the
# distribution's python3 (images/python_venv.j2 `runtime_packages`), so that is the Python its venv runs. From each
# release's python3 package (Ubuntu: focal 3.8, jammy 3.10, noble 3.12; Debian: bullseye 3.9, bookworm 3.11, trixie
# 3.13). An (ID, VERSION_ID) of /etc/os-release not listed here is refused, not guessed.
DISTRIBUTION_PYTHON = {
    ("ubuntu", "20.04"): "3.8",
    ("ubuntu", "22.04"): "3.10",
    ("ubuntu", "24.04"): "3.12",
    ("debian", "11"): "3.9",
    ("debian", "12"): "3.11",
    ("debian", "13"): "3.13",
}
PROBE_TIMEOUT_S = 60  # a shell line that prints three values: far more than it takes
# One shell line, run in the base with no network: its os-release, its glibc and, where it has one, its python3.
_PROBE = ('. /etc/os-release 2>/dev/null; echo "os ${ID:-none} ${VERSION_ID:-none}"; '
          'echo "glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d" " -f2)"; '
          'if command -v python3 >/dev/null 2>&1; then '
          'python3 -c "import sys; print(\'python %d.%d\' % sys.version_info[:2])"; fi')


@dataclass(frozen=True)
class BaseProbe:
    """What a local base image says of itself: the Python its venv will run and its glibc."""

    python_version: str
    glibc: str
    python_from: str  # "python3 in the image" | "the distribution's python3 (ubuntu 24.04)"


def parse_base_probe(ref: str, output: str) -> BaseProbe:
    """The probe's three lines -> BaseProbe; a base whose Python cannot be known is refused, naming it."""
    fields = {line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() for line in output.splitlines() if " " in line}
    distro = tuple(fields.get("os", "none none").split()[:2])
    glibc = fields.get("glibc", "")
    if not re.fullmatch(r"\d+\.\d+", glibc):
        raise KitError(f"base image {ref}: no glibc found (getconf GNU_LIBC_VERSION said {glibc or 'nothing'!r})",
                       hint="the kit's images build on glibc distributions (Debian, Ubuntu); musl bases are not "
                            "supported")
    if "python" in fields and re.fullmatch(r"3\.\d+", fields["python"]):
        return BaseProbe(fields["python"], glibc, "python3 in the image")
    python = DISTRIBUTION_PYTHON.get((distro[0].lower(), distro[1])) if len(distro) == 2 else None
    if python is None:
        raise KitError(f"base image {ref}: it has no python3, and the kit does not know which python3 its "
                       f"distribution ({' '.join(distro)}) installs",
                       hint="give --python-version X.Y (the python3 `apt-get install python3` gives there)")
    return BaseProbe(python, glibc, f"the distribution's python3 ({' '.join(distro)})")


def probe_base_image(ref: str) -> BaseProbe | None:
    """The Python and glibc of a base image on this engine, or None when the engine lacks it (or no engine
    answers): the caller then keeps the table's values. The probe runs the base's own shell with no network."""
    from docker.errors import ImageNotFound as SdkImageNotFound

    try:
        client = docker_client()
        client.images.get(ref)
    except (DockerUnavailable, SdkImageNotFound):
        return None
    # created, started and removed here rather than by containers.run, which leaves the container behind when the
    # start itself fails (a base with no shell)
    container = None
    try:
        container = client.containers.create(ref, ["sh", "-c", _PROBE], network_disabled=True, entrypoint=[],
                                             user="0")
        container.start()
        status = container.wait(timeout=PROBE_TIMEOUT_S).get("StatusCode")
        out = container.logs(stdout=True, stderr=False)
        if status != 0:
            raise RuntimeError(f"the probe exited {status}")
    except Exception as exc:  # noqa: BLE001 - APIError, a timeout: the base cannot run a shell
        raise KitError(f"base image {ref}: its shell could not be run to read its Python and glibc "
                       f"({str(exc).splitlines()[0][:160]})",
                       hint="give --python-version X.Y; the kit's images need a base with a POSIX shell") from None
    finally:
        if container is not None:
            container.remove(force=True)
    return parse_base_probe(ref, out.decode(errors="replace"))


def base_target(ref: str, python_version: str | None) -> tuple[str | None, str | None, str]:
    """(python version, glibc, what the status line says) for a build on ``ref``: --python-version wins, else the
    base's own (probed where this engine has it), else None and None (the table's). A base that cannot be read is
    refused unless --python-version gives its Python."""
    try:
        probed = probe_base_image(ref)
    except KitError as exc:
        if not python_version:
            raise
        return python_version, None, (f"base {ref}: Python {python_version} as given; its glibc is the table's "
                                      f"({exc})")
    if probed is None:
        return python_version, None, (f"base {ref} is not on this Docker engine: its Python and glibc are the "
                                      "table's" + (f" (Python {python_version}, as given)" if python_version else ""))
    if python_version and python_version != probed.python_version:
        return python_version, probed.glibc, (f"base {ref}: Python {python_version} as given (the base's is "
                                              f"{probed.python_version}, {probed.python_from}), glibc {probed.glibc}")
    return probed.python_version, probed.glibc, (f"base {ref}: Python {probed.python_version} "
                                                 f"({probed.python_from}), glibc {probed.glibc}")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_env(index_url: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The index for pip as environment (PIP_INDEX_URL), never as an argument: argv shows in `ps` and in logs.

    The preset's image.pip_index_url has no credentials (the preset refuses them); a private index's
    user:password comes from the caller's own PIP_INDEX_URL (from .env, say) when that is the same URL
    with credentials added."""
    if not index_url:
        return {}
    own = (os.environ if environ is None else environ).get("PIP_INDEX_URL", "")
    if own and _without_userinfo(own) == index_url.rstrip("/"):
        return {"PIP_INDEX_URL": own}
    return {"PIP_INDEX_URL": index_url}


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])).rstrip("/")


def _run_pip(args: list[str], log: Path, on_line: Callable[[str], None] | None = None,
             env: Mapping[str, str] | None = None) -> None:
    """Run the host's pip; every line goes to ``log``, and to ``on_line`` as it arrives (progress).

    ``env`` adds to the environment (the index URL); lines are masked (kit.core.secretrules.redact) before they
    reach the log or the screen, whatever pip prints."""
    argv = [sys.executable, "-m", "pip", *args]
    with log.open("a", encoding="utf-8") as fh:
        shown_env = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items()))
        fh.write(redact("$ " + (shown_env + " " if shown_env else "") + " ".join(argv)) + "\n")
        fh.flush()
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", env={**os.environ, **(env or {})}) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = redact(line)
                fh.write(line)
                if on_line:
                    on_line(line.rstrip())
        returncode = proc.returncode
    if returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise KitError(f"pip failed: {' | '.join(tail)[:400]}", hint=f"full log: {log}")


def _requirement_started(line: str) -> str | None:
    """The requirement a pip line starts on: ``Collecting NAME`` (an index) or ``Processing FILE`` (a local
    wheel from find-links or a file index), as ``name==version`` for a wheel; None for other lines."""
    if line.startswith("Collecting "):
        return line.split()[1]
    if line.startswith("Processing ") and line.split()[1].endswith(".whl"):
        name, version = Path(line.split()[1]).name.split("-")[:2]
        return f"{name}=={version}"
    return None


def _resolve_progress(say: Callable[[str], None], every: float = 10.0) -> Callable[[str], None]:
    """Resolving fetches each candidate's metadata and can take minutes: a count every ``every`` seconds."""
    state = {"seen": 0, "last": time.monotonic()}

    def on_line(line: str) -> None:
        started = _requirement_started(line)
        if started:
            state["seen"] += 1
            if time.monotonic() - state["last"] >= every:
                state["last"] = time.monotonic()
                say(f"resolving: {state['seen']} requirements looked at so far ({started})")

    return on_line


def _download_progress(say: Callable[[str], None], total: int) -> Callable[[str], None]:
    """One line per wheel, and the size of the large ones as pip starts them (its bar needs a terminal)."""
    state = {"n": 0}

    def on_line(line: str) -> None:
        started = _requirement_started(line)
        if started:
            state["n"] += 1
            say(f"[{state['n']}/{total}] {started}")
        elif line.lstrip().startswith("Downloading ") and line.rstrip().endswith(("MB)", "GB)")):
            say(f"    downloading {line.rsplit('(', 1)[1].rstrip(')')}")

    return on_line


def resolve(d: Deployment, target: Target, workdir: Path, log: Path,
            progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """Resolve the image's requirements for ``target``: {normalised name: version}."""
    requirements = workdir / "requirements.txt"
    requirements.write_text("\n".join(d.image.requirements) + "\n")
    report = workdir / "report.json"
    args = ["install", "--dry-run", "--ignore-installed", "--progress-bar", "off", "--report", str(report),
            "--target", str(workdir / "unused-target"), *target.pip_args(), "-r", str(requirements)]
    _run_pip(args, log, _resolve_progress(progress) if progress else None, env=index_env(d.image.pip_index_url))
    data = json.loads(report.read_text())
    return {_normalise(item["metadata"]["name"]): item["metadata"]["version"] for item in data["install"]}


def missing_wheels(directory: Path, pins: Mapping[str, str]) -> list[str]:
    """The pins ({normalised name: version}) with no wheel of that version in ``directory``, as NAME==VERSION.

    Every (name, version) there counts: a wheelhouse reused after a pin changed holds the old wheel beside the new.
    """
    have = set()
    for wheel in directory.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        have |= {(_normalise(name), version), (_normalise(name), version.split("+")[0])}
    return [f"{n}=={v}" for n, v in pins.items() if (n, v) not in have]


def build_wheelhouse(d: Deployment, directory: Path, *, python_version: str | None = None, glibc: str | None = None,
                     progress: Callable[[str], None] | None = None) -> WheelhouseResult:
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    target = target_for(d, python_version, glibc)
    log = directory / "wheelhouse.log"
    log.write_text("")
    say(f"resolving {', '.join(d.image.requirements)} for CPython {target.python_version}, "
        f"glibc {target.glibc}, {target.machine}")
    with tempfile.TemporaryDirectory(prefix="kit-wheelhouse-") as tmp:
        pins = resolve(d, target, Path(tmp), log, say)
        shutil.copyfile(Path(tmp) / "report.json", directory / REPORT_NAME)
    excluded = sorted(n for n in pins if n in {_normalise(x) for x in d.image.exclude_packages})
    kept = {n: v for n, v in sorted(pins.items()) if n not in excluded}
    lock = directory / LOCK_NAME
    header = [
        f"# Resolved by `kit wheelhouse` for preset {d.preset_name}: vLLM {d.image.vllm_version}, CPython "
        f"{target.python_version}, glibc {target.glibc}, {target.machine}.",
        f"# Installed with --no-deps. Left out on purpose: {', '.join(excluded) or 'nothing'}.",
    ]
    lock_text = "\n".join(header + [f"{n}=={v}" for n, v in kept.items()]) + "\n"
    lock.write_text(lock_text)
    say(f"downloading {len(kept)} wheels into {directory} (wheels already there are reused)")
    args = ["download", "--no-deps", "--progress-bar", "off", "-d", str(directory), *target.pip_args(), "-r", str(lock)]
    _run_pip(args, log, _download_progress(say, len(kept)), env=index_env(d.image.pip_index_url))
    missing = missing_wheels(directory, kept)
    if missing:
        raise KitError(f"{directory}: wheels missing after download: {', '.join(missing[:5])}", hint=f"see {log}")
    total = sum(w.stat().st_size for w in directory.glob("*.whl") if _normalise(w.name.split("-")[0]) in kept)
    return WheelhouseResult(directory, lock, kept, excluded, total, time.monotonic() - started)
