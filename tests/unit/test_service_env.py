"""Every service of every composition the kit renders: which .env names it gets (kit/data/service_env.yaml) and its
hardening. Compositions are the golden cases (each preset, several nodes, Kubernetes, --with monitoring/webui,
--with-preset, replicas), so a new one is covered here too."""

from __future__ import annotations

import re

import pytest
import yaml

from kit.core.datafiles import load_yaml
from kit.deploy.pipeline import prepare
from kit.deploy.service_env import env_names
from tests.golden.test_golden import CASES, WITH_PRESETS, WITH_PROFILES

pytestmark = pytest.mark.unit

# Secrets in .env and the only services that may name them (a server includes its replicas and companions).
SECRET_READERS = {
    "HF_TOKEN": re.compile(r"model-fetch(-.+)?"),
    "VLLM_API_KEY": re.compile(r"vllm(-.+)?|webui|door(-.+)?"),  # the door checks it (kit/deploy/door.py)
    "GRAFANA_ADMIN_PASSWORD": re.compile(r"grafana"),
    "WEBUI_SECRET_KEY": re.compile(r"webui"),
    "WEBUI_ADMIN_PASSWORD": re.compile(r"webui"),
}
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)")


def rendered(case: str) -> dict[str, str]:
    preset, overrides, target = CASES[case]
    return prepare(preset, overrides, target=target, with_presets=WITH_PRESETS.get(case),
                   with_profiles=WITH_PROFILES.get(case)).files


def compose_services(files: dict[str, str]) -> dict[str, dict]:
    out = {}
    for rel, text in files.items():
        if rel.startswith("compose") and rel.endswith(".yaml"):
            for name, svc in yaml.safe_load(text)["services"].items():
                out[f"{rel}:{name}"] = svc
    return out


def env_read(svc: dict) -> set[str]:
    """The .env names a service can see: listed with no value, or interpolated into a value."""
    env = svc.get("environment") or {}
    names = {k for k, v in env.items() if v is None}
    for value in env.values():
        names |= set(INTERPOLATION.findall(value or ""))
    return names


COMPOSE_CASES = sorted(c for c, (_, _, target) in CASES.items() if target == "compose")
K8S_CASES = sorted(c for c, (_, _, target) in CASES.items() if target == "k8s")


@pytest.mark.parametrize("case", COMPOSE_CASES)
def test_every_compose_service_gets_only_its_names_and_is_hardened(case):
    services = compose_services(rendered(case))
    assert services
    pids = load_yaml("hardening.yaml")["pids_limit"]
    for where, svc in services.items():
        name = where.split(":", 1)[1]
        # No shared env file: a service sees only the names it lists.
        assert "env_file" not in svc, where
        seen = env_read(svc)
        for secret, readers in SECRET_READERS.items():
            if secret in seen:
                assert readers.fullmatch(name), f"{where} reads {secret}"
        # Hardened: no capability beyond what it names, no privilege gain, read-only root, a pids limit.
        assert svc["cap_drop"] == ["ALL"], where
        assert svc["security_opt"] == ["no-new-privileges:true"], where
        assert svc["read_only"] is True, where
        assert 0 < svc["pids_limit"] <= pids, where
        if name.startswith("model-fetch"):
            assert re.fullmatch(r"[1-9][0-9]*:[0-9]+", svc["user"]), where  # non-root, named explicitly
            assert "cap_add" not in svc, where
            assert all(v.endswith(":ro") for v in svc["volumes"] if not v.startswith(("hf-cache", "hf"))), where
        if name.startswith("model-make"):
            assert svc["network_mode"] == "none" and svc.get("environment", {}).get("HF_HUB_OFFLINE") == "1", where
            assert env_read(svc) == set(), where


def test_the_server_and_the_fetch_split_the_secrets():
    services = compose_services(rendered("cpu"))
    server, fetch = services["compose.yaml:vllm"]["environment"], services["compose.yaml:model-fetch"]["environment"]
    # The key is required by default (runtime.require_api_key): a required interpolation, never a value.
    assert server["VLLM_API_KEY"].startswith("${VLLM_API_KEY:?") and "HF_TOKEN" not in server
    assert "HF_ENDPOINT" not in server
    assert fetch["HF_TOKEN"] is None and fetch["HF_ENDPOINT"] is None and "VLLM_API_KEY" not in fetch
    # The kit's own values are kept, and win over a name of the table.
    assert server["HF_HUB_OFFLINE"] == "1"


def test_ray_workers_never_get_the_api_key_and_gpu_ranks_get_cuda_compat():
    head = compose_services(rendered("a100x8@nodes2"))
    worker = next(s for w, s in head.items() if w.endswith(":ray-worker"))
    server = next(s for w, s in head.items() if w.endswith(":vllm"))
    assert "VLLM_API_KEY" not in env_read(worker) and "VLLM_API_KEY" in env_read(server)
    for svc in (worker, server):
        assert {"VLLM_ENABLE_CUDA_COMPATIBILITY", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} <= env_read(svc)
        assert "VLLM_HOST_IP" in env_read(svc)  # required, interpolated, from this host's .env
    cpu = compose_services(rendered("cpu"))["compose.yaml:vllm"]
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY" not in env_read(cpu)


def test_the_key_is_required_by_default_and_keyless_only_by_name():
    files = prepare("cpu", ["runtime.bind_address=0.0.0.0"]).files
    server = compose_services(files)["compose.yaml:vllm"]
    assert server["environment"]["VLLM_API_KEY"].startswith("${VLLM_API_KEY:?")
    assert "kit render writes a random one into .env" in files[".env.example"]
    keyless = prepare("cpu", ["runtime.require_api_key=false"]).files
    assert compose_services(keyless)["compose.yaml:vllm"]["environment"]["VLLM_API_KEY"] is None


def test_a_keyless_stack_is_warned_about_on_every_bind():
    def warnings(*overrides, target="compose"):
        return [str(w) for w in prepare("cpu", list(overrides), target=target).report.warnings
                if "require_api_key" in w.where]

    assert warnings() == warnings("runtime.bind_address=0.0.0.0") == []
    loopback = warnings("runtime.require_api_key=false")
    assert len(loopback) == 1 and loopback[0].startswith("override runtime.require_api_key: false: ")
    assert "a web page in a browser here, through 127.0.0.1:8000" in loopback[0]
    (wide,) = warnings("runtime.require_api_key=false", "runtime.bind_address=0.0.0.0")
    assert "anyone who reaches 0.0.0.0:8000, beyond this host's loopback" in wide
    (pods,) = warnings("runtime.require_api_key=false", target="k8s")
    assert "every pod that reaches the Service" in pods


def test_the_table_names_only_what_its_readers_read():
    """The table's groups are disjoint where it matters: the fetch's names reach no server, the key no fetch."""
    table = load_yaml("service_env.yaml")
    groups = table["groups"]
    assert set(groups["fetch"]).isdisjoint(groups["api_server"] + groups["watchdog"] + groups["gpu_rank"])
    assert set(table["services"]) == {"server", "ray_head", "ray_worker", "fetch", "model_make"}
    for role, used in table["services"].items():
        assert set(used) <= set(groups), role
    d = prepare("cpu").deployment
    assert env_names("model_make", d) == []
    assert "KIT_WATCHDOG_GRACE" in env_names("server", d) and "KIT_WATCHDOG_GRACE" not in env_names("server", d, "k8s")
    with pytest.raises(ValueError):
        env_names("grafana", d)


# ---------------------------------------------------------------------------------------------- Kubernetes


def k8s_docs(files: dict[str, str]) -> list[dict]:
    return [yaml.safe_load(t) for rel, t in files.items() if rel.startswith("k8s/") and "kustomization" not in rel]


def pod_specs(docs: list[dict]) -> list[dict]:
    pods = []
    for doc in docs:
        spec = doc.get("spec", {})
        lws = spec.get("leaderWorkerTemplate", {})
        for template in (spec.get("template"), lws.get("leaderTemplate"), lws.get("workerTemplate")):
            if template:
                pods.append(template["spec"])
    return pods


@pytest.mark.parametrize("case", K8S_CASES)
def test_every_k8s_container_gets_only_its_keys(case):
    files = rendered(case)
    pods = pod_specs(k8s_docs(files))
    assert pods
    for pod in pods:
        for container in pod.get("initContainers", []) + pod["containers"]:
            assert "envFrom" not in container, container["name"]
            refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
                    if "secretKeyRef" in e.get("valueFrom", {})}
            # Optional, but the key the server requires by default (runtime.require_api_key).
            assert all(ref["key"] == name and ref["optional"] is (name != "VLLM_API_KEY") for name, ref in refs.items())
            if container["name"] == "model-fetch":
                assert {"HF_TOKEN", "HF_ENDPOINT"} <= set(refs) and "VLLM_API_KEY" not in refs
            else:
                assert "HF_TOKEN" not in refs and "HF_ENDPOINT" not in refs
                assert ("VLLM_API_KEY" in refs) is (container["name"] in ("vllm", "door"))  # the server and its door
            # Kubernetes has no watchdog: its names would reach nothing.
            assert not any(n.startswith("KIT_WATCHDOG") for n in refs)


def test_a_required_key_is_not_optional_on_kubernetes():
    docs = k8s_docs(prepare("cpu", [], target="k8s").files)  # required by default
    (pod,) = pod_specs(docs)
    server = pod["containers"][0]
    ref = next(e for e in server["env"] if e["name"] == "VLLM_API_KEY")["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is False
    fetch = next(c for c in pod["initContainers"] if c["name"] == "model-fetch")
    assert next(e for e in fetch["env"] if e["name"] == "HF_TOKEN")["valueFrom"]["secretKeyRef"]["optional"] is True


def test_network_policy_single_node():
    docs = k8s_docs(rendered("cpu@k8s"))
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    # It selects the server's pods, and lets in the API port from this namespace's pods only.
    assert spec["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spec["ingress"] == [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 8000}]}]


def test_network_policy_lws_keeps_ray_inside_the_group():
    docs = k8s_docs(rendered("a100x8@nodes2-k8s"))
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (lws,) = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
    name = lws["metadata"]["name"]
    assert lws["spec"]["replicas"] == 1  # one group: the peer rule names group 0
    api, peers = policy["spec"]["ingress"]
    assert api["ports"] == [{"protocol": "TCP", "port": 8000}] and api["from"] == [{"podSelector": {}}]
    # Every port (Ray's GCS and workers, NCCL, Gloo), but only from pods of this LWS's group 0; no namespaceSelector.
    assert "ports" not in peers
    assert peers["from"] == [{"podSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": name,
                                                              "leaderworkerset.sigs.k8s.io/group-index": "0"}}}]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"leaderworkerset.sigs.k8s.io/name": name}
    # The GCS port the leader opens is within what the peer rule lets in and outside the API rule.
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert {"name": "ray-gcs", "containerPort": 6379} in leader["ports"]


def test_a_name_in_env_that_no_container_reads_is_a_warning_naming_only_the_name(tmp_path):
    """Before, one env_file gave every .env name to the server; a name no service lists now reaches nothing, so the
    render says so (the name, never the value)."""
    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.deploy.service_env import unread_env_names

    files = prepare("cpu").files
    env = "VLLM_API_KEY=k\n# VLLM_LOGGING_LEVEL=INFO\nexport HF_TOKEN=t\nVLLM_LOGGING_LEVEL=DEBUG-secretish\nnoequals\n"
    assert unread_env_names(files, ["VLLM_API_KEY", "HF_TOKEN", "VLLM_LOGGING_LEVEL"]) == ["VLLM_LOGGING_LEVEL"]
    assert unread_env_names(prepare("cpu", with_profiles=["monitoring"]).files, ["GRAFANA_ADMIN_PASSWORD"]) == []
    assert unread_env_names(prepare("cpu", target="k8s").files, ["ANYTHING"]) == []
    (tmp_path / ".env").write_text(env)
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    import json

    warnings = json.loads(result.stdout)["warnings"]
    assert any("VLLM_LOGGING_LEVEL: reaches no container" in w for w in warnings)
    assert "DEBUG-secretish" not in result.output
