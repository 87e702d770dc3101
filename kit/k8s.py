"""Deployment -> Kubernetes manifests (``kit render --target k8s``), as data serialized to YAML.

Public entry point: ``render_manifests(ctx, launcher) -> {path: text}``, called by ``kit.render.render``.
Manifests are nested data, so they are built as dicts and written by a YAML serializer (which quotes every
value for YAML) rather than laid out by a template; the decisions (shm size, probes' windows, GPU count) come
from the same Deployment as the compose files.

One node: a Deployment, a Service and PersistentVolumeClaims. Several nodes: a LeaderWorkerSet (the leader
runs Ray's head and the server, workers join it; the whole group restarts together when a pod fails), the
launcher as a ConfigMap, a Service on the leader, and a ReadWriteMany claim for the shared HF cache.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from kit import deployment as dep

K8S_DIR = "k8s"
LWS_API = "leaderworkerset.x-k8s.io/v1"
GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
PROBE_PERIOD = 10


def app_name(d: dep.Deployment) -> str:
    """A DNS-1123 label from the preset's name."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"vllm-{d.preset_name}".lower()).strip("-")
    return name[:50].rstrip("-") or "vllm"


def secret_name(d: dep.Deployment) -> str:
    return f"{app_name(d)}-secrets"


def k8s_quantity(size: str) -> str:
    """compose sizes (1024m, 4g, 512k, bytes) as Kubernetes binary quantities (1024Mi, 4Gi)."""
    number, unit = re.fullmatch(r"(\d+)([bkmg]?)", size.lower()).groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def cache_claim_size(d: dep.Deployment) -> str:
    """The HF cache claim: the weights with room for a second revision, at least 20 GiB."""
    weights = dep.weights_gib_estimate(d.preset) or 0
    return f"{max(20, math.ceil(weights * 2 + 10))}Gi"


def labels(d: dep.Deployment, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": app_name(d),
        "app.kubernetes.io/managed-by": "vllm-kit",
        **extra,
    }


def probes(d: dep.Deployment) -> dict[str, Any]:
    """startup covers loading (the compose healthcheck's start period); then readiness and liveness on /health."""
    def http(period: int, failures: int, timeout: int) -> dict[str, Any]:
        return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period,
                "failureThreshold": failures, "timeoutSeconds": timeout}

    return {
        "startupProbe": http(PROBE_PERIOD, math.ceil(d.healthcheck_start_period / PROBE_PERIOD), 5),
        "readinessProbe": http(PROBE_PERIOD, 3, 5),
        "livenessProbe": http(15, 4, 10),
    }


def pod_security(d: dep.Deployment) -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": d.run_user.uid, "runAsGroup": d.run_user.gid,
            "fsGroup": d.run_user.gid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security(d: dep.Deployment) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if d.strategy == "cpu":
        # The CPU backend binds threads and memory to NUMA nodes (mbind/set_mempolicy need SYS_NICE).
        capabilities["add"] = ["SYS_NICE"]
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


def gpu_resources(d: dep.Deployment) -> dict[str, Any]:
    hw = d.preset.hardware
    if hw.gpu is None:
        return {}
    return {"limits": {GPU_RESOURCE: hw.count}}


def env_list(d: dep.Deployment, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in d.environment.items()] + list(extra or [])


def secret_env(d: dep.Deployment) -> list[dict[str, Any]]:
    # HF_TOKEN, VLLM_API_KEY (and HF_ENDPOINT) from a Secret made from .env; optional, so public models work.
    return [{"secretRef": {"name": secret_name(d), "optional": True}}]


def volumes(d: dep.Deployment, hf_claim: str, launcher_map: str | None = None) -> tuple[list, list]:
    """(pod volumes, server volume mounts)."""
    vols: list[dict[str, Any]] = [
        {"name": "hf-cache", "persistentVolumeClaim": {"claimName": hf_claim}},
        {"name": "vllm-cache", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "hf-cache", "mountPath": dep.HF_HOME},
        {"name": "vllm-cache", "mountPath": dep.VLLM_CACHE},
    ]
    if d.shm.shm_size:
        # /dev/shm: Docker's and Kubernetes' default 64 MiB is far too small (NCCL, Ray's object store).
        vols.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(d.shm.shm_size)}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if d.model_mount:
        vols.append({"name": "models", "persistentVolumeClaim": {"claimName": f"{app_name(d)}-models", "readOnly": True}})
        mounts.append({"name": "models", "mountPath": dep.MODELS_DIR, "readOnly": True})
    if launcher_map:
        vols.append({"name": "launcher", "configMap": {"name": launcher_map}})
        mounts.append({"name": "launcher", "mountPath": dep.LAUNCHER_DIR, "readOnly": True})
    return vols, mounts


def fetch_container(d: dep.Deployment, ctx_image: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """Init container: the model into the cache first, so the server starts offline (compose's model-fetch)."""
    return {
        "name": "model-fetch",
        "image": ctx_image,
        "command": list(d.fetch_command),
        "env": [{"name": "HF_HOME", "value": dep.HF_HOME}],
        "envFrom": secret_env(d),
        "volumeMounts": [m for m in mounts if m["name"] in ("hf-cache", "models")],
        "securityContext": container_security(d),
    }


def pod_spec(d: dep.Deployment, image: str, *, command: list[str], args: list[str], hf_claim: str,
             serves: bool, launcher_map: str | None = None, extra_env: list[dict[str, Any]] | None = None) -> dict:
    vols, mounts = volumes(d, hf_claim, launcher_map)
    server: dict[str, Any] = {
        "name": "vllm" if serves else "ray-worker",
        "image": image,
        "command": command,
        "args": args,
        "env": env_list(d, extra_env),
        "envFrom": secret_env(d),
        "volumeMounts": mounts,
        "securityContext": container_security(d),
    }
    if serves:
        server["ports"] = [{"name": "http", "containerPort": dep.CONTAINER_PORT}]
        server.update(probes(d))
    if d.cluster is not None and serves:
        server["ports"].append({"name": "ray-gcs", "containerPort": d.cluster.ray_port})
    resources = gpu_resources(d)
    if resources:
        server["resources"] = resources
    spec: dict[str, Any] = {
        "securityContext": pod_security(d),
        "initContainers": [fetch_container(d, image, mounts)],
        "containers": [server],
        "volumes": vols,
        "terminationGracePeriodSeconds": 30,
    }
    if d.shm.ipc == "host":
        spec["hostIPC"] = True
    return spec


def claim(d: dep.Deployment, name: str, size: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels(d)},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}},
    }


def service(d: dep.Deployment, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_name(d), "labels": labels(d)},
        "spec": {"type": "ClusterIP", "selector": selector,
                 "ports": [{"name": "http", "port": dep.CONTAINER_PORT, "targetPort": "http"}]},
    }


def single_node(d: dep.Deployment, image: str) -> dict[str, dict[str, Any]]:
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
                "spec": pod_spec(d, image, command=list(d.entrypoint), args=list(d.pod_serve_args),
                                 hf_claim=f"{name}-hf-cache", serves=True),
            },
        },
    }
    return {
        "deployment.yaml": deployment,
        "service.yaml": service(d, selector),
        "pvc.yaml": claim(d, f"{name}-hf-cache", cache_claim_size(d), "ReadWriteOnce"),
    }


def multi_node(d: dep.Deployment, image: str, launcher: str) -> dict[str, dict[str, Any]]:
    cl = d.cluster
    assert cl is not None
    name = app_name(d)
    launcher_map = f"{name}-ray-node"
    node_ip = [{"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    hf_claim = f"{name}-hf-cache"
    leader = pod_spec(d, image, command=list(cl.launcher),
                      args=[*cl.head_options, "--", *d.entrypoint, *d.pod_serve_args],
                      hf_claim=hf_claim, serves=True, launcher_map=launcher_map, extra_env=node_ip)
    # LeaderWorkerSet gives every pod its leader's address in LWS_LEADER_ADDRESS; Kubernetes expands $(VAR).
    worker = pod_spec(d, image, command=list(cl.launcher), args=cl.worker_args_for("$(LWS_LEADER_ADDRESS)"),
                      hf_claim=hf_claim, serves=False, launcher_map=launcher_map, extra_env=node_ip)
    role = "leaderworkerset.sigs.k8s.io/name"
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
        # Every pod loads its own layers: a claim all nodes can mount (an RWX storage class: NFS, CephFS, ...).
        "pvc.yaml": claim(d, hf_claim, cache_claim_size(d), "ReadWriteMany"),
    }


def header(d: dep.Deployment, image: str) -> str:
    lines = [
        f"Rendered by vllm-kit for preset {d.preset_name}: vLLM {d.vllm_version}, strategy {d.strategy}.",
        f"Push the image ({image}) where the cluster pulls from (image.repository), then:",
        f"  kubectl create secret generic {secret_name(d)} --from-env-file=.env   # HF_TOKEN, VLLM_API_KEY",
        "  kubectl apply -k k8s/",
    ]
    if d.cluster is not None:
        lines.append(f"Needs the LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1); {d.cluster.nodes} pods per group.")
    if d.model_mount:
        lines.append(f"Local model: copy it into the {app_name(d)}-models claim at {d.model_mount[1]} (kubectl cp).")
    return "".join(f"# {line}\n" for line in lines)


class _Dumper(yaml.SafeDumper):
    """No anchors and aliases: the same mount listed twice is written out twice, as kubectl users expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def render_manifests(ctx: Any, launcher: str) -> dict[str, str]:
    """``ctx`` is kit.render.RenderContext; returns {k8s/<file>: text}."""
    d: dep.Deployment = ctx.d
    docs = single_node(d, ctx.image_ref) if d.cluster is None else multi_node(d, ctx.image_ref, launcher)
    if d.model_mount:
        docs["models-pvc.yaml"] = claim(d, f"{app_name(d)}-models", "10Gi", "ReadOnlyMany" if d.cluster else "ReadWriteOnce")
    files = {f"{K8S_DIR}/{rel}": dump(doc) for rel, doc in docs.items()}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": sorted(docs)}
    files[f"{K8S_DIR}/kustomization.yaml"] = header(d, ctx.image_ref) + dump(kustomization)
    return files
