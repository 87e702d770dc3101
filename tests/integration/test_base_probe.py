"""The wheels are resolved for the Python the image will run (issue 37's review: a lock on a base whose Python is
not the table's resolved wheels pip then refused in the build). `kit wheelhouse` and `kit lock` read it from the base
on this engine: its own python3, else the python3 its distribution installs (the runtime step installs it). Run in
real images: the stand-in base with python3, the same base with python3 taken out, and a reference the engine lacks.
Cheap: one small image built, no wheel downloaded."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.image.wheelhouse import base_target, probe_base_image

from .conftest import BASE_IMAGE

NO_PYTHON = "vllm-kit/test-base-no-python:probe"


@pytest.fixture(scope="module")
def base_without_python(docker_client):
    dockerfile = (f"FROM {BASE_IMAGE}\n"
                  "RUN rm -f /usr/bin/python3* /usr/local/bin/python3* && ! command -v python3\n")
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON, rm=True, forcerm=True,
                               network_mode="none")
    yield NO_PYTHON
    docker_client.images.remove(NO_PYTHON, force=True)


def test_a_base_with_python3_is_read_as_it_is(docker_client):
    script = "import platform, sys; print('%d.%d' % sys.version_info[:2], platform.libc_ver()[1])"
    python, glibc = docker_client.containers.run(BASE_IMAGE, ["python3", "-c", script], remove=True, entrypoint=[],
                                                 network_disabled=True).decode().split()
    probe = probe_base_image(BASE_IMAGE)
    assert probe is not None
    assert (probe.python_version, probe.glibc, probe.python_from) == (python, glibc, "python3 in the image")


def test_a_base_without_python3_gets_its_distributions_python(base_without_python):
    probe = probe_base_image(base_without_python)
    assert probe is not None
    # the stand-in base is Debian 12 (bookworm): apt's python3 there is 3.11
    assert (probe.python_version, probe.glibc) == ("3.11", "2.36")
    assert probe.python_from == "the distribution's python3 (debian 12)"


def test_a_base_the_engine_lacks_keeps_the_tables_values():
    assert probe_base_image("vllm-kit/never-built-here:none") is None
    python, glibc, said = base_target("vllm-kit/never-built-here:none", None)
    assert (python, glibc) == (None, None)
    assert "is not on this Docker engine" in said


def test_kit_lock_resolves_for_the_bases_python_not_the_tables(base_without_python, tmp_path):
    """rtx4090-awq's table base is Ubuntu 24.04's CUDA image (Python 3.12); on the Debian 12 base the lock's wheels
    are for 3.11, with no --python-version given. The wheelhouse here is empty and the index is not asked: the
    lock stops where it would resolve, and says for which Python."""
    out = tmp_path / "deploy"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "kit"), "lock", "preset=rtx4090-awq", "--base-image", base_without_python, "--offline",
         "--out", str(out), "--wheelhouse", str(tmp_path / "wh"), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
        # pip finds nothing anywhere: no index, no configured extra index or find-links
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_NO_INDEX": "1",
             "PIP_CONFIG_FILE": os.devnull})
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"base {base_without_python}: Python 3.11 (the distribution's python3 (debian 12)), glibc 2.36" \
        in result.stderr, result.stderr
    assert "for CPython 3.11, glibc 2.36, x86_64" in result.stderr, result.stderr
    assert not (out / "vllm-kit.lock.json").exists()


def test_a_given_python_version_wins_and_the_difference_is_said(base_without_python):
    python, glibc, said = base_target(base_without_python, "3.12")
    assert (python, glibc) == ("3.12", "2.36")
    assert said == (f"base {base_without_python}: Python 3.12 as given (the base's is 3.11, the distribution's "
                    "python3 (debian 12)), glibc 2.36")


def test_a_base_the_kit_cannot_read_needs_python_version(docker_client):
    """A base with no shell (here the empty image `scratch` stands in for a distroless one) is refused, naming it,
    unless --python-version says its Python."""
    from kit.core.errors import KitError

    ref = "vllm-kit/test-base-no-shell:probe"
    docker_client.images.build(fileobj=io.BytesIO(b"FROM scratch\nLABEL kit.test=no-shell\n"), tag=ref, rm=True)
    try:
        with pytest.raises(KitError, match=rf"base image {ref}: its shell could not be run"):
            base_target(ref, None)
        python, glibc, said = base_target(ref, "3.12")
        assert (python, glibc) == ("3.12", None)
        assert said.startswith(f"base {ref}: Python 3.12 as given; its glibc is the table's")
        # the failed probes left no container behind
        assert not docker_client.containers.list(all=True, filters={"ancestor": ref})
    finally:
        docker_client.images.remove(ref, force=True)
