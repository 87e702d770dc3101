"""Is this host ready to run a preset? Raw facts in, one verdict per check out.

Two halves, so each can be tested alone:
- ``gather_facts()`` runs the commands (argv lists, short timeouts) and reads the files, keeping the raw text;
- ``evaluate(facts, preset)`` is pure: it parses that text and returns a ``Check`` per subject.

Public entry point: ``diagnose(preset=None, facts=None) -> list[Check]``. Secrets are never read into the
facts: for the Hugging Face token only *whether* one is set is recorded.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.config.strategy import StrategyName, strategy_for, strategy_of
from kit.core.datafiles import gpu_catalog, load_yaml
from kit.core.docker_engine import docker_client
from kit.core.errors import DockerUnavailable, KitError
from kit.core.gpus import gpu_key
from kit.core.tables import vllm_model
from kit.core.units import ram_in_bytes
from kit.core.versions import version_or_oldest
from kit.deploy.compat import check_compat
from kit.deploy.deployment import CUDA_LABEL, MIN_DRIVER_LABEL, shm_size_for
from kit.memory.plan import plan
from kit.memory.preset_plan import as_preset_fixes, model_spec_for, plan_inputs_for

if TYPE_CHECKING:
    from kit.config.preset import Preset
    from kit.memory.plan import Plan

PASS, WARN, FAIL = "pass", "warn", "fail"
GIB = 1 << 30
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]
DOCKER_INFO = ["docker", "info", "--format", "{{json .}}"]
COMPOSE_VERSION = ["docker", "compose", "version", "--short"]
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | warn | fail
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: the program is not installed or timed out
    stdout: str = ""
    stderr: str = ""


@dataclass
class HostFacts:
    """Everything the checks look at, as raw as it came."""

    docker_info: CommandResult
    compose_version: CommandResult
    nvidia_smi: CommandResult
    cdi_specs: list[str] = field(default_factory=list)
    shm_bytes: int | None = None
    disk_free: dict[str, int] = field(default_factory=dict)  # path -> free bytes
    hf_home: str = ""
    hf_home_from_env: bool = False
    hf_token_set: bool = False
    hf_token_source: str | None = None  # "HF_TOKEN", "token file" (never the value)
    device_hooks: list[str] = field(default_factory=list)  # NVIDIA hook programs found on PATH
    image: ImageFacts | None = None  # the deployment's image on this engine, when a preset or folder names one


@dataclass(frozen=True)
class ImageFacts:
    """The image a deployment runs, as this Docker engine has it: its labels, or why there are none to read."""

    ref: str | None  # None: the preset names no image (it does not render)
    labels: dict[str, str] | None  # None: not on this engine (or no engine answers)
    absent: str = ""  # why ``labels`` is None, as the check says it


def host_table() -> dict[str, Any]:
    return load_yaml("host.yaml")


# ---------------------------------------------------------------------------------------- gathering


def run_command(argv: list[str], timeout: float = 20) -> CommandResult:
    exe = shutil.which(argv[0])
    if exe is None:
        return CommandResult(argv, None, "", f"{argv[0]}: not found")
    try:
        done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CommandResult(argv, None, "", f"{' '.join(argv)}: no answer within {timeout:g} s")
    return CommandResult(argv, done.returncode, done.stdout, done.stderr)


def hf_home() -> tuple[str, bool]:
    env = os.environ.get("HF_HOME")
    if env:
        return env, True
    return str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"), False


def hf_token_state(home: str) -> tuple[bool, str | None]:
    """Whether a token is set and where from; the value is never read into memory."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True, "HF_TOKEN environment variable"
    token_file = Path(os.environ.get("HF_TOKEN_PATH", Path(home) / "token"))
    try:
        if token_file.is_file() and token_file.stat().st_size > 0:
            return True, "token file in the HF cache"
    except OSError:
        pass
    return False, None


def free_bytes(path: str) -> int | None:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def image_facts(ref: str, client: Any = None) -> ImageFacts:
    """The labels of ``ref`` on the local engine (the Docker SDK's ``images.get``; the image is never run).
    ``client``: a Docker client (default: the kit's one connection)."""
    from docker.errors import DockerException, ImageNotFound

    try:
        image = (client or docker_client()).images.get(ref)
    except ImageNotFound:
        return ImageFacts(ref, None, "is not on this Docker engine")
    except DockerUnavailable as exc:
        return ImageFacts(ref, None, f"cannot be looked up: {exc.message}")
    except (DockerException, OSError) as exc:  # OSError: requests' connection errors
        return ImageFacts(ref, None, f"cannot be looked up ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    return ImageFacts(ref, dict(image.labels or {}))


def gather_facts(image_ref: str | None = None, image_unknown: str = "") -> HostFacts:
    """``image_ref``: the deployment's image, whose labels are read from the engine; ``image_unknown``: why a
    preset given names none (it does not render)."""
    info = run_command(DOCKER_INFO)
    compose = run_command(COMPOSE_VERSION)
    smi = run_command(NVIDIA_SMI_QUERY)
    specs = sorted(p for d in CDI_DIRS for p in glob.glob(f"{d}/*.yaml") + glob.glob(f"{d}/*.json"))
    try:
        stat = os.statvfs("/dev/shm")
        shm = stat.f_blocks * stat.f_frsize
    except OSError:
        shm = None
    home, from_env = hf_home()
    token_set, token_source = hf_token_state(home)
    paths = {home}
    root = docker_root_dir(parse_docker_info(info.stdout) if info.returncode == 0 else None)
    if root:
        paths.add(root)
    disk = {p: b for p in sorted(paths) if (b := free_bytes(p)) is not None}
    # The daemon looks the hooks up on its own PATH; this process's PATH is the closest a client can see.
    hooks = [found for name in host_table()["nvidia_device_hooks"] if (found := shutil.which(name))]
    image = image_facts(image_ref) if image_ref else ImageFacts(None, None, image_unknown) if image_unknown else None
    return HostFacts(info, compose, smi, specs, shm, disk, home, from_env, token_set, token_source, hooks, image)


# ------------------------------------------------------------------------------------------ parsing


def parse_docker_info(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except (ValueError, IndexError):
        return None
    return data if isinstance(data, dict) else None


def docker_root_dir(info: dict[str, Any] | None) -> str | None:
    return (info or {}).get("DockerRootDir") or None


@dataclass(frozen=True)
class SmiGpu:
    index: int
    name: str
    memory_mib: int
    driver: str
    catalog_key: str | None


def parse_nvidia_smi(text: str) -> list[SmiGpu]:
    """`nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits` lines."""
    gpus = []
    for i, row in enumerate(csv.reader(line for line in text.splitlines() if line.strip())):
        if len(row) < 3:
            continue
        name, memory, driver = (c.strip() for c in row[:3])
        try:
            mib = int(float(memory))
        except ValueError:
            continue
        gpus.append(SmiGpu(i, name, mib, driver, gpu_key(name, mib)))
    return gpus


version_key = version_or_oldest  # host tools' versions (Docker, Compose, the driver), compared by packaging


# ----------------------------------------------------------------------------------------- checking


def check_docker(facts: HostFacts, preset: Preset | None) -> Check:
    result, table = facts.docker_info, host_table()["docker"]
    info = parse_docker_info(result.stdout) if result.returncode == 0 else None
    if info is None or not info.get("ServerVersion"):
        why = (result.stderr or result.stdout).strip().splitlines()
        return Check("docker engine", FAIL, f"no Docker engine answers ({why[-1][:160] if why else 'no output'})",
                     "start one: `systemctl start docker` (or `bash scripts/setup-host.sh`), and make sure this "
                     "user may use it (the docker group)")
    version = info["ServerVersion"]
    detail = f"Docker {version} ({info.get('OperatingSystem', '?')}, {info.get('Architecture', '?')})"
    gpu = preset is not None and preset.hardware.gpu is not None and not strategy_of(preset).nvidia_runtime
    cdi = gpu and preset is not None and preset.hardware.gpu_runtime == "cdi"
    if cdi and version_key(version) < version_key(table["min_cdi"]):
        return Check("docker engine", FAIL, f"{detail}: compose `driver: cdi` needs Docker {table['min_cdi']}+",
                     "upgrade Docker Engine, or use hardware.gpu_runtime=nvidia")
    if cdi and version_key(version) < version_key(table["cdi_default"]) \
            and not info.get("CDISpecDirs"):
        # Docker 25-28.1 has CDI only when the daemon opts in; `docker info` lists CDISpecDirs when it is on.
        return Check("docker engine", WARN, f"{detail}: CDI is opt-in before Docker {table['cdi_default']} and "
                     "`docker info` shows no CDI spec directories, so compose `driver: cdi` requests may fail",
                     'add "features": {"cdi": true} to /etc/docker/daemon.json and restart Docker, upgrade to '
                     f"Docker {table['cdi_default']}+, or use hardware.gpu_runtime=nvidia")
    if gpu and version_key(version) < version_key(table["min_gpu_requests"]):
        return Check("docker engine", FAIL, f"{detail}: GPU device requests need Docker {table['min_gpu_requests']}+",
                     "upgrade Docker Engine")
    return Check("docker engine", PASS, detail)


def check_compose(facts: HostFacts) -> Check:
    result, table = facts.compose_version, host_table()["compose"]
    text = result.stdout.strip()
    install = "install the Compose v2 CLI plugin (docker-compose-plugin, or `bash scripts/setup-host.sh`)"
    if result.returncode != 0 or not text:
        return Check("compose", FAIL, "`docker compose` (Compose v2) does not answer", install)
    version = text.lstrip("v")
    if version_key(version).major < 2:
        return Check("compose", FAIL, f"`docker compose` is {text}, not v2", install)
    need = table["min_version"]
    if version_key(version) < version_key(need):
        return Check("compose", FAIL,
                     f"Compose {version} is older than {need}, which {table['needed_for']} needs",
                     f"upgrade the Compose plugin to >= {need} (docker-compose-plugin, or `bash scripts/setup-host.sh`)")
    return Check("compose", PASS, f"Compose v2 ({version} >= {need})")


def check_gpu_runtime(facts: HostFacts, preset: Preset | None) -> Check:
    name = "nvidia container runtime"
    if preset is not None and preset.hardware.gpu is None:
        return Check(name, PASS, "not needed: the preset runs on the CPU")
    info = parse_docker_info(facts.docker_info.stdout) if facts.docker_info.returncode == 0 else None
    runtimes = sorted((info or {}).get("Runtimes") or {})
    has_nvidia = "nvidia" in runtimes
    cdi, hooks = facts.cdi_specs, facts.device_hooks
    configure = ("install the NVIDIA Container Toolkit (its nvidia-container-runtime-hook on the daemon's PATH serves "
                 "GPU requests), then `nvidia-ctk runtime configure --runtime=docker` and restart Docker")
    if preset is not None and strategy_of(preset).nvidia_runtime:
        # The Jetson stack says `runtime: nvidia`: that name must be registered; a hook alone does not do.
        if has_nvidia:
            return Check(name, PASS, "docker runtime `nvidia` registered (compose.yaml uses `runtime: nvidia`)")
        return Check(name, FAIL, f"compose.yaml uses `runtime: nvidia`, which `docker info` does not list "
                     f"(runtimes: {', '.join(runtimes) or 'unknown'})", configure)
    wants_cdi = preset is not None and preset.hardware.gpu_runtime == "cdi"
    if wants_cdi:
        if cdi:
            return Check(name, PASS, f"CDI specs: {', '.join(cdi)}")
        return Check(name, FAIL, "hardware.gpu_runtime is cdi, but no CDI spec in /etc/cdi or /var/run/cdi",
                     "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (NVIDIA Container Toolkit)")
    parts = []
    if has_nvidia:
        parts.append("docker runtime `nvidia` registered")
    if hooks:
        # moby registers its `nvidia` device driver when the hook is on the daemon's PATH (kit/data/host.yaml).
        parts.append(f"{', '.join(hooks)} on PATH: Docker's nvidia device driver serves compose's GPU requests"
                     + ("" if has_nvidia else " without a registered `nvidia` runtime"))
    if cdi:
        parts.append(f"CDI specs: {', '.join(cdi)}")
    if parts:
        return Check(name, PASS, "; ".join(parts))
    status = FAIL if preset is not None else WARN
    return Check(name, status,
                 f"no `nvidia` runtime in `docker info` (runtimes: {', '.join(runtimes) or 'unknown'}), no "
                 f"{' or '.join(host_table()['nvidia_device_hooks'])} on PATH and no CDI spec",
                 configure + ("" if preset is not None else " (only CPU presets run without it)"))


def _smi_gpus(facts: HostFacts) -> list[SmiGpu] | None:
    result = facts.nvidia_smi
    if result.returncode != 0:
        return None
    return parse_nvidia_smi(result.stdout)


def _smi_missing(facts: HostFacts) -> str:
    result = facts.nvidia_smi
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1][:160] if lines else "no output"


def image_cuda_matters(preset: Preset) -> bool:
    """Whether the host's driver is held against the preset's image: a discrete NVIDIA GPU (a CPU stack needs no
    driver; Jetson's comes with L4T)."""
    return preset.hardware.gpu is not None and not strategy_of(preset).nvidia_runtime


def check_driver(facts: HostFacts, preset: Preset | None) -> Check:
    name = "nvidia driver"
    if preset is not None and preset.hardware.gpu is None:
        return Check(name, PASS, "not needed: the preset runs on the CPU")
    if preset is not None and strategy_of(preset).nvidia_runtime:
        return Check(name, PASS, f"Jetson: the driver and CUDA come with L4T {preset.hardware.l4t}")
    gpus = _smi_gpus(facts)
    if not gpus:
        status = FAIL if preset is not None else WARN
        return Check(name, status, f"nvidia-smi gives no GPUs ({_smi_missing(facts)})",
                     "install the NVIDIA driver (and reboot), then check `nvidia-smi`")
    driver = gpus[0].driver
    if preset is None:
        return Check(name, PASS, f"driver {driver}")
    target = driver_target(preset, facts.image)
    if target.min_driver and target.cuda and version_key(driver) < version_key(target.min_driver):
        options, note = driver_alternatives(driver, target.cuda, preset, gpus)
        fix = f"upgrade the driver to >= {target.min_driver}" + "".join(f", or {o}" for o in options)
        if not options:
            fix += f" (no other pinned vLLM build runs on driver {driver})"
        elif target.from_image:
            fix += " (an override renders an image for an older CUDA; then `kit build` it)"
        return Check(name, FAIL, f"driver {driver} is older than {target.min_driver}, which {target.what} needs"
                     + target.source, fix + (f"; {note}" if note else ""))
    if not target.min_driver:
        return Check(name, PASS, f"driver {driver}{target.source}")
    return Check(name, PASS, f"driver {driver} >= {target.min_driver} ({target.what}){target.source}")


@dataclass(frozen=True)
class DriverTarget:
    """What the host's driver is held against: the built image's labels when the engine has the image, else the
    preset's declared CUDA build; ``source`` says which, and why the image's did not count."""

    cuda: str | None
    min_driver: str | None
    what: str  # "the CUDA 13.0 image" (the preset's), "the CUDA 12.9 build in image REF" (its labels)
    source: str  # "" (no image asked about, or its labels read), or "; from the preset (why not the image's)"
    from_image: bool = False


def driver_target(preset: Preset, image: ImageFacts | None) -> DriverTarget:
    """The CUDA and minimum driver the host's driver must meet. An image's labels (kit/deploy/deployment.py
    CUDA_LABEL, MIN_DRIVER_LABEL) are what its wheels were built for; a label missing (an image built by an older
    kit) or the image not on the engine falls back to the preset's declared CUDA build, and says so."""
    base = strategy_of(preset).base(preset)
    declared = DriverTarget(base.cuda, base.min_driver, f"the CUDA {base.cuda} image", "")
    if image is None:
        return declared
    if image.ref is None:
        return replace(declared, source=f"; from the preset (no image to read: {image.absent})")
    if image.labels is None:
        return replace(declared, source=f"; from the preset (image {image.ref} {image.absent})")
    cuda = image.labels.get(CUDA_LABEL)
    if not cuda:
        return replace(declared, source=f"; from the preset (image {image.ref} carries no {CUDA_LABEL} label: an "
                                        "older kit built it)")
    known = vllm_model().cuda.get(cuda)
    min_driver = image.labels.get(MIN_DRIVER_LABEL) or (known.min_driver if known is not None else None)
    if not min_driver:
        return replace(declared, source=f"; from the preset (image {image.ref} is labelled CUDA {cuda}, whose minimum "
                                        "driver the kit's table does not list)")
    return DriverTarget(cuda, min_driver, f"the CUDA {cuda} build in image {image.ref}", "", from_image=True)


def driver_alternatives(driver: str, cuda: str, preset: Preset, gpus: list[SmiGpu]) -> tuple[list[str], str | None]:
    """What runs on a driver older than the image's CUDA needs, read from the tables: another CUDA build of the
    release, CUDA forward compatibility (datacenter GPUs), or the newest older pin whose build the driver runs.
    Returns the options and a note on what does not apply to these GPUs."""
    table, img = vllm_model(), preset.image
    on_vllm_image = strategy_of(preset).vllm_image
    have = version_key(driver)

    def runs(build_cuda: str) -> bool:
        return have >= version_key(table.cuda[build_cuda].min_driver)

    release = table.versions[img.vllm_version]
    options: list[str] = []
    for other, ref in release.official_variants.items():
        if other != cuda and runs(other):
            switch = "" if on_vllm_image else "image.strategy=official "  # overrides, as typed
            options.append(f"{switch}image.cuda={other} (the {ref} image, driver >= "
                           f"{table.cuda[other].min_driver})")
    note = None
    compat = host_table()["cuda_forward_compat"]
    rule = compat.get(cuda)
    ended = compat.get("ended_branches") or {}
    live = ", ".join(f"R{b['branch']} ({b['kind']}, to {b['end_of_life']})" for b in compat.get("live_branches", []))
    if rule and have.major in rule["branches"] and have.major in ended:
        when = ended[have.major]
        note = (f"CUDA forward compatibility is not offered on R{have.major}: NVIDIA has ended that driver branch"
                + (f" ({when})" if when != "ended" else "") + f"; supported branches are {live} "
                f"(as of {compat['branches_checked']})")
    elif rule and have.major in rule["branches"] and on_vllm_image \
            and version_key(img.vllm_version) >= version_key(compat["since"]):
        kinds = {gpu_catalog()[g.catalog_key].get("kind") if g.catalog_key else None for g in gpus}
        switch = (f"set {compat['env']}={compat['value']} in the stack's .env (vLLM's CUDA {cuda} image then loads CUDA's "
                  f"forward-compatibility libraries, which the NVIDIA runtime accepts on R{have.major})")
        if kinds <= set(compat["gpu_kinds"]):
            options.append(switch)
        else:
            names = ", ".join(sorted({g.name for g in gpus}))
            note = (f"CUDA forward compatibility ({compat['env']}={compat['value']}) works on datacenter GPUs only, "
                    f"not on {names}")
    current = version_key(img.vllm_version)
    for version in sorted(table.versions, key=version_key, reverse=True):
        if options or version_key(version) >= current:
            continue  # a build of the pinned release beats going back a release
        older = table.versions[version]
        builds = [older.cuda, *older.official_variants]
        usable = [b for b in builds if runs(b)]
        if usable:
            build = usable[0]
            extra = "" if build == older.cuda else (
                f" image.cuda={build}" + ("" if on_vllm_image else " image.strategy=official"))
            options.append(f"image.vllm_version={version}{extra} (its CUDA {build} build needs driver >= "
                           f"{table.cuda[build].min_driver})")
    return options, note


def _plan_on(preset: Preset, memory_gib: float) -> Plan | None:

    inputs = plan_inputs_for(preset)
    if inputs is None:
        return None
    return as_preset_fixes(plan(inputs.model_copy(update={"gpu_memory_gib": memory_gib})))  # fixes as overrides


def check_gpus(facts: HostFacts, preset: Preset | None, where: str = "preset") -> list[Check]:
    """GPU count, names and memory against the preset, and the planner's verdict on the real memory."""
    name = "gpus"
    if preset is not None and preset.hardware.gpu is None:
        return [Check(name, PASS, "not needed: the preset runs on the CPU")]
    if preset is not None and strategy_of(preset).nvidia_runtime:
        return [Check(name, PASS, "Jetson: the integrated GPU is used through the NVIDIA runtime")]
    gpus = _smi_gpus(facts)
    if not gpus:
        status = FAIL if preset is not None else WARN
        return [Check(name, status, f"no NVIDIA GPU visible ({_smi_missing(facts)})",
                      "check `nvidia-smi`; without GPUs only the cpu preset runs")]
    listing = ", ".join(f"{g.index}: {g.name} {g.memory_mib} MiB" for g in gpus)
    if preset is None:
        return [Check(name, PASS, f"{len(gpus)} GPU(s): {listing}")]
    hw = preset.hardware
    assert hw.gpu is not None  # a CPU preset returned above
    wanted = gpu_catalog()[hw.gpu]
    if hw.device_ids:
        chosen = [g for g in gpus if str(g.index) in hw.device_ids]
        missing = [i for i in hw.device_ids if not i.isdigit() or int(i) >= len(gpus)]
        if missing and not all(i.startswith("GPU-") for i in missing):
            return [Check(name, FAIL, f"hardware.device_ids {', '.join(missing)} not on this host ({listing})",
                          "use the indexes nvidia-smi shows")]
        chosen = chosen or gpus[: hw.count]
    else:
        chosen = gpus[: hw.count]
    checks: list[Check] = []
    if len(gpus) < hw.count:
        checks.append(Check(name, FAIL, f"the preset uses {hw.count} GPU(s) per node; this host has {len(gpus)} ({listing})",
                            f"lower hardware.count (and the parallel sizes) to {len(gpus)}, or use a host with more GPUs"))
        return checks
    other = sorted({g.name for g in chosen if g.catalog_key != hw.gpu})
    if other:
        keys = sorted({g.catalog_key for g in chosen if g.catalog_key and g.catalog_key != hw.gpu})
        checks.append(Check(name, WARN, f"the preset is for {wanted['name']}; this host has {', '.join(other)}",
                            f"render with hardware.gpu={keys[0]}" if keys else
                            "this GPU is not in the catalog (kit gpus); the plan below uses its real memory"))
    else:
        checks.append(Check(name, PASS, f"{len(chosen)} x {wanted['name']} as the preset expects ({listing})"))

    # Compatibility of the real GPU, when it differs from the preset's and the catalog knows it.
    real_keys = {g.catalog_key for g in chosen if g.catalog_key and g.catalog_key != hw.gpu}
    for key in sorted(real_keys):
        errors, _ = check_compat(where, preset.model_copy(update={"hardware": hw.model_copy(update={"gpu": key})}))
        for problem in errors:
            checks.append(Check("gpu compatibility", FAIL, f"on {gpu_catalog()[key]['name']}: {problem.message}",
                                problem.hint))

    reserve = host_table()["cuda_reserve_gib"]
    memory = min(g.memory_mib for g in chosen) / 1024 - reserve
    try:
        result = _plan_on(preset, memory)
    except KitError as exc:
        checks.append(Check("memory plan", FAIL, f"cannot plan on {memory:.2f} GiB: {exc.message}", exc.hint))
        return checks
    if result is None:
        checks.append(Check("memory plan", WARN, "no plan: the local model directory does not exist yet"))
    elif result.fits:
        checks.append(Check("memory plan", PASS,
                            f"fits in {memory:.2f} GiB per GPU: KV cache {result.kv_cache_gib:.2f} GiB = "
                            f"{result.kv_cache_tokens:,} tokens, {result.max_concurrency:.1f}x concurrency at "
                            f"{result.inputs['max_model_len']} tokens"))
    else:
        fixes = "; ".join(s["message"] for s in result.suggestions[:3]) or None
        checks.append(Check("memory plan", FAIL, f"does not fit in {memory:.2f} GiB per GPU: {result.error}", fixes))
    return checks


def check_shm(facts: HostFacts, preset: Preset | None) -> Check:

    name = "shared memory"
    if facts.shm_bytes is None:
        return Check(name, WARN, "cannot read the size of /dev/shm", "mount a tmpfs on /dev/shm")
    host_mib = facts.shm_bytes // (1 << 20)
    floor = host_table()["min_host_shm_mib"]
    if preset is None:
        if host_mib < floor:
            return Check(name, WARN, f"/dev/shm is {host_mib} MiB",
                         f"fine with the kit's shm_size; with `ipc: host` enlarge it (>= {floor} MiB)")
        return Check(name, PASS, f"/dev/shm is {host_mib} MiB")
    shm = shm_size_for(preset)
    if shm.ipc == "host":
        # The container shares the host's /dev/shm: it must hold what the rule would have given it.
        private = shm_size_for(preset.model_copy(update={"runtime": preset.runtime.model_copy(update={"ipc": None})}))
        need_mib = -(-ram_in_bytes(private.shm_size) // (1 << 20)) if private.shm_size else floor
        if host_mib < need_mib:
            return Check(name, FAIL, f"ipc: host shares the host's /dev/shm ({host_mib} MiB); the stack wants {need_mib} MiB",
                         f"`mount -o remount,size={need_mib}m /dev/shm`, or drop runtime.ipc to use shm_size")
        return Check(name, PASS, f"ipc: host; host /dev/shm {host_mib} MiB >= {need_mib} MiB")
    return Check(name, PASS, f"the container gets shm_size {shm.shm_size} from compose.yaml (host /dev/shm {host_mib} MiB)")


def need_gib(preset: Preset | None) -> tuple[float, str]:
    """Disk wanted for the image and the weights, with how it was reckoned."""
    table = host_table()
    if preset is None:
        official = strategy_for(StrategyName.OFFICIAL).disk_gib()
        return (official + float(table["default_model_gib"]),
                f"an official image (~{official:.0f} GiB, its newest published size) and a small model")
    strategy = strategy_of(preset)
    image = strategy.disk_gib()
    weights, how = 0.0, "weights unknown"
    if not preset.model.is_local:
        try:
            spec = model_spec_for(preset)
        except KitError:
            spec = None
        if spec is not None and spec.weights_bytes:
            weights, how = spec.weights_bytes / GIB, "checkpoint size"
        elif spec is not None:
            try:
                result = _plan_on(preset, 1e6) if preset.hardware.gpu else None
            except KitError:
                result = None
            if result is not None:
                weights = result.weights_gib * preset.engine.tp * preset.engine.pp
                how = "planner's weight estimate"
    else:
        how = "local model (on the host already)"
    return image + weights, f"image ~{image:.0f} GiB ({strategy.name}) + weights {weights:.1f} GiB ({how})"


def check_disk(facts: HostFacts, preset: Preset | None) -> Check:
    name = "disk"
    info = parse_docker_info(facts.docker_info.stdout) if facts.docker_info.returncode == 0 else None
    root = docker_root_dir(info)
    path = root if root and root in facts.disk_free else next(iter(facts.disk_free), None)
    if path is None:
        return Check(name, WARN, "cannot tell the free disk space", "check `df -h /var/lib/docker`")
    free = facts.disk_free[path] / GIB
    need, how = need_gib(preset)
    where = "Docker's storage" if path == root else path
    detail = f"{free:.0f} GiB free at {where} ({path}); needs ~{need:.0f} GiB: {how}"
    if free < need:
        return Check(name, FAIL, detail, "free space (`docker system prune`, `docker builder prune`), or move Docker's "
                     "data-root to a bigger disk")
    return Check(name, PASS, detail)


def check_hf(facts: HostFacts, preset: Preset | None) -> Check:
    name = "hugging face"
    where = f"{facts.hf_home} ({'HF_HOME' if facts.hf_home_from_env else 'default'})"
    exists = Path(facts.hf_home).is_dir()
    cache = f"cache {where}{'' if exists else ', not created yet'}"
    if facts.hf_token_set:
        return Check(name, PASS, f"{cache}; token set ({facts.hf_token_source})")
    if preset is not None and preset.model.is_local:
        return Check(name, PASS, f"{cache}; no token, none needed for a local model")
    return Check(name, WARN, f"{cache}; no token set",
                 "gated models (Llama, some Mistral) need one: put HF_TOKEN in the stack's .env "
                 "(see .env.example), never in the preset")


def evaluate(facts: HostFacts, preset: Preset | None = None, where: str = "preset") -> list[Check]:
    checks = [check_docker(facts, preset), check_compose(facts), check_gpu_runtime(facts, preset),
              check_driver(facts, preset)]
    checks += check_gpus(facts, preset, where)
    checks += [check_shm(facts, preset), check_disk(facts, preset), check_hf(facts, preset)]
    return checks


def diagnose(preset: Preset | None = None, where: str = "preset", facts: HostFacts | None = None) -> list[Check]:
    return evaluate(facts or gather_facts(), preset, where)


def report_json(checks: list[Check]) -> dict[str, Any]:
    return {"checks": [c.to_json() for c in checks], "ok": not any(c.status == FAIL for c in checks)}
