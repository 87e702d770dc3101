"""The chat front end profile (`--with webui`): Open WebUI beside the server, as compose data.

Public entry point: ``webui_profile(ctx, servers)``, the profile's builder (kit/deploy/profiles.py), returns the services,
volumes, comments and .env.example lines the profile adds to a one-node compose file. The facts (image tag, port, data directory, the
environment Open WebUI reads) are in kit/data/webui.yaml with their sources.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from kit.core.datafiles import load_yaml
from kit.core.errors import PresetError, Problem
from kit.core.safevalue import compose_text
from kit.deploy.checks import LOOPBACK
from kit.deploy.profile_parts import ProfileParts
from kit.deploy.router import ROUTER_SERVICE, router_spec

if TYPE_CHECKING:
    from kit.config.preset import Preset
    from kit.deploy.render import RenderContext

SERVICE = "webui"


@cache
def webui_data() -> dict[str, Any]:
    return load_yaml("webui.yaml")


_s = compose_text


def image_ref() -> str:
    data = webui_data()
    return f"{data['image']}:{data['tag']}"


def webui_exposure(where: str, preset: Preset) -> list[Problem]:
    """Open WebUI is published on runtime.bind_address; beyond loopback its login page is on the network, and its
    admin holds the server's key and runs Functions (Python code) inside the container."""
    rt = preset.runtime
    if rt.bind_address in LOOPBACK:
        return []
    port = int(webui_data()["default_host_port"])
    return [Problem(
        f"{where}: runtime.bind_address",
        f"--with webui publishes Open WebUI on {rt.bind_address}:{port} (WEBUI_PORT), beyond this host's loopback: "
        "anyone who reaches it gets the login page of an admin who can read the server's key and run code (Functions) "
        "in the web UI's container",
        "keep a long WEBUI_ADMIN_PASSWORD in .env (sign-up is off), or publish on 127.0.0.1 behind a proxy that "
        "authenticates and terminates TLS",
    )]


def webui_profile(ctx: RenderContext, servers: list[str]) -> ProfileParts:
    """Open WebUI wired to the stack's first server over the compose network; its port on the server's bind address."""
    if ctx.d.serve.cluster is not None:
        raise PresetError("--with webui: the chat front end needs a one-node preset (hardware.nodes=1)")
    data = webui_data()
    server, server_port = servers[0], ctx.port
    rt = ctx.d.preset.runtime
    if rt.replicas > 1:  # replicas: the router is the stack's one endpoint (kit/deploy/router.py)
        server, server_port = ROUTER_SERVICE, router_spec(ctx.d.preset).container_port
    port = int(data["container_port"])
    environment = {
        # The server's service name resolves on the stack's network; its container port, not the published one.
        "OPENAI_API_BASE_URL": _s(f"http://{server}:{server_port}/v1"),
        **{k: _s(v) for k, v in data["environment"].items()},
    }
    if data["auto_tool_flag"] not in ctx.d.serve.serve_args:
        # No tool parser on the server: Open WebUI's native tool calls would be refused (kit/data/webui.yaml).
        mode = data["function_calling_without_tool_parser"]
        environment["DEFAULT_MODEL_PARAMS"] = _s(json.dumps({"function_calling": mode}))
    # Fixed text, the one place compose interpolation is meant: the values live in .env only.
    for name, source in data["secret_env"].items():
        environment[name] = f"${{{source}:-}}"
    secret = data["required_secret"]
    for name in (secret, *data["admin_env"]):
        environment[name] = f"${{{name}:?set {name} in .env (see .env.example)}}"
    admin_name = data["admin_name_env"]
    environment[admin_name] = f"${{{admin_name}:-{_s(data['admin_name_default'])}}}"
    health = f"http://127.0.0.1:{port}{data['health_path']}"
    service = {
        "image": _s(image_ref()),
        "depends_on": {server: {"condition": "service_healthy"}},
        "ports": [f"{_s(rt.bind_address)}:${{WEBUI_PORT:-{int(data['default_host_port'])}}}:{port}"],
        "environment": environment,
        "volumes": [f"{_s(data['volume'])}:{_s(data['data_dir'])}"],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
        "tmpfs": [_s(t) for t in data["tmpfs"]],
        "pids_limit": int(data["pids_limit"]),
        "init": True,
        "restart": _s(rt.restart),
        # python3 is in the official image (a python:3.11-slim base) and in any image built from the PyPI release;
        # curl and jq, which the image's own HEALTHCHECK uses, are not in the latter.
        "healthcheck": {
            "test": ["CMD", "python3", "-c", f"import urllib.request; urllib.request.urlopen({health!r}, timeout=5)"],
            "interval": "15s",
            "timeout": "10s",
            "retries": 4,
            "start_period": "120s",
        },
    }
    path = ("services", SERVICE)
    comments = {
        path: [f"Open WebUI {data['version']}, the chat front end, on the server's OpenAI endpoint inside this network.",
               f"http://127.0.0.1:${{WEBUI_PORT:-{int(data['default_host_port'])}}} (WEBUI_PORT in .env); "
               "its users, chats and settings live on the webui-data volume."],
        (*path, "environment"): [
            "OPENAI_API_KEY is the server's VLLM_API_KEY and WEBUI_SECRET_KEY signs sessions: both from .env.",
            "Sign-up is off: the one account is the admin WEBUI_ADMIN_EMAIL / WEBUI_ADMIN_PASSWORD from .env, made at "
            "the first start."],
        (*path, "cap_drop"): [
            "Hardened as far as Open WebUI allows: it stays root (the image's user, which owns the data volume), "
            "with no capabilities,",
            "a read-only root and tmpfs where it writes outside its data (static files, /tmp, caches under HOME)."],
        (*path, "healthcheck"): ["start_period: Open WebUI imports its retrieval stack before it listens (a minute "
                                 "or more on 2 cores)."],
    }
    env_example = [
        "# ---- Open WebUI (--with webui). It calls the server with VLLM_API_KEY above.",
        "# Required: signs its login sessions; the stack refuses to start without it. kit render writes a random one",
        "# into .env when there is none.",
        f"# {secret}=",
        "# Required: the admin account, created at the first start (sign-up is off, so it is the only way in; add",
        "# users from its admin panel). Change the password there later: Open WebUI keeps the account in webui-data.",
        "# kit render writes admin@localhost and a random password into .env when they are not set.",
        "# WEBUI_ADMIN_EMAIL=admin@localhost",
        "# WEBUI_ADMIN_PASSWORD=",
        f"# {admin_name}={data['admin_name_default']}",
        f"# Its port on this host (default {int(data['default_host_port'])}).",
        f"# WEBUI_PORT={int(data['default_host_port'])}",
    ]
    return ProfileParts(services={SERVICE: service}, volumes={_s(data["volume"]): {}}, comments=comments,
                        env_example=env_example)
