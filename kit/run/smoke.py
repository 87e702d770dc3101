"""Smoke test a running stack: testinfra checks inside the container, HTTP checks on 127.0.0.1.

Public entry point: ``run_checks(stack, prepared, env_values) -> list[Check]``. Starting and stopping the
stack is the caller's (kit/run/workflow.py), so tests can run the same checks on a stack they hold.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kit.config.hubfetch import artefacts_for
from kit.config.pooling import PoolingProfile, pooling_profile
from kit.core.docker_engine import docker_client
from kit.core.errors import KitError
from kit.core.units import ram_in_bytes
from kit.deploy.deployment import WATCHDOG_FILE, Deployment
from kit.deploy.pipeline import Prepared
from kit.memory import vllmlog
from kit.memory.preset_plan import model_spec_for
from kit.run.stack import Stack

if TYPE_CHECKING:
    from docker.models.containers import Container
    from testinfra.host import Host

    from kit.config.modelinfo import ModelSpec

SERVER_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # not applicable to this server (the detail says why); counts as passed


# The API checks, selected by what the server runs (select_api_checks).
COMPLETION = "POST /v1/completions returns tokens"
CHAT = "POST /v1/chat/completions returns tokens"
EMBEDDINGS = "POST /v1/embeddings returns a vector per input"
RERANK = "POST /rerank scores every document"
KV_PLAN = "KV cache size matches the plan"
MANIFEST = "fetched model files match their manifest"
NO_JIT = "the start compiled no kernel just in time"


def select_api_checks(profile: PoolingProfile) -> list[tuple[str, str | None]]:
    """(check name, reason to skip it or None) for the API rows of a server of this kind (kit/config/pooling.py).

    A generating server gets the completion checks only; a pooling server (vLLM's pooling runner) serves no
    completions, so those rows say so, and it gets the routes of its task (kit/data/pooling.yaml).
    """
    if not profile.pooling:
        return [(COMPLETION, None), (CHAT, None)]
    why = f"pooling model (task {profile.task}): vLLM's pooling runner serves no completions"
    return [
        (COMPLETION, why),
        (CHAT, why),
        (EMBEDDINGS, None if profile.task == "embed" else f"task {profile.task}: no /v1/embeddings"),
        (RERANK, None if profile.score else
         f"task {profile.task}: vLLM enables /score and /rerank only for embedding models and one-label classifiers"),
    ]


def kv_check_skip(profile: PoolingProfile) -> str | None:
    """Why the KV-cache-vs-plan row does not apply, or None: encoder-only models keep no KV cache."""
    return "encoder-only model: vLLM keeps no KV cache" if profile.encoder_only else None


def http(method: str, url: str, *, body: dict | None = None, key: str | None = None,
         timeout: float = 120) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http://127.0.0.1:PORT, built here
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", errors="replace")


def infra_host(container_id: str):  # noqa: ANN201 - testinfra Host
    import testinfra

    return testinfra.get_host(f"docker://{container_id}")


def server_marker(entrypoint: list[str]) -> str:
    """What the server's command line contains: the API server module, or the `vllm` script's path."""
    return SERVER_MODULE if SERVER_MODULE in entrypoint else "bin/vllm"


def server_pids(host, marker: str = SERVER_MODULE) -> list[int]:  # noqa: ANN001
    """PIDs whose command line runs the API server, without the container's init (PID 1)."""
    # "[v]llm" keeps grep's own command line from matching.
    out = host.run(f"grep -l -a '[{marker[0]}]{marker[1:]}' /proc/[0-9]*/cmdline").stdout
    pids = sorted(int(m.group(1)) for m in re.finditer(r"/proc/(\d+)/cmdline", out))
    # The serve watchdog carries the server's argv after `--`: it is the server's parent, not the server.
    launchers = host.run(f"grep -l -a '[{WATCHDOG_FILE[0]}]{WATCHDOG_FILE[1:]}' /proc/[0-9]*/cmdline").stdout
    skip = {1} | {int(m.group(1)) for m in re.finditer(r"/proc/(\d+)/cmdline", launchers)}
    return [p for p in pids if p not in skip and host.file(f"/proc/{p}/status").exists]


def uid_of(host, pid: int) -> int:  # noqa: ANN001
    status = host.file(f"/proc/{pid}/status").content_string
    found = re.search(r"^Uid:\s+(\d+)", status, re.M)
    assert found is not None, f"/proc/{pid}/status has no Uid line"
    return int(found.group(1))


def listening_ports(host) -> set[int]:  # noqa: ANN001
    """TCP ports in LISTEN state, from /proc/net (no ss or netstat needed in the image)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        f = host.file(table)
        if not f.exists:
            continue
        for line in f.content_string.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def shm_kib(host) -> int:  # noqa: ANN001
    out = host.check_output("df -k /dev/shm")
    return int(out.splitlines()[-1].split()[1])


def expected_shm_kib(size: str) -> int:
    # Docker mounts the tmpfs with size=<bytes>; the kernel rounds that up to whole 4 KiB pages.
    return -(-ram_in_bytes(size) // 4096) * 4


def secrets_out_of_image(image_id: str, files: dict[str, str], env_values: dict[str, str]) -> Check:
    api = docker_client().api
    history = " ".join(str(layer.get("CreatedBy", "")) for layer in api.history(image_id))
    config = api.inspect_image(image_id).get("Config") or {}
    baked = " ".join(config.get("Env") or []) + json.dumps(config.get("Labels") or {})
    sentinels = [v for k, v in env_values.items() if k in ("HF_TOKEN", "VLLM_API_KEY") and v]
    leaks = [name for name, text in (("image history", history), ("image config", baked),
                                     *[(rel, files[rel]) for rel in sorted(files)])
             if any(s in text for s in sentinels)]
    secret_names = [e.split("=", 1)[0] for e in config.get("Env") or [] if e.split("=", 1)[0] in ("HF_TOKEN", "VLLM_API_KEY")]
    if leaks or secret_names:
        return Check("secrets stay out of the image", False, f"found in: {', '.join(leaks + secret_names)}")
    return Check("secrets stay out of the image", True, f"{len(sentinels)} secret(s) only in .env, not in history/config/files")


def manifest_skip(prepared: Prepared) -> str | None:
    """Why the manifest row does not apply (every artefact a local path, which no fetch wrote), else None."""
    artefacts = artefacts_for(prepared.preset, prepared.deployment.serve.model_arg)
    if all(a.is_local for a in artefacts):
        return "local model: nothing fetched from a hub, no manifest"
    return None


def manifest_check(container, fetch_command: list[str]) -> tuple[bool, str]:  # noqa: ANN001 - docker Container
    """Every fetched file in the server's HF cache still has the sha256 the fetch checked and recorded
    (kit/launch/fetch_files.py --verify, run inside the server container: its HF_HOME, its volume)."""
    python, script, spec = fetch_command
    code, output = container.exec_run([python, script, "--verify", spec], demux=False)
    lines = (output or b"").decode("utf-8", errors="replace").strip().splitlines()
    last = lines[-1] if lines else "(no output)"
    if code == 0:
        verified = [line for line in lines[:-1] if line.endswith("manifest ok")]
        return True, "; ".join(verified) or last
    return False, last[:600]


def model_spec_or_none(prepared: Prepared, base_dir):  # noqa: ANN001, ANN201 - ModelSpec | None
    try:
        return model_spec_for(prepared.preset, base_dir)
    except KitError:
        return None


@dataclass(frozen=True)
class _Server:
    """What every check of one server reads: its container and a testinfra host in it, its API's address and key,
    and what the kit rendered and planned for it."""

    prepared: Prepared
    container: Container
    host: Host  # testinfra's, on the container
    base: str  # http://127.0.0.1:PORT
    key: str | None
    spec: ModelSpec | None
    profile: PoolingProfile

    @property
    def deployment(self) -> Deployment:
        return self.prepared.deployment


def _server(stack: Stack, prepared: Prepared, env_values: dict[str, str], port: int, service: str | None) -> _Server:
    spec = model_spec_or_none(prepared, stack.directory)
    profile = pooling_profile(prepared.preset.engine.flags(), spec)
    container = stack.container(service) if service else stack.container()
    container.reload()
    host = infra_host(container.id)
    return _Server(prepared, container, host, f"http://127.0.0.1:{port}", env_values.get("VLLM_API_KEY") or None,
                   spec, profile)


def _non_root(server: _Server) -> tuple[bool, str]:
    pids = server_pids(server.host, server_marker(server.deployment.serve.entrypoint))
    if not pids:
        return False, "no API server process found"
    server_uids = sorted({uid_of(server.host, pid) for pid in pids})
    every = server.host.run("grep -H '^Uid:' /proc/[0-9]*/status").stdout
    all_uids = sorted({int(m.group(1)) for m in re.finditer(r"Uid:\s+(\d+)", every)})
    return 0 not in server_uids + all_uids, f"server uid {server_uids}; every process: uid {all_uids}"


def _listening(server: _Server) -> tuple[bool, str]:
    ports = listening_ports(server.host)
    return 8000 in ports, f"8000 {'is' if 8000 in ports else 'is not'} listening ({len(ports)} listening ports)"


def _shm(server: _Server) -> tuple[bool, str]:
    want = server.deployment.runtime.shm.shm_size
    got = shm_kib(server.host)
    if want is None:
        return True, f"/dev/shm is {got // 1024} MiB (ipc {server.deployment.runtime.shm.ipc})"
    return got == expected_shm_kib(want), f"/dev/shm is {got // 1024} MiB, configured {want}"


def _health(server: _Server) -> tuple[bool, str]:
    status, _ = http("GET", f"{server.base}/health", timeout=10)
    return status == 200, f"HTTP {status}"


def _models(server: _Server) -> tuple[bool, str]:
    status, text = http("GET", f"{server.base}/v1/models", key=server.key)
    ids = [m.get("id") for m in json.loads(text).get("data", [])] if status == 200 else []
    return server.deployment.serve.served_model_name in ids, f"HTTP {status}, models {ids}"


def _auth(server: _Server) -> tuple[bool, str]:
    if not server.key:
        if server.prepared.preset.runtime.require_api_key:
            return False, "the stack requires a key (runtime.require_api_key) and the folder's .env has no VLLM_API_KEY"
        return True, "no API key configured (runtime.require_api_key=false)"
    status, _ = http("GET", f"{server.base}/v1/models")
    return status == 401, f"HTTP {status} without the key"


def _completion(server: _Server) -> tuple[bool, str]:
    # with logprobs: the sampler's logprobs path is compiled code of its own (vllm/v1/sample/ops/logprobs.py);
    # a server that answers plain completions can still fail every request that asks for them
    status, text = http("POST", f"{server.base}/v1/completions", key=server.key, body={
        "model": server.deployment.serve.served_model_name, "prompt": "The server", "max_tokens": 8, "temperature": 0,
        "logprobs": 1})
    answer = json.loads(text) if status == 200 else {}
    tokens = answer.get("usage", {}).get("completion_tokens", 0)
    choice = (answer.get("choices") or [{}])[0]
    logprobs = len((choice.get("logprobs") or {}).get("token_logprobs") or [])
    return tokens > 0 and logprobs == tokens, f"HTTP {status}, {tokens} tokens, logprobs for {logprobs}"


def _chat(server: _Server) -> tuple[bool, str]:
    status, text = http("POST", f"{server.base}/v1/chat/completions", key=server.key, body={
        "model": server.deployment.serve.served_model_name, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]})
    tokens = json.loads(text).get("usage", {}).get("completion_tokens", 0) if status == 200 else 0
    return tokens > 0, f"HTTP {status}, {tokens} tokens"


def _embeddings(server: _Server) -> tuple[bool, str]:
    inputs = ["The server starts.", "A token streams.", "The cache stores blocks."]
    status, text = http("POST", f"{server.base}/v1/embeddings", key=server.key, body={
        "model": server.deployment.serve.served_model_name, "input": inputs})
    vectors = [item.get("embedding") or [] for item in json.loads(text).get("data", [])] if status == 200 else []
    dims = sorted({len(v) for v in vectors})
    want = server.spec.hidden_size if server.spec is not None else None
    ok = len(vectors) == len(inputs) and len(dims) == 1 and (want is None or dims == [want])
    return ok, f"HTTP {status}, {len(vectors)} vectors for {len(inputs)} inputs, dimension {dims} " \
               f"(model hidden size {want if want is not None else 'unknown'})"


def _rerank(server: _Server) -> tuple[bool, str]:
    documents = ["The cache stores blocks.", "A worker loads the weights.", "Paris is the capital."]
    status, text = http("POST", f"{server.base}/rerank", key=server.key, body={
        "model": server.deployment.serve.served_model_name, "query": "What does the cache store?", "documents": documents})
    results = json.loads(text).get("results", []) if status == 200 else []
    indices = sorted(r.get("index") for r in results)
    scored = all(isinstance(r.get("relevance_score"), (int, float)) for r in results)
    ok = indices == list(range(len(documents))) and scored
    return ok, f"HTTP {status}, {len(results)} of {len(documents)} documents scored ({server.profile.score})"


def _metrics(server: _Server) -> tuple[bool, str]:
    status, text = http("GET", f"{server.base}/metrics", key=server.key)
    return status == 200 and "vllm:kv_cache_usage_perc" in text, f"HTTP {status}"


def _door_closed(server: _Server) -> tuple[bool, str]:
    # Routes vLLM serves without its key (vllm/entrypoints/serve/middleware/authenticate.py guards /v1 only):
    # the front door must refuse them, with the key and without.
    got = {path: http("POST", f"{server.base}{path}", key=server.key, body={"model": server.deployment.serve.served_model_name, "prompt": "x"})[0]
           for path in ("/invocations", "/tokenize", "/v1/load_lora_adapter")}
    return all(status in (401, 403) for status in got.values()), ", ".join(f"{p} {c}" for p, c in got.items())


def _plan_matches(server: _Server) -> tuple[bool, str]:
    plan = server.prepared.report.plan
    logs = server.container.logs().decode("utf-8", errors="replace")
    found = vllmlog.kv_cache_tokens(logs)  # the one reader of vLLM's start-up log
    if found is None:
        return False, "no 'KV cache size' line in the server log"
    device, actual = found
    if plan is None:
        return True, f"server: {actual:,} tokens (no plan for this model)"
    predicted = plan.kv_cache_tokens
    if device == "CPU":
        return actual == predicted, f"server {actual:,} tokens, planned {predicted:,}"
    error = abs(actual - predicted) / max(actual, 1)
    return error <= 0.05, f"server {actual:,} tokens, planned {predicted:,} ({error:.1%})"


def jit_skip(deployment: Deployment) -> str | None:
    """Why the no-JIT row does not apply, or None: it holds where the image compiled FlashInfer's modules ahead."""
    if not deployment.image.flashinfer_aot:
        return "this image compiles no FlashInfer module ahead of time (none runs here, or upstream's image ships them)"
    return None


def _no_jit(server: _Server) -> tuple[bool, str]:
    # After the completion rows: FlashInfer's sampler is built at the first request when it was not compiled ahead.
    modules = vllmlog.parse(server.container.logs().decode("utf-8", errors="replace")).jit_modules
    if modules:
        return False, (f"compiled {', '.join(modules)} (\"Building JIT module\" in the server log); the image has "
                       f"{', '.join(server.deployment.image.flashinfer_aot)} ahead of time")
    return True, f"no \"Building JIT module\" line; ahead of time: {', '.join(server.deployment.image.flashinfer_aot)}"


def _manifest(server: _Server) -> tuple[bool, str]:
    return manifest_check(server.container, server.deployment.serve.fetch_command)


_API_CHECKS = {COMPLETION: _completion, CHAT: _chat, EMBEDDINGS: _embeddings, RERANK: _rerank}


def _run_one(name: str, check: Callable[[_Server], tuple[bool, str]], server: _Server) -> Check:
    try:
        ok, detail = check(server)
    except Exception as exc:  # noqa: BLE001 - a check that errors is a failed check, reported
        ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
    return Check(name, bool(ok), detail)


def _run_or_skip(name: str, check: Callable[[_Server], tuple[bool, str]], server: _Server,
                 skip: str | None) -> Check:
    return Check(name, True, skip, skipped=True) if skip else _run_one(name, check, server)


def _door_file(service: str | None) -> str:
    """The front door's config of the server checked: the stack's server's, or a side-by-side one'server."""
    return "door/haproxy.cfg" if service is None else f"door/haproxy{service.removeprefix('vllm')}.cfg"


def run_checks(stack: Stack, prepared: Prepared, env_values: dict[str, str], port: int,
               service: str | None = None) -> list[Check]:
    """``service``: the compose service to check (default: the stack's server; a side-by-side stack's other one)."""
    server = _server(stack, prepared, env_values, port, service)
    checks = [_run_one("server runs as a non-root user", _non_root, server),
              _run_one("server listens on port 8000", _listening, server),
              _run_one("/dev/shm has the configured size", _shm, server),
              secrets_out_of_image(server.container.image.id, prepared.files, env_values),
              _run_one("GET /health answers 200", _health, server),
              _run_one("GET /v1/models lists the served model", _models, server),
              _run_one("requests without the API key are refused", _auth, server)]
    checks += [_run_or_skip(name, _API_CHECKS[name], server, skip) for name, skip in select_api_checks(server.profile)]
    checks.append(_run_or_skip(MANIFEST, _manifest, server, manifest_skip(prepared)))
    checks.append(_run_one("/metrics exposes vllm:kv_cache_usage_perc", _metrics, server))
    if prepared.files.get(_door_file(service)):
        checks.append(_run_one("the front door refuses routes beyond the inference API", _door_closed, server))
    checks.append(_run_or_skip(KV_PLAN, _plan_matches, server, kv_check_skip(server.profile)))
    checks.append(_run_or_skip(NO_JIT, _no_jit, server, jit_skip(server.deployment)))
    return checks


def format_table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{'SKIP' if c.skipped else 'PASS' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in checks]
    skipped = sum(c.skipped for c in checks)
    passed = sum(c.ok for c in checks) - skipped
    lines.append(f"{passed} passed, {len(checks) - passed - skipped} failed" + (f", {skipped} skipped" if skipped else ""))
    return "\n".join(lines)
