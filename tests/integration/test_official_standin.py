"""The official strategy on a stand-in for the official vLLM image, which cannot be pulled on these machines.

The stand-in (tests/integration/standins/official/) is built from the local Debian base. It must have every
property of the real image that the kit relies on, as kit/data/vllm.yaml lists them: the first test checks
each one against that table, so the table, the stand-in and the kit's Dockerfile cannot drift apart. Then
the rendered a100x8 and rtx3090x2-fp16 Dockerfiles are built on it and their images checked, and the
template before this fix is shown to fail on it, as it failed on the real image (`useradd: user 'vllm'
already exists`).

Ray: the real `ray[default]` wheels are ~150 MB; here the wheelhouse holds a small stand-in wheel with
Ray's name and pinned version (made by the test), which proves the installer, the path and the permissions,
not Ray itself (tests/integration/test_ray_cluster.py runs real Ray on the CPU image).

Containers run with the network disabled; everything they create is removed at the end.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kit.core.datafiles import vllm_table
from kit.core.errors import BuildError
from kit.deploy.pipeline import prepare
from kit.image.build import BuildRequest, build_image, prepare_build_context
from kit.run.workflow import render_into
from tests.integration.conftest import BASE_IMAGE, CACHE, session_progress

pytestmark = pytest.mark.integration

STANDIN_DIR = Path(__file__).parent / "standins" / "official"
STANDIN_TAG = f"vllm-kit/standin-vllm-openai:test-{os.getpid()}"
STANDIN_WHEELS = CACHE / "wheelhouse-standin"
UV_PIN = "uv==0.13.9"  # what upstream's image gets with `python3 -m pip install uv`; any recent uv does
RELEASE = "0.33.0"  # the release both official presets pin

# The user step of images/official.Dockerfile.j2 before this fix, as it rendered for a100x8.
OLD_USER_STEP = (
    "RUN groupadd --gid 10001 vllm \\\n"
    "    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/vllm --shell /bin/bash vllm \\\n"
    "    && mkdir -p /home/vllm/.cache/huggingface /home/vllm/.cache/vllm \\\n"
    "    && chown -R 10001:10001 /home/vllm\n"
)

# Run inside an image as its default user: what the kit relies on, as JSON.
PROBE = r"""
import glob, json, os, pwd, shutil, stat, subprocess, sys, sysconfig
def writable_by_group0(path):
    st = os.stat(path)
    return st.st_gid == 0 and bool(st.st_mode & stat.S_IWGRP)
def user(name):
    try:
        p = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": p.pw_uid, "gid": p.pw_gid, "home": p.pw_dir}
paths = json.loads(sys.argv[1])
pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
uv = subprocess.run(["uv", "pip", "list", "--system"], capture_output=True, text=True)
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "user": user(paths["user"]),
    "python": shutil.which(paths["python"]), "in_venv": sys.prefix != sys.base_prefix,
    "pip": pip.returncode == 0, "uv_pip": uv.returncode == 0, "uv": shutil.which("uv"), "vllm": shutil.which("vllm"),
    "purelib": sysconfig.get_paths()["purelib"], "externally_managed": glob.glob("/usr/lib/python3*/EXTERNALLY-MANAGED"),
    "group_writable": {p: os.path.isdir(p) and writable_by_group0(p) for p in paths["group_writable"]},
    "cwd": os.getcwd(),
}))
"""

# Run inside a built image as its user: the caches are writable and Ray is where the image's Python finds it.
WRITE_PROBE = r"""
import json, os, pathlib, sys
out = {"uid": os.getuid(), "gid": os.getgid(), "writable": {}}
for var in ("HF_HOME", "VLLM_CACHE_ROOT"):
    path = pathlib.Path(os.environ[var]) / "kit-write-test"
    try:
        path.write_text("ok"); path.unlink(); out["writable"][var] = True
    except OSError as exc:
        out["writable"][var] = str(exc)
if sys.argv[1] == "ray":
    import ray
    out["ray"] = {"version": ray.__version__, "file": ray.__file__}
print(json.dumps(out))
"""


def official_layout() -> dict:
    table = vllm_table()
    return table["official_layouts"][table["versions"][RELEASE]["official_layout"]]


def ray_pin() -> Requirement:
    return Requirement(vllm_table()["ray"]["pip"])


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_standin_ray_wheel(directory: Path) -> Path:
    """A pure-Python wheel named ray at the pinned version, with the `default` extra and no dependencies."""
    pin = ray_pin()
    version = next(iter(pin.specifier)).version
    dist = f"ray-{version}.dist-info"
    files = {
        "ray/__init__.py": f'"""Stand-in for Ray in the kit\'s tests: name and version only."""\n__version__ = "{version}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: ray\nVersion: {version}\n"
                            + "".join(f"Provides-Extra: {extra}\n" for extra in sorted(pin.extras)),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: vllm-kit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(text.encode())},{len(text.encode())}\n" for name, text in files.items())
    files[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    wheel = directory / f"ray-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    (directory / "requirements.lock.txt").write_text(f"ray=={version}\n")
    return wheel


def run_json(client, image: str, argv: list[str], **kwargs) -> dict:
    """Run to completion (network off, bounded wait) and parse the last output line; the container is removed
    even when it cannot start."""
    container = client.containers.create(image, argv, network_disabled=True, **kwargs)
    try:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        assert code == 0, container.logs().decode()[-2000:]
    finally:
        container.remove(force=True)
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def standin(docker_client, tmp_path_factory):
    """The stand-in image, built from the local base with uv from the host's index (cached on the host)."""
    STANDIN_WHEELS.mkdir(parents=True, exist_ok=True)
    if not list(STANDIN_WHEELS.glob("uv-*.whl")):
        session_progress(f"downloading {UV_PIN} for the official-image stand-in")
        subprocess.run([sys.executable, "-m", "pip", "download", UV_PIN, "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux2014_x86_64", "-d", str(STANDIN_WHEELS)], check=True)
    context = tmp_path_factory.mktemp("standin-context")
    shutil.copytree(STANDIN_DIR, context, dirs_exist_ok=True)
    (context / "wheels").mkdir()
    for wheel in STANDIN_WHEELS.glob("uv-*.whl"):
        shutil.copy2(wheel, context / "wheels" / wheel.name)
    request = BuildRequest(context_dir=context, tags=[STANDIN_TAG], base_image=BASE_IMAGE)
    standin_id = build_image(request, tmp_path_factory.mktemp("standin-log"), progress=session_progress).image_id
    built: list[str] = []
    try:
        yield built
    finally:
        for ref in built:
            try:
                docker_client.images.remove(ref, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        remove_descendants(docker_client, standin_id)  # what a failed build left on top of the stand-in
        docker_client.images.remove(standin_id, force=True)


def remove_descendants(client, image_id: str) -> None:
    """Remove every image built on ``image_id`` (a failed build's intermediate images), children first."""
    children: dict[str, list[str]] = {}
    for image in client.api.images(all=True):
        children.setdefault(image.get("ParentId") or "", []).append(image["Id"])
    order, queue = [], list(children.get(image_id, []))
    while queue:
        current = queue.pop()
        order.append(current)
        queue += children.get(current, [])
    for child in reversed(order):
        try:
            client.images.remove(child, force=True)
        except Exception:  # noqa: BLE001 - removed with its child already
            pass


def test_standin_has_what_the_official_image_has(docker_client, standin):
    """Every property in kit/data/vllm.yaml for the pinned official image, checked on the stand-in."""
    layout, user = official_layout(), vllm_table()["official_user"]
    assert layout["has_user"], "v0.33.0's image carries upstream's vllm user"
    config = docker_client.api.inspect_image(STANDIN_TAG)["Config"]
    assert config["Entrypoint"] == layout["entrypoint"]
    assert config["WorkingDir"] == layout["workdir"]
    assert (config.get("User") or "root") == layout["default_user"]
    env = dict(item.split("=", 1) for item in config["Env"])
    for key, value in layout["env"].items():
        assert env.get(key) == value, key
    paths = {"user": user["name"], "python": layout["python"], "group_writable": layout["group_writable"]}
    found = run_json(docker_client, STANDIN_TAG, [layout["python"], "-c", PROBE, json.dumps(paths)], entrypoint=[])
    assert found["uid"] == 0  # the default user stays root
    assert found["user"] == {"uid": user["uid"], "gid": user["gid"], "home": user["home"]}
    assert found["python"] and not found["in_venv"], "the system Python, no venv"
    assert found["pip"] is layout["pip"]
    assert found["uv"] == f"{layout['scripts']}/uv" and found["uv_pip"], "uv pip works on the system Python"
    assert found["vllm"] == f"{layout['scripts']}/vllm"
    assert fnmatch.fnmatch(found["purelib"], layout["site_packages"])
    assert found["externally_managed"] == [], "installs into the system Python are allowed"
    assert all(found["group_writable"].values()), found["group_writable"]
    assert found["cwd"] == layout["workdir"]


def build_rendered(prepared, out: Path, wheelhouse: Path | None, tag: str, base: str) -> str:
    """The kit's own build of a rendered directory, FROM ``base`` (the --base-image build argument)."""
    render_into(prepared, out)
    context = prepare_build_context(out, out / ".kit" / "build-context", wheelhouse)
    request = BuildRequest(context_dir=context, tags=[tag], base_image=base, offline=wheelhouse is not None)
    return build_image(request, out / ".kit", progress=session_progress).image_id


@pytest.mark.parametrize("name, base", [
    ("a100x8", None),  # the Dockerfile users get (FROM the pinned image), built with BASE_IMAGE=stand-in
    ("rtx3090x2-fp16", "standin"),  # rendered with --base-image: the user step checks for the user first
    ("rtx3090x2-fp16", "plain"),  # --base-image without the user (a site's base, v0.16.0): it is made
])
def test_rendered_official_dockerfile_builds_and_runs_as_vllm(docker_client, standin, tmp_path, name, base):
    build_base = BASE_IMAGE if base == "plain" else STANDIN_TAG
    prepared = prepare(name, base_image=build_base) if base else prepare(name)
    d = prepared.deployment
    wheelhouse = None
    if any(r.startswith("ray") for r in d.image.requirements):
        wheelhouse = tmp_path / "wheels"
        wheelhouse.mkdir()
        make_standin_ray_wheel(wheelhouse)
    tag = f"vllm-kit/test-{name}:{base or 'pinned'}-{os.getpid()}"
    standin.append(tag)
    build_rendered(prepared, tmp_path / "out", wheelhouse, tag, build_base)

    config = docker_client.api.inspect_image(tag)["Config"]
    assert config["User"] == d.runtime.run_user.spec == "2000:0"
    assert config["Entrypoint"] == d.serve.entrypoint == ["vllm", "serve"]
    if base != "plain":  # the plain base has no vLLM: only its user and caches are checked
        # The image's entrypoint with compose's command: `vllm serve MODEL ...`, as the vllm user, in its home.
        got = run_json(docker_client, tag, list(d.serve.serve_args))
        assert got["model"] == d.serve.model_arg and got["flags"] == d.serve.serve_args[1:]
        assert (got["uid"], got["gid"], got["home"], got["cwd"]) == (2000, 0, "/home/vllm", "/home/vllm")
    # The caches are writable by that user, also on fresh named volumes (what compose mounts: Docker copies
    # the image's directory, owner and mode included, into a new volume).
    volumes = {f"kit-test-{name}-hf-{os.getpid()}": d.serve.environment["HF_HOME"],
               f"kit-test-{name}-vllm-{os.getpid()}": d.serve.environment["VLLM_CACHE_ROOT"]}
    try:
        probe = run_json(docker_client, tag, [d.serve.python, "-c", WRITE_PROBE, "ray" if wheelhouse else "-"],
                         entrypoint=[], volumes={v: {"bind": p, "mode": "rw"} for v, p in volumes.items()})
    finally:
        for volume in volumes:
            try:
                docker_client.volumes.get(volume).remove(force=True)
            except Exception:  # noqa: BLE001 - never created
                pass
    assert (probe["uid"], probe["gid"]) == (2000, 0)
    assert probe["writable"] == {"HF_HOME": True, "VLLM_CACHE_ROOT": True}
    if wheelhouse:
        assert probe["ray"]["version"] == str(next(iter(ray_pin().specifier)).version)
        assert fnmatch.fnmatch(str(Path(probe["ray"]["file"]).parent.parent), official_layout()["site_packages"])


def test_old_template_fails_on_the_standin(docker_client, standin, tmp_path):
    """The stand-in would have caught the bug: the old user step fails on it as on the real image."""
    # The failing step comes right after FROM, so the failed build leaves no intermediate image behind.
    (tmp_path / "Dockerfile").write_text(f"FROM {STANDIN_TAG}\n{OLD_USER_STEP}")
    tag = f"vllm-kit/test-old-template:standin-{os.getpid()}"
    standin.append(tag)
    with pytest.raises(BuildError) as failed:
        build_image(BuildRequest(context_dir=tmp_path, tags=[tag]), tmp_path / "log")
    log = (tmp_path / "log" / "build.log").read_text()
    assert "useradd: user 'vllm' already exists" in log, failed.value


def test_locked_official_build_checks_hashes_in_the_image_and_its_base(docker_client, standin, tmp_path):
    """`kit build --locked` on the official strategy: the real build_locked installs Ray from the lock with uv
    --require-hashes and checks the result stands on the locked base; a wheel whose sha256 differs from the
    lock's fails inside the build (uv), not only on the host."""
    from kit.image.lock import (
        LOCK_FILE,
        Lock,
        LockedBase,
        LockedPackage,
        base_mismatch,
        build_locked,
        locked_requirements_text,
        render_inputs,
        write_lock,
    )

    repository = f"vllm-kit/test-locked-{os.getpid()}"
    prepared = prepare("a100x8", [f"image.repository={repository}"], base_image=STANDIN_TAG)
    d = prepared.deployment
    out, wheelhouse = tmp_path / "out", tmp_path / "wheels"
    wheelhouse.mkdir()
    wheel = make_standin_ray_wheel(wheelhouse)
    render_into(prepared, out)
    standin_id = docker_client.images.get(STANDIN_TAG).id
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = Lock(preset=prepared.name, vllm_version=d.image.vllm_version, strategy=d.image.strategy, platform=d.image.platform,
                inputs=render_inputs(prepared.files), base_image_option=STANDIN_TAG,
                base=LockedBase(ref=d.image.base_image, digest=standin_id, kind="image-id", pinned=standin_id),
                packages=[LockedPackage(name="ray", version=wheel.name.split("-")[1], file=wheel.name, sha256=sha)])
    write_lock(lock, out / LOCK_FILE)
    standin += [prepared.image_ref, f"{repository}:{d.image.vllm_version}"]
    built = build_locked(prepared, out, lock_path=out / LOCK_FILE, wheelhouse=wheelhouse, offline=True)
    assert built.checked_packages == 1
    log = (out / ".kit" / "build.log").read_text()
    assert "PIP_REQUIRE_HASHES=1" in log and "--require-hashes --no-deps" in log
    # The base check is real: the stand-in is not built on the image built from it.
    other = lock.model_copy(update={"base": LockedBase(ref="x", digest=built.image_id, kind="image-id",
                                                       pinned=built.image_id)})
    assert base_mismatch(docker_client, lock, built.image_id) == []
    assert any("not built on the locked base" in p for p in base_mismatch(docker_client, other, standin_id))

    # The same build context with a lock whose hash does not match the wheel: uv refuses it in the build.
    context = out / ".kit" / "build-context"
    (context / "wheels" / "requirements.lock.txt").write_text(
        locked_requirements_text(lock).replace(sha, "0" * 64))
    tag = f"{repository}:tampered"
    standin.append(tag)
    request = BuildRequest(context_dir=context, tags=[tag], base_image=standin_id, offline=True,
                           extra_args={"PIP_REQUIRE_HASHES": "1"})
    with pytest.raises(BuildError):
        build_image(request, tmp_path / "tampered-log")
    assert "hash" in (tmp_path / "tampered-log" / "build.log").read_text().lower()
