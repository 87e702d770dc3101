"""`make webui-e2e`: the chat front end end to end, as a person would use it (issue 13 point 3). Not in CI.

1. Open WebUI from PyPI (pinned in kit/data/webui.yaml) into a local image: wheels downloaded on the host, installed
   with --no-index on the local base image (no registry is reachable, and pip in a container does not trust the
   host's proxy).
2. `kit up preset=cpu` (the tiny model), then `kit render ... --with webui` into the same directory and
   `docker compose up` of the webui service, with a compose.e2e.yaml beside it that swaps in the local image and
   turns authentication off for this throwaway instance (WEBUI_AUTH=False, allowed on a fresh data volume).
3. Debian's headless Chromium opens the page, sends a message and waits for the tiny model's reply
   (browser.py, under Debian's python3 with python3-selenium); the screenshot lands in the run directory.
4. Tear down: the stack, its volumes (the webui data included). The built images stay for the next run.

Every command run is appended to RUN_DIR/webui-e2e.sh, so a failing step can be re-run by hand.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from kit.core.datafiles import load_yaml
from kit.run.workflow import project_for

HERE = Path(__file__).resolve().parent
PRESET = "cpu"


def say(message: str) -> None:
    print(f"webui-e2e: {message}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, run_dir: Path):
        self.script = run_dir / "webui-e2e.sh"
        self.script.write_text("#!/bin/sh\n# The commands `make webui-e2e` ran, in order.\nset -e\n")

    def __call__(self, argv: list[str], *, cwd: Path | None = None, check: bool = True, timeout: float = 1800,
                 capture: bool = False) -> subprocess.CompletedProcess:
        line = shlex.join(str(a) for a in argv)
        with self.script.open("a") as f:
            f.write((f"cd {shlex.quote(str(cwd))} && " if cwd else "") + line + "\n")
        say(f"$ {line}")
        return subprocess.run([str(a) for a in argv], cwd=cwd, check=check, timeout=timeout, text=True,
                              capture_output=capture)


def ensure_wheelhouse(run, wheelhouse: Path, version: str, torch: str, extra: list[str]) -> None:
    if list(wheelhouse.glob(f"open_webui-{version}-*.whl")):
        say(f"wheelhouse {wheelhouse}: open-webui {version} present")
        return
    wheelhouse.mkdir(parents=True, exist_ok=True)
    platforms = [a for p in ("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
                             "manylinux2014_x86_64", "linux_x86_64", "any") for a in ("--platform", p)]
    # Wheels for the image's Python (Debian 12's 3.11), whatever Python runs this script.
    run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", "3.11", *platforms,
         "-d", wheelhouse, f"open-webui=={version}", torch, *extra])


def ensure_image(run, tag: str, wheelhouse: Path, version: str, torch: str, base_image: str) -> None:
    if run(["docker", "image", "inspect", tag], check=False, capture=True).returncode == 0:
        say(f"image {tag} present")
        return
    with tempfile.TemporaryDirectory(prefix="webui-e2e-") as tmp:
        context = Path(tmp)
        shutil.copy(HERE / "Dockerfile", context / "Dockerfile")
        wheels = context / "wheels"
        wheels.mkdir()
        for wheel in wheelhouse.glob("*.whl"):
            try:
                (wheels / wheel.name).hardlink_to(wheel)
            except OSError:  # another filesystem
                shutil.copy(wheel, wheels / wheel.name)
        started = time.monotonic()
        run(["docker", "build", "--build-arg", f"BASE_IMAGE={base_image}", "--build-arg",
             f"OPEN_WEBUI_VERSION={version}", "--build-arg", f"TORCH_REQUIREMENT={torch}", "-t", tag, context])
        say(f"built {tag} in {time.monotonic() - started:.0f} s")


def wait_for_page(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(3)
    raise SystemExit(f"webui-e2e: {url} did not answer within {timeout:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("run/webui-e2e"))
    parser.add_argument("--port", type=int, default=8000, help="the server's port on 127.0.0.1")
    parser.add_argument("--webui-port", type=int, default=8080, help="Open WebUI's port on 127.0.0.1")
    parser.add_argument("--wheelhouse", type=Path, required=True, help="Open WebUI's wheels (filled if empty)")
    parser.add_argument("--cpu-wheelhouse", type=Path, required=True, help="the cpu preset's wheels (as `make run`)")
    parser.add_argument("--base-image", default="vllm-kit/base:bookworm")
    parser.add_argument("--message", default="Hello! Please tell me a short story.")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for Open WebUI to answer, and for the reply")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (stop it with `make down`)")
    args = parser.parse_args()

    data = load_yaml("webui.yaml")
    version, torch = data["version"], data["e2e"]["torch_requirement"]
    tag = f"{data['e2e']['local_image']}:{version}"
    run_dir = args.run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    run = Runner(run_dir)
    kit = [sys.executable, "-m", "kit.cli.main"]
    same = [f"preset={PRESET}", "--out", run_dir, "--base-image", args.base_image]

    began = time.monotonic()
    ensure_wheelhouse(run, args.wheelhouse, version, torch, list(data["e2e"]["extra_requirements"]))
    ensure_image(run, tag, args.wheelhouse, version, torch, args.base_image)

    started = time.monotonic()
    run([*kit, "up", *same, "--port", args.port, "--wheelhouse", args.cpu_wheelhouse])
    served = None
    try:
        # The same preset, overrides and base image as `kit up`: the server's service is unchanged, only webui is added.
        run([*kit, "render", *same, f"runtime.port={args.port}", "--with", "webui"])
        # The render wrote the API key and the web UI's secrets into .env (kept: the running server reads the key);
        # only the port is the e2e run's own.
        with (run_dir / ".env").open("a", encoding="utf-8") as env:
            env.write(f"WEBUI_PORT={args.webui_port}\n")
        compose = yaml.safe_load((run_dir / "compose.yaml").read_text())
        server = next(iter(compose["services"]["webui"]["depends_on"]))
        command = compose["services"][server]["command"]
        served = command[command.index("--served-model-name") + 1]
        (run_dir / "compose.e2e.yaml").write_text(yaml.safe_dump({"services": {"webui": {
            "image": tag,
            "pull_policy": "never",
            "environment": {
                "WEBUI_AUTH": "False",  # a fresh throwaway instance: no account to create
                "OFFLINE_MODE": "True",  # no hub or update check is reachable here
                "DEFAULT_MODELS": served,
                # The background tasks Open WebUI runs after each reply (config.py) send long prompts of their own:
                # off, so the server's log holds only the user's chat and the tiny model's 1024-token context fits.
                "ENABLE_TITLE_GENERATION": "False",
                "ENABLE_TAGS_GENERATION": "False",
                "ENABLE_FOLLOW_UP_GENERATION": "False",
            },
        }}}, sort_keys=False))
        project = project_for(run_dir)  # the project `kit up` started
        files = ["-p", project, "-f", "compose.yaml", "-f", "compose.e2e.yaml"]
        run(["docker", "compose", *files, "up", "-d", "--no-build", "--no-deps", "--wait", "--wait-timeout",
             int(args.timeout), "webui"], cwd=run_dir)
        url = f"http://127.0.0.1:{args.webui_port}/"
        wait_for_page(url, args.timeout)
        ready = time.monotonic() - started
        say(f"Open WebUI up {ready:.0f} s after `kit up` began; driving Chromium")
        shot = run_dir / "webui-e2e.png"
        result = run(["/usr/bin/python3", HERE / "browser.py", url, args.message, shot, "--timeout", int(args.timeout)],
                     check=False, capture=True)
        sys.stderr.write(result.stderr)
        logs = run(["docker", "compose", *files, "logs", "--no-color", "webui"], cwd=run_dir, check=False, capture=True)
        (run_dir / "webui.log").write_text(logs.stdout + logs.stderr)
        if result.returncode != 0:
            say(f"FAILED: no reply in the browser; screenshot {shot}, Open WebUI's log {run_dir / 'webui.log'}")
            return 1
        # What the page shows may be an error Open WebUI relays; the server's access log says whether the chat
        # requests it received succeeded.
        server_log = run(["docker", "compose", *files, "logs", "--no-color", server], cwd=run_dir, check=False,
                         capture=True).stdout
        (run_dir / "server.log").write_text(server_log)
        statuses = re.findall(r'"POST /v1/chat/completions HTTP/[0-9.]+" (\d{3})', server_log)
        ok, failed = statuses.count("200"), len(statuses) - statuses.count("200")
        say(f"server: {ok} chat completions answered 200, {failed} failed")
        if not ok or failed:
            say(f"FAILED: the server refused chat requests (statuses {statuses}); see {run_dir / 'server.log'}, "
                f"screenshot {shot}")
            return 1
        print(f"reply from {served}: {result.stdout.strip()[:200]}")
        print(f"screenshot: {shot}")
        print(f"wall time: {time.monotonic() - began:.0f} s (Open WebUI answering {ready:.0f} s after `kit up` began)")
        return 0
    finally:
        if not args.keep:
            run([*kit, "down", "--out", run_dir, "--volumes"], check=False)


if __name__ == "__main__":
    sys.exit(main())
