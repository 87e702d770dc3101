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
        text = door_config(name, 8000, routes, "a title")
    except UnsafeValue:
        return
    assert len(text.splitlines()) == len(door_config("vllm", 8000, routes, "a title").splitlines())
