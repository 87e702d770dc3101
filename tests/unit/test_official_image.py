"""The official strategy against what the official images contain (kit/data/vllm.yaml official_layouts)."""

import pytest

from kit.core.datafiles import vllm_table
from kit.deploy.deployment import HF_HOME, VLLM_CACHE
from kit.deploy.pipeline import prepare
from kit.run.smoke import SERVER_MODULE, server_marker

pytestmark = pytest.mark.unit


def test_every_pinned_release_names_a_known_official_layout():
    table = vllm_table()
    for version, release in table["versions"].items():
        layout = table["official_layouts"][release["official_layout"]]
        assert layout["entrypoint"] == ["vllm", "serve"], version
        assert layout["installer"][:3] == ["uv", "pip", "install"], version


def test_official_images_run_as_upstreams_user_with_caches_in_its_home():
    user = vllm_table()["official_user"]
    d = prepare("a100x8").deployment
    assert (d.runtime.run_user.name, d.runtime.run_user.uid, d.runtime.run_user.gid, d.runtime.run_user.home) == (
        user["name"], user["uid"], user["gid"], user["home"])
    assert d.runtime.run_user.create == "never"  # v0.33.0's image has it
    # The cache volumes are mounted under that home, where the Dockerfile makes them writable.
    assert HF_HOME.startswith(d.runtime.run_user.home + "/") and VLLM_CACHE.startswith(d.runtime.run_user.home + "/")
    assert prepare("a100x8", ["image.vllm_version=0.16.0"]).deployment.runtime.run_user.create == "if-missing"
    assert prepare("a100x8", base_image="site/vllm:1").deployment.runtime.run_user.create == "if-missing"
    assert prepare("rtx4090-awq").deployment.runtime.run_user.uid == 10001  # the kit's own images keep their user


def test_smoke_finds_the_server_process_for_either_entrypoint():
    assert server_marker(prepare("a100x8").deployment.serve.entrypoint) == "bin/vllm"
    assert server_marker(prepare("cpu").deployment.serve.entrypoint) == SERVER_MODULE
