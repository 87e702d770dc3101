"""Hardened runtime by default: the rendered compose files and k8s manifests carry it for every preset."""

from __future__ import annotations


import pytest
import yaml

from kit.config.preset_files import preset_names
from kit.core.datafiles import load_yaml
from kit.deploy import deployment as dep
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
            # Only the server binds to NUMA nodes; the model's maker and fetch and the door take no capability.
            wanted = cap_add if container["name"] in ("vllm", "ray-worker") else None
            assert sec["capabilities"]["drop"] == ["ALL"] and sec["capabilities"].get("add") == wanted
            writable = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if m["name"] in empty_dirs}
            if container["name"] == "door":  # HAProxy writes nothing (as the compose door, read-only, no tmpfs)
                assert not writable
                continue
            assert {"/tmp", p.deployment.runtime.run_user.home} <= set(writable), container["name"]


def one_shots(files: dict[str, str]) -> dict[str, dict]:
    return {f"{rel}:{name}": svc for rel, text in files.items() if rel.startswith("compose") and rel.endswith(".yaml")
            for name, svc in yaml.safe_load(text)["services"].items() if name.startswith(("model-fetch", "model-make"))}


@pytest.mark.parametrize("overrides", [[], CLUSTER, ["runtime.replicas=2"]], ids=["one", "nodes2", "replicas2"])
@pytest.mark.parametrize("preset", ["cpu", "cpu-embed"])
def test_model_make_runs_non_root_hardened_into_the_kits_volume_read_only_to_the_server(preset, overrides):
    """Issue 23 item 5: the generated model is made as the server's uid, with no capability, in the stack's own named
    volume, which the fetch and the server mount read-only; nothing writes into a host folder."""
    prepared = prepare(preset, overrides)
    d, volume = prepared.deployment, prepared.preset.runtime.models_volume
    shots = one_shots(prepared.files)
    makes = [svc for name, svc in shots.items() if ":model-make" in name]
    assert len(makes) == 1  # one per stack: a one-host cluster overlays its two files, and the head's makes it
    for make in makes:
        assert make["user"] == f"{d.runtime.run_user.uid}:{d.runtime.run_user.gid}" != "0:0" and d.runtime.run_user.uid != 0
        assert make["cap_drop"] == ["ALL"] and "cap_add" not in make
        assert make["security_opt"] == ["no-new-privileges:true"] and make["read_only"] is True
        assert make["tmpfs"] == ["/tmp:size=2g"] and make["pids_limit"] > 0 and make["network_mode"] == "none"
        model_mount, script = make["volumes"]
        assert model_mount == f"{volume}:{dep.MODEL_MAKE_DIR}" and script.endswith(":ro")
        assert make["entrypoint"][2] == f"{dep.MODEL_MAKE_DIR}/{d.serve.model_arg.rsplit('/', 1)[1]}"
    readers = [svc for name, svc in shots.items() if ":model-fetch" in name] + list(services(prepared.files).values())
    for svc in readers:  # the fetch, servers, Ray nodes; the router and profiles' services do not mount it at all
        model = [m for m in svc.get("volumes", []) if m.split(":", 1)[0] == volume]
        if svc.get("image", "").startswith(d.image.image_repository):
            assert model == [f"{volume}:{dep.MODELS_DIR}:ro"], svc["volumes"]
        assert not any(m.startswith(("./models", "/")) for m in svc.get("volumes", []))  # no host model folder
    for rel, text in prepared.files.items():
        if rel.startswith("compose") and rel.endswith(".yaml"):
            assert volume in yaml.safe_load(text)["volumes"]


def test_a_host_folder_model_stays_a_read_only_bind_mount_with_no_model_make(tmp_path):
    prepared = prepare("cpu", ["model.host_path=./models/mine", "model.id=mine", "model.generate=null"])
    doc = yaml.safe_load(prepared.files["compose.yaml"])
    assert set(doc["services"]) == {"model-fetch", "vllm", "door"} and set(doc["volumes"]) == {"hf-cache", "vllm-cache"}
    for name in ("model-fetch", "vllm"):
        assert "./models/mine:/models/mine:ro" in doc["services"][name]["volumes"]
    assert not [v for v in doc["services"]["door"]["volumes"] if "models" in v]  # the door reads its config only
    assert "tinymodel.py" not in prepared.files


def test_k8s_makes_a_generated_model_in_an_init_container_read_only_to_the_rest():
    p = prepare("cpu", target="k8s")
    pod = yaml.safe_load(p.files["k8s/deployment.yaml"])["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    make, fetch = pod["initContainers"]
    assert (make["name"], fetch["name"]) == ("model-make", "model-fetch")
    assert make["command"][2] == p.deployment.serve.model_arg and make["command"][-1] == "--if-missing"
    assert make["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not any("valueFrom" in e for e in make["env"])  # no secret reaches it
    assert {"name": "models", "mountPath": dep.MODELS_DIR} in make["volumeMounts"]
    for container in [fetch, *pod["containers"]]:
        mounts = container["volumeMounts"]
        if container["name"] == "door":  # the door mounts its config only
            assert [m["name"] for m in mounts] == ["door-config"]
            continue
        assert {"name": "models", "mountPath": dep.MODELS_DIR, "readOnly": True} in mounts
    script = yaml.safe_load(p.files["k8s/model-make-configmap.yaml"])
    assert "def make_tiny_model" in script["data"][dep.TINY_MODEL_FILE]
    assert "model-make-configmap.yaml" in yaml.safe_load(p.files["k8s/kustomization.yaml"])["resources"]
    # A host folder stays a read-only claim, filled by hand, with no init container to write it.
    folder = prepare("cpu", ["model.host_path=./models/mine", "model.id=mine", "model.generate=null"], target="k8s")
    pod = yaml.safe_load(folder.files["k8s/deployment.yaml"])["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["model-fetch"]
    assert next(v for v in pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]["readOnly"] is True
