"""`kit doctor`: pure evaluation of recorded host facts, and one real run on this machine."""

import json
from pathlib import Path

import pytest

from kit.config.presetload import load_preset
from kit.core.gpus import gpu_key
from kit.host.doctor import (
    FAIL,
    PASS,
    WARN,
    CommandResult,
    HostFacts,
    check_compose,
    check_disk,
    check_docker,
    check_driver,
    check_gpu_runtime,
    check_gpus,
    check_hf,
    check_shm,
    evaluate,
    parse_nvidia_smi,
    report_json,
)

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
REPO = Path(__file__).resolve().parents[2]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def facts(smi: str | None = None, info: str = "docker-info-nvidia.json", **extra) -> HostFacts:
    docker_info = CommandResult(["docker", "info"], 0, fixture(info)) if info else CommandResult(
        ["docker", "info"], 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?")
    nvidia_smi = CommandResult(["nvidia-smi"], 0, fixture(smi)) if smi else CommandResult(
        ["nvidia-smi"], None, "", "nvidia-smi: not found")
    values = dict(docker_info=docker_info, compose_version=CommandResult(["docker", "compose"], 0, "2.40.3\n"),
                  nvidia_smi=nvidia_smi, shm_bytes=64 << 20, disk_free={"/var/lib/docker": 500 << 30},
                  hf_home="/nonexistent/hf", hf_token_set=False)
    values.update(extra)
    return HostFacts(**values)


def preset(name, *overrides):
    return load_preset(name, list(overrides))[2]


def by_name(checks):
    return {c.name: c for c in checks}


def test_parse_nvidia_smi_maps_names_to_the_catalog():
    gpus = parse_nvidia_smi(fixture("nvidia-smi-8x-a100-80gb.csv"))
    assert len(gpus) == 8 and {g.catalog_key for g in gpus} == {"a100-80gb"}
    assert gpus[0].memory_mib == 81920 and gpus[0].driver == "580.82.07"
    [g] = parse_nvidia_smi(fixture("nvidia-smi-1x-rtx4090.csv"))
    assert (g.name, g.catalog_key, g.driver) == ("NVIDIA GeForce RTX 4090", "rtx4090", "575.64.03")
    # The 8 GB RTX 4060 Ti shares the name of the 16 GB one: memory decides.
    assert gpu_key("NVIDIA GeForce RTX 4060 Ti", 16380) == "rtx4060ti-16gb"
    assert gpu_key("NVIDIA GeForce RTX 4060 Ti", 8188) is None
    assert gpu_key("Tesla T4", 15360) == "t4"


def test_rtx4090_on_a_575_driver_fails_the_cuda13_slim_image_and_says_how_to_fix():
    checks = by_name(evaluate(facts("nvidia-smi-1x-rtx4090.csv"), preset("rtx4090-awq")))
    driver = checks["nvidia driver"]
    assert driver.status == FAIL and "575.64.03 is older than 580.65.06" in driver.detail
    # vLLM 0.33 has no CUDA 12.9 image: the newest pinned release whose image runs on 575 is named exactly.
    assert "image.cuda=12.9" not in driver.fix
    assert "image.vllm_version=0.16.0 (its CUDA 12.9 build needs driver >= 575.51.03)" in driver.fix
    assert checks["gpus"].status == PASS
    assert checks["memory plan"].status == PASS and "fits in 23.49 GiB" in checks["memory plan"].detail
    assert checks["nvidia container runtime"].status == PASS


def test_2x3090_on_a_550_driver_is_too_old_even_for_cuda_129():
    checks = by_name(evaluate(facts("nvidia-smi-2x-rtx3090.csv"), preset("rtx3090x2-fp16")))
    assert checks["nvidia driver"].status == FAIL
    # No pinned build needs less than 575 (0.16.0, the oldest pin, is CUDA 12.9): the table leaves only the upgrade.
    assert checks["nvidia driver"].fix.startswith("upgrade the driver to >= 580.65.06 (no other pinned vLLM build "
                                                  "runs on driver 550.144.03); CUDA forward compatibility is not "
                                                  "offered on R550: NVIDIA has ended that driver branch")
    assert checks["gpus"].status == PASS
    assert checks["memory plan"].status == PASS


def test_8x_a100_on_580_passes_the_gpu_checks():
    checks = by_name(evaluate(facts("nvidia-smi-8x-a100-80gb.csv"), preset("a100x8")))
    for name in ("nvidia container runtime", "nvidia driver", "gpus", "memory plan"):
        assert checks[name].status == PASS, checks[name]
    assert "8 x NVIDIA A100-SXM4-80GB" in checks["gpus"].detail


def test_too_few_gpus_and_a_misfit_on_the_real_memory():
    checks = evaluate(facts("nvidia-smi-1x-rtx4090.csv"), preset("rtx3090x2-fp16"))
    gpus = [c for c in checks if c.name == "gpus"]
    assert gpus[0].status == FAIL and "2 GPU(s) per node; this host has 1" in gpus[0].detail
    # One 4090 for a preset planned on a 3090: a warning naming the key, then the plan on 23.5 GiB.
    checks = by_name(evaluate(facts("nvidia-smi-1x-rtx4090.csv"),
                              preset("rtx3090x2-fp16", "hardware.count=1", "engine.tensor_parallel_size=1")))
    assert checks["gpus"].status == WARN and checks["gpus"].fix == "render with hardware.gpu=rtx4090"
    assert checks["memory plan"].status == FAIL and "does not fit in 23.49 GiB" in checks["memory plan"].detail


def test_real_gpu_compatibility_is_checked_when_it_differs():
    t4 = "Tesla T4, 15360, 580.82.07\n"
    result = facts(None)
    result.nvidia_smi = CommandResult(["nvidia-smi"], 0, t4)
    checks = evaluate(result, preset("rtx3090x2-fp16", "hardware.count=1", "engine.tensor_parallel_size=1",
                                      "engine.dtype=bfloat16"))
    compat = [c for c in checks if c.name == "gpu compatibility"]
    assert compat and compat[0].status == FAIL and "engine.dtype=float16" in compat[0].fix


def test_runtime_missing_is_a_failure_for_a_gpu_preset_only():
    no_nvidia = facts("nvidia-smi-1x-rtx4090.csv", info="docker-info-no-nvidia.json")
    check = check_gpu_runtime(no_nvidia, preset("rtx4090-awq"))
    assert check.status == FAIL and "nvidia-ctk runtime configure" in check.fix
    assert check_gpu_runtime(no_nvidia, preset("cpu")).status == PASS
    assert check_gpu_runtime(no_nvidia, None).status == WARN
    with_cdi = facts("nvidia-smi-1x-rtx4090.csv", info="docker-info-no-nvidia.json", cdi_specs=["/etc/cdi/nvidia.yaml"])
    assert check_gpu_runtime(with_cdi, preset("rtx4090-awq")).status == PASS
    cdi_preset = preset("rtx4090-awq", "hardware.gpu_runtime=cdi")
    assert check_gpu_runtime(no_nvidia, cdi_preset).status == FAIL


def test_docker_versions():
    assert check_docker(facts(), preset("rtx4090-awq")).detail.startswith("Docker 27.5.1")
    old = facts(info="docker-info-no-nvidia.json")  # 20.10: no CDI device requests
    assert check_docker(old, preset("rtx4090-awq", "hardware.gpu_runtime=cdi")).status == FAIL
    assert check_docker(old, preset("rtx4090-awq")).status == PASS
    down = check_docker(facts(info=None), None)
    assert down.status == FAIL and "Is the docker daemon running?" in down.detail


def test_cdi_is_opt_in_before_docker_28_2():
    import json

    cdi = preset("rtx4090-awq", "hardware.gpu_runtime=cdi")
    base = json.loads(fixture("docker-info-no-nvidia.json").strip().splitlines()[-1])

    def engine(version, **extra):
        result = facts(info="docker-info-no-nvidia.json")
        result.docker_info = CommandResult(["docker", "info"], 0, json.dumps({**base, "ServerVersion": version, **extra}))
        return check_docker(result, cdi)

    opt_in = engine("26.1.4")
    assert opt_in.status == WARN and '"features": {"cdi": true}' in opt_in.fix
    assert engine("26.1.4", CDISpecDirs=["/etc/cdi", "/var/run/cdi"]).status == PASS  # the daemon opted in
    assert engine("28.2.0").status == PASS


def test_shm_with_ipc_host_must_hold_the_planned_size():
    small = facts(shm_bytes=64 << 20)
    assert check_shm(small, preset("a100x8")).status == PASS  # private /dev/shm sized by compose
    check = check_shm(small, preset("a100x8", "runtime.ipc=host"))
    assert check.status == FAIL and "the stack wants 19456 MiB" in check.detail


def test_disk_needs_image_plus_weights():
    tight = facts(disk_free={"/var/lib/docker": 10 << 30})
    check = check_disk(tight, preset("a100x8"))
    # The official image's newest published size, 28.6 GB (26.6 GiB), plus 1 GiB the kit adds: from data.
    assert check.status == FAIL and "image ~28 GiB (official)" in check.detail
    assert check_disk(facts(), preset("a100x8")).status == PASS


def test_the_official_image_budget_follows_its_newest_published_size(monkeypatch):
    from kit.config import strategy
    from kit.core.tables import ImageSize

    official = strategy.strategy_for("official")
    assert official.disk_gib() == pytest.approx(28.6e9 / (1 << 30) + 1)
    table = strategy.vllm_model()
    newest = ImageSize(image="vllm/vllm-openai:latest", date="2026-11", gb=40.0, source="a test's")
    bigger = table.model_copy(update={"official_image_sizes": [*table.official_image_sizes, newest]})
    monkeypatch.setattr(strategy, "vllm_model", lambda: bigger)
    assert official.disk_gib() == pytest.approx(40e9 / (1 << 30) + 1)
    # 31 GiB free passed the old fixed 30 GiB; it is short of a 38 GiB image and a small model.
    check = check_disk(facts(disk_free={"/var/lib/docker": 31 << 30}), None)
    assert check.status == FAIL and "an official image (~38 GiB, its newest published size)" in check.detail


def test_hf_token_presence_is_reported_never_its_value(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_do_not_print")
    from kit.host.doctor import hf_token_state

    assert hf_token_state("/nonexistent") == (True, "HF_TOKEN environment variable")
    check = check_hf(facts(hf_token_set=True, hf_token_source="HF_TOKEN environment variable"), preset("a100x8"))
    assert check.status == PASS and "hf_secret" not in json.dumps(check.to_json())
    assert check_hf(facts(), preset("a100x8")).status == WARN
    assert check_hf(facts(), preset("cpu")).status == PASS


def test_report_json_has_stable_keys():
    report = report_json(evaluate(facts("nvidia-smi-8x-a100-80gb.csv"), preset("a100x8")))
    assert set(report) == {"checks", "ok"}
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in report["checks"])


def test_driver_without_preset_just_reports():
    assert check_driver(facts("nvidia-smi-2x-rtx3090.csv"), None).detail == "driver 550.144.03"
    assert [c.status for c in check_gpus(facts(None), None)] == [WARN]


# ------------------------------------------------------------------ what upstream really requires


def compose_facts(name: str) -> HostFacts:
    return facts(compose_version=CommandResult(["docker", "compose", "version", "--short"], 0, fixture(name)))


def test_compose_floor_is_the_include_element_with_that_reason():
    """The floor names the feature that needs it (top-level `include:`), not the env_file form no render has now."""
    old = check_compose(compose_facts("compose-version-2.20.2.txt"))
    assert old.status == FAIL and "Compose 2.20.2 is older than 2.20.3" in old.detail
    assert "`include:`" in old.detail and "required: false" not in old.detail and ">= 2.20.3" in old.fix
    assert check_compose(compose_facts("compose-version-2.20.3.txt")).status == PASS
    assert check_compose(compose_facts("compose-version-2.40.3.txt")).detail == "Compose v2 (2.40.3 >= 2.20.3)"


def test_the_compose_floor_covers_every_rendered_top_level_key():
    """A rendered file's top-level keys are ones Compose 2.20.3 reads; a new one must move the floor (and its reason)."""
    import yaml

    from kit.deploy.pipeline import prepare
    from kit.deploy.render import Companion

    main = prepare("cpu")
    other = prepare("cpu-embed")
    files = __import__("kit.deploy.render", fromlist=["render"]).render(
        main.deployment, companions=(Companion(other.deployment),), profiles=("webui",))
    keys = {k for name, text in files.items() if name.startswith("compose") for k in yaml.safe_load(text)}
    assert keys == {"include", "services", "volumes"}


def test_runtime_hook_on_path_serves_gpu_requests_without_a_registered_runtime():
    hook = ["/usr/bin/nvidia-container-runtime-hook"]
    only_hook = facts("nvidia-smi-1x-rtx4090.csv", info="docker-info-28-no-nvidia-runtime.json", device_hooks=hook)
    check = check_gpu_runtime(only_hook, preset("rtx4090-awq"))
    assert check.status == PASS and "without a registered `nvidia` runtime" in check.detail
    # Without the hook (and without runtime or CDI) the same host fails, naming what is missing.
    bare = facts("nvidia-smi-1x-rtx4090.csv", info="docker-info-28-no-nvidia-runtime.json")
    check = check_gpu_runtime(bare, preset("rtx4090-awq"))
    assert check.status == FAIL and "nvidia-container-runtime-hook" in check.detail
    # Jetson's compose uses `runtime: nvidia`: the hook alone is not enough there.
    jetson = check_gpu_runtime(only_hook, preset("orin"))
    assert jetson.status == FAIL and "runtime: nvidia" in jetson.detail
    assert check_gpu_runtime(facts(), preset("orin")).status == PASS


@pytest.mark.parametrize(("smi", "branch"), [("nvidia-smi-8x-a100-80gb-r570.csv", 570),
                                             ("nvidia-smi-8x-a100-80gb-r535.csv", 535)])
def test_forward_compat_is_not_offered_on_ended_branches(smi, branch):
    # The NVIDIA runtime still accepts R535/R570 for CUDA 13.0 images, but NVIDIA has ended both branches
    # (host.yaml cuda_forward_compat.ended_branches): the doctor names the live branches instead of the switch.
    checks = by_name(evaluate(facts(smi), preset("a100x8")))
    driver = checks["nvidia driver"]
    assert driver.status == FAIL and "which the CUDA 13.0 image needs" in driver.detail
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY=1 in the stack's .env" not in driver.fix
    assert f"not offered on R{branch}: NVIDIA has ended that driver branch" in driver.fix
    assert "R580 (LTSB, to 2028-06)" in driver.fix
    # The -cu129 image needs 575.51.03: not offered to an R570 or R535 host.
    assert "image.cuda=12.9" not in driver.fix


def test_forward_compat_is_offered_on_a_live_listed_branch(monkeypatch):
    # Were a listed branch still supported, a datacenter GPU would get the switch (the rule is data, not code).
    from kit.host import doctor

    table = doctor.host_table()
    rule = {**table["cuda_forward_compat"], "ended_branches": {}}
    monkeypatch.setattr(doctor, "host_table", lambda: {**table, "cuda_forward_compat": rule})
    driver = by_name(evaluate(facts("nvidia-smi-8x-a100-80gb-r570.csv"), preset("a100x8")))["nvidia driver"]
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY=1 in the stack's .env" in driver.fix and "accepts on R570" in driver.fix


def test_a100_on_r575_is_offered_an_older_release_not_a_cu129_image():
    smi = fixture("nvidia-smi-8x-a100-80gb-r570.csv").replace("570.172.08", "575.57.08")
    result = facts()
    result.nvidia_smi = CommandResult(["nvidia-smi"], 0, smi)
    fix = check_driver(result, preset("a100x8")).fix
    assert "cu129" not in fix and "image.cuda=" not in fix
    assert "image.vllm_version=0.16.0 (its CUDA 12.9 build needs driver >= 575.51.03)" in fix
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY=1" not in fix and "not offered on R575" in fix


def test_geforce_never_gets_forward_compat():
    # RTX 4090 on R575 with the a100x8-style official CUDA 13 image: an older release, not the compat switch.
    checks = by_name(evaluate(facts("nvidia-smi-1x-rtx4090.csv"),
                              preset("rtx4090-awq", "image.strategy=official")))
    fix = checks["nvidia driver"].fix
    assert "image.vllm_version=0.16.0" in fix
    assert "in the stack's .env" not in fix
