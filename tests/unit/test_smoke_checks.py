"""kit.run.smoke.run_checks without Docker: the rows it reports, in order, for a server that passes, one that fails
each way, a pooling server and a side-by-side stack's second server. The container, its testinfra host and the HTTP
API are stand-ins answering as a real server does (tests/integration/ runs the same checks on real stacks)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kit.deploy.pipeline import prepare
from kit.run import smoke
from kit.run.smoke import CHAT, COMPLETION, EMBEDDINGS, KV_PLAN, MANIFEST, NO_JIT, RERANK, Check, run_checks

pytestmark = pytest.mark.unit

LISTENING_8000 = ("  sl  local_address rem_address   st\n"
                  "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000\n"
                  "   1: 0100007F:0035 00000000:0000 01 00000000:00000000\n")


class Host:
    """A testinfra host whose server is PID 42 (uid ``uid``), listening on ``tcp``, with ``shm_kib`` of /dev/shm."""

    def __init__(self, uid: int = 1000, tcp: str = LISTENING_8000, shm_kib: int = 4 * 1024 * 1024,
                 server: bool = True) -> None:
        self.uid, self.tcp, self.shm, self.server = uid, tcp, shm_kib, server

    def run(self, command: str) -> SimpleNamespace:
        if "cmdline" in command and "serve_watchdog" not in command and "[s]erve" not in command:
            return SimpleNamespace(stdout="/proc/1/cmdline\n/proc/42/cmdline\n" if self.server else "")
        if "cmdline" in command:
            return SimpleNamespace(stdout="")
        assert command == "grep -H '^Uid:' /proc/[0-9]*/status", command
        return SimpleNamespace(stdout=f"/proc/1/status:Uid:\t{self.uid}\t{self.uid}\n"
                                      f"/proc/42/status:Uid:\t{self.uid}\t{self.uid}\n")

    def file(self, path: str) -> SimpleNamespace:
        if path.startswith("/proc/net/"):
            return SimpleNamespace(exists=path == "/proc/net/tcp", content_string=self.tcp)
        return SimpleNamespace(exists=True, content_string=f"Name:\tpython\nUid:\t{self.uid}\t{self.uid}\n")

    def check_output(self, command: str) -> str:
        assert command == "df -k /dev/shm"
        return f"Filesystem 1K-blocks Used Available Use% Mounted on\nshm {self.shm} 0 {self.shm} 0% /dev/shm\n"


class Container:
    def __init__(self, log: str, verify: tuple[int, bytes]) -> None:
        self.id, self.image, self.log, self.verify, self.reloaded = "c0ffee", SimpleNamespace(id="sha256:1"), log, \
            verify, False

    def reload(self) -> None:
        self.reloaded = True

    def logs(self) -> bytes:
        return self.log.encode()

    def exec_run(self, argv: list[str], demux: bool = False) -> tuple[int, bytes]:
        assert argv[2] == "--verify"
        return self.verify


class Stack:
    def __init__(self, directory, container: Container) -> None:
        self.directory, self.held, self.asked = directory, container, []

    def container(self, service: str | None = None) -> Container:
        self.asked.append(service)
        return self.held


def api(model: str, *, api_key: str | None, broken: frozenset[str] = frozenset(), dimension: int = 2):
    """vLLM's routes as a server of ``model`` answers them; a path in ``broken`` answers 500, "/health" in it raises."""
    def http(method, url, *, body=None, key=None, timeout=120):
        path = "/" + url.removeprefix("http://127.0.0.1:").split("/", 1)[1]
        if path in broken:
            if path == "/health":
                raise ConnectionResetError("connection reset by peer")
            return 500, "{}"
        if path in ("/invocations", "/tokenize", "/v1/load_lora_adapter"):
            return 403, "forbidden"
        if path == "/v1/models" and api_key and key != api_key:
            return 401, "{}"
        answers = {
            "/health": "",
            "/v1/models": f'{{"data": [{{"id": "{model}"}}]}}',
            "/v1/completions": '{"usage": {"completion_tokens": 2}, "choices": [{"logprobs": '
                               '{"token_logprobs": [-0.1, -0.2]}}]}',
            "/v1/chat/completions": '{"usage": {"completion_tokens": 3}}',
            "/v1/embeddings": json.dumps({"data": [{"embedding": [0.5] * dimension}] * 3}),
            "/rerank": '{"results": [{"index": 1, "relevance_score": 0.2}, {"index": 0, "relevance_score": 0.9}, '
                       '{"index": 2, "relevance_score": 0.1}]}',
            "/metrics": "vllm:kv_cache_usage_perc 0.0",
        }
        return 200, answers[path]
    return http


@pytest.fixture
def stand_ins(monkeypatch):
    def use(host: Host, key: str | None, model: str, broken: frozenset[str] = frozenset(), dimension: int = 2) -> None:
        monkeypatch.setattr(smoke, "infra_host", lambda container_id: host)
        monkeypatch.setattr(smoke, "http", api(model, api_key=key, broken=broken, dimension=dimension))
        monkeypatch.setattr(smoke, "secrets_out_of_image", lambda image_id, files, env: Check(
            "secrets stay out of the image", image_id == "sha256:1", f"{len(files)} files, {sorted(env)}"))
    return use


def rows(checks: list[Check]) -> list[tuple[str, bool, bool]]:
    return [(c.name, c.ok, c.skipped) for c in checks]


GENERATING_ROWS = [
    ("server runs as a non-root user", True, False),
    ("server listens on port 8000", True, False),
    ("/dev/shm has the configured size", True, False),
    ("secrets stay out of the image", True, False),
    ("GET /health answers 200", True, False),
    ("GET /v1/models lists the served model", True, False),
    ("requests without the API key are refused", True, False),
    (COMPLETION, True, False),
    (CHAT, True, False),
    (MANIFEST, True, True),
    ("/metrics exposes vllm:kv_cache_usage_perc", True, False),
    ("the front door refuses routes beyond the inference API", True, False),
    (KV_PLAN, True, False),
    (NO_JIT, True, True),  # the cpu image runs no FlashInfer
]


def test_a_healthy_generating_server_passes_every_row_in_order(tmp_path, stand_ins):
    prepared = prepare("cpu")
    tokens = prepared.report.plan.kv_cache_tokens
    container = Container(f"INFO 12-01 03:20:11 [kv_cache_utils.py:1] CPU KV cache size: {tokens:,} tokens\n",
                          (0, b"model: manifest ok\ndone\n"))
    stand_ins(Host(), "sekrit", prepared.deployment.serve.served_model_name)
    stack = Stack(tmp_path, container)
    checks = run_checks(stack, prepared, {"VLLM_API_KEY": "sekrit"}, 18000)
    assert rows(checks) == GENERATING_ROWS
    assert stack.asked == [None] and container.reloaded
    details = {c.name: c.detail for c in checks}
    assert details["server runs as a non-root user"] == "server uid [1000]; every process: uid [1000]"
    assert details["server listens on port 8000"] == "8000 is listening (1 listening ports)"
    assert details["/dev/shm has the configured size"] == "/dev/shm is 4096 MiB, configured 4096m"
    assert details["requests without the API key are refused"] == "HTTP 401 without the key"
    assert details[COMPLETION] == "HTTP 200, 2 tokens, logprobs for 2"
    assert details[MANIFEST] == "local model: nothing fetched from a hub, no manifest"
    assert details[KV_PLAN] == f"server {tokens:,} tokens, planned {tokens:,}"
    assert details["the front door refuses routes beyond the inference API"] == \
        "/invocations 403, /tokenize 403, /v1/load_lora_adapter 403"


def test_each_failing_row_says_why_and_the_rest_still_run(tmp_path, stand_ins):
    prepared = prepare("cpu")
    container = Container("no sizing line\n", (1, b"checking\nmodel.safetensors: sha256 differs\n"))
    stand_ins(Host(uid=0, tcp="  sl\n", shm_kib=65536, server=False), None,
              prepared.deployment.serve.served_model_name, broken=frozenset({"/health", "/v1/chat/completions"}))
    checks = run_checks(Stack(tmp_path, container), prepared, {}, 18000)
    details = {c.name: (c.ok, c.detail) for c in checks}
    assert [name for name, _, _ in rows(checks)] == [name for name, _, _ in GENERATING_ROWS]
    assert details["server runs as a non-root user"] == (False, "no API server process found")
    assert details["server listens on port 8000"] == (False, "8000 is not listening (0 listening ports)")
    assert details["/dev/shm has the configured size"] == (False, "/dev/shm is 64 MiB, configured 4096m")
    assert details["GET /health answers 200"] == (False, "ConnectionResetError: connection reset by peer")
    # the cpu preset requires a key (runtime.require_api_key), and none reached the checks
    assert details["requests without the API key are refused"] == (
        False, "the stack requires a key (runtime.require_api_key) and the folder's .env has no VLLM_API_KEY")
    assert details[CHAT] == (False, "HTTP 500, 0 tokens")
    assert details[KV_PLAN] == (False, "no 'KV cache size' line in the server log")


def test_a_pooling_server_skips_the_completion_rows_and_checks_its_task(tmp_path, stand_ins):
    prepared = prepare("cpu-embed")
    container = Container("INFO 12-01 03:20:11 [kv_cache_utils.py:1] CPU KV cache size: 5 tokens\n", (0, b"ok\n"))
    stand_ins(Host(), None, prepared.deployment.serve.served_model_name, dimension=128)  # the model's hidden size
    checks = run_checks(Stack(tmp_path, container), prepared, {}, 18000)
    by_name = {c.name: c for c in checks}
    assert by_name[COMPLETION].skipped and by_name[CHAT].skipped and by_name[COMPLETION].ok
    assert [c.name for c in checks].index(EMBEDDINGS) == [c.name for c in checks].index(CHAT) + 1
    assert (by_name[EMBEDDINGS].ok, by_name[EMBEDDINGS].detail) == (
        True, "HTTP 200, 3 vectors for 3 inputs, dimension [128] (model hidden size 128)")
    assert rows([by_name[RERANK]]) == [(RERANK, True, False)]  # a bi-encoder scores documents
    assert by_name[RERANK].detail == "HTTP 200, 3 of 3 documents scored (bi-encoder)"
    plan = prepared.report.plan
    assert by_name[KV_PLAN].detail == f"server 5 tokens, planned {plan.kv_cache_tokens:,}"
    assert not by_name[KV_PLAN].ok


def test_a_side_by_side_servers_rows_check_its_own_container_and_door(tmp_path, stand_ins):
    prepared = prepare("cpu", with_presets=["cpu-embed"])
    container = Container("", (0, b"ok\n"))
    stand_ins(Host(), None, prepared.deployment.serve.served_model_name)
    stack = Stack(tmp_path, container)
    checks = run_checks(stack, prepared, {}, 18001, service="vllm-cpu-embed")
    assert stack.asked == ["vllm-cpu-embed"]
    assert "the front door refuses routes beyond the inference API" in [c.name for c in checks]
    no_door = run_checks(stack, prepared, {}, 18001, service="vllm-other")
    assert "the front door refuses routes beyond the inference API" not in [c.name for c in no_door]


JIT_LINE = "INFO 12-04 10:01:02 [core.py:1] Building JIT module sampling\n"


@pytest.mark.parametrize("log, ok", [("", True), (JIT_LINE, False)])
def test_a_slim_image_start_that_compiles_a_flashinfer_module_fails_the_no_jit_row(tmp_path, stand_ins, log, ok):
    """Issue 37: where the image compiled FlashInfer's modules ahead (rtx4090-awq: the sampler), a first start that
    still builds one just in time fails the row, naming the module; a log without the line passes it."""
    prepared = prepare("rtx4090-awq")
    assert prepared.deployment.image.flashinfer_aot == ["sampling"]
    stand_ins(Host(), None, prepared.deployment.serve.served_model_name)
    checks = run_checks(Stack(tmp_path, Container(log, (0, b"ok\n"))), prepared, {}, 18000)
    row = {c.name: c for c in checks}[NO_JIT]
    assert (row.ok, row.skipped) == (ok, False)
    assert ("compiled sampling" in row.detail) == (not ok) and "ahead of time" in row.detail
