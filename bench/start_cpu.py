"""Record where the CPU stack's start goes: the `cpu` preset's compose stack, first on fresh volumes, then restarted
with its volumes kept, as `kit up` starts it (issue 24). Writes OUT/{first,restart}.log (`docker logs --timestamps`
of the server), OUT/results.json (the container's start time, seconds to /health and to the first token of a
streamed completion through the front door, both from the host, and the image), for bench/start_report.py.

    python bench/start_cpu.py --out kit/data/startup/cpu-vllm-0.32.0 [--wheelhouse DIR] [--base-image REF]
Needs the Docker engine and base image (scripts/setup-host.sh). Logs are compressed with xz there.
"""

from __future__ import annotations

import argparse
import http.client
import json
import lzma
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.deploy.pipeline import prepare
from kit.run.probe import free_port
from kit.run.stack import SERVICE, Stack, write_smoke_env
from kit.run.workflow import render_into, start


def container_of(out: Path, project: str) -> str:
    done = subprocess.run(["docker", "compose", "-p", project, "ps", "-q", SERVICE], cwd=out, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip().splitlines()[0]


def started_at(container: str) -> str:
    return subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", container], capture_output=True,
                          text=True, check=True).stdout.strip()


def first_token(port: int, key: str, served: str) -> dict:
    body = json.dumps({"model": served, "prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    sent = time.time()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                   "Authorization": f"Bearer {key}"})
    resp = conn.getresponse()
    first = None
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data:") and b"[DONE]" not in line and first is None:
            first = time.time()
    conn.close()
    return {"status": resp.status, "sent_unix": sent, "first_token_unix": first}


def wait_health(port: int, limit_s: float) -> float | None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return time.time()
        except OSError:
            pass
        time.sleep(0.25)
    return None


def record(out: Path, project: str, port: int, key: str, served: str, name: str, results: dict) -> None:
    container = container_of(out, project)
    ready = wait_health(port, 600)
    entry = {"container_started_at": started_at(container), "ready_unix": ready}
    if ready:
        entry["completion"] = first_token(port, key, served)
    logs = subprocess.run(["docker", "logs", "--timestamps", container], capture_output=True, text=True)
    results[name] = entry
    results[name]["log"] = f"{name}.log.xz"
    results[name]["log_text"] = logs.stdout + logs.stderr


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--out", type=Path, required=True)
    cli.add_argument("--wheelhouse", type=Path)
    cli.add_argument("--base-image", default="vllm-kit/base:bookworm")
    args = cli.parse_args()
    port = free_port()
    prepared = prepare("cpu", [f"runtime.port={port}"], base_image=args.base_image)
    served = prepared.deployment.serve.served_model_name
    results: dict = {"preset": "cpu", "image": prepared.image_ref, "vllm": prepared.deployment.image.vllm_version,
                     "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
                     "how": "python bench/start_cpu.py: kit's cpu stack, first start on fresh volumes, then "
                            "`docker compose down` (volumes kept) and up again; times from the host"}
    with tempfile.TemporaryDirectory(prefix="kit-start-") as tmp:
        out = Path(tmp) / "cpu"
        render_into(prepared, out)
        key = write_smoke_env(out).get("VLLM_API_KEY", "")
        project = f"kit-start-{port}"
        stack, _ready = start(prepared, out, project, wheelhouse=args.wheelhouse, progress=print)
        try:
            record(out, project, port, key, served, "first", results)
            stack.down(volumes=False)
            stack.up()
            record(out, project, port, key, served, "restart", results)
        finally:
            Stack(out, project).down(volumes=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("first", "restart"):
        with lzma.open(args.out / f"{name}.log.xz", "wt") as fh:
            fh.write(results[name].pop("log_text"))
    (args.out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in results.items()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
