"""Measure a preset's real start-up on this host's GPU, with dummy weights, beside the planner's prediction.

The engine gets the preset's own serve arguments (deployment.serve_args_for, the list compose runs), with
the model swapped for a directory that holds only config.json (and tokenizer files when at hand) and
`--load-format dummy`: vLLM allocates the weights with random values, profiles memory, captures CUDA graphs
and serves, so nothing is downloaded. Two ways to start it:

* docker (default): the preset's image through the Docker SDK, with the GPU device request compose uses;
* native: the vLLM installed in this Python, the same module and arguments (hosts without Docker).

Public entry points: ``prepare(...) -> ProbeCommand`` (pure: what would be run, as data),
``run(command, ...) -> ProbeResult`` (starts, waits for the memory profile and /health, stops) and
``compare(plan, log)`` (rows of planned vs measured).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable

from kit.config.modelinfo import catalog_path, load_model_spec
from kit.core.datafiles import gpu_catalog
from kit.core.docker_engine import docker_client
from kit.core.errors import KitError
from kit.deploy.deployment import (
    CONTAINER_PORT,
    flashinfer_aot_modules,
    plan_deployment,
    serve_args_for,
    server_command_for,
)
from kit.memory import vllmlog
from kit.memory.plan import plan
from kit.memory.preset_plan import as_preset_fixes, plan_inputs_for
from kit.run.smoke import http

if TYPE_CHECKING:
    from kit.config.preset import Preset

CONTAINER_MODEL_DIR = "/models"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model")
# Environment a native probe passes on: never reach a hub (the weights are dummies anyway).
NATIVE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
STOP_GRACE_S = 20.0


class ProbeError(KitError):
    """A probe could not be carried out (not: the engine failed to start, which is a result)."""


@dataclass(frozen=True)
class ProbeCommand:
    mode: str  # "native" or "docker"
    argv: list[str]  # native: the whole command; docker: the container's command (serve arguments)
    env: dict[str, str]  # added to the environment (native) or the container's environment (docker)
    port: int  # on 127.0.0.1
    served_name: str
    model_dir: Path
    tokenizer: bool
    docker: dict[str, Any] | None = None  # DockerClient.containers.run keyword arguments

    def shell_line(self) -> str:
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


@dataclass
class ProbeResult:
    command: ProbeCommand
    log: vllmlog.StartupLog
    log_text: str
    ready: bool
    seconds_to_ready: float | None
    exit_code: int | None  # None: it was still running when stopped
    timed_out: bool
    checks: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- the model directory
def has_tokenizer(model_dir: Path) -> bool:
    return any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES)


def write_dummy_model_dir(config: dict[str, Any], out_dir: Path) -> Path:
    """A model directory vLLM can load with --load-format dummy: config.json only (catalog notes dropped)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in config.items() if not k.startswith("_")}
    (out_dir / "config.json").write_text(json.dumps(clean, indent=2, sort_keys=True) + "\n")
    return out_dir


def catalog_config(model_id: str) -> dict[str, Any]:

    path = catalog_path(model_id)
    if not path.is_file():
        raise ProbeError(f"model {model_id!r} is not in the kit's catalog (kit/data/models/)",
                         hint="give --model-dir DIR with the model's config.json (and tokenizer files)")
    return json.loads(path.read_text())


# --------------------------------------------------------------------------- the command, as data
def dummy_serve_args(serve_args: list[str], model_arg: str, *, tokenizer: bool,
                     positional: bool = False) -> list[str]:
    """The preset's serve arguments with the model swapped and dummy weights asked for.

    ``positional``: the server takes the model as its first argument (`vllm serve MODEL`), which is then
    ``serve_args[0]``; otherwise as ``--model`` (the API server module of the CPU build).
    """
    rest = serve_args[1:] if positional else serve_args
    out: list[str] = []
    skip = False
    for arg in rest:
        if skip:
            skip = False
            continue
        if arg in ("--model", "--load-format", "--tokenizer"):
            skip = True
            continue
        if arg.startswith(("--model=", "--load-format=", "--tokenizer=")) or arg == "--skip-tokenizer-init":
            continue
        out.append(arg)
    out = ([model_arg] if positional else ["--model", model_arg]) + out + ["--load-format", "dummy"]
    if not tokenizer:
        out.append("--skip-tokenizer-init")  # no tokenizer files: the engine still starts, prompts are token ids
    return out


def native_module_argv(entrypoint: list[str]) -> list[str]:
    """The image's entrypoint as a module of the current interpreter: `[-m, module, ...]`.

    `[python, -m, module]` keeps its module; a console script (`.../vllm serve`) becomes vLLM's CLI module, which
    is what the `vllm` script runs, so a host where vLLM is importable but has no script (PYTHONPATH installs) works.
    """
    if len(entrypoint) >= 3 and entrypoint[1] == "-m":
        return list(entrypoint[1:])
    return ["-m", "vllm.entrypoints.cli.main", *entrypoint[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(name: str, preset: Preset, model_dir: Path, *, mode: str = "docker", port: int | None = None,
            image: str | None = None, python: str | None = None) -> ProbeCommand:
    """What the probe runs for a loaded preset: argv, environment, and for docker the SDK call's arguments."""
    deployment = plan_deployment(name, preset)
    server = server_command_for(preset)
    model_dir = Path(model_dir)
    tokenizer = has_tokenizer(model_dir)
    port = port or free_port()
    served = deployment.serve.served_model_name
    if mode == "native":
        args = serve_args_for(preset, served, str(model_dir), server, listen=("127.0.0.1", port))
        args = dummy_serve_args(args, str(model_dir), tokenizer=tokenizer, positional=server.model_positional)
        argv = [python or sys.executable, *native_module_argv(deployment.serve.entrypoint), *args]
        env = {**NATIVE_ENV, **preset.runtime.env, **preset.runtime.unsafe_env}
        return ProbeCommand("native", argv, env, port, served, model_dir, tokenizer)
    if mode != "docker":
        raise ProbeError(f"unknown probe mode {mode!r}", hint="docker or native")
    container_model = str(PurePosixPath(CONTAINER_MODEL_DIR) / (model_dir.name or "model"))
    args = serve_args_for(preset, served, container_model, server, listen=("0.0.0.0", CONTAINER_PORT))
    args = dummy_serve_args(args, container_model, tokenizer=tokenizer, positional=server.model_positional)
    env = dict(deployment.serve.environment)
    kwargs: dict[str, Any] = {
        "image": image or f"{deployment.image.image_repository}:{deployment.image.vllm_version}",
        "entrypoint": list(deployment.serve.entrypoint),
        "command": args,
        "environment": env,
        "ports": {f"{CONTAINER_PORT}/tcp": ("127.0.0.1", port)},
        "volumes": {str(model_dir.resolve()): {"bind": container_model, "mode": "ro"}},
        "detach": True,
        "init": True,
        "labels": {"io.vllm-kit.probe": name},
    }
    if deployment.runtime.gpu_devices:
        # compose's deploy.resources.reservations.devices entry, in the SDK's DeviceRequest fields
        request = {"driver": deployment.runtime.gpu_devices["driver"],
                   "capabilities": [list(deployment.runtime.gpu_devices["capabilities"])]}
        if "count" in deployment.runtime.gpu_devices:
            request["count"] = deployment.runtime.gpu_devices["count"]
        else:
            request["device_ids"] = list(deployment.runtime.gpu_devices["device_ids"])
        kwargs["device_requests"] = [request]
    if deployment.runtime.shm.ipc:
        kwargs["ipc_mode"] = deployment.runtime.shm.ipc
    elif deployment.runtime.shm.shm_size:
        kwargs["shm_size"] = deployment.runtime.shm.shm_size
    return ProbeCommand("docker", args, env, port, served, model_dir, tokenizer, docker=kwargs)


# --------------------------------------------------------------------------- running it
def default_log_path(name: str, environ: dict[str, str] | None = None) -> Path:
    """Where a probe keeps its server log unless --log says: one file per preset in the user's cache folder
    (``$XDG_CACHE_HOME/vllm-kit/probe/NAME.log``), replaced by the next probe of that preset, so it is there to
    read after the run and never piles up."""
    env = os.environ if environ is None else environ
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in Path(name).name).lstrip(".") or "preset"
    return cache / "vllm-kit" / "probe" / f"{stem}.log"


def failure_reason(result: ProbeResult) -> str:
    """Why a start failed, in one line: the engine's first error (vllmlog's rule), else what is known."""
    if result.log.fatal:
        return result.log.fatal
    if result.timed_out:
        return "timed out waiting for /health, and the log shows no error"
    last = next((line.strip() for line in reversed(result.log_text.splitlines()) if line.strip()), None)
    code = f"exited with code {result.exit_code}" if result.exit_code is not None else "stopped"
    return f"the engine {code} and logged no error" + (f"; its last line: {last[:300]}" if last else " (empty log)")


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


_MILESTONES = (
    ("weights", vllmlog.WEIGHTS, "weights loaded"),
    ("kv", vllmlog.AVAILABLE_KV, "memory profiled"),
    ("tokens", vllmlog.KV_TOKENS, "KV cache sized"),
    ("graphs", vllmlog.GRAPH_CAPTURE, "CUDA graphs captured"),
    ("init", vllmlog.INIT_ENGINE, "engine initialised"),
)


class _Watcher:
    """Reports each start-up milestone once, as it appears in the log."""

    def __init__(self, progress: Callable[[str], None], started: float):
        self.progress, self.started = progress, started
        self.seen: set[str] = set()

    def __call__(self, text: str) -> None:
        for key, pattern, label in _MILESTONES:
            if key not in self.seen and (m := pattern.search(text)):
                self.seen.add(key)
                self.progress(f"  {time.monotonic() - self.started:5.0f} s  {label}: {m.group(0)[:110]}")


def run(command: ProbeCommand, *, timeout: float = 600, log_path: Path | None = None,
        progress: Callable[[str], None] = lambda _m: None,
        after_ready: Callable[[ProbeCommand], list[dict[str, Any]]] | None = None,
        poll_s: float = 1.0) -> ProbeResult:
    """Start the engine, wait for /health (or its exit, or the deadline), run ``after_ready``, stop it."""
    if command.mode == "native":
        return _run_native(command, timeout, log_path, progress, after_ready, poll_s)
    return _run_docker(command, timeout, log_path, progress, after_ready, poll_s)


def _checks_after_ready(after_ready, command: ProbeCommand) -> list[dict[str, Any]]:  # noqa: ANN001
    if after_ready is None:
        return []
    try:
        return after_ready(command)
    except Exception as exc:  # noqa: BLE001 - a check that errors is a failed check, and the engine must still stop
        return [{"name": "API checks", "ok": False, "status": None, "detail": f"{type(exc).__name__}: {exc}"[:300]}]


def _finish(command: ProbeCommand, text: str, ready: bool, started: float, ready_at: float | None,
            exit_code: int | None, timed_out: bool, checks: list[dict[str, Any]]) -> ProbeResult:
    return ProbeResult(command=command, log=vllmlog.parse(text), log_text=text, ready=ready,
                       seconds_to_ready=(ready_at - started) if ready_at else None, exit_code=exit_code,
                       timed_out=timed_out, checks=checks)


def _run_native(command, timeout, log_path, progress, after_ready, poll_s) -> ProbeResult:  # noqa: ANN001
    log_path = Path(log_path) if log_path else Path(f"probe-{command.port}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **command.env}
    progress(f"starting: {command.shell_line()}")
    started = time.monotonic()
    with open(log_path, "wb") as sink:
        # Its own session: stopping it stops the engine-core and worker processes it spawns too.
        proc = subprocess.Popen(command.argv, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    watch = _Watcher(progress, started)
    ready_at, timed_out, checks = None, False, []
    try:
        while True:
            text = log_path.read_text(errors="replace")
            watch(text)
            if proc.poll() is not None:
                break
            if _health(command.port):
                ready_at = time.monotonic()
                progress(f"  {ready_at - started:5.0f} s  ready: /health answers 200")
                checks = _checks_after_ready(after_ready, command)
                break
            if time.monotonic() - started > timeout:
                timed_out = True
                progress(f"  {timeout:.0f} s deadline passed without /health; stopping")
                break
            time.sleep(poll_s)
    finally:
        exit_code = _stop_group(proc)
    text = log_path.read_text(errors="replace")
    return _finish(command, text, ready_at is not None, started, ready_at,
                   None if ready_at or timed_out else exit_code, timed_out, checks)


def _stop_group(proc: subprocess.Popen) -> int | None:
    """SIGINT the process group (vLLM shuts its workers down), SIGKILL what is left after a grace period."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:  # children outlive the parent for a moment; wait until the group is gone
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.5)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.wait(timeout=STOP_GRACE_S)


def _run_docker(command, timeout, log_path, progress, after_ready, poll_s) -> ProbeResult:  # noqa: ANN001

    client = docker_client()
    assert command.docker is not None
    progress(f"starting {command.docker['image']} with: {' '.join(command.argv)}")
    started = time.monotonic()
    try:
        container = client.containers.run(**command.docker)
    except Exception as exc:  # noqa: BLE001 - the SDK's errors (image missing, no GPU runtime) are the user's to fix
        raise ProbeError(f"could not start the probe container: {str(exc).splitlines()[0][:200]}",
                         hint="build the image first (`kit build preset=...`), or run the probe with --native") from None
    watch = _Watcher(progress, started)
    ready_at, timed_out, checks, exit_code = None, False, [], None
    try:
        while True:
            text = container.logs().decode(errors="replace")
            watch(text)
            container.reload()
            if container.status in ("exited", "dead"):
                exit_code = container.attrs.get("State", {}).get("ExitCode")
                break
            if _health(command.port):
                ready_at = time.monotonic()
                progress(f"  {ready_at - started:5.0f} s  ready: /health answers 200")
                checks = _checks_after_ready(after_ready, command)
                break
            if time.monotonic() - started > timeout:
                timed_out = True
                break
            time.sleep(poll_s)
        text = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(text)
    return _finish(command, text, ready_at is not None, started, ready_at, exit_code, timed_out, checks)


# --------------------------------------------------------------------------- API checks once ready
def _completion_tokens(body: str) -> int:
    try:
        return int(json.loads(body)["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return 0


def api_checks(command: ProbeCommand) -> list[dict[str, Any]]:
    """/v1/models lists the served name; a completion returns tokens; with a tokenizer, text and chat too."""
    base = f"http://127.0.0.1:{command.port}"
    out: list[dict[str, Any]] = []

    def record(name: str, status: int, body: str, ok: bool) -> None:
        out.append({"name": name, "ok": ok and status == 200, "status": status, "detail": body[:300]})

    status, body = http("GET", f"{base}/v1/models", timeout=30)
    record("/v1/models lists the served name", status, body, command.served_name in body)
    prompt: Any = "Hello, my name is" if command.tokenizer else [1, 2, 3, 4]
    status, body = http("POST", f"{base}/v1/completions", timeout=60,
                        body={"model": command.served_name, "prompt": prompt, "max_tokens": 8, "ignore_eos": True})
    record("completion returns tokens", status, body, _completion_tokens(body) > 0)
    if command.tokenizer:
        status, body = http("POST", f"{base}/v1/chat/completions", timeout=60,
                            body={"model": command.served_name, "max_tokens": 8,
                                  "messages": [{"role": "user", "content": "Say hi"}]})
        record("chat completion returns tokens", status, body, _completion_tokens(body) > 0)
    return out


# --------------------------------------------------------------------------- planned vs measured
ROWS = (
    ("weights_gib", "weights GiB", "weights_gib"),
    ("activation_gib", "peak activation GiB", "peak_activation_gib"),
    ("non_torch_gib", "non-torch GiB", "non_torch_gib"),
    ("cuda_graph_gib", "CUDA graphs (charged) GiB", None),
    ("kv_cache_gib", "KV cache GiB", "kv_cache_gib"),
    ("kv_cache_tokens", "KV cache tokens", "kv_cache_tokens"),
    ("max_concurrency", "max concurrency", "max_concurrency"),
)


def charged_graph_gib(log: vllmlog.StartupLog) -> float | None:
    """CUDA-graph memory vLLM subtracted from the KV budget: the estimate when charged, else 0; with 0.34's extensible
    KV cache (sized after capture: the log has its "Memory after warmup" line) the pool as captured."""
    if log.kv_cache_gib is None:
        return None
    if log.kept_for_transients_gib is not None:
        return log.cuda_graph_gib
    return (log.cuda_graph_estimate_gib or 0.0) if log.cuda_graph_charged else 0.0


# 0.34's extensible KV cache: what it kept free for transients (the larger of the warm-up's peak and torch's growth),
# beside the planned peak it stands for (kit/data/vllm.yaml kv_sizing: not calibrated yet)
# (metric, label, the plan's figure it is compared with, the log's)
EXTENSIBLE_ROWS = (("kept_for_transients_gib", "kept for transients GiB", "activation_gib", "kept_for_transients_gib"),)


def compare(plan_json: dict[str, Any], log: vllmlog.StartupLog) -> list[dict[str, Any]]:
    rows = []
    every = [(key, label, key, log_key) for key, label, log_key in ROWS]
    if log.kept_for_transients_gib is not None:
        every += EXTENSIBLE_ROWS
    for key, label, plan_key, log_key in every:
        planned = plan_json.get(plan_key)
        measured = getattr(log, log_key) if log_key else charged_graph_gib(log)
        diff = pct = None
        if planned is not None and measured is not None:
            diff = planned - measured
            pct = diff / measured * 100 if measured else None
        rows.append({"metric": key, "label": label, "planned": planned, "measured": measured,
                     "difference": diff, "difference_pct": pct})
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    def show(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, int) or (isinstance(value, float) and abs(value) >= 1000):
            return f"{value:,.0f}"
        return f"{value:.2f}"

    lines = [f"{'':<28}{'planned':>14}{'measured':>14}{'difference':>14}"]
    for row in rows:
        pct = f" ({row['difference_pct']:+.1f}%)" if row["difference_pct"] is not None else ""
        lines.append(f"{row['label']:<28}{show(row['planned']):>14}{show(row['measured']):>14}"
                     f"{show(row['difference']):>14}{pct}")
    return "\n".join(lines)


def plan_for_probe(preset: Preset, result: ProbeResult) -> dict[str, Any]:
    """The planner's prediction for the run that happened: the probed model directory's shape, the GPU memory and
    vLLM version the log reports (the preset's own where the log is silent)."""
    try:
        inputs = plan_inputs_for(preset)
        if inputs is None:
            return {"error": "no plan: the model's shape is unknown"}
        update: dict[str, Any] = {}
        if (result.command.model_dir / "config.json").is_file():
            update["model"] = load_model_spec(str(result.command.model_dir))
        if result.log.total_gib:
            update["gpu_memory_gib"] = result.log.total_gib
        if result.log.vllm_version:
            update["vllm_version"] = result.log.vllm_version
        return as_preset_fixes(plan(inputs.model_copy(update=update))).to_json()  # a preset's fixes are overrides
    except KitError as exc:
        return {"error": exc.message}


def probe_notes(preset: Preset, result: ProbeResult) -> list[str]:
    """What makes this run differ from the preset's target card."""
    notes: list[str] = []
    gpu = gpu_catalog().get(preset.hardware.gpu or "")
    total = result.log.total_gib
    if gpu and total and abs(total - gpu["memory_gib"]) > 0.05 * gpu["memory_gib"]:
        notes.append(f"probed on a {total:.2f} GiB GPU; the preset is for {gpu['name']} ({gpu['memory_gib']} GiB): "
                     "scale engine.gpu_memory_utilization to emulate its budget")
        unset = [f for f in ("max_num_seqs", "max_num_batched_tokens") if getattr(preset.engine, f, None) is None]
        if unset and (total >= 70) != (gpu["memory_gib"] >= 70):
            notes.append(f"{' and '.join(unset)} not set: vLLM's defaults differ between GPUs under and over 70 GiB "
                         "(EngineArgs.get_batch_defaults); set them to compare like with like")
    if result.log.jit_modules:
        modules = ", ".join(result.log.jit_modules)
        aot = ", ".join(flashinfer_aot_modules(preset, gpu)) or "none"
        notes.append(f"this start compiled FlashInfer module(s) {modules} just in time (\"Building JIT module\" in "
                     f"vLLM's log; minutes each on a first start). The kit's slim image for this preset (vLLM "
                     f"{preset.image.vllm_version}) compiles {aot} while it is built (kit/data/vllm.yaml "
                     "flashinfer_aot), and its first start builds none of those")
    if result.log.vllm_version and result.log.vllm_version != preset.image.vllm_version:
        notes.append(f"the engine that ran is vLLM {result.log.vllm_version}; the preset pins {preset.image.vllm_version}")
    return notes


def report(name: str, preset: Preset, result: ProbeResult) -> dict[str, Any]:
    """Everything `kit probe` prints: measured figures, the plan, the comparison (rows and a table)."""
    planned = plan_for_probe(preset, result)
    rows = compare(planned, result.log) if "kv_cache_tokens" in planned else []
    table = format_rows(rows) if rows else f"no comparison: {planned.get('error')}"
    return {
        "preset": name,
        "notes": probe_notes(preset, result),
        "ready": result.ready,
        "seconds_to_ready": result.seconds_to_ready,
        "timed_out": result.timed_out,
        "exit_code": result.exit_code,
        "command": result.command.argv if result.command.mode == "native" else result.command.docker,
        "measured": result.log.to_json(),
        "plan": planned,
        "rows": rows,
        "table": table,
        "checks": result.checks,
    }
