"""The `orin` preset's image, built for linux/arm64 on this x86-64 machine under QEMU emulation, locked.

Honest scope: the real orin image installs vLLM and torch from the Jetson AI Lab index (CUDA 12.6 wheels for
JetPack 6), which is not reachable here, on an L4T r36.4 base that no registry here serves. This test keeps the
preset's Dockerfile, strategy and platform, and swaps two inputs, in the test only: the base for an arm64 Debian
bookworm stand-in made by scripts/setup-host.sh (mmdebstrap --arch=arm64, imported as linux/arm64), and the
requirement list for a small set PyPI serves for aarch64 (a compiled wheel and a pure one). Lock, locked build,
architecture and installed versions are then checked for real.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from kit.deploy.pipeline import prepare
from kit.deploy.render import render
from kit.image.lock import LOCK_FILE, build_locked, installed_in, make_lock, write_lock
from kit.run.workflow import render_into

from tests.conftest import environment_refuses, missing

from .conftest import CACHE, session_progress

ARM64_BASE = os.environ.get("KIT_ARM64_BASE_IMAGE", "vllm-kit/base-arm64:bookworm")
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
# Test-only stand-in for the Jetson wheels: PyYAML has a compiled aarch64 wheel, packaging is pure Python.
REDUCED_REQUIREMENTS = ["pyyaml==6.0.2", "packaging==24.2"]


def emulation_unavailable() -> str | None:
    if not BINFMT.parent.joinpath("register").exists():
        return f"binfmt_misc is not mounted at {BINFMT.parent} (scripts/setup-host.sh mounts it)"
    if not BINFMT.exists():
        return f"no qemu-aarch64 binfmt handler ({BINFMT} missing; this machine refused update-binfmts, or setup skipped it)"
    if not BINFMT.read_text().startswith("enabled"):
        return f"{BINFMT} is registered but disabled"
    return None


@pytest.fixture(scope="module")
def arm64_base(docker_client):
    reason = emulation_unavailable()
    if reason:
        # The one skip CI allows: some machines refuse to register a binfmt handler (no privilege for it), which
        # no setup step can change. It is listed by `-rs` (docs/testing.md, "Skips").
        environment_refuses(f"arm64 emulation unavailable: {reason}")
    try:
        image = docker_client.images.get(ARM64_BASE)
    except Exception:  # noqa: BLE001
        missing(f"arm64 base image {ARM64_BASE}", "scripts/setup-host.sh")
    assert image.attrs["Architecture"] == "arm64", "import the stand-in base with --platform linux/arm64"
    return ARM64_BASE


@pytest.fixture(scope="module")
def orin_built(arm64_base, docker_client, tmp_path_factory):
    out = tmp_path_factory.mktemp("orin-arm64")
    prepared = prepare("orin", ["image.repository=vllm-kit/orin-emulated"], base_image=arm64_base)
    # The reduced set: no Jetson index, no GPU JIT toolchain (gcc and headers come from the L4T base in
    # production), the stand-in base's CPython 3.11.
    image = dataclasses.replace(prepared.deployment.image, requirements=REDUCED_REQUIREMENTS, pip_index_url=None,
                                runtime_packages=[], python_version="3.11")
    d = dataclasses.replace(prepared.deployment, image=image)
    prepared = dataclasses.replace(prepared, deployment=d, files=render(d, plan_lines=prepared.report.plan_lines))
    render_into(prepared, out)
    wheelhouse = CACHE / "wheelhouse-orin-emulated"
    lock = make_lock(prepared, overrides=[], base_image_option=arm64_base, offline=True, wheelhouse=wheelhouse,
                     python_version="3.11", progress=session_progress)
    write_lock(lock, out / LOCK_FILE)
    built = build_locked(prepared, out, lock_path=out / LOCK_FILE, wheelhouse=wheelhouse, offline=True,
                         progress=session_progress)
    try:
        yield prepared, lock, built
    finally:
        for tag in built.tags:
            try:
                docker_client.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001
                pass


def test_orin_lock_is_for_aarch64(orin_built):
    prepared, lock, _ = orin_built
    assert lock.platform == "linux/arm64" and lock.strategy == "jetson"
    assert lock.target.machine == "aarch64" and lock.target.python == "3.11"
    assert {p.name: p.version for p in lock.packages} == {"pyyaml": "6.0.2", "packaging": "24.2"}
    compiled = next(p for p in lock.packages if p.name == "pyyaml")
    assert "aarch64" in compiled.file and len(compiled.sha256) == 64


def test_orin_image_is_arm64_and_matches_the_lock(orin_built, docker_client):
    prepared, lock, built = orin_built
    image = docker_client.images.get(built.image_id)
    assert image.attrs["Architecture"] == "arm64" and image.attrs["Os"] == "linux"
    assert built.machine == "aarch64"
    found = installed_in(built.image_id, prepared.deployment.serve.python)
    installed = {k.lower(): v for k, v in found["packages"].items()}
    assert found["machine"] == "aarch64"
    assert {p.name: installed.get(p.name) for p in lock.packages} == {p.name: p.version for p in lock.packages}
    out = docker_client.containers.run(built.image_id, ["sh", "-c", "uname -m; python -c 'import yaml; "
                                       "print(yaml.__with_libyaml__)'"], entrypoint=[], remove=True,
                                       network_disabled=True)
    assert out.decode().split() == ["aarch64", "True"]  # the compiled aarch64 extension loads
