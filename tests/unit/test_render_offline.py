"""`kit render`'s `next:` line on a host without a registry (issue 36, item 2): a site image the shell names
(VLLM_KIT_DOOR_IMAGE) goes into the folder's .env, so the line works as printed with no prefix, and a render made for
such a host (--base-image, or a site image) says in a `note:` line exactly what compose would still fetch."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.docker_engine import image_on_engine as engine_check  # the real one (the fixture stands in for it)
from kit.core.envfile import read_env_file
from kit.deploy.door import IMAGE_ENV, image_ref as door_pinned
from kit.deploy.stack_images import stack_images
from kit.run.workflow import project_for
from tests.conftest import require_compose

pytestmark = pytest.mark.unit

LOCAL_BASE = "vllm-kit/base:bookworm"
STANDIN = "vllm-kit/standin-haproxy:local"


@pytest.fixture(autouse=True)
def _kit_on_path(monkeypatch):
    monkeypatch.setenv("VLLM_KIT_PROG", "kit")  # how the printed commands name the kit
    # An engine without the stack's images, whatever this host's holds (the test after the next says what one with
    # them changes).
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: False)


PULLS = "note: compose pulls from a registry what this engine lacks"
WHEELS = "note: on a host without a package index, build from wheels"


def render(out, *args):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return result


def lines(result, prefix: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(prefix)]


def rendered(out) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("compose*.yaml")}


def test_the_shells_door_image_goes_into_env_and_the_printed_line_needs_no_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv(IMAGE_ENV, STANDIN)
    result = render(tmp_path, "--base-image", LOCAL_BASE)
    [step] = lines(result, "next: ")
    # The engine lacks the kit's image (compose never pulls it): the line builds it first.
    assert step == f"next: kit build --out {tmp_path} && cd {shlex.quote(str(tmp_path))} && docker compose -p " \
                   f"{project_for(tmp_path)} up -d --wait --remove-orphans"
    assert read_env_file(tmp_path / ".env")[IMAGE_ENV] == STANDIN
    assert f"wrote {IMAGE_ENV}={STANDIN} into {tmp_path / '.env'}" in result.stderr
    # The rendered files are the same as without it: the site's image lives in .env, and the base in the Dockerfile.
    compose = (tmp_path / "compose.yaml").read_text()
    assert f'"${{{IMAGE_ENV}:-{door_pinned()}}}"' in compose and STANDIN not in compose
    assert f'ARG BASE_IMAGE="{LOCAL_BASE}"' in (tmp_path / "Dockerfile").read_text()
    # What compose resolves from the folder as the line runs it (a shell without the variable): the stand-in door.
    monkeypatch.delenv(IMAGE_ENV)
    images = {i.services[0]: i for i in stack_images(rendered(tmp_path), read_env_file(tmp_path / ".env"))}
    assert images["door"].ref == STANDIN and images["door"].from_variable
    # No registry image is pulled by this stack; only the build's other route is left to name, from wheels.
    assert not lines(result, PULLS)
    [note] = lines(result, WHEELS)
    assert note == (
        f"{WHEELS} in place of the line's `kit build`: `kit wheelhouse --out {tmp_path} --wheelhouse WHEELHOUSE` "
        f"fetches them on a connected host, then `kit build --out {tmp_path} --wheelhouse WHEELHOUSE` builds from base "
        f"{LOCAL_BASE} on this engine")
    assert "haproxy" not in note and "debian" not in note


def test_after_kit_build_the_note_no_longer_names_the_image_the_engine_has(tmp_path, monkeypatch):
    """The walk: render, `kit build` as the note says, then a tweak re-rendered (the image's tag unchanged): the note
    named the built image as still needed, contradicting the build. An image the engine has is left out; with
    nothing left, there is no note. What is still missing is named as before."""
    monkeypatch.setenv(IMAGE_ENV, STANDIN)
    render(tmp_path, "--base-image", LOCAL_BASE)
    image = json.loads(render(tmp_path, "--json").stdout)["data"]["image"]
    asked: list[str] = []

    def built(ref: str) -> bool:
        asked.append(ref)
        return ref == image

    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", built)
    tweaked = render(tmp_path, "engine.max_num_seqs=4")
    assert image in asked
    assert not lines(tweaked, "note: ")
    [step] = lines(tweaked, "next: ")
    assert step.startswith(f"next: cd {tmp_path} && ")  # nothing to build first
    with_monitoring = render(tmp_path, "--with", "monitoring")
    [note] = lines(with_monitoring, PULLS)
    assert image not in note and "prometheus" in note and "`docker load` it from a connected host" in note
    assert not lines(with_monitoring, WHEELS)


def test_the_engine_check_says_no_where_there_is_no_engine(monkeypatch):
    monkeypatch.setenv("PATH", "")  # no docker CLI
    assert engine_check("vllm-kit/cpu:0.32.0") is False


def test_compose_itself_reads_the_door_image_from_env(tmp_path, monkeypatch):
    docker = require_compose()
    monkeypatch.setenv(IMAGE_ENV, STANDIN)
    render(tmp_path, "--base-image", LOCAL_BASE)
    env = {k: v for k, v in os.environ.items() if k != IMAGE_ENV}
    argv = [docker, "compose", "-p", project_for(tmp_path), "config", "--images"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert STANDIN in done.stdout.split() and door_pinned() not in done.stdout


def test_a_render_with_no_sign_of_an_offline_host_builds_first_and_names_what_compose_pulls(tmp_path):
    """The walk's first render on a host without a registry: the printed compose line failed at the door's pull (and
    the kit's image was never built), with no note. The line builds the kit's image first; the note tells the image
    compose pulls (the door's upstream one) from the kit's own, with what stands in for it without a registry."""
    result = render(tmp_path)
    [step] = lines(result, "next: ")
    assert step.startswith(f"next: kit build --out {tmp_path} && cd {tmp_path} && docker compose -p ")
    [note] = lines(result, PULLS)
    assert note == (f"{PULLS}; on a host without a registry, it needs here first: {door_pinned()} (door; or "
                    f"{IMAGE_ENV}=IMAGE in {tmp_path / '.env'}, an image this engine has)")
    assert "vllm-kit/" not in note  # the kit's image is built by the line, never pulled
    assert not lines(result, WHEELS)  # no sign of a host without a package index
    assert IMAGE_ENV not in read_env_file(tmp_path / ".env")


def test_an_engine_with_every_image_gets_the_plain_line_and_no_note(tmp_path, monkeypatch):
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: True)
    result = render(tmp_path)
    [step] = lines(result, "next: ")
    assert step == f"next: cd {tmp_path} && docker compose -p {project_for(tmp_path)} up -d --wait --remove-orphans"
    assert not lines(result, "note: ")


def test_the_note_names_every_image_compose_would_still_pull(tmp_path):
    result = render(tmp_path, "--base-image", LOCAL_BASE, "--with", "monitoring")
    [note] = lines(result, PULLS)
    assert f"{door_pinned()} (door; or {IMAGE_ENV}=IMAGE in {tmp_path / '.env'}, an image this engine has)" in note
    files = rendered(tmp_path)
    pulled = [i for i in stack_images(files, {}) if not i.built]
    assert {i.services[0] for i in pulled} == {"door", "prometheus", "grafana"}
    for image in pulled:
        assert image.ref in note
    assert "`docker load` it from a connected host" in note
    assert IMAGE_ENV not in read_env_file(tmp_path / ".env")


def test_an_env_that_names_another_door_image_is_kept_and_said(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text(f"{IMAGE_ENV}=mirror.example/haproxy:3.4.5\n")
    monkeypatch.setenv(IMAGE_ENV, STANDIN)
    result = render(tmp_path)
    assert read_env_file(tmp_path / ".env")[IMAGE_ENV] == "mirror.example/haproxy:3.4.5"
    assert f"note: {tmp_path / '.env'} sets {IMAGE_ENV} to another image than this shell's; kept" in result.stderr
    # The shell's value is what compose uses where it is set: the door is the site's, so the note leaves it out.
    assert not lines(result, PULLS)
    [note] = lines(result, WHEELS)
    assert "haproxy" not in note and "debian:bookworm-slim" in note


def test_a_door_image_that_is_no_reference_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setenv(IMAGE_ENV, "not an image; rm -rf /")
    result = render(tmp_path)
    assert f"warning: {IMAGE_ENV} in this shell's environment is not an image reference" in result.stderr
    assert IMAGE_ENV not in read_env_file(tmp_path / ".env")


def test_kubernetes_reads_no_door_variable_so_none_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv(IMAGE_ENV, STANDIN)
    result = render(tmp_path, "--target", "k8s")
    assert IMAGE_ENV not in read_env_file(tmp_path / ".env")
    assert not lines(result, "note: ")


BASE_NOTE = "note: the line's `kit build` pulls its base"


def test_the_base_the_build_pulls_is_named_when_the_engine_lacks_it(tmp_path, monkeypatch):
    """The walk on a host without a registry: the printed `kit build` failed at pulling the table's base, which no
    line named. The base is an upstream image too: named when the line builds and the engine lacks it, with the
    render onto a base it has; not named when the engine has it, nor when nothing is to be built."""
    result = render(tmp_path)
    [note] = lines(result, BASE_NOTE)
    assert note == (f"{BASE_NOTE} debian:bookworm-slim, which this engine lacks; on a host without a registry, render "
                    f"onto a base this engine has first: `kit render --out {tmp_path} --base-image REF`")
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: ref == LOCAL_BASE)
    based = render(tmp_path, "--base-image", LOCAL_BASE)
    assert lines(based, f"next: kit build --out {tmp_path} && ") and not lines(based, BASE_NOTE)
    built = json.loads(render(tmp_path, "--json").stdout)["data"]["image"]
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: ref == built)
    assert not lines(render(tmp_path), BASE_NOTE)  # the image is here: nothing is built, no base pulled
