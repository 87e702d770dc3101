"""Deployment -> compose files, as data serialised to YAML (as kit/deploy/k8s.py does for manifests).

Public entry points: ``compose_file(ctx)`` (one node) and ``cluster_compose_file(ctx)`` (one role of a Ray
cluster), called by ``kit.deploy.render.render`` with its RenderContext.

No value can change a file's structure: every key and value goes through the one YAML writer
(kit/core/yamlwrite.py, which Kubernetes manifests and the record use too), every string from the preset is
`$`-escaped for compose's interpolation, and comments are fixed text or text that passed ``check_text``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kit.core.safevalue import compose_text
from kit.core.yamlwrite import Path, dump_with_comments
from kit.deploy import door
from kit.deploy.deployment import BUILT_PULL_POLICY, MODEL_MAKE_DIR, MODELS_DIR
from kit.deploy.router import ROUTER_SERVICE, replica_service, replicated_services
from kit.deploy.service_env import compose_environment

if TYPE_CHECKING:
    from kit.deploy.render import RenderContext

# ---------------------------------------------------------------------------------------------- services


_s = compose_text  # every preset string that reaches compose.yaml goes through this


def _volumes(ctx: RenderContext, *, compile_cache: bool, launcher: bool = False) -> list[str]:
    rt = ctx.d.preset.runtime
    mounts = [f"{rt.hf_cache_volume}:{ctx.hf_home}"]
    if compile_cache:
        mounts.append(f"{rt.compile_cache_volume}:{ctx.vllm_cache}")
    if ctx.d.serve.model_mount:
        host, container = ctx.d.serve.model_mount
        mounts.append(f"{host}:{container}:ro")
    if ctx.d.serve.model_volume:
        mounts.append(f"{ctx.d.serve.model_volume}:{MODELS_DIR}:ro")
    if launcher:
        mounts.append(f"{ctx.launcher_mount}:ro")
    return [_s(m) for m in mounts]


def _built_image(ctx: RenderContext) -> dict[str, Any]:
    """The stack's image: built here, never pulled (BUILT_PULL_POLICY). Pinned by digest (image.pin_digest, the image
    `kit push` recorded): that image, pulled by its digest, and nothing to build."""
    if ctx.d.preset.image.pin_digest:
        return {"image": _s(ctx.image_ref), "platform": _s(ctx.d.image.platform)}
    return {
        "image": _s(ctx.image_ref),
        "build": {"context": ".", "dockerfile": "Dockerfile"},
        "pull_policy": BUILT_PULL_POLICY,
        "platform": _s(ctx.d.image.platform),
    }


def _environment(fixed: dict[str, str], role: str, ctx: RenderContext) -> dict[str, str | None]:
    """The kit's own values, then the .env names this container reads (kit/data/service_env.yaml), each with no
    value: compose resolves it from .env and leaves it out when unset, so no secret is written here and no
    container gets another's (no shared env_file)."""
    return {**fixed, **{k: v for k, v in compose_environment(role, ctx.d).items() if k not in fixed}}


def _one_shot_hardening(ctx: RenderContext, tmpfs: list[str]) -> dict[str, Any]:
    """The server's limits for a one-shot that needs no capability: none, no privilege gain, a read-only root
    with tmpfs where it writes outside its volumes, the pids limit (kit/data/hardening.yaml)."""
    assert ctx.d.runtime.hardening is not None  # filled by the pipeline before any render
    return {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"], "read_only": True,
            "tmpfs": [_s(t) for t in tmpfs], "pids_limit": ctx.d.runtime.hardening.pids_limit}


def fetch_service(ctx: RenderContext) -> dict[str, Any]:
    """Runs as the server's own non-root user (named here, not left to the image's USER), hardened as the server:
    it writes only into the HF cache volume (HF_HOME, the image's directory owned by that user), and under HOME
    (huggingface_hub's token and lock files), which is a tmpfs as on the server."""
    user = ctx.d.runtime.run_user
    assert ctx.d.runtime.hardening is not None  # filled by the pipeline before any render
    return {
        **_built_image(ctx),
        "entrypoint": [_s(a) for a in ctx.d.serve.fetch_command],
        "command": [],
        "user": f"{int(user.uid)}:{int(user.gid)}",
        "environment": _environment({"HF_HOME": _s(ctx.hf_home)}, "fetch", ctx),
        "volumes": _volumes(ctx, compile_cache=False),
        **_one_shot_hardening(ctx, ctx.d.runtime.hardening.compose_tmpfs),
        "restart": "no",
    }


def model_make_service(ctx: RenderContext) -> dict[str, Any]:
    """One-shot, before the fetch and the server: makes the preset's generated tiny model when it is missing, with the
    image's own torch and transformers, so `docker compose up` of a fresh render serves. As model-fetch: the server's
    own non-root user, no capability, a read-only root; it writes only into the stack's models volume (mounted at
    MODEL_MAKE_DIR, so the volume is that user's: kit/deploy/deployment.py says why) and /tmp; no network."""
    d = ctx.d
    # Called only for a generated model: it has a volume and a command (deployment.py sets both).
    assert d.serve.model_volume is not None and d.serve.model_make_command is not None
    user = d.runtime.run_user
    return {
        **_built_image(ctx),
        "entrypoint": [_s(a) for a in d.serve.model_make_command],
        "command": [],
        "user": f"{int(user.uid)}:{int(user.gid)}",
        "network_mode": "none",
        # seen: tinymodel.py makes the model so (vllm-kit/cpu 0.32.0): writes only there and under /tmp
        **_one_shot_hardening(ctx, ["/tmp:size=2g"]),
        "environment": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        "volumes": [_s(f"{d.serve.model_volume}:{MODEL_MAKE_DIR}"), _s(ctx.tiny_model_mount)],
        "restart": "no",
    }


def _gpu_deploy(ctx: RenderContext) -> dict[str, Any]:
    gpus = ctx.d.runtime.gpu_devices
    assert gpus is not None  # called for GPU presets only
    device: dict[str, Any] = {"driver": gpus["driver"]}
    if "count" in gpus:
        device["count"] = gpus["count"]
    else:
        device["device_ids"] = [_s(i) for i in gpus["device_ids"]]
    device["capabilities"] = ["gpu"]
    return {"resources": {"reservations": {"devices": [device]}}}


def _healthcheck(ctx: RenderContext) -> dict[str, Any]:
    return {
        "test": [_s(a) for a in ctx.healthcheck_test],
        "interval": "15s",
        "timeout": "10s",
        "retries": 4,
        "start_period": f"{int(ctx.d.runtime.healthcheck_start_period)}s",
    }


def _shm_and_caps(ctx: RenderContext, service: dict[str, Any]) -> None:
    shm = ctx.d.runtime.shm
    if shm.shm_size:
        service["shm_size"] = _s(shm.shm_size)
    if shm.ipc:
        service["ipc"] = shm.ipc
    # Hardened (kit/data/hardening.yaml): no capabilities but those listed, no privilege gain, read-only root
    # with tmpfs where the server writes, a pids limit.
    hard = ctx.d.runtime.hardening
    assert hard is not None  # the pipeline fills it (deployment.hardening_for)
    service["cap_drop"] = ["ALL"]
    if hard.cap_add:
        service["cap_add"] = list(hard.cap_add)
    service["security_opt"] = ["no-new-privileges:true"]
    service["read_only"] = True
    service["tmpfs"] = [_s(t) for t in hard.compose_tmpfs]
    service["pids_limit"] = hard.pids_limit


def _runtime_comments(ctx: RenderContext, service: Path) -> dict[Path, list[str]]:
    """The why of /dev/shm, capabilities and the healthcheck window, beside the keys they explain."""
    shm_key = "shm_size" if ctx.d.runtime.shm.shm_size else "ipc" if ctx.d.runtime.shm.ipc else None
    comments: dict[Path, list[str]] = {}
    if shm_key:
        comments[(*service, shm_key)] = [f"/dev/shm: {ctx.d.runtime.shm.reason}"]
    hard = ctx.d.runtime.hardening
    assert hard is not None
    if hard.cap_add:
        comments[(*service, "cap_add")] = [hard.cap_add_reason]
    comments[(*service, "healthcheck")] = [f"start_period: {ctx.d.runtime.healthcheck_reason}"]
    return comments


def _header(ctx: RenderContext) -> list[str]:
    d = ctx.d
    return [f"Rendered by vllm-kit for preset {d.preset_name}: vLLM {d.image.vllm_version}, strategy {d.image.strategy}."]


def _notes(ctx: RenderContext) -> list[str]:
    return ([f"Host: {note}." for note in ctx.d.image.notes] + [f"Plan: {line}" for line in ctx.plan_lines])


def start_lines(project: str) -> list[str]:
    """How the stack starts and stops, as commands that run as printed from the folder this file is in (no name to
    fill in: the kit's commands take the folder as `--out .`, and compose reads the project from `name:` below)."""
    named = f" (compose project {project}: the name below)" if project else ""
    return ["Start, from this folder: kit up --out .    Stop: kit down --out .",
            "Or with compose: kit build --out . (when this engine lacks the image), then "
            f"docker compose up -d --wait --remove-orphans{named}"]


SECRETS_LINE = "Secrets (HF_TOKEN, VLLM_API_KEY) go in .env beside this file (see .env.example), never here."


def _merge_profiles(ctx: RenderContext, doc: dict[str, Any]) -> dict[Path, list[str]]:
    """--with PROFILE: the profiles' services and volumes join the stack (kit/deploy/profiles.py); returns their comments."""
    comments: dict[Path, list[str]] = {}
    for parts in ctx.profile_parts:
        doc["services"].update(parts.services)
        doc["volumes"].update(parts.volumes)
        comments.update(parts.comments)
    return comments


def compose_file(ctx: RenderContext) -> str:
    """compose.yaml for one node: the one-shot model fetch, then the server. A server beside another preset's
    (``ctx.service_suffix``) gets suffixed service names in its own file, which compose.yaml includes."""
    d = ctx.d
    fetch, serve = ctx.fetch_service, ctx.server_service
    server: dict[str, Any] = {
        **_built_image(ctx),
        "depends_on": {fetch: {"condition": "service_completed_successfully"}},
    }
    make = ctx.model_make_service if d.serve.model_make_command else None
    if d.runtime.jetson_runtime:
        server["runtime"] = "nvidia"
    # The watchdog runs the image's server and exits when /health stops answering while it lives.
    assert d.runtime.hardening is not None
    server["entrypoint"] = [_s(a) for a in d.runtime.hardening.watchdog + d.serve.entrypoint]
    server["command"] = [_s(a) for a in d.serve.serve_args]
    server["environment"] = _environment({k: _s(v) for k, v in d.serve.environment.items()}, "server", ctx)
    server["volumes"] = [*_volumes(ctx, compile_cache=True), _s(ctx.watchdog_mount)]
    _shm_and_caps(ctx, server)
    server["init"] = True
    server["restart"] = d.preset.runtime.restart
    server["healthcheck"] = _healthcheck(ctx)
    if d.runtime.gpu_devices:
        server["deploy"] = _gpu_deploy(ctx)
    rt = d.preset.runtime
    doc: dict[str, Any] = {"name": _s(ctx.project)} if ctx.project else {}
    if ctx.includes:
        doc["include"] = [_s(path) for path in ctx.includes]
    fetcher = fetch_service(ctx)
    if make:  # the fetch checks a local model is there: it runs after the model is made
        fetcher = {**fetcher, "depends_on": {make: {"condition": "service_completed_successfully"}}}
    doc["services"] = {**({make: model_make_service(ctx)} if make else {}), fetch: fetcher, serve: server}
    models: dict[str, dict[str, Any]] = {d.serve.model_volume: {}} if d.serve.model_volume else {}
    doc["volumes"] = {rt.hf_cache_volume: {}, rt.compile_cache_volume: {}, **models}
    replica_comments: dict[Path, list[str]] = {}
    if rt.replicas > 1:  # N copies of the server behind vLLM's router (kit/deploy/router.py)
        services, caches, replica_comments = replicated_services(ctx, server, _s)
        doc["services"] = {**({make: doc["services"][make]} if make else {}), fetch: doc["services"][fetch],
                           **services}
        doc["volumes"] = {rt.hf_cache_volume: {}, **{c: {} for c in caches}, **models}
    # The front door (kit/deploy/door.py): the API's one published port, in front of the server or the router.
    backend = ROUTER_SERVICE if rt.replicas > 1 else serve
    door_name = door.service_name(ctx.service_suffix)
    doc["services"][door_name] = door.door_service(
        backend_service=backend, published_port=_s(ctx.published_port), restart=rt.restart, suffix=ctx.service_suffix)
    door_comments = door.door_comments(("services", door_name), backend, door.door_routes(d.preset), ctx.service_suffix)
    profile_comments = _merge_profiles(ctx, doc)
    comments: dict[Path, list[str]] = {
        ("include",): ["Servers of other presets in this stack, on the same image, with their own ports, volumes "
                       "and healthchecks."],
        ("services", fetch): [
            "One-shot: puts the model into the HF cache volume (HF_ENDPOINT and HF_TOKEN from .env), so the server",
            "starts offline and a cold start excludes the download. `kit fetch` runs it on its own.",
        ],
        **({("services", make): [
            "One-shot: makes the preset's generated test model (model.generate) in the models volume when it is",
            "missing, with the image's torch and transformers, offline, as the server's non-root user; a model",
            "already there is left as it is. The fetch and the server mount that volume read-only.",
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
        first = ("services", replica_service(serve, 1))
        comments = {(first + k[2:] if k[:2] == ("services", serve) else k): v for k, v in comments.items()}
        comments.update(replica_comments)
    start = ([f"Runs beside the server of {ctx.included_by}, which includes this file: start and stop the stack from there."]
             if ctx.included_by else start_lines(ctx.project))
    header = [*_header(ctx), *start, SECRETS_LINE, *_notes(ctx)]
    return dump_with_comments(doc, header, comments)


def cluster_compose_file(ctx: RenderContext) -> str:
    """One role of a Ray cluster over several nodes: the head (Ray head + API server) or a worker (Ray only)."""
    d, cl = ctx.d, ctx.d.serve.cluster
    assert cl is not None  # rendered for cluster presets only
    head = ctx.role == "head"
    name = ctx.service
    node: dict[str, Any] = {
        **_built_image(ctx),
        "depends_on": {ctx.fetch_service: {"condition": "service_completed_successfully"}},
    }
    if cl.host_network:
        node["network_mode"] = "host"
    if d.runtime.jetson_runtime:
        node["runtime"] = "nvidia"
    node["entrypoint"] = [_s(a) for a in cl.launcher]
    node["command"] = [_s(a) for a in (cl.head_args if head else cl.worker_args)]
    if head and not cl.host_network:
        node["ports"] = [_s(ctx.published_port)]
    environment = {k: _s(v) for k, v in d.serve.environment.items()}
    if cl.host_network:
        # Fixed text, the one place compose interpolation is meant: each host's address from its own .env.
        environment["VLLM_HOST_IP"] = "${VLLM_HOST_IP:?set VLLM_HOST_IP in .env to this host's address (see .env.example)}"
    node["environment"] = _environment(environment, "ray_head" if head else "ray_worker", ctx)
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
    if d.runtime.gpu_devices:
        deploy.update(_gpu_deploy(ctx))
    if deploy:
        node["deploy"] = deploy
    rt = d.preset.runtime
    # One project on one Docker host (bridge networking) overlays both files (`-f compose.head.yaml -f
    # compose.worker.yaml`): the head's fetch (and model-make) fill the shared volumes for both, and a second
    # definition of the same service would be merged by compose, its lists (security_opt) concatenated into
    # duplicates it refuses.
    fetches = head or cl.host_network
    one_shots: dict[str, Any] = {}
    if fetches:
        fetcher = fetch_service(ctx)
        if d.serve.model_make_command:  # each host's stack makes the generated model in its own volume, as one node does
            one_shots[ctx.model_make_service] = model_make_service(ctx)
            fetcher = {**fetcher,
                       "depends_on": {ctx.model_make_service: {"condition": "service_completed_successfully"}}}
        one_shots[ctx.fetch_service] = fetcher
    doc = {
        **({"name": _s(ctx.project)} if ctx.project else {}),
        "services": {**one_shots, name: node},
        "volumes": {rt.hf_cache_volume: {}, rt.compile_cache_volume: {}, **({d.serve.model_volume: {}} if d.serve.model_volume else {})},
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
    comments: dict[Path, list[str]] = {
        ("services", ctx.fetch_service): [
            "One-shot: puts the model into this node's HF cache volume (every node loads its own layers from it)."],
        **({("services", ctx.model_make_service): [
            "One-shot: makes the generated test model (model.generate, a fixed seed: the same on every node) in this",
            "node's models volume when it is missing, as the server's non-root user; the node mounts it read-only.",
        ]} if ctx.model_make_service in one_shots else {}),
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
