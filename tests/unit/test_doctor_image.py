"""`kit doctor` holds the host's driver against the image a deployment runs (issue 36, image consistency): the
CUDA its wheels were built for and that CUDA's minimum driver, as the built image's labels record them, read from
the engine by the SDK (never by running the image); without the image or its labels, against the preset's CUDA."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from docker.errors import ImageNotFound

from kit.cli.main import cli
from kit.config.presetload import load_preset
from kit.core.datafiles import vllm_table
from kit.deploy.deployment import CUDA_LABEL, MIN_DRIVER_LABEL, plan_deployment
from kit.deploy.pipeline import prepare
from kit.host import doctor
from kit.host.doctor import FAIL, PASS, CommandResult, HostFacts, ImageFacts, check_driver, image_facts

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
REF = "vllm-kit/rtx4090-awq:0.33.0-0123456789ab"


def rtx4090_host(image: ImageFacts | None) -> HostFacts:
    """One RTX 4090 on driver 575.64.03 (the recorded nvidia-smi answer)."""
    smi = (FIXTURES / "nvidia-smi-1x-rtx4090.csv").read_text()
    return HostFacts(docker_info=CommandResult(["docker", "info"], 0, (FIXTURES / "docker-info-nvidia.json").read_text()),
                     compose_version=CommandResult(["docker", "compose"], 0, "2.40.3\n"),
                     nvidia_smi=CommandResult(["nvidia-smi"], 0, smi), image=image)


def preset(*overrides: str):
    return load_preset("rtx4090-awq", list(overrides))[2]


def labels_of(*overrides: str) -> dict[str, str]:
    """The labels the kit writes into the image of rtx4090-awq with these overrides (the Dockerfile's LABEL lines)."""
    return plan_deployment("rtx4090-awq", preset(*overrides)).image.labels


class FakeImages:
    def __init__(self, images: dict[str, dict[str, str] | None]) -> None:
        self.images, self.asked = images, []

    def get(self, ref: str):
        self.asked.append(ref)
        if ref not in self.images:
            raise ImageNotFound(f"No such image: {ref}")
        return type("Image", (), {"labels": self.images[ref]})()


class FakeClient:
    """The Docker SDK's lookup boundary: ``images.get(ref).labels``; nothing else of the engine is used."""

    def __init__(self, images: dict[str, dict[str, str] | None]) -> None:
        self.images = FakeImages(images)


def test_the_image_labels_record_the_wheels_cuda_and_its_minimum_driver_from_the_table():
    table = vllm_table()
    for overrides in ((), ("image.vllm_version=0.16.0",), ("image.strategy=official",)):
        labels = labels_of(*overrides)
        release = table["versions"][preset(*overrides).image.vllm_version]
        assert labels[CUDA_LABEL] == release["cuda"]
        assert labels[MIN_DRIVER_LABEL] == table["cuda"][release["cuda"]]["min_driver"]
    # The Dockerfile carries them as LABEL lines (what the built image's config then holds).
    files = prepare("rtx4090-awq").files
    assert f'LABEL {MIN_DRIVER_LABEL}="580.65.06"' in files["Dockerfile"]
    assert f'LABEL {CUDA_LABEL}="13.0"' in files["Dockerfile"]
    # No CUDA, no driver: the cpu image records neither; Jetson's driver comes with L4T.
    assert not {CUDA_LABEL, MIN_DRIVER_LABEL} & set(plan_deployment("cpu", load_preset("cpu")[2]).image.labels)
    assert MIN_DRIVER_LABEL not in plan_deployment("orin", load_preset("orin")[2]).image.labels


def test_a_driver_new_enough_for_the_images_cuda_passes_although_the_preset_now_declares_a_newer_one():
    # The image was built from vLLM 0.16.0 (CUDA 12.9, driver >= 575.51.03); the preset now says 0.33.0 (CUDA 13.0).
    check = check_driver(rtx4090_host(ImageFacts(REF, labels_of("image.vllm_version=0.16.0"))), preset())
    assert check.status == PASS
    assert check.detail == f"driver 575.64.03 >= 575.51.03 (the CUDA 12.9 build in image {REF})"


def test_a_driver_too_old_for_the_images_cuda_fails_and_names_the_upgrade_and_an_older_cuda_image():
    check = check_driver(rtx4090_host(ImageFacts(REF, labels_of())), preset())
    assert check.status == FAIL
    assert check.detail == f"driver 575.64.03 is older than 580.65.06, which the CUDA 13.0 build in image {REF} needs"
    assert check.fix.startswith("upgrade the driver to >= 580.65.06, or image.vllm_version=0.16.0 (its CUDA 12.9 "
                                "build needs driver >= 575.51.03)")
    assert "(an override renders an image for an older CUDA; then `kit build` it)" in check.fix


def test_an_image_from_a_kit_that_recorded_only_the_cuda_gets_the_driver_from_the_table():
    labels = {k: v for k, v in labels_of("image.vllm_version=0.16.0").items() if k != MIN_DRIVER_LABEL}
    check = check_driver(rtx4090_host(ImageFacts(REF, labels)), preset())
    assert check.status == PASS and "575.51.03 (the CUDA 12.9 build in image" in check.detail


def test_an_image_without_the_cuda_label_falls_back_to_the_presets_cuda_and_says_why():
    older_kit = {k: v for k, v in labels_of("image.vllm_version=0.16.0").items() if k not in (CUDA_LABEL, MIN_DRIVER_LABEL)}
    check = check_driver(rtx4090_host(ImageFacts(REF, older_kit)), preset())
    assert check.status == FAIL  # the preset's CUDA 13.0 needs 580.65.06
    assert check.detail == (f"driver 575.64.03 is older than 580.65.06, which the CUDA 13.0 image needs; from the "
                            f"preset (image {REF} carries no {CUDA_LABEL} label: an older kit built it)")
    assert "then `kit build` it" not in check.fix


def test_an_image_not_on_the_engine_is_looked_up_by_the_sdk_and_the_preset_decides():
    client = FakeClient({})
    facts = image_facts(REF, client)
    assert client.images.asked == [REF] and facts == ImageFacts(REF, None, "is not on this Docker engine")
    check = check_driver(rtx4090_host(facts), preset())
    assert check.status == FAIL
    assert check.detail.endswith(f"which the CUDA 13.0 image needs; from the preset (image {REF} is not on this "
                                 "Docker engine)")
    # Without an image asked about (no preset rendered), the verdict reads as it always did.
    assert check_driver(rtx4090_host(None), preset()).detail == ("driver 575.64.03 is older than 580.65.06, which the "
                                                                 "CUDA 13.0 image needs")


def test_an_image_on_the_engine_gives_its_labels():
    labels = labels_of("image.vllm_version=0.16.0")
    assert image_facts(REF, FakeClient({REF: labels})) == ImageFacts(REF, labels)
    assert image_facts(REF, FakeClient({REF: None})) == ImageFacts(REF, {})  # an image with no labels at all


def test_doctor_out_reads_the_folders_image_from_the_engine(tmp_path, monkeypatch):
    """`kit doctor --out DIR`: the folder's record decides the image, whose labels the engine gives."""
    out = tmp_path / "dep"
    rendered = CliRunner().invoke(cli,
                                  ["render", "preset=rtx4090-awq", "image.vllm_version=0.16.0", "--out", str(out), "--json"])
    assert rendered.exit_code == 0, rendered.output
    ref = json.loads(rendered.stdout)["data"]["image"]
    host = rtx4090_host(None)
    answers = {"docker": host.docker_info, "nvidia-smi": host.nvidia_smi}
    # The host's commands are recorded answers; the image lookup goes to a fake engine that has the folder's image.
    monkeypatch.setattr(doctor, "run_command", lambda argv, timeout=20: replace(
        answers.get(argv[0], CommandResult(argv, None, "", "")), argv=argv))
    client = FakeClient({ref: labels_of("image.vllm_version=0.16.0")})
    monkeypatch.setattr(doctor, "docker_client", lambda: client)
    result = CliRunner().invoke(cli, ["doctor", "--out", str(out), "--json"])
    checks = {c["name"]: c for c in json.loads(result.stdout)["data"]["checks"]}
    assert client.images.asked == [ref]
    assert checks["nvidia driver"]["status"] == PASS
    assert checks["nvidia driver"]["detail"] == f"driver 575.64.03 >= 575.51.03 (the CUDA 12.9 build in image {ref})"
