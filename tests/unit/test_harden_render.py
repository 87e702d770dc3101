"""Hardened runtime by default: the rendered compose files and k8s manifests carry it for every preset."""

from __future__ import annotations


import pytest
import yaml

from kit.config.preset import preset_names
from kit.core.datafiles import load_yaml
from kit.deploy.deployment import LAUNCHER_DIR, WATCHDOG_FILE
from kit.deploy.pipeline import prepare

pytestmark = pytest.mark.unit

CLUSTER = ["hardware.nodes=2", "cluster.network=bridge"]


def services(files: dict[str, str]) -> dict[str, dict]:
    out = {}
    for rel, text in files.items():
        if rel.startswith("compose") and rel.endswith(".yaml"):
            for name, svc in yaml.safe_load(text)["services"].items():
                if not name.startswith(("model-fetch", "model-make")):  # one-shots that exit before the server
                    out[f"{rel}:{name}"] = svc
    return out


def assert_hardened(svc: dict, home: str, cap_add: list[str]) -> None:
    assert svc["cap_drop"] == ["ALL"]
    assert svc.get("cap_add", []) == cap_add
    assert svc["security_opt"] == ["no-new-privileges:true"]
    assert svc["read_only"] is True
    mounted = {entry.split(":", 1)[0]: entry.split(":", 1)[1].split(",") for entry in svc["tmpfs"]}
    assert set(mounted) == {"/tmp", home}
    assert all("exec" in opts and any(o.startswith("size=") for o in opts) for opts in mounted.values())
    assert svc["pids_limit"] == load_yaml("hardening.yaml")["pids_limit"] > 0


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_runs_hardened(preset):
    p = prepare(preset)
    cap_add = ["SYS_NICE"] if p.deployment.image.strategy == "cpu" else []
    found = services(p.files)
    svc = found["compose.yaml:vllm"]
    assert_hardened(svc, p.deployment.runtime.run_user.home, cap_add)
    # The front door beside it: no capability, no privilege gain, read-only root, a pids limit.
    door = found["compose.yaml:door"]
    assert set(found) == {"compose.yaml:vllm", "compose.yaml:door"}
    assert door["cap_drop"] == ["ALL"] and "cap_add" not in door and door["read_only"] is True
    assert door["security_opt"] == ["no-new-privileges:true"] and door["pids_limit"] > 0
    # The watchdog runs the image's own server argv; compose appends the serve args after it.
    watchdog = [p.deployment.serve.python, f"{LAUNCHER_DIR}/{WATCHDOG_FILE}"]
    assert svc["entrypoint"][:2] == watchdog
    cut = svc["entrypoint"].index("--")
    assert svc["entrypoint"][cut + 1:] == p.deployment.serve.entrypoint
    assert svc["command"] == p.deployment.serve.serve_args
    grace = svc["entrypoint"][svc["entrypoint"].index("--grace") + 1]
    assert int(grace) == 2 * p.deployment.runtime.healthcheck_start_period
    assert f"./{WATCHDOG_FILE}:{LAUNCHER_DIR}/{WATCHDOG_FILE}:ro" in svc["volumes"]
    from kit.deploy.render import launcher_text

    assert p.files[WATCHDOG_FILE] == launcher_text(WATCHDOG_FILE)


def test_cluster_roles_are_hardened_too():
    p = prepare("cpu", CLUSTER)
    found = services(p.files)
    assert set(found) == {"compose.head.yaml:vllm", "compose.worker.yaml:ray-worker"}
    for svc in found.values():
        assert_hardened(svc, p.deployment.runtime.run_user.home, ["SYS_NICE"])


@pytest.mark.parametrize("preset,overrides", [("cpu", []), ("rtx4090-awq", []), ("cpu", CLUSTER)])
def test_k8s_containers_are_read_only_with_writable_empty_dirs(preset, overrides):
    p = prepare(preset, overrides, target="k8s")
    docs = [yaml.safe_load(t) for rel, t in p.files.items() if rel.startswith("k8s/") and rel.endswith(".yaml")]
    pods = []
    for doc in docs:
        spec = doc.get("spec", {})
        for template in (spec.get("template"), spec.get("leaderWorkerTemplate", {}).get("leaderTemplate"),
                         spec.get("leaderWorkerTemplate", {}).get("workerTemplate")):
            if template:
                pods.append(template["spec"])
    assert pods
    cap_add = ["SYS_NICE"] if p.deployment.image.strategy == "cpu" else None
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False
        empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in pod["containers"] + pod.get("initContainers", []):
            sec = container["securityContext"]
            assert sec["readOnlyRootFilesystem"] is True and sec["allowPrivilegeEscalation"] is False
            assert sec["capabilities"]["drop"] == ["ALL"] and sec["capabilities"].get("add") == cap_add
            writable = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if m["name"] in empty_dirs}
            assert {"/tmp", p.deployment.runtime.run_user.home} <= set(writable), container["name"]
