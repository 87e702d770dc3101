"""Replicas behind vLLM's router (`runtime.replicas`): the rendered stack, the GPU split, the router image, errors."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import load_yaml
from kit.core.errors import KitError
from kit.deploy.pipeline import prepare
from kit.deploy.router import router_image_ref

pytestmark = pytest.mark.unit

ROUTER = load_yaml("router.yaml")


def compose(*overrides: str, preset: str = "cpu", **kw) -> tuple[dict, dict[str, str]]:
    files = prepare(preset, list(overrides), **kw).files
    return yaml.safe_load(files["compose.yaml"]), files


def gpu_ids(service: dict) -> list[str]:
    return service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]


def test_one_replica_renders_no_router():
    doc, files = compose()
    assert set(doc["services"]) == {"model-make", "model-fetch", "vllm", "door"}  # cpu generates its tiny model
    assert not any(rel.startswith("router/") for rel in files)


def test_cpu_replicas_sit_behind_the_router_on_the_preset_port():
    doc, files = compose("runtime.replicas=3", "runtime.port=8100")
    services = doc["services"]
    assert list(services) == ["model-make", "model-fetch", "vllm-1", "vllm-2", "vllm-3", "router", "door"]
    router = services["router"]
    # The router's own API (/add_worker, /remove_worker, /flush_cache) takes no key: it publishes nothing, and the
    # front door, which passes the inference routes only, publishes the preset's port (kit/deploy/door.py).
    assert "ports" not in router
    assert services["door"]["ports"] == ["127.0.0.1:8100:8000"]
    assert services["door"]["depends_on"] == {"router": {"condition": "service_healthy"}}
    assert f"server api router:{ROUTER['container_port']} " in files["door/haproxy.cfg"]
    for i in (1, 2, 3):
        replica = services[f"vllm-{i}"]
        assert "ports" not in replica  # the router is the one endpoint
        assert router["depends_on"][f"vllm-{i}"] == {"condition": "service_healthy"}
        assert "deploy" not in replica  # CPU replicas share the host's cores
        # its own compile cache, the one HF cache
        assert f"vllm-cache-{i}:/home/vllm/.cache/vllm" in replica["volumes"]
        assert "hf-cache:/home/vllm/.cache/huggingface" in replica["volumes"]
    assert set(doc["volumes"]) == {"hf-cache", "vllm-cache-1", "vllm-cache-2", "vllm-cache-3", "models"}
    argv = router["command"]
    urls = argv[argv.index("--worker-urls") + 1:argv.index("--policy")]
    assert urls == ["http://vllm-1:8000", "http://vllm-2:8000", "http://vllm-3:8000"]
    assert argv[argv.index("--policy") + 1] == ROUTER["default_policy"]
    assert argv[argv.index("--health-check-interval-secs") + 1] == str(ROUTER["health_check_interval_secs"])
    assert argv[argv.index("--health-failure-threshold") + 1] == str(ROUTER["health_failure_threshold"])
    # the router waits for its workers as long as the servers' healthcheck allows them to load
    assert argv[argv.index("--worker-startup-timeout-secs") + 1] == services["vllm-1"]["healthcheck"]["start_period"][:-1]
    # the replicas are the server, unchanged but for the keys above
    single, _ = compose("runtime.port=8100")
    server = single["services"]["vllm"]
    for key in ("entrypoint", "command", "environment", "healthcheck", "cap_drop", "read_only", "tmpfs", "pids_limit"):
        assert services["vllm-2"][key] == server[key]


def test_router_is_hardened_and_pinned():
    doc, files = compose("runtime.replicas=2")
    router = doc["services"]["router"]
    assert router["cap_drop"] == ["ALL"] and "cap_add" not in router
    assert router["security_opt"] == ["no-new-privileges:true"]
    assert router["read_only"] is True
    assert router["pids_limit"] == ROUTER["pids_limit"]
    assert router["tmpfs"] == [f"/tmp:size={ROUTER['tmpfs_size']}"]
    assert router["healthcheck"]["test"][0] == "CMD"
    assert router["build"] == {"context": "router", "dockerfile": "Dockerfile"}
    assert router["image"] == router_image_ref(prepare("cpu", ["runtime.replicas=2"]).deployment, files)
    assert router["image"].startswith(f"vllm-kit/router:{ROUTER['version']}-")
    assert files["router/requirements.txt"].splitlines()[-1] == f"vllm-router=={ROUTER['version']}"
    dockerfile = files["router/Dockerfile"]
    assert "--find-links /tmp/kit-wheels" in dockerfile and "ARG PIP_NO_INDEX" in dockerfile
    assert "\nUSER 10001\n" in dockerfile and 'ENTRYPOINT ["vllm-router"]' in dockerfile
    assert files["router/.dockerignore"].startswith("#") and "!wheels/" in files["router/.dockerignore"]


def test_router_image_tag_follows_its_inputs_only():
    _, two = compose("runtime.replicas=2")
    _, three = compose("runtime.replicas=3", "engine.max_num_seqs=4")
    d = prepare("cpu", ["runtime.replicas=2"]).deployment
    assert router_image_ref(d, two) == router_image_ref(d, three)  # replica count and flags: no rebuild
    _, other_base = compose("runtime.replicas=2", base_image="example.org/site/base:1")
    assert router_image_ref(d, other_base) != router_image_ref(d, two)


def test_gpu_replicas_get_disjoint_devices():
    doc, _ = compose("engine.tensor_parallel_size=2", "runtime.replicas=4", preset="a100x8", allow_no_fit=True)
    assigned = [gpu_ids(doc["services"][f"vllm-{i}"]) for i in range(1, 5)]
    assert assigned == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]


def test_gpu_replicas_follow_device_ids_and_cdi():
    # GPU UUIDs as `nvidia-smi -L` prints them (device_ids takes one index or UUID per item).
    a, b, c, d = (f"GPU-{n}0000000-0000-0000-0000-000000000000" for n in "abcd")
    doc, _ = compose("hardware.count=4", f"hardware.device_ids=[{a},{b},{c},{d}]", "hardware.gpu_runtime=cdi",
                     "engine.tensor_parallel_size=2", "runtime.replicas=2", preset="a100x8", allow_no_fit=True)
    assert gpu_ids(doc["services"]["vllm-1"]) == [f"nvidia.com/gpu={a}", f"nvidia.com/gpu={b}"]
    assert gpu_ids(doc["services"]["vllm-2"]) == [f"nvidia.com/gpu={c}", f"nvidia.com/gpu={d}"]
    assert doc["services"]["vllm-1"]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "cdi"


@pytest.mark.parametrize("overrides, preset, field, words", [
    (["engine.tensor_parallel_size=2", "runtime.replicas=5"], "a100x8", "runtime.replicas", "= 10 GPUs, but hardware.count is 8"),
    (["runtime.replicas=2"], "rtx3090x2-fp16", "runtime.replicas", "= 4 GPUs, but hardware.count is 2"),
    (["runtime.replicas=2", "hardware.nodes=2", "cluster.network=bridge"], "cpu", "runtime.replicas", "one host"),
    (["runtime.router_policy=round_robin"], "cpu", "runtime.router_policy", "one replica"),
])
def test_bad_replica_input_names_the_field(overrides, preset, field, words):
    with pytest.raises(KitError) as caught:
        prepare(preset, overrides, allow_no_fit=True)
    text = str(caught.value.problems)
    assert field in text and words in text, text


def test_unknown_policy_is_refused_with_the_choices():
    with pytest.raises(KitError) as caught:
        prepare("cpu", ["runtime.replicas=2", "runtime.router_policy=fastest"])
    text = f"{caught.value.message} {caught.value.problems}"
    assert "runtime.router_policy" in text and "round_robin" in text


def test_policy_choice_reaches_the_router():
    doc, _ = compose("runtime.replicas=2", "runtime.router_policy=power_of_two")
    argv = doc["services"]["router"]["command"]
    assert argv[argv.index("--policy") + 1] == "power_of_two"


def test_k8s_target_is_refused():
    with pytest.raises(KitError) as caught:
        prepare("cpu", ["runtime.replicas=2"], target="k8s")
    assert "runtime.replicas" in str(caught.value.problems)


def test_replicas_compose_with_a_server_beside_them():
    """One door per API: the replicas' router behind `door`, the companion's server behind `door-cpu-embed`."""
    doc, files = compose("runtime.replicas=2", with_presets=["cpu-embed"])
    other = yaml.safe_load(files["compose.cpu-embed.yaml"])["services"]
    assert doc["services"]["door"]["ports"] == ["127.0.0.1:8000:8000"]
    assert other["door-cpu-embed"]["ports"] == ["127.0.0.1:8001:8000"]
    assert "ports" not in other["vllm-cpu-embed"] and "ports" not in doc["services"]["router"]
    assert "server api vllm-cpu-embed:8000 " in files["door/haproxy-cpu-embed.cfg"]


def test_a_companion_with_replicas_is_refused(tmp_path):
    from kit.core.datafiles import PRESETS_DIR

    text = (PRESETS_DIR / "cpu-embed.yaml").read_text(encoding="utf-8")
    companion = tmp_path / "embed2.yaml"
    companion.write_text(text.replace("runtime:\n", "runtime:\n  replicas: 2\n", 1), encoding="utf-8")
    with pytest.raises(KitError) as caught:
        prepare("cpu", with_presets=[str(companion)])
    assert "runtime.replicas" in str(caught.value.problems)


def test_replicas_compose_with_monitoring_and_webui():
    doc, files = compose("runtime.replicas=2", with_profiles=["monitoring", "webui"])
    prometheus = yaml.safe_load(files["monitoring/prometheus.yml"])
    # Prometheus scrapes each replica on the stack network, not through the door.
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == ["vllm-1:8000", "vllm-2:8000"]
    webui = doc["services"]["webui"]
    assert webui["environment"]["OPENAI_API_BASE_URL"] == f"http://router:{ROUTER['container_port']}/v1"
    assert webui["depends_on"] == {"router": {"condition": "service_healthy"}}


def test_cli_refuses_too_many_gpu_replicas_in_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=rtx3090x2-fp16", "runtime.replicas=2", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "override runtime.replicas:" in result.output  # the value came from the command line
    assert not any(tmp_path.iterdir())
