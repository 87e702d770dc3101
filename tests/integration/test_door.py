"""The front door of the single-server stack, for real: the shared CPU stack's published 127.0.0.1 port is HAProxy
(the stand-in built from Debian's package, tests/integration/conftest.py), in front of a real vLLM server.

Proved through that port only: /health without a key, /v1 with the key, 401 without it; /invocations, /tokenize,
the server's admin routes and the router's API refused (403) with the key and without; CORS closed. And from
`docker inspect`/`docker exec`: the server publishes nothing, and the key is in no rendered file the door reads.
The router's door is proved in tests/integration/test_router.py with the same checks.
"""

from __future__ import annotations

import pytest

from kit.deploy.door import SERVICE, config_file
from tests.integration.conftest import assert_door_closed, session_progress

pytestmark = pytest.mark.integration


def test_the_door_passes_the_inference_api_only(cpu_stack):
    key = cpu_stack.env["VLLM_API_KEY"]
    try:
        seen = assert_door_closed(cpu_stack.port, key, cpu_stack.prepared.deployment.serve.served_model_name)
    except Exception:
        door = cpu_stack.stack.container(SERVICE)  # what the door said, for the failure report
        door.reload()
        session_progress(f"door {door.status}: {door.logs(tail=30).decode(errors='replace')}")
        raise
    session_progress("door, single server: " + "; ".join(f"{k} -> {v}" for k, v in seen.items()))


def test_only_the_door_is_published_and_it_holds_no_key(cpu_stack):
    stack, key = cpu_stack.stack, cpu_stack.env["VLLM_API_KEY"]
    server = stack.container()
    server.reload()
    published = server.attrs["NetworkSettings"]["Ports"] or {}
    assert all(bindings is None for bindings in published.values()), published
    door = stack.container(SERVICE)
    door.reload()
    bindings = door.attrs["NetworkSettings"]["Ports"]["8000/tcp"]
    assert [(b["HostIp"], int(b["HostPort"])) for b in bindings] == [("127.0.0.1", cpu_stack.port)]
    host = door.attrs["HostConfig"]
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and door.attrs["Config"]["User"] not in ("", "0")
    code, text = door.exec_run(["cat", "/usr/local/etc/haproxy/haproxy.cfg"])
    assert code == 0 and text.decode() == (cpu_stack.out_dir / config_file()).read_text()
    assert key not in text.decode() and "${VLLM_API_KEY}" in text.decode()
