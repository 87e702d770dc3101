"""The front door: one authenticating HAProxy publishes a compose stack's API (kit/data/door.yaml says why).

Public entry points: ``door_routes(preset)`` (what the door passes, from the server's task), ``door_config(...)``
(the HAProxy config text) and ``door_service(...)`` (its compose service). Pure, like the rest of the render.

The key never reaches a rendered file: the config says ``"Bearer ${VLLM_API_KEY}"``, which HAProxy expands from its
own environment when it reads the config (HAProxy configuration manual, "Environment variables"), and compose sets
that variable from .env by interpolation. With no key in .env the inference routes are open, as the server itself
is without a key; every other route stays refused either way.

Before any route is looked at, the door refuses a Host it is not served as (``served_hosts``, or a loopback name at
any port: DNS rebinding), a
body over the cap or of unstated length, and (``option http-buffer-request``) a body slower than the header timeout.
Kubernetes runs the same config in a sidecar (kit/deploy/k8s.py: ``resolve=False``, the server on the pod's loopback).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from kit.config.modelinfo import load_model_spec
from kit.config.pooling import pooling_profile, pooling_table
from kit.core.datafiles import load_yaml
from kit.core.safevalue import check_text

if TYPE_CHECKING:
    from kit.config.preset import Preset

SERVICE = "door"
DIR = "door"
KEY_ENV = "VLLM_API_KEY"
# A site's mirror of the pinned image (or a stand-in), from .env or the environment by compose interpolation.
IMAGE_ENV = "VLLM_KIT_DOOR_IMAGE"


# A Host value the config may name: a DNS name, an IPv4 address or a bracketed IPv6 one, with an optional port; or a
# name with the door's own `${POD_NAMESPACE}` (HAProxy expands it from its environment inside double quotes).
HOST_VALUE = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?(\.\$\{POD_NAMESPACE\}[a-z.]*)?)(:[0-9]{1,5})?")


# The loopback names at any port (HAProxy's `-m reg`, single-quoted: no escaping inside). A client on this machine
# reaching the door through a forwarded port (`ssh -L 9000:127.0.0.1:8000`, `kubectl port-forward svc/x 9000:8000`)
# sends the local end's port; a browser page rebound to 127.0.0.1 sends its own name, never one of these.
LOOPBACK_HOST = r"^(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?$"


def loopback_host(value: str) -> bool:
    """Whether a Host header value is a loopback name at any port (the door's ``loopback_host`` acl, case-insensitive)."""
    return re.fullmatch(LOOPBACK_HOST.strip("^$"), value, flags=re.IGNORECASE) is not None


def _quoted(value: str) -> str:
    return f'"{value}"'


@cache
def door_data() -> dict[str, Any]:
    return load_yaml("door.yaml")


@dataclass(frozen=True)
class Route:
    path: str
    methods: tuple[str, ...]
    open: bool = False  # no key needed


def image_ref() -> str:
    image = door_data()["image"]
    return f"{image['repository']}:{image['tag']}@{image['digest']}"


def config_file(suffix: str = "") -> str:
    """The config's path beside compose.yaml: one door per API server (a side-by-side server's has its suffix)."""
    return f"{DIR}/haproxy{suffix}.cfg"


def service_name(suffix: str = "") -> str:
    return SERVICE + suffix


def door_routes(preset: Preset) -> list[Route]:
    """The open routes, /v1/models, and the routes of what the server runs: text generation, or its pooling task
    (and the score routes of tasks that may serve them; kit/data/pooling.yaml)."""
    try:
        spec = load_model_spec(preset.model.id)
    except Exception:  # noqa: BLE001 - a model the catalog does not know: the flags alone decide
        spec = None
    profile = pooling_profile(preset.engine.flags(), spec)
    table = door_data()["routes"]
    groups = ["always"]
    if not profile.pooling:
        groups.append("generate")
    else:
        task = profile.task or "embed"
        groups.append(task)
        if pooling_table()["tasks"][task].get("score"):
            groups.append("score")
    routes = [Route(r["path"], tuple(r["methods"]), open=True) for r in table["open"]]
    routes += [Route(r["path"], tuple(r["methods"])) for g in groups for r in table[g]]
    return routes


def _acl_name(index: int) -> str:
    return f"route_{index}"


def host_form(name: str) -> str:
    """A name as it stands in a Host header: an IPv6 address in brackets (RFC 9110 7.2, RFC 3986 3.2.2)."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name
    return f"[{address}]" if address.version == 6 else str(address)


def client_host(bind_address: str) -> str:
    """The address a client on this machine uses for a server bound to ``bind_address``, in URL form: every-address
    binds are reached on loopback (0.0.0.0 as 127.0.0.1, :: as [::1]), an IPv6 address in brackets. It is also a
    Host the front door answers to (``served_hosts``)."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(bind_address, host_form(bind_address))


def served_hosts(preset: Preset, port: int) -> list[str]:
    """The Host values a compose stack's door answers to: 127.0.0.1, localhost, the bind address (unless it is every
    address: then only the names the user configures mean this machine) and runtime.server_names, each without a port
    and with the published one. Any other Host is refused (kit/data/door.yaml: DNS rebinding)."""
    rt = preset.runtime
    names = ["127.0.0.1", "localhost"]
    bind = ipaddress.ip_address(rt.bind_address)
    if bind.version == 6:  # an IPv6 bind is reached on this machine as [::1] (`kit up` prints that for ::)
        names.append("::1")
    if not bind.is_unspecified:
        names.append(rt.bind_address)
    names += list(rt.server_names)
    return with_port(names, port)


def with_port(names: list[str], port: int) -> list[str]:
    seen: list[str] = []
    for name in names:
        for value in (host_form(name), f"{host_form(name)}:{int(port)}"):
            if value not in seen:
                seen.append(value)
    return seen


def _host_value(value: str) -> str:
    """A Host value for the config: a DNS name or address with an optional port, or the fixed `${POD_NAMESPACE}`
    forms (kit/deploy/k8s.py); anything else would change the config's structure."""
    if not HOST_VALUE.fullmatch(value):
        raise ValueError(f"not a Host value for the door: {value!r}")
    return value


def door_config(backend: str, backend_port: int, routes: list[Route], title: str, *, hosts: list[str],
                resolve: bool = True) -> str:
    """HAProxy's config: the Host allow-list, bounded requests, the route allow-list, the key check, CORS closed,
    one backend (the server or the router; ``resolve`` by the stack network's DNS, else an address as written)."""
    data = door_data()
    t = data["timeouts"]
    check_text(title, "a door title")
    backend = check_text(backend, "a backend host")
    if not hosts:
        raise ValueError("a door needs the Host values it answers to")
    body_max = int(data["body_max_bytes"])
    lines = [
        f"# Rendered by vllm-kit for {title} (the front door, kit/deploy/door.py); `kit render` rewrites it.",
        "# Only the routes below pass; each but the open ones needs 'Authorization: Bearer <VLLM_API_KEY>'.",
        "# The key is read from the door's environment (.env, or the Secret on Kubernetes) when HAProxy starts: it is",
        "# not in this file.",
        "global",
        "    log stdout format raw local0 info",
        f"    maxconn {int(data['maxconn'])}",
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    # The request rules below wait for the body (up to one buffer) within `timeout http-request`, as for the",
        "    # headers: a slow body is cut as a slow header is.",
        "    option http-buffer-request",
        f"    timeout connect {t['connect']}",
        f"    timeout http-request {t['http_request']}",
        f"    timeout client {t['idle']}",
        f"    timeout server {t['idle']}",
        "",
        *(["# The stack network's DNS (Docker's resolver, from the container's resolv.conf): a restarted server",
           "# container may come back on another address.",
           "resolvers stack",
           "    parse-resolv-conf",
           "    hold valid 10s",
           ""] if resolve else []),
        "frontend door",
        f"    bind :{int(data['container_port'])}",
        "    # Only the names this door is served as: a web page whose name was rebound to this address (DNS rebinding)",
        "    # sends its own name as Host. One Host header, one of these, case-insensitive; or a loopback name at any",
        "    # port (a tunnel or `kubectl port-forward` to another local port: no page can send those as its name).",
        "    acl one_host req.fhdr_cnt(host) eq 1",
        f"    acl served_host req.fhdr(host) -i -m str {' '.join(_quoted(_host_value(h)) for h in hosts)}",
        f"    acl loopback_host req.fhdr(host) -i -m reg '{LOOPBACK_HOST}'",
        f"    http-request deny deny_status {int(data['host_refused_status'])} unless one_host served_host || "
        "one_host loopback_host",
        f"    # Bodies: at most {body_max} bytes, and their length stated up front (Content-Length): a chunked body",
        "    # could not be measured before it reaches the server.",
        "    http-request deny deny_status 400 if { req.fhdr_cnt(transfer-encoding) gt 0 }",
        "    http-request deny deny_status 400 if { req.fhdr_cnt(content-length) gt 1 }",
        "    http-request deny deny_status 400 if METH_POST !{ req.hdr(content-length) -m found }",
        f"    http-request deny deny_status 413 if {{ req.hdr_val(content-length) gt {body_max} }}",
        "    # CORS closed: no preflight, no Origin reaches the server, no grant leaves the door.",
        "    http-request deny deny_status 403 if METH_OPTIONS",
        "    http-request del-header Origin",
        *[f"    http-response del-header {h}" for h in data["cors_response_headers"]],
    ]
    allowed = []
    for index, route in enumerate(routes):
        name = _acl_name(index)
        lines.append(f"    acl {name} path {check_text(route.path, 'a route')}")
        lines.append(f"    acl {name}_method method {' '.join(route.methods)}")
        allowed.append(f"{name} {name}_method")
    open_routes = [_acl_name(i) for i, r in enumerate(routes) if r.open]
    lines += [
        "    # Exact paths and methods only; anything else is 403 before the key is looked at.",
        "    http-request deny deny_status 403 unless " + " || ".join(allowed),
        f"    acl key_configured env({KEY_ENV}) -m len gt 0",
        f'    acl key_given req.fhdr(authorization) -m str "Bearer ${{{KEY_ENV}}}"',
        "    acl one_authorization req.hdr_cnt(authorization) le 1",
        "    http-request deny deny_status 401 unless one_authorization",
        f"    http-request deny deny_status 401 if key_configured !key_given !{' !'.join(open_routes)}"
        if open_routes else "    http-request deny deny_status 401 if key_configured !key_given",
        "    default_backend api",
        "",
        "backend api",
        f"    server api {backend}:{int(backend_port)}" + (" resolvers stack init-addr libc,none" if resolve else ""),
    ]
    return "\n".join(lines) + "\n"


def door_service(*, backend_service: str, published_port: str, restart: str, suffix: str = "") -> dict[str, Any]:
    """The door's compose service: the only published port of the API, the config read-only, hardened like the
    servers. No healthcheck: neither the official image nor a minimal one has an HTTP client, and the door starts
    only once its backend is healthy (depends_on), so `docker compose up --wait` still waits for a serving stack."""
    data = door_data()
    return {
        # Fixed text, compose interpolation meant: the pinned image unless VLLM_KIT_DOOR_IMAGE names a mirror of it.
        "image": f"${{{IMAGE_ENV}:-{image_ref()}}}",
        "depends_on": {backend_service: {"condition": "service_healthy"}},
        "entrypoint": ["haproxy", "-db", "-f", data["config_path"]],
        "command": [],
        # Fixed text, compose interpolation meant: the key from .env, never from this file.
        "environment": {KEY_ENV: f"${{{KEY_ENV}:-}}"},
        "ports": [published_port],
        "volumes": [f"./{config_file(suffix)}:{data['config_path']}:ro"],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
        "pids_limit": int(data["pids_limit"]),
        "restart": restart,
    }


def door_comments(path: tuple[str, ...], backend_service: str, routes: list[Route], suffix: str = "") -> dict[
        tuple[str, ...], list[str]]:
    paths = ", ".join(r.path for r in routes)
    return {path: [
        f"The front door (HAProxy, kit/data/door.yaml): the only published port of this API; {backend_service} "
        "answers on this network only.",
        f"It passes {paths}; each but /health needs the key (VLLM_API_KEY in .env); CORS closed ({config_file(suffix)}).",
    ]}
