"""The front door's config and service (kit/deploy/door.py), offline; tests/integration/test_door.py runs it."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kit.core.safevalue import UnsafeValue
from kit.deploy.door import Route, door_config, door_routes
from kit.deploy.pipeline import prepare

pytestmark = pytest.mark.unit
HOSTS = ["127.0.0.1", "127.0.0.1:8000"]


def paths(preset: str) -> set[str]:
    return {r.path for r in door_routes(prepare(preset).preset)}


def test_routes_follow_what_the_server_runs():
    assert paths("cpu") == {"/health", "/v1/models", "/metrics", "/v1/completions", "/v1/chat/completions"}
    embed = paths("cpu-embed")
    assert "/v1/embeddings" in embed and "/rerank" in embed and "/v1/completions" not in embed
    for preset in ("cpu", "cpu-embed"):  # never a route vLLM serves without its key, nor an admin one
        assert not paths(preset) & {"/invocations", "/tokenize", "/detokenize", "/pooling", "/v1/load_lora_adapter"}


def test_the_key_stays_in_the_environment():
    files = prepare("cpu").files
    cfg = files["door/haproxy.cfg"]
    assert '"Bearer ${VLLM_API_KEY}"' in cfg and "server api vllm:8000 " in cfg
    door = yaml.safe_load(files["compose.yaml"])["services"]["door"]
    assert door["environment"] == {"VLLM_API_KEY": "${VLLM_API_KEY:-}"}
    assert "env_file" not in door  # HF_TOKEN and the rest of .env stay out of the door


@given(st.text(min_size=1, max_size=40))
def test_no_backend_name_changes_the_config_structure(name):
    routes = [Route("/health", ("GET",), open=True), Route("/v1/models", ("GET",))]
    try:
        text = door_config(name, 8000, routes, "a title", hosts=HOSTS)
    except UnsafeValue:
        return
    assert len(text.splitlines()) == len(door_config("vllm", 8000, routes, "a title", hosts=HOSTS).splitlines())


def served(preset: str, *overrides: str) -> list[str]:
    cfg = prepare(preset, list(overrides)).files["door/haproxy.cfg"]
    line = next(x for x in cfg.splitlines() if "acl served_host" in x)
    return [v.strip('"') for v in line.split(" -m str ", 1)[1].split()]


def test_the_door_answers_only_to_the_names_it_is_served_as():
    """Issue 35: the door accepted any Host, so a page whose name was rebound to 127.0.0.1 drove the model."""
    assert served("cpu") == ["127.0.0.1", "127.0.0.1:8000", "localhost", "localhost:8000"]
    assert served("cpu", "runtime.port=9100", "runtime.bind_address=192.0.2.7",
                  "runtime.server_names=[API.Example.com, 2001:db8::1]") == [
        "127.0.0.1", "127.0.0.1:9100", "localhost", "localhost:9100", "192.0.2.7", "192.0.2.7:9100",
        "api.example.com", "api.example.com:9100", "[2001:db8::1]", "[2001:db8::1]:9100"]
    # Every address: no name means this machine but the ones given.
    assert served("cpu", "runtime.bind_address=0.0.0.0") == ["127.0.0.1", "127.0.0.1:8000", "localhost",
                                                              "localhost:8000"]
    assert served("cpu", "runtime.bind_address=::") == ["127.0.0.1", "127.0.0.1:8000", "localhost", "localhost:8000",
                                                         "[::1]", "[::1]:8000"]
    cfg = prepare("cpu").files["door/haproxy.cfg"]
    assert "http-request deny deny_status 421 unless one_host served_host || one_host loopback_host" in cfg
    assert "acl one_host req.fhdr_cnt(host) eq 1" in cfg  # fhdr: a comma does not split the header


@pytest.mark.parametrize(("host", "passes"), [
    ("localhost:9000", True), ("127.0.0.1:18000", True), ("[::1]:8000", True), ("LocalHost", True),
    ("127.0.0.1:123456", False), ("127.0.0.1.evil.example", False), ("localhost:8000.evil.example", False),
    ("127.1:8000", False), ("0x7f000001", False), ("evil.example:8000", False), ("localhost:+80", False)])
def test_a_loopback_name_passes_at_any_port_and_nothing_else_does(host, passes):
    """Issue 36: `kubectl port-forward svc/x 9000:8000` (or an ssh tunnel) sends the local end's port, which the
    door refused. A loopback name is no page's name, so it passes at any port; the integration test sends these
    through the real HAProxy (tests/integration/hostile_door.py)."""
    from kit.deploy.door import LOOPBACK_HOST, loopback_host

    assert loopback_host(host) is passes
    cfg = prepare("cpu").files["door/haproxy.cfg"]
    assert f"acl loopback_host req.fhdr(host) -i -m reg '{LOOPBACK_HOST}'" in cfg


@pytest.mark.parametrize("name", ["*.example.com", "example.com:80", "a..b", "-a.example", "a_b.example",
                                  "example.com.", "ex ample", "\u0435xample.com", "1.2.3", "a" * 64 + ".com",
                                  '"evil"', "a${X}.com", "http://a.b", ""])
def test_server_names_are_plain_names_or_addresses(name):
    from kit.core.errors import KitError

    with pytest.raises(KitError) as info:
        prepare("cpu", [f"runtime.server_names=[{yaml.safe_dump(name, default_style=chr(39)).strip()}]"])
    assert "server_names" in " ".join([str(info.value), *map(str, info.value.problems), *info.value.detail])


def test_request_bodies_and_time_are_bounded():
    cfg = prepare("cpu").files["door/haproxy.cfg"]
    assert "    option http-buffer-request\n" in cfg and "timeout http-request 30s" in cfg
    assert "http-request deny deny_status 413 if { req.hdr_val(content-length) gt 16777216 }" in cfg
    assert "http-request deny deny_status 400 if { req.fhdr_cnt(transfer-encoding) gt 0 }" in cfg
    assert "http-request deny deny_status 400 if METH_POST !{ req.hdr(content-length) -m found }" in cfg
    # The Host and body rules come before any route or key rule, and before the backend.
    lines = cfg.splitlines()
    first_route = next(i for i, x in enumerate(lines) if "acl route_0 " in x)
    assert max(i for i, x in enumerate(lines) if "deny_status 413" in x or "deny_status 421" in x) < first_route


@pytest.mark.parametrize(("bind", "host"), [("0.0.0.0", "127.0.0.1"), ("::", "[::1]"), ("127.0.0.1", "127.0.0.1"),
                                            ("::1", "[::1]"), ("192.168.1.5", "192.168.1.5"), ("fd00::5", "[fd00::5]")])
def test_client_host_is_what_a_client_here_uses_and_the_door_answers_to(bind, host):
    """`kit up` (its printed URL and --json), the door wait and host-network health checks share one mapping: an
    every-address bind is reached on loopback, IPv6 in brackets; and the door is served as that name."""
    from kit.deploy.door import client_host

    assert client_host(bind) == host
    assert host in served("cpu", f"runtime.bind_address={bind}")
