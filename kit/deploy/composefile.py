"""Deployment -> compose files, as data serialised to YAML (as kit/deploy/k8s.py does for manifests).

Public entry points: ``compose_file(ctx)`` (one node) and ``cluster_compose_file(ctx)`` (one role of a Ray
cluster), called by ``kit.deploy.render.render`` with its RenderContext.

No value can change a file's structure: every key and value goes through the YAML serialiser, every string
from the preset is `$`-escaped for compose's interpolation, and comments are fixed text or text that passed
``check_text`` (no line break of any kind). ``dump_with_comments`` reads its own output back and fails when it
differs from the data, so a serialiser surprise is a bug report, never a silently different file.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from kit.core.datafiles import SAFE_LOADER
from kit.core.safevalue import check_text, compose_text

Path = tuple[str, ...]

# Words some YAML reader takes as a bool, null or number (YAML 1.1: PyYAML; 1.2: Compose's go-yaml).
_PLAIN_OK = re.compile(r"[A-Za-z][A-Za-z0-9_-]*", re.ASCII)
_TYPED_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}


class _Dumper(yaml.SafeDumper):
    """Strings plain only when they are simple names (keys, `host`); everything else double-quoted, non-ASCII and
    every line break escaped. No aliases: a repeated volume is written twice, as compose users expect."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - PyYAML's signature
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    plain = _PLAIN_OK.fullmatch(data) is not None and data.lower() not in _TYPED_WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=None if plain else '"')


_Dumper.add_representer(str, _represent_str)


def _dump(doc: dict[str, Any]) -> str:
    # An infinite width: no scalar is folded over lines, so each value stays on its key's line.
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=math.inf,
                     allow_unicode=False)


def comment_lines(lines: list[str], indent: int = 0) -> str:
    pad = " " * indent
    return "".join(f"{pad}# {check_text(line, 'a comment')}\n".replace(" \n", "\n") for line in lines)


def _emit(doc: dict[str, Any], comments: dict[Path, list[str]], path: Path, indent: int, gap: bool) -> str:
    out = []
    for index, (key, value) in enumerate(doc.items()):
        here = (*path, key)
        if gap and index:
            out.append("\n")
        out.append(comment_lines(comments.get(here, []), indent))
        nested = isinstance(value, dict) and value and any(p[: len(here)] == here and p != here for p in comments)
        if nested:
            out.append(" " * indent + _dump({key: None}).rstrip("\n").removesuffix(" null") + "\n")
            out.append(_emit(value, comments, here, indent + 2, gap=len(here) == 1))
        else:
            out.append("".join(" " * indent + line + "\n" for line in _dump({key: value}).splitlines()))
    return "".join(out)


def dump_with_comments(doc: dict[str, Any], header: list[str], comments: dict[Path, list[str]]) -> str:
    """YAML text of ``doc`` with ``# comment`` lines before the keys named by path. Top-level keys and the
    entries under them are separated by a blank line, as a person lays a compose file out."""
    text = comment_lines(header) + _emit(doc, comments, (), 0, gap=True)
    # Read back with libyaml where PyYAML has it (kit/core/datafiles.py): the same safe rules, a fraction of a render's time.
    if yaml.load(text, Loader=SAFE_LOADER) != doc:  # noqa: S506  # pragma: no cover - a serialiser bug, never the user's
        raise AssertionError("compose serialisation does not read back as the data it was built from")
    return text


# ---------------------------------------------------------------------------------------------- services


_s = compose_text  # every preset string that reaches compose.yaml goes through this


def _volumes(ctx: Any, *, compile_cache: bool, launcher: bool = False) -> list[str]:
    rt = ctx.d.preset.runtime
    mounts = [f"{rt.hf_cache_volume}:{ctx.hf_home}"]
    if compile_cache:
        mounts.append(f"{rt.compile_cache_volume}:{ctx.vllm_cache}")
    if ctx.d.model_mount:
        host, container = ctx.d.model_mount
        mounts.append(f"{host}:{container}:ro")
    if launcher:
        mounts.append(f"{ctx.launcher_mount}:ro")
    return [_s(m) for m in mounts]


# Images the kit builds are never pulled: compose's default policy (missing) pulls a missing image first, and
# Docker Hub's vllm-kit/... belongs to whoever claims the name. `never` rather than `build`: under `build` every
# `docker compose up` rebuilds from this folder, without the wheelhouse and build args `kit build` gives, over the
# image `kit build` made under the same content tag; under `never` compose uses that image and builds only when the
# tag is missing (Compose v2.40 `up --dry-run`: never/present: used; never/absent: built, no pull; build/present:
# rebuilt; missing/absent: pulled first). The tag changes with every input of the image, so a missing tag is
# exactly a changed image.
BUILT_PULL_POLICY = "never"


def _built_image(ctx: Any) -> dict[str, Any]:
    """The stack's image: built here, never pulled (BUILT_PULL_POLICY). Pinned by digest (image.pin_digest, the image
    `kit push` recorded): that image, pulled by its digest, and nothing to build."""
    if ctx.d.preset.image.pin_digest:
        return {"image": _s(ctx.image_ref), "platform": _s(ctx.d.platform)}
    return {
        "image": _s(ctx.image_ref),
        "build": {"context": ".", "dockerfile": "Dockerfile"},
        "pull_policy": BUILT_PULL_POLICY,
        "platform": _s(ctx.d.platform),
    }


ENV_FILE = [{"path": ".env", "required": False}]


def fetch_service(ctx: Any) -> dict[str, Any]:
    return {
        **_built_image(ctx),
        "entrypoint": [_s(a) for a in ctx.d.fetch_command],
        "command": [],
        "environment": {"HF_HOME": _s(ctx.hf_home)},
        "env_file": ENV_FILE,
        "volumes": _volumes(ctx, compile_cache=False),
        "restart": "no",
    }


def model_make_service(ctx: Any) -> dict[str, Any]:
    """One-shot, before the server: makes the preset's generated tiny model in its folder when it is missing, with
    the image's own torch and transformers, so `docker compose up` of a fresh render serves. Root, because the
    folder compose creates for a missing bind mount is root's; no network (it needs none)."""
    host, container = ctx.d.model_mount
    return {
        **_built_image(ctx),
        "entrypoint": [_s(a) for a in ctx.d.model_make_command],
        "command": [],
        "user": "0:0",
        "network_mode": "none",
        # Root may write into a folder another user owns (DAC_OVERRIDE, FOWNER for its chmod), nothing more.
        "cap_drop": ["ALL"],
        "cap_add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"],
        "security_opt": ["no-new-privileges:true"],
        "environment": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        "volumes": [_s(f"{host}:{container}"), _s(ctx.tiny_model_mount)],
        "restart": "no",
    }


def _gpu_deploy(ctx: Any) -> dict[str, Any]:
    gpus = ctx.d.gpu_devices
    device: dict[str, Any] = {"driver": gpus["driver"]}
    if "count" in gpus:
        device["count"] = gpus["count"]
    else:
        device["device_ids"] = [_s(i) for i in gpus["device_ids"]]
    device["capabilities"] = ["gpu"]
    return {"resources": {"reservations": {"devices": [device]}}}


def _healthcheck(ctx: Any) -> dict[str, Any]:
    return {
        "test": [_s(a) for a in ctx.healthcheck_test],
        "interval": "15s",
        "timeout": "10s",
        "retries": 4,
        "start_period": f"{int(ctx.d.healthcheck_start_period)}s",
    }


def _shm_and_caps(ctx: Any, service: dict[str, Any]) -> None:
    shm = ctx.d.shm
    if shm.shm_size:
        service["shm_size"] = _s(shm.shm_size)
    if shm.ipc:
        service["ipc"] = shm.ipc
    # Hardened (kit/data/hardening.yaml): no capabilities but those listed, no privilege gain, read-only root
    # with tmpfs where the server writes, a pids limit.
    hard = ctx.d.hardening
    service["cap_drop"] = ["ALL"]
    if hard.cap_add:
        service["cap_add"] = list(hard.cap_add)
    service["security_opt"] = ["no-new-privileges:true"]
    service["read_only"] = True
    service["tmpfs"] = [_s(t) for t in hard.compose_tmpfs]
    service["pids_limit"] = hard.pids_limit


def _runtime_comments(ctx: Any, service: Path) -> dict[Path, list[str]]:
    """The why of /dev/shm, capabilities and the healthcheck window, beside the keys they explain."""
    shm_key = "shm_size" if ctx.d.shm.shm_size else "ipc" if ctx.d.shm.ipc else None
    comments: dict[Path, list[str]] = {}
    if shm_key:
        comments[(*service, shm_key)] = [f"/dev/shm: {ctx.d.shm.reason}"]
    if ctx.d.hardening.cap_add:
        comments[(*service, "cap_add")] = [ctx.d.hardening.cap_add_reason]
    comments[(*service, "healthcheck")] = [f"start_period: {ctx.d.healthcheck_reason}"]
    return comments


def _header(ctx: Any) -> list[str]:
    d = ctx.d
    return [f"Rendered by vllm-kit for preset {d.preset_name}: vLLM {d.vllm_version}, strategy {d.strategy}."]


def _notes(ctx: Any) -> list[str]:
    return ([f"Host: {note}." for note in ctx.d.notes] + [f"Plan: {line}" for line in ctx.plan_lines])


SECRETS_LINE = "Secrets (HF_TOKEN, VLLM_API_KEY) go in .env beside this file (see .env.example), never here."


def _merge_profiles(ctx: Any, doc: dict[str, Any]) -> dict[Path, list[str]]:
    """--with PROFILE: the profiles' services and volumes join the stack (kit/deploy/profiles.py); returns their comments."""
    comments: dict[Path, list[str]] = {}
    for parts in ctx.profile_parts:
        doc["services"].update(parts.services)
        doc["volumes"].update(parts.volumes)
        comments.update(parts.comments)
    return comments


def compose_file(ctx: Any) -> str:
    """compose.yaml for one node: the one-shot model fetch, then the server. A server beside another preset's
    (``ctx.service_suffix``) gets suffixed service names in its own file, which compose.yaml includes."""
    d = ctx.d
    fetch, serve = ctx.fetch_service, ctx.server_service
    server: dict[str, Any] = {
        **_built_image(ctx),
        "depends_on": {fetch: {"condition": "service_completed_successfully"}},
    }
    make = ctx.model_make_service if d.model_make_command else None
    if d.jetson_runtime:
        server["runtime"] = "nvidia"
    # The watchdog runs the image's server and exits when /health stops answering while it lives.
    server["entrypoint"] = [_s(a) for a in d.hardening.watchdog + d.entrypoint]
    server["command"] = [_s(a) for a in d.serve_args]
    server["environment"] = {k: _s(v) for k, v in d.environment.items()}
    server["env_file"] = ENV_FILE
    server["volumes"] = [*_volumes(ctx, compile_cache=True), _s(ctx.watchdog_mount)]
    _shm_and_caps(ctx, server)
    server["init"] = True
    server["restart"] = d.preset.runtime.restart
    server["healthcheck"] = _healthcheck(ctx)
    if d.gpu_devices:
        server["deploy"] = _gpu_deploy(ctx)
    rt = d.preset.runtime
    doc: dict[str, Any] = {}
    if ctx.includes:
        doc["include"] = [_s(path) for path in ctx.includes]
    fetcher = fetch_service(ctx)
    if make:  # the fetch checks a local model is there: it runs after the model is made
        fetcher = {**fetcher, "depends_on": {make: {"condition": "service_completed_successfully"}}}
    doc["services"] = {**({make: model_make_service(ctx)} if make else {}), fetch: fetcher, serve: server}
    doc["volumes"] = {rt.hf_cache_volume: {}, rt.compile_cache_volume: {}}
    replica_comments: dict[Path, list[str]] = {}
    if rt.replicas > 1:  # N copies of the server behind vLLM's router (kit/deploy/router.py)
        from kit.deploy.router import replicated_services

        services, caches, replica_comments = replicated_services(ctx, server, _s)
        doc["services"] = {**({make: doc["services"][make]} if make else {}), fetch: doc["services"][fetch],
                           **services}
        doc["volumes"] = {rt.hf_cache_volume: {}, **{c: {} for c in caches}}
    # The front door (kit/deploy/door.py): the API's one published port, in front of the server or the router.
    from kit.deploy import door
    from kit.deploy.router import ROUTER_SERVICE

    backend = ROUTER_SERVICE if rt.replicas > 1 else serve
    door_name = door.service_name(ctx.service_suffix)
    doc["services"][door_name] = door.door_service(
        backend_service=backend, published_port=_s(ctx.published_port), restart=rt.restart, suffix=ctx.service_suffix)
    door_comments = door.door_comments(("services", door_name), backend, door.door_routes(d.preset), ctx.service_suffix)
    profile_comments = _merge_profiles(ctx, doc)
    comments = {
        ("include",): ["Servers of other presets in this stack, on the same image, with their own ports, volumes "
                       "and healthchecks."],
        ("services", fetch): [
            "One-shot: puts the model into the HF cache volume (HF_ENDPOINT and HF_TOKEN from .env), so the server",
            "starts offline and a cold start excludes the download. `kit fetch` runs it on its own.",
        ],
        **({("services", make): [
            "One-shot: makes the preset's generated test model (model.generate) in its folder when it is missing, with",
            "the image's torch and transformers, offline; a model already there is left as it is.",
        ]} if make else {}),
        ("services", serve, "runtime"): ["Jetson: the NVIDIA container runtime maps the integrated GPU and the L4T libraries."],
        ("services", serve, "init"): [
            "tini as PID 1: if the server dies or hangs (the watchdog exits), the container exits and the restart",
            "policy brings it back."],
        **_runtime_comments(ctx, ("services", serve)),
        **door_comments,
        **profile_comments,
    }
    if replica_comments:  # the server's comments go to the first replica, which has the same keys
        from kit.deploy.router import replica_service

        first = ("services", replica_service(serve, 1))
        comments = {(first + k[2:] if k[:2] == ("services", serve) else k): v for k, v in comments.items()}
        comments.update(replica_comments)
    start = (f"Runs beside the server of {ctx.included_by}, which includes this file: start and stop the stack from there."
             if ctx.included_by else "Start: docker compose up -d --wait    Stop: docker compose down")
    header = [*_header(ctx), start, SECRETS_LINE, *_notes(ctx)]
    return dump_with_comments(doc, header, comments)


def cluster_compose_file(ctx: Any) -> str:
    """One role of a Ray cluster over several nodes: the head (Ray head + API server) or a worker (Ray only)."""
    d, cl = ctx.d, ctx.d.cluster
    head = ctx.role == "head"
    name = ctx.service
    node: dict[str, Any] = {
        **_built_image(ctx),
        "depends_on": {ctx.fetch_service: {"condition": "service_completed_successfully"}},
    }
    if cl.host_network:
        node["network_mode"] = "host"
    if d.jetson_runtime:
        node["runtime"] = "nvidia"
    node["entrypoint"] = [_s(a) for a in cl.launcher]
    node["command"] = [_s(a) for a in (cl.head_args if head else cl.worker_args)]
    if head and not cl.host_network:
        node["ports"] = [_s(ctx.published_port)]
    environment = {k: _s(v) for k, v in d.environment.items()}
    if cl.host_network:
        # Fixed text, the one place compose interpolation is meant: each host's address from its own .env.
        environment["VLLM_HOST_IP"] = "${VLLM_HOST_IP:?set VLLM_HOST_IP in .env to this host's address (see .env.example)}"
    node["environment"] = environment
    node["env_file"] = ENV_FILE
    node["volumes"] = _volumes(ctx, compile_cache=True, launcher=True)
    _shm_and_caps(ctx, node)
    node["init"] = True
    node["restart"] = d.preset.runtime.restart
    if head:
        node["healthcheck"] = _healthcheck(ctx)
    replicas = cl.nodes - 1 if (not head and not cl.host_network and cl.nodes > 2) else 0
    deploy: dict[str, Any] = {}
    if replicas:
        deploy["replicas"] = replicas
    if d.gpu_devices:
        deploy.update(_gpu_deploy(ctx))
    if deploy:
        node["deploy"] = deploy
    rt = d.preset.runtime
    doc = {
        "services": {ctx.fetch_service: fetch_service(ctx), name: node},
        "volumes": {rt.hf_cache_volume: {}, rt.compile_cache_volume: {}},
    }
    profile_comments = _merge_profiles(ctx, doc)
    service = ("services", name)
    if head:
        launcher_why = [
            f"The launcher starts Ray's head, waits up to {int(cl.join_timeout)} s for all {int(cl.nodes)} nodes, "
            "then runs the server",
            f"and stops it when a node is gone for {int(cl.node_grace)} s (so /health fails and the restart policy acts).",
        ]
    else:
        launcher_why = [f"The launcher waits up to {int(cl.join_timeout)} s for the head at {cl.head_endpoint}, "
                        "then joins with `ray start --block`."]
    comments = {
        ("services", ctx.fetch_service): [
            "One-shot: puts the model into this node's HF cache volume (every node loads its own layers from it)."],
        (*service, "network_mode"): [
            "vLLM's multi-node guide: host networking, so Ray, NCCL and Gloo reach the other hosts directly."],
        (*service, "entrypoint"): launcher_why,
        (*service, "environment", "VLLM_HOST_IP"): [
            "This host's address, from .env: Ray's node address and the address vLLM's ranks use."],
        (*service, "init"): ([] if head else [
            "No healthcheck: `ray start --block` exits when this node's Ray stops, and the restart policy rejoins it."]),
        (*service, "deploy"): ["One container per worker node on this host."] if replicas else [],
        **_runtime_comments(ctx, service),
        **profile_comments,
    }
    if not head:
        comments.pop((*service, "healthcheck"))
    header = [*_header(ctx),
              f"Ray cluster over {int(cl.nodes)} nodes ({cl.network} networking): this is the {ctx.role} stack. "
              "CLUSTER.md says what runs where."]
    if cl.host_network:
        f = f"compose.{ctx.role}.yaml"
        where = "On the head host" if head else "On each worker host"
        header += [f"{where}: docker compose -f {f} up -d    Stop: docker compose -f {f} down",
                   "Each host's address comes from its .env (VLLM_HOST_IP; see .env.example), never from this file."]
    else:
        header.append("All nodes on this Docker host, one project: "
                      "docker compose -f compose.head.yaml -f compose.worker.yaml up -d")
    header += [SECRETS_LINE, *_notes(ctx)]
    return dump_with_comments(doc, header, comments)
