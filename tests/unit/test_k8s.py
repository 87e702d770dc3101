"""`kit render --target k8s`: manifests validated offline against Kubernetes' OpenAPI schemas (kubernetes-validate).

LeaderWorkerSet is a CRD, not in the core schemas: its pod templates are validated as core PodTemplates,
and its own fields are asserted here.
"""

from __future__ import annotations

import math

import pytest
import yaml

from kit.config.preset_files import preset_names
from kit.deploy.deployment import APP_UID, HF_HOME, LAUNCHER_DIR, VLLM_CACHE
from kit.deploy.k8s import LWS_API, k8s_quantity
from kit.deploy.pipeline import prepare
from tests.conftest import require_module

kubernetes_validate = require_module("kubernetes_validate")
K8S_VERSION = "1.34.0"
CORE_KINDS = {"Deployment", "Service", "PersistentVolumeClaim", "ConfigMap"}


def manifests(preset: str, *overrides: str) -> dict[str, dict]:
    files = prepare(preset, list(overrides), target="k8s").files
    assert "compose.yaml" not in files and "Dockerfile" in files
    return {rel: yaml.safe_load(text) for rel, text in files.items() if rel.startswith("k8s/")}


def by_kind(docs: dict[str, dict], kind: str) -> dict:
    found = [doc for doc in docs.values() if doc.get("kind") == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def validate_core(doc: dict) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def validate_pod_template(template: dict) -> None:
    """A CRD's embedded pod template against the core schema, wrapped as a v1 PodTemplate."""
    validate_core({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "embedded"},
                   "template": template})


def server_container(pod_spec: dict) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == "vllm")


def claims(docs: dict[str, dict]) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in docs.values() if doc.get("kind") == "PersistentVolumeClaim"}


def gib(quantity: str) -> int:
    assert quantity.endswith("Gi"), quantity
    return int(quantity.removesuffix("Gi"))


def assert_pod_basics(pod_spec: dict, *, shm: str, gpus: int | None, serves: bool = True,
                      user: tuple[int, int] = (APP_UID, APP_UID)) -> None:
    # vLLM never talks to the Kubernetes API: no service-account token mounted into the pod.
    assert pod_spec["automountServiceAccountToken"] is False
    security = pod_spec["securityContext"]
    assert security["runAsNonRoot"] is True and (security["runAsUser"], security["fsGroup"]) == user
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
    container = pod_spec["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm" and mounts[HF_HOME] == "hf-cache"
    # The compile cache (VLLM_CACHE_ROOT) survives restarts on a claim, as compose keeps it on a named volume.
    assert mounts[VLLM_CACHE] == "vllm-cache" and "persistentVolumeClaim" in volumes["vllm-cache"]
    assert {"name": "VLLM_CACHE_ROOT", "value": VLLM_CACHE} in container["env"]
    limits = container.get("resources", {}).get("limits", {})
    assert limits.get("nvidia.com/gpu") == gpus
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # Secrets only by reference, key by key: no envFrom of the whole Secret, no value ever inlined, no HF_TOKEN in
    # the server (only the fetch reads it), the API key only where the API is served.
    assert "envFrom" not in container
    by_name = {e["name"]: e for e in container["env"]}
    assert "HF_TOKEN" not in by_name
    assert all("value" not in by_name[n] for n in ("VLLM_API_KEY", "NCCL_SOCKET_IFNAME") if n in by_name)
    assert ("VLLM_API_KEY" in by_name) is serves
    if serves:
        # Required by default (runtime.require_api_key): the pod does not start without the Secret's key.
        assert by_name["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is False
    if serves:
        # The server listens on the pod's loopback only; its probes ask it there, the pod's one port is the door's.
        assert container["args"][container["args"].index("--host") + 1] == "127.0.0.1"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert "http://127.0.0.1:8001/health" in container[probe]["exec"]["command"][-1], probe
        assert all(p["name"] != "http" for p in container.get("ports", []))
        door = next(c for c in pod_spec["containers"] if c["name"] == "door")
        assert door["ports"] == [{"name": "http", "containerPort": 8000}]


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_renders_valid_core_manifests(preset):
    docs = manifests(preset)
    kinds = {doc["kind"] for rel, doc in docs.items() if not rel.endswith("kustomization.yaml")}
    assert {"Deployment", "Service", "PersistentVolumeClaim"} <= kinds
    for doc in docs.values():
        if doc["kind"] in CORE_KINDS:
            validate_core(doc)
    kustomization = docs["k8s/kustomization.yaml"]
    assert sorted(kustomization["resources"]) == sorted(r.removeprefix("k8s/") for r in docs if "kustomization" not in r)


def test_single_node_gpu_deployment():
    docs = manifests("rtx3090x2-fp16")
    deployment = by_kind(docs, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    # The official image's own user, vllm (uid 2000, gid 0): its home and caches are group 0 writable.
    assert_pod_basics(spec, shm="3Gi", gpus=2, user=(2000, 0))  # 2 GiB + 1 GiB for the second rank
    container = server_container(spec)
    # The server's command (after the empty-key guard, when the key is required) and its args.
    assert container["command"][-2:] == ["vllm", "serve"] and container["args"][0] == "Qwen/Qwen2.5-14B-Instruct"
    assert container["args"][container["args"].index("--tensor-parallel-size") + 1] == "2"
    assert container["args"][container["args"].index("--port") + 1] == "8001"  # on the pod's loopback, behind the door
    startup = container["startupProbe"]
    d = prepare("rtx3090x2-fp16", target="k8s").deployment
    assert startup["periodSeconds"] * startup["failureThreshold"] >= d.runtime.healthcheck_start_period
    assert spec["initContainers"][0]["name"] == "model-fetch"
    claim = claims(docs)["vllm-rtx3090x2-fp16-hf-cache"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert {v["name"]: v for v in spec["volumes"]}["hf-cache"]["persistentVolumeClaim"]["claimName"] == \
        claim["metadata"]["name"]
    service = by_kind(docs, "Service")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_cpu_deployment_has_no_gpu_and_adds_sys_nice():
    spec = by_kind(manifests("cpu"), "Deployment")["spec"]["template"]["spec"]
    assert_pod_basics(spec, shm="4Gi", gpus=None)
    assert server_container(spec)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE"]}


def test_several_nodes_render_a_leaderworkerset():
    docs = manifests("a100x8", "hardware.nodes=2")  # no head address: LWS hands workers the leader's
    lws = by_kind(docs, "LeaderWorkerSet")
    assert lws["apiVersion"] == LWS_API
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert set(template) == {"size", "restartPolicy", "leaderTemplate", "workerTemplate"}
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    validate_pod_template(leader)
    validate_pod_template(worker)
    shm = k8s_quantity(prepare("a100x8", ["hardware.nodes=2"], target="k8s").deployment.runtime.shm.shm_size)
    assert shm == "19Gi"  # 8 ranks on the node: 2 + 7 GiB, +10 GiB for Ray's object store
    assert_pod_basics(leader["spec"], shm=shm, gpus=8, user=(2000, 0))
    assert_pod_basics(worker["spec"], shm=shm, gpus=8, serves=False, user=(2000, 0))
    head = server_container(leader["spec"])
    assert head["command"][-2:] == ["python3", f"{LAUNCHER_DIR}/ray_node.py"]  # after the guard when the key is required
    args = head["args"]
    assert args[:3] == ["head", "--nodes", "2"]
    server = args[args.index("--") + 1:]
    assert server[server.index("--pipeline-parallel-size") + 1] == "2"
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert server[server.index("--host") + 1] == "127.0.0.1"  # behind the leader pod's door
    worker_container = worker["spec"]["containers"][0]
    assert worker_container["args"][:3] == ["worker", "--address", "$(LWS_LEADER_ADDRESS):6379"]
    for pod in (leader, worker):
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["VLLM_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    config_map = docs["k8s/ray-node-configmap.yaml"]
    validate_core(config_map)
    assert "def run_head" in config_map["data"]["ray_node.py"]
    service = by_kind(docs, "Service")
    validate_core(service)
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
                                           "role": "leader"}
    assert {name: c["spec"]["accessModes"] for name, c in claims(docs).items()} == {
        "vllm-a100x8-hf-cache": ["ReadWriteMany"], "vllm-a100x8-vllm-cache": ["ReadWriteMany"]}


def test_validator_catches_a_broken_manifest():
    deployment = by_kind(manifests("cpu"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": [1]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(deployment)
    bad = {"metadata": {}, "spec": {"containers": [{"name": "x", "shmSize": "4g"}]}}  # no such field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_pod_template(bad)


def test_quantities():
    # Every Docker size form, as the exact Kubernetes quantity (whole binary units where exact, else bytes).
    assert [k8s_quantity(s) for s in ("4096m", "4g", "4GiB", "512k", "100", "1536m", "10.24g")] == \
        ["4Gi", "4Gi", "4Gi", "512Ki", "100", "1536Mi", "10995116277"]
    validate_core({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
                   "spec": {"containers": [{"name": "c", "image": "i"}],
                            "volumes": [{"name": "s", "emptyDir": {"medium": "Memory",
                                                                   "sizeLimit": k8s_quantity("10.24g")}}]}})


def claim_gib(preset: str) -> int:
    found = claims(manifests(preset))[f"vllm-{preset}-hf-cache"]
    return gib(found["spec"]["resources"]["requests"]["storage"])


def test_model_cache_claim_is_sized_from_the_plan():
    """27.5 GiB of fp16 weights no longer get the old flat 20Gi: weights x 2 + 5 GiB (kit/data/k8s.yaml)."""
    prepared = prepare("rtx3090x2-fp16", target="k8s")
    plan, engine = prepared.report.plan, prepared.preset.engine
    weights = plan.weights_gib * engine.tp * engine.pp
    assert 27 < weights < 28
    size = claim_gib("rtx3090x2-fp16")
    assert size == math.ceil(weights * 2 + 5)
    # A smaller model gets a smaller claim: the size follows the model, not a constant.
    small = claim_gib("rtx4090-awq")
    assert small < size


def test_cpu_requests_hold_weights_kv_cache_and_processes():
    prepared = prepare("cpu", ["runtime.cpu_kvcache_space_gib=6"], target="k8s")
    plan = prepared.report.plan
    spec = by_kind(manifests("cpu", "runtime.cpu_kvcache_space_gib=6"), "Deployment")["spec"]["template"]["spec"]
    resources = server_container(spec)["resources"]
    request, limit = gib(resources["requests"]["memory"]), gib(resources["limits"]["memory"])
    assert plan.kv_cache_gib == 6
    # 6 GiB KV + weights + 3 processes (API server, engine core, one worker) x 2 GiB
    assert request == math.ceil(6 + plan.weights_gib + 3 * 2)
    assert limit == request + 4  # + the 4 GiB /dev/shm emptyDir, which counts against the memory limit
    assert resources["requests"]["cpu"] == "3" and "cpu" not in resources["limits"]
    # More KV cache, more memory requested.
    bigger = by_kind(manifests("cpu", "runtime.cpu_kvcache_space_gib=16"), "Deployment")["spec"]["template"]["spec"]
    assert gib(server_container(bigger)["resources"]["requests"]["memory"]) == request + 10


def test_gpu_requests_cover_loading_the_ranks_weights():
    prepared = prepare("rtx3090x2-fp16", target="k8s")
    spec = by_kind(manifests("rtx3090x2-fp16"), "Deployment")["spec"]["template"]["spec"]
    resources = server_container(spec)["resources"]
    assert resources["requests"]["cpu"] == "4"  # API server + engine core + a worker per GPU
    memory = gib(resources["requests"]["memory"])
    assert memory >= 2 * prepared.report.plan.weights_gib + 4 * 2
    assert gib(resources["limits"]["memory"]) == memory + 3  # + /dev/shm 3 GiB
    assert resources["limits"]["nvidia.com/gpu"] == 2


def test_runtime_class_is_optional_and_jetson_defaults_to_nvidia():
    orin = by_kind(manifests("orin"), "Deployment")["spec"]["template"]["spec"]
    assert orin["runtimeClassName"] == "nvidia"
    validate_core(by_kind(manifests("orin"), "Deployment"))
    assert "runtimeClassName" not in by_kind(manifests("orin", 'runtime.k8s_runtime_class=""'), "Deployment")[
        "spec"]["template"]["spec"]
    assert "runtimeClassName" not in by_kind(manifests("rtx4090-awq"), "Deployment")["spec"]["template"]["spec"]
    chosen = by_kind(manifests("rtx4090-awq", "runtime.k8s_runtime_class=nvidia-cdi"), "Deployment")
    assert chosen["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia-cdi"
    lws = by_kind(manifests("a100x8", "hardware.nodes=2", "runtime.k8s_runtime_class=nvidia"), "LeaderWorkerSet")
    for role in ("leaderTemplate", "workerTemplate"):
        assert lws["spec"]["leaderWorkerTemplate"][role]["spec"]["runtimeClassName"] == "nvidia"


def test_runtime_class_must_be_a_dns_name():
    from kit.core.errors import PresetError

    with pytest.raises(PresetError) as caught:
        prepare("rtx4090-awq", ["runtime.k8s_runtime_class=Not_A_Name"], target="k8s")
    assert any(p.where == "override runtime.k8s_runtime_class" for p in caught.value.problems)


def test_an_image_with_no_registry_host_is_a_warning_that_says_to_push_it():
    # issue 23, item 2: a cluster pulls on each node; vllm-kit/cpu would be Docker Hub's, not the image built here.
    from click.testing import CliRunner

    from kit.cli.main import cli

    def registry_warnings(overrides, target="k8s"):
        return [str(w) for w in prepare("cpu", overrides, target=target).report.warnings if "registry host" in str(w)]

    [warning] = registry_warnings([])
    assert warning.startswith("presets/cpu.yaml: image: the manifests name the image vllm-kit/cpu, which has no "
                              "registry host")
    assert "kit push preset=cpu --registry HOST[:PORT]" in warning and "image.repository=HOST/" in warning
    [named] = registry_warnings(["image.repository=team/cpu"])
    assert named.startswith("override image.repository: the manifests name the image team/cpu,")  # the override set it
    for repository in ("registry.example:5000/team/cpu", "registry.example.org/org/cpu", "localhost/cpu", "127.0.0.1:5000/cpu"):
        assert registry_warnings([f"image.repository={repository}"]) == [], repository
    assert registry_warnings([], target="compose") == []  # compose builds it on this host and never pulls it
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--target", "k8s", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning: presets/cpu.yaml: image: the manifests name the image vllm-kit/cpu" in result.output


def door_of(spec: dict) -> dict:
    return next(c for c in spec["containers"] if c["name"] == "door")


@pytest.mark.parametrize("preset,overrides", [("cpu", ()), ("cpu-embed", ()), ("a100x8", ("hardware.nodes=2",))])
def test_the_door_stands_in_front_of_the_server_as_in_compose(preset, overrides):
    """Issue 35: the Service reached every route of vLLM (/invocations, /tokenize answer without its key). Now the
    compose stacks' door is a sidecar: the pod's only port, the server on the pod's loopback, the same config."""
    docs = manifests(preset, *overrides)
    pods = [by_kind(docs, "Deployment")["spec"]["template"]] if "k8s/deployment.yaml" in docs else \
        [by_kind(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]]
    config = docs["k8s/door-configmap.yaml"]
    validate_core(config)
    cfg = config["data"]["haproxy.cfg"]
    assert "server api 127.0.0.1:8001\n" in cfg and "resolvers" not in cfg
    assert "path /invocations" not in cfg and "path /tokenize" not in cfg
    assert "${POD_NAMESPACE}" in cfg and '"localhost:8000"' in cfg
    for pod in pods:
        validate_pod_template(pod)
        spec = pod["spec"]
        door = door_of(spec)
        server = server_container(spec)
        assert server["args"][server["args"].index("--host") + 1] == "127.0.0.1"
        assert all(p.get("name") != "http" for p in server.get("ports", []))
        assert door["ports"] == [{"name": "http", "containerPort": 8000}]
        assert door["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                           "capabilities": {"drop": ["ALL"]}}
        assert door["image"].startswith("haproxy:") and "@sha256:" in door["image"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["door-config"]["configMap"]["name"] == config["metadata"]["name"]
        env = {e["name"]: e for e in door["env"]}
        assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "VLLM_API_KEY"
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    service = by_kind(docs, "Service")
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    policy = by_kind(docs, "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_an_empty_required_key_stops_the_server_at_start():
    """Issue 35: `optional: false` only checks that the Secret has the name; `--from-env-file` with `VLLM_API_KEY=`
    gave an empty key and vLLM ran open. The command checks the value before it execs the server (run here by sh)."""
    import os
    import subprocess

    spec = by_kind(manifests("cpu", "runtime.require_api_key=true"), "Deployment")["spec"]["template"]["spec"]
    server = server_container(spec)
    env = {e["name"]: e for e in server["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is False
    plain = server_container(by_kind(manifests("cpu", "runtime.require_api_key=false"), "Deployment")["spec"][
        "template"]["spec"])
    # The guard goes before the server's own command; the args stay as they were.
    assert server["command"][:2] == ["/bin/sh", "-c"] and server["command"][3:] == plain["command"]
    assert server["args"] == plain["args"]
    # The guard as the container runs it, with `echo` in place of the server.
    script = server["command"][2]
    for key, code, out in (("", 1, ""), ("k3y", 0, "started --port 8001")):
        run = subprocess.run(["/bin/sh", "-c", script, "echo", "started", "--port", "8001"], capture_output=True,
                             text=True, env={**os.environ, "VLLM_API_KEY": key}, timeout=10)
        assert (run.returncode, run.stdout.strip()) == (code, out), run
        assert ("VLLM_API_KEY is empty" in run.stderr) is (code == 1)
    unset = subprocess.run(["/bin/sh", "-c", script, "echo", "started"], capture_output=True, text=True, timeout=10,
                           env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"})
    assert unset.returncode == 1
    # Without the requirement the server's own command runs as before.
    assert plain["command"][0] == "/opt/venv/bin/python" and "/bin/sh" not in plain["command"]


def test_the_fetch_has_no_capability():
    """Issue 35: the fetch init container got the server's SYS_NICE (CPU backend)."""
    spec = by_kind(manifests("cpu"), "Deployment")["spec"]["template"]["spec"]
    for init in spec["initContainers"]:
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}, init["name"]
    assert server_container(spec)["securityContext"]["capabilities"]["add"] == ["SYS_NICE"]


def test_a_ray_port_on_the_servers_pod_port_is_refused():
    from kit.core.errors import KitError

    with pytest.raises(KitError) as info:
        prepare("a100x8", ["hardware.nodes=2", "cluster.ray_port=8001"], target="k8s")
    assert "cluster.ray_port" in " ".join([str(info.value), *map(str, info.value.problems)])
