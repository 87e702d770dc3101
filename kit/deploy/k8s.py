"""Deployment -> Kubernetes manifests (``kit render --target k8s``), as data serialized to YAML.

Public entry point: ``render_manifests(ctx, launcher) -> {path: text}``, called by ``kit.deploy.render.render``.
Manifests are nested data, so they are built as dicts and written by a YAML serializer (which quotes every
value for YAML) rather than laid out by a template; the decisions (shm size, probes' windows, GPU count) come
from the same Deployment as the compose files.

One node: a Deployment, a Service and PersistentVolumeClaims. Several nodes: a LeaderWorkerSet (the leader
runs Ray's head and the server, workers join it; the whole group restarts together when a pod fails), the
launcher as a ConfigMap, a Service on the leader, and ReadWriteMany claims for the shared HF and compile caches.

Sizes come from the memory plan (``ctx.plan``, kit/memory/plan.py) and the rules in kit/data/k8s.yaml: the model cache
from the planner's weights, memory and CPU requests from the processes vLLM runs and what they hold.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any


from kit.core.units import ram_in_bytes
from kit.core.datafiles import load_yaml
from kit.core.safevalue import check_text, k8s_escape
from kit.core.yamlwrite import checked, comment_lines, yaml_text
from kit.deploy import deployment as dep
from kit.deploy import door
from kit.deploy.service_env import API_KEY_ENV, api_key_required, env_names

if TYPE_CHECKING:
    from kit.deploy.render import RenderContext
    from kit.memory.plan import Plan

K8S_DIR = "k8s"
LWS_API = "leaderworkerset.x-k8s.io/v1"
GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
PROBE_PERIOD = 10


def literal(value: str) -> str:
    """A preset-derived string as Kubernetes must see it in command/args/env: one line, `$(` not expanded."""
    return k8s_escape(check_text(value, "a value for Kubernetes"))


def literal_list(values: list[str]) -> list[str]:
    return [literal(v) for v in values]


def app_name(d: dep.Deployment) -> str:
    """A DNS-1123 label from the preset's name."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"vllm-{d.preset_name}".lower()).strip("-")
    return name[:50].rstrip("-") or "vllm"


def secret_name(d: dep.Deployment) -> str:
    return f"{app_name(d)}-secrets"


GIB = 1 << 30
FALLBACK_MODEL_CACHE_GIB = 50  # no plan (the model's shape is unknown offline): vLLM's own k8s guide's claim


def k8s_quantity(size: str) -> str:
    """A Docker size (10.24g, 4096m, 4GiB, bytes) as a Kubernetes quantity: whole Gi/Mi/Ki if exact, else bytes."""
    value = ram_in_bytes(size)
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def gib(value: float) -> str:
    return f"{max(1, math.ceil(value))}Gi"


def rules() -> dict[str, Any]:
    return load_yaml("k8s.yaml")


def model_weights_gib(plan: Plan | None, d: dep.Deployment) -> float | None:
    """The whole model's weights as the planner counts them: one rank's weights times the ranks."""
    if plan is None:
        return None
    eng = d.preset.engine
    return plan.weights_gib * eng.tp * eng.pp


def model_cache_size(plan: Plan | None, d: dep.Deployment) -> str:
    """The model-cache claim: the model's weights x copies + extra (kit/data/k8s.yaml says why)."""
    weights = model_weights_gib(plan, d)
    if weights is None:
        return gib(FALLBACK_MODEL_CACHE_GIB)
    rule = rules()["model_cache"]
    return gib(weights * rule["copies"] + rule["extra_gib"])


def ranks_in_pod(d: dep.Deployment) -> int:
    """Engine ranks one pod runs: its GPUs, or every rank on the CPU backend (one pod)."""
    eng, hw = d.preset.engine, d.preset.hardware
    if hw.gpu is None:
        return eng.tp * eng.pp
    return min(eng.tp * eng.pp, hw.count)


def resources_for(d: dep.Deployment, plan: Plan | None, *, serves: bool) -> dict[str, Any]:
    """requests (cpu, memory) and limits (memory, GPUs) of the server or Ray-worker container."""
    rule = rules()["resources"]
    ranks = ranks_in_pod(d)
    ray = d.preset.engine.distributed_executor_backend == "ray"
    processes = ranks + (2 if serves else 0) + (rule["ray_processes"] if ray else 0)
    memory = processes * rule["process_gib"]
    if plan is not None:
        memory += plan.weights_gib * ranks  # loading (GPU: page cache) or for good (CPU backend)
        if d.preset.hardware.gpu is None:
            memory += plan.kv_cache_gib * ranks  # VLLM_CPU_KVCACHE_SPACE per rank, in host memory
    requests = {"cpu": str(processes), "memory": gib(memory)}
    limit = memory + (ram_in_bytes(d.runtime.shm.shm_size) / GIB if d.runtime.shm.shm_size else 0)
    limits: dict[str, Any] = {"memory": gib(limit)}
    if d.preset.hardware.gpu is not None:
        limits[GPU_RESOURCE] = d.preset.hardware.count
    return {"requests": requests, "limits": limits}


def labels(d: dep.Deployment, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": app_name(d),
        "app.kubernetes.io/managed-by": "vllm-kit",
        **extra,
    }


def probes(d: dep.Deployment) -> dict[str, Any]:
    """startup covers loading (the compose healthcheck's start period); then readiness and liveness on /health, asked
    inside the server's container (it listens on the pod's loopback only, behind the door), as compose's healthcheck
    asks it."""
    url = f"http://127.0.0.1:{dep.POD_SERVER_PORT}/health"
    check = ["{python}", "-c", f"import urllib.request; urllib.request.urlopen('{url}', timeout={{timeout}})"]

    def health(period: int, failures: int, timeout: int) -> dict[str, Any]:
        command = [part.format(python=d.serve.python, timeout=timeout) for part in check]
        return {"exec": {"command": literal_list(command)}, "periodSeconds": period,
                "failureThreshold": failures, "timeoutSeconds": timeout + 1}

    return {
        "startupProbe": health(PROBE_PERIOD, math.ceil(d.runtime.healthcheck_start_period / PROBE_PERIOD), 5),
        "readinessProbe": health(PROBE_PERIOD, 3, 5),
        "livenessProbe": health(15, 4, 10),
    }


# The serving container's command runs under this guard when the key is required: `optional: false` only makes the
# Secret hold the name, and `kubectl create secret --from-env-file` with `VLLM_API_KEY=` gives it an empty value, with
# which vLLM and the door run without authentication. Fixed text: no preset value enters it (Kubernetes expands only
# `$(NAME)`, which it does not contain).
KEY_GUARD = ('if [ -z "${VLLM_API_KEY}" ]; then echo "VLLM_API_KEY is empty in the Secret: '
             'runtime.require_api_key is true; set a key (kubectl create secret ... --from-env-file=.env)" >&2; '
             'exit 1; fi; exec "$0" "$@"')


def key_guarded(d: dep.Deployment, command: list[str]) -> list[str]:
    """The server's command, refusing to start with an empty required key: `sh -c GUARD COMMAND...`, to which
    Kubernetes appends the args as they were, then the guard execs COMMAND with them."""
    return ["/bin/sh", "-c", KEY_GUARD, *command] if api_key_required(d) else command


def door_config_map(d: dep.Deployment) -> str:
    return f"{app_name(d)}-door"


def door_hosts(d: dep.Deployment) -> list[str]:
    """The Host values the pod's door answers to: 127.0.0.1 and localhost (probes; `kubectl port-forward` to any
    local port passes the door's loopback rule too), the Service's names in the pod's own namespace (HAProxy expands POD_NAMESPACE from the door's
    environment) and runtime.server_names (an Ingress's host), with the Service's port or without."""
    service_names = [app_name(d)] + [f"{app_name(d)}.${{POD_NAMESPACE}}{tail}" for tail in ("", ".svc",
                                                                                          ".svc.cluster.local")]
    return door.with_port(["127.0.0.1", "localhost", *service_names, *d.preset.runtime.server_names],
                          dep.CONTAINER_PORT)


def door_config_text(d: dep.Deployment) -> str:
    return door.door_config("127.0.0.1", dep.POD_SERVER_PORT, door.door_routes(d.preset), f"preset {d.preset_name}",
                            hosts=door_hosts(d), resolve=False)


def door_container(d: dep.Deployment) -> dict[str, Any]:
    """The front door as a sidecar (kit/deploy/door.py, the compose stacks' door): the pod's only port, the route
    allow-list and the key check in front of the server on the pod's loopback."""
    data = door.door_data()
    rules_k8s = data["k8s"]
    config_dir = data["config_path"].rsplit("/", 1)[0]
    return {
        "name": door.SERVICE,
        "image": door.image_ref(),
        "command": ["haproxy", "-db", "-f", data["config_path"]],
        "env": [
            {"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {
                "name": secret_name(d), "key": API_KEY_ENV, "optional": not api_key_required(d)}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [{"name": "http", "containerPort": int(data["container_port"])}],
        # Through the door, as a client asks: ready once the server behind it answers.
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http",
                                       "httpHeaders": [{"name": "Host", "value": "localhost"}]},
                           "periodSeconds": PROBE_PERIOD, "failureThreshold": 3, "timeoutSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 15, "failureThreshold": 4,
                          "timeoutSeconds": 5},
        "volumeMounts": [{"name": "door-config", "mountPath": config_dir, "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": str(rules_k8s["cpu"]), "memory": str(rules_k8s["memory"])},
                      "limits": {"memory": str(rules_k8s["memory_limit"])}},
    }


def pod_security(d: dep.Deployment) -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": d.runtime.run_user.uid, "runAsGroup": d.runtime.run_user.gid,
            "fsGroup": d.runtime.run_user.gid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security(d: dep.Deployment) -> dict[str, Any]:
    # The capability set and writable paths compose uses (kit/data/hardening.yaml); the root stays read-only.
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    assert d.runtime.hardening is not None  # the pipeline fills it (deployment.hardening_for)
    if d.runtime.hardening.cap_add:
        capabilities["add"] = list(d.runtime.hardening.cap_add)
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": capabilities}


def writable_volumes(d: dep.Deployment) -> tuple[list, list]:
    """emptyDirs where the server writes on a read-only root (compose's tmpfs mounts): /tmp and HOME."""
    vols, mounts = [], []
    assert d.runtime.hardening is not None
    for number, (path, size) in enumerate(d.runtime.hardening.tmpfs.items()):
        vols.append({"name": f"writable-{number}", "emptyDir": {"sizeLimit": k8s_quantity(size)}})
        mounts.append({"name": f"writable-{number}", "mountPath": path})
    return vols, mounts


def env_list(d: dep.Deployment, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [{"name": k, "value": literal(v)} for k, v in d.serve.environment.items()] + list(extra or [])


def secret_env(d: dep.Deployment, role: str) -> list[dict[str, Any]]:
    """One `secretKeyRef` per .env name the container of ``role`` reads (kit/data/service_env.yaml), from the
    Secret made from .env: no container sees the others' keys (an `envFrom` of the whole Secret gave HF_TOKEN to
    the server and the API key to the fetch). Optional (a public model needs no token, a default needs no
    setting), except the API key when runtime.require_api_key is set: the pod then does not start without it
    (Kubernetes: a missing non-optional key or Secret is CreateContainerConfigError)."""
    refs = []
    for name in env_names(role, d, target="k8s"):
        required = name == API_KEY_ENV and api_key_required(d)
        refs.append({"name": name, "valueFrom": {"secretKeyRef": {
            "name": secret_name(d), "key": name, "optional": not required}}})
    return refs


def hf_claim_name(d: dep.Deployment) -> str:
    return f"{app_name(d)}-hf-cache"


def compile_claim_name(d: dep.Deployment) -> str:
    return f"{app_name(d)}-vllm-cache"


def volumes(d: dep.Deployment, launcher_map: str | None = None) -> tuple[list, list]:
    """(pod volumes, server volume mounts)."""
    vols: list[dict[str, Any]] = [
        {"name": "hf-cache", "persistentVolumeClaim": {"claimName": hf_claim_name(d)}},
        # VLLM_CACHE_ROOT on a claim, as compose keeps it on a named volume: torch.compile artefacts survive restarts.
        {"name": "vllm-cache", "persistentVolumeClaim": {"claimName": compile_claim_name(d)}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "hf-cache", "mountPath": dep.HF_HOME},
        {"name": "vllm-cache", "mountPath": dep.VLLM_CACHE},
    ]
    if d.runtime.shm.shm_size:
        # /dev/shm: Docker's and Kubernetes' default 64 MiB is far too small (NCCL, Ray's object store).
        vols.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(d.runtime.shm.shm_size)}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if d.serve.local_model_dir:
        # Read-only to every container but model-make's (a generated model, one pod: it writes the claim first).
        claim_ro = not makes_model(d)
        vols.append({"name": "models", "persistentVolumeClaim": {"claimName": f"{app_name(d)}-models", "readOnly": claim_ro}})
        mounts.append({"name": "models", "mountPath": dep.MODELS_DIR, "readOnly": True})
    writable, writable_mounts = writable_volumes(d)
    vols += writable
    mounts += writable_mounts
    if makes_model(d):
        vols.append({"name": "model-make-script", "configMap": {"name": model_make_map(d)}})
    if launcher_map:
        vols.append({"name": "launcher", "configMap": {"name": launcher_map}})
        mounts.append({"name": "launcher", "mountPath": dep.LAUNCHER_DIR, "readOnly": True})
    return vols, mounts


def makes_model(d: dep.Deployment) -> bool:
    """A generated model made in the pod by an init container (compose's model-make): one node only, where the models
    claim is the pod's own (ReadWriteOnce); a cluster's claim is ReadOnlyMany and is filled by hand."""
    return d.serve.model_make_command is not None and d.serve.cluster is None


def model_make_map(d: dep.Deployment) -> str:
    return f"{app_name(d)}-model-make"


def model_make_container(d: dep.Deployment, ctx_image: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """Init container: makes the generated model in the models claim when it is missing, as the pod's non-root user
    (fsGroup makes the claim writable to it), before the fetch checks it; no token, no secret."""
    assert d.serve.model_make_command is not None
    command = list(d.serve.model_make_command)
    command[2] = d.serve.model_arg  # the claim is mounted at MODELS_DIR here (compose mounts its volume elsewhere)
    script = {"name": "model-make-script", "mountPath": dep.LAUNCHER_DIR, "readOnly": True}
    return {
        "name": "model-make",
        "image": ctx_image,
        "command": literal_list(command),
        "env": [{"name": k, "value": "1"} for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONDONTWRITEBYTECODE")],
        "volumeMounts": [{"name": "models", "mountPath": dep.MODELS_DIR}, script,
                         *(m for m in mounts if m["name"].startswith("writable-"))],
        "securityContext": {**container_security(d), "capabilities": {"drop": ["ALL"]}},
    }


def fetch_container(d: dep.Deployment, ctx_image: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """Init container: the model into the cache first, so the server starts offline (compose's model-fetch)."""
    return {
        "name": "model-fetch",
        "image": ctx_image,
        "command": literal_list(d.serve.fetch_command),
        "env": [{"name": "HF_HOME", "value": dep.HF_HOME}, *secret_env(d, "fetch")],
        "volumeMounts": [m for m in mounts if m["name"] in ("hf-cache", "models") or m["name"].startswith("writable-")],
        # The server's added capability (SYS_NICE on the CPU backend, for NUMA placement) is not the fetch's.
        "securityContext": {**container_security(d), "capabilities": {"drop": ["ALL"]}},
    }


def pod_spec(d: dep.Deployment, image: str, plan: Plan | None, *, command: list[str], args: list[str], serves: bool,
             launcher_map: str | None = None, extra_env: list[dict[str, Any]] | None = None) -> dict:
    vols, mounts = volumes(d, launcher_map)
    role = ("server" if d.serve.cluster is None else "ray_head") if serves else "ray_worker"
    server: dict[str, Any] = {
        "name": "vllm" if serves else "ray-worker",
        "image": image,
        "command": command,
        "args": args,
        "env": env_list(d, extra_env) + secret_env(d, role),
        "volumeMounts": mounts,
        "securityContext": container_security(d),
    }
    if serves:
        server["command"] = key_guarded(d, command)
        server.update(probes(d))
    if d.serve.cluster is not None and serves:
        server["ports"] = [{"name": "ray-gcs", "containerPort": d.serve.cluster.ray_port}]
    server["resources"] = resources_for(d, plan, serves=serves)
    if serves:  # the door beside the server: the pod's API port is the door's
        vols.append({"name": "door-config", "configMap": {"name": door_config_map(d)}})
    spec: dict[str, Any] = {
        # vLLM never calls the Kubernetes API: no service-account token in the pod for a compromise to use.
        "automountServiceAccountToken": False,
        "securityContext": pod_security(d),
        "initContainers": [*([model_make_container(d, image, mounts)] if makes_model(d) else []),
                           fetch_container(d, image, mounts)],
        "containers": [server, door_container(d)] if serves else [server],
        "volumes": vols,
        "terminationGracePeriodSeconds": 30,
    }
    if d.runtime.shm.ipc == "host":
        spec["hostIPC"] = True
    if d.preset.runtime.k8s_runtime_class:
        spec["runtimeClassName"] = d.preset.runtime.k8s_runtime_class
    return spec


def claim(d: dep.Deployment, name: str, size: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels(d)},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}},
    }


def compile_claim(d: dep.Deployment, mode: str) -> dict[str, Any]:
    return claim(d, compile_claim_name(d), gib(rules()["compile_cache_gib"]), mode)


def service(d: dep.Deployment, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_name(d), "labels": labels(d)},
        "spec": {"type": "ClusterIP", "selector": selector,
                 "ports": [{"name": "http", "port": dep.CONTAINER_PORT, "targetPort": "http"}]},
    }


# Pod labels the LeaderWorkerSet controller sets on every pod of a group (kubernetes-sigs/lws docs, "Labels,
# annotations and environment variables": leaderworkerset.sigs.k8s.io/name and /group-index, 0 to replicas-1).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"


def network_policy(d: dep.Deployment, pods: dict[str, str], group: dict[str, str] | None = None) -> dict[str, Any]:
    """Ingress to the stack's pods: the API port from pods of the same namespace only, and with several nodes every
    port from the pods of the same LeaderWorkerSet group only (Ray's GCS, raylets, object managers and worker
    range, NCCL and Gloo all pick ports of their own, so the group's peers get all ports, nobody else any).

    The API's selector is `podSelector: {}` in the policy's own namespace (no namespaceSelector): the namespace's
    ingress (a gateway, an Ingress controller or clients deployed beside the server) reaches it, pods of other
    namespaces do not. The kit cannot know where a cluster-wide Ingress controller lives; such a site adds a
    `from` entry with that namespace's selector (a kustomize patch). Probes are unaffected: traffic from the pod's
    own node is always allowed (Kubernetes docs, "Network Policies": behaviour of to and from selectors)."""
    api = {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": dep.CONTAINER_PORT}]}
    ingress: list[dict[str, Any]] = [api]
    if group is not None:
        ingress.append({"from": [{"podSelector": {"matchLabels": group}}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{app_name(d)}-ingress", "labels": labels(d)},
        "spec": {"podSelector": {"matchLabels": pods}, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def single_node(d: dep.Deployment, image: str, plan: Plan | None) -> dict[str, dict[str, Any]]:
    name = app_name(d)
    selector = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "server"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels(d)},
        "spec": {
            "replicas": 1,
            # The cache claim is ReadWriteOnce and the GPUs are few: the old pod goes before the new one starts.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels(d, **{"app.kubernetes.io/component": "server"})},
                "spec": pod_spec(d, image, plan, command=literal_list(d.serve.entrypoint),
                                 args=literal_list(d.serve.pod_serve_args), serves=True),
            },
        },
    }
    return {
        "deployment.yaml": deployment,
        "service.yaml": service(d, selector),
        "networkpolicy.yaml": network_policy(d, selector),
        "pvc.yaml": claim(d, hf_claim_name(d), model_cache_size(plan, d), "ReadWriteOnce"),
        "compile-cache-pvc.yaml": compile_claim(d, "ReadWriteOnce"),
    }


def multi_node(d: dep.Deployment, image: str, launcher: str, plan: Plan | None) -> dict[str, dict[str, Any]]:
    cl = d.serve.cluster
    assert cl is not None
    name = app_name(d)
    launcher_map = f"{name}-ray-node"
    node_ip = [{"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    leader = pod_spec(d, image, plan, command=list(cl.launcher),
                      args=literal_list([*cl.head_options, "--", *d.serve.entrypoint, *d.serve.pod_serve_args]),
                      serves=True, launcher_map=launcher_map, extra_env=node_ip)
    # LeaderWorkerSet gives every pod its leader's address in LWS_LEADER_ADDRESS; Kubernetes expands $(VAR).
    worker = pod_spec(d, image, plan, command=list(cl.launcher), args=cl.worker_args_for("$(LWS_LEADER_ADDRESS)"),
                      serves=False, launcher_map=launcher_map, extra_env=node_ip)
    role = LWS_NAME_LABEL
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels(d)},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": cl.nodes,
                # A lost rank breaks the whole pipeline: restart the group together (as the head's launcher does).
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": labels(d, role="leader")}, "spec": leader},
                "workerTemplate": {"metadata": {"labels": labels(d, role="worker")}, "spec": worker},
            },
        },
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": launcher_map, "labels": labels(d)},
        "data": {dep.LAUNCHER_FILE: launcher},
    }
    return {
        "leaderworkerset.yaml": lws,
        "ray-node-configmap.yaml": config_map,
        "service.yaml": service(d, {role: name, "role": "leader"}),
        # One group (replicas: 1 above, group index 0): a second group would need its own peer rule.
        "networkpolicy.yaml": network_policy(d, {role: name}, {role: name, LWS_GROUP_LABEL: "0"}),
        # Every pod loads its own layers: a claim all nodes can mount (an RWX storage class: NFS, CephFS, ...).
        "pvc.yaml": claim(d, hf_claim_name(d), model_cache_size(plan, d), "ReadWriteMany"),
        # Each rank writes its own subdirectory of the compile cache (rank_<i>_<j>), so the pods can share one claim.
        "compile-cache-pvc.yaml": compile_claim(d, "ReadWriteMany"),
    }


def header(d: dep.Deployment, image: str, plan: Plan | None) -> str:
    weights = model_weights_gib(plan, d)
    model_rule = rules()["model_cache"]
    sized = (f"~{weights:.1f} GiB of weights x {model_rule['copies']} + {model_rule['extra_gib']} GiB"
             if weights is not None
             else f"the model's size is unknown offline: {FALLBACK_MODEL_CACHE_GIB} GiB, adjust it")
    lines = [
        f"Rendered by vllm-kit for preset {d.preset_name}: vLLM {d.image.vllm_version}, strategy {d.image.strategy}.",
        f"Push the image ({image}) where the cluster pulls from (image.repository), then:",
        f"  kubectl create secret generic {secret_name(d)} --from-env-file=.env   # HF_TOKEN, VLLM_API_KEY",
        "  kubectl apply -k k8s/",
        "Each container reads only its own keys of that Secret (secretKeyRef): the server and its door VLLM_API_KEY"
        + (" (required: runtime.require_api_key)" if d.preset.runtime.require_api_key else "")
        + ", the model fetch HF_TOKEN and HF_ENDPOINT.",
        "networkpolicy.yaml: the API port from pods of this namespace only"
        + ("; Ray's and NCCL's ports between the pods of one group only." if d.serve.cluster is not None else "."),
        f"Model cache claim: {sized} (rules: kit/data/k8s.yaml).",
        "Memory request: the weights one pod loads" + (" and its KV cache" if d.preset.hardware.gpu is None else "")
        + f" + {rules()['resources']['process_gib']} GiB per vLLM process; the memory limit adds /dev/shm.",
    ]
    # vLLM's key guards /v1, /v2, /inference and /cohere only (vllm/entrypoints/serve/middleware/authenticate.py):
    # the compose stacks' front door stands in front of the server here too.
    lines.append(f"Front door: HAProxy ({door.image_ref().split('@')[0]}) beside the server in its pod, the pod's only "
                 f"port ({dep.CONTAINER_PORT}); the server listens on the pod's loopback. It passes "
                 f"{', '.join(r.path for r in door.door_routes(d.preset))} (each but /health with the key) and only the "
                 "Host names in door-configmap.yaml (add an Ingress's name with runtime.server_names); "
                 f"kubectl port-forward svc/{app_name(d)} 8000:8000 reaches it as localhost:8000 (any local port "
                 "will do: the door takes localhost and 127.0.0.1 at any port).")
    if d.preset.runtime.require_api_key:
        lines.append("An empty VLLM_API_KEY in the Secret stops the server at start (runtime.require_api_key).")
    if d.preset.runtime.k8s_runtime_class:
        lines.append(f"Pods run with runtimeClassName {d.preset.runtime.k8s_runtime_class}: "
                     "the cluster needs that RuntimeClass.")
    if d.serve.cluster is not None:
        lines.append(f"Needs the LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1); {d.serve.cluster.nodes} pods per group.")
    if d.serve.model_mount:
        lines.append(f"Local model: copy it into the {app_name(d)}-models claim at {d.serve.model_mount[1]} (kubectl cp).")
    elif makes_model(d):
        lines.append(f"Generated model: the model-make init container makes it in the {app_name(d)}-models claim "
                     "when it is missing, as the pod's non-root user; the fetch and the server mount it read-only.")
    elif d.serve.model_volume and d.preset.model.generate:
        lines.append(f"Generated model: make it (python -m kit.config.tinymodel DIR --kind {d.preset.model.generate}) and "
                     f"copy it into the {app_name(d)}-models claim at {d.serve.model_arg} (kubectl cp).")
    return comment_lines(lines)


def dump(doc: dict[str, Any]) -> str:
    """One manifest as YAML, by the writer compose files use (kit/core/yamlwrite.py), read back before it is kept."""
    return checked(yaml_text(doc), doc)


def render_manifests(ctx: RenderContext, launcher: str, tiny_model: str | None = None) -> dict[str, str]:
    """``ctx`` is kit.deploy.render.RenderContext; ``tiny_model`` kit/config/tinymodel.py for a generated model;
    returns {k8s/<file>: text}."""
    d: dep.Deployment = ctx.d
    plan = ctx.plan
    docs = single_node(d, ctx.image_ref, plan) if d.serve.cluster is None else multi_node(d, ctx.image_ref, launcher, plan)
    if makes_model(d):
        assert tiny_model is not None
        docs["model-make-configmap.yaml"] = {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": model_make_map(d), "labels": labels(d)},
                                             "data": {dep.TINY_MODEL_FILE: tiny_model}}
    if d.serve.local_model_dir:
        # A local model lives in its own claim; the HF cache then holds only what the tokenizer may fetch.
        docs["models-pvc.yaml"] = claim(d, f"{app_name(d)}-models", model_cache_size(plan, d),
                                        "ReadOnlyMany" if d.serve.cluster else "ReadWriteOnce")
    docs["door-configmap.yaml"] = {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": door_config_map(d), "labels": labels(d)},
                                   "data": {door.config_file().rsplit("/", 1)[1]: door_config_text(d)}}
    files = {f"{K8S_DIR}/{rel}": dump(doc) for rel, doc in docs.items()}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": sorted(docs)}
    files[f"{K8S_DIR}/kustomization.yaml"] = header(d, ctx.image_ref, plan) + dump(kustomization)
    return files
