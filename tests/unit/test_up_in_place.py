"""`kit up` of a folder whose stack runs (the walk: render, start, re-render, `kit up`): it took the stack down and
started it again even when nothing it runs had changed. A healthy unchanged stack is left running, said; otherwise only
what changed is recreated. Without Docker: compose's answers and the engine's containers are stood in for here;
tests/integration/test_journeys.py runs the real ones."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.run import workflow
from kit.run.workflow import MOUNTED_FILE_CHANGED, Stack, stale_services

pytestmark = pytest.mark.unit

PROJECT = "deploy-0123abcd"


def stamp(seconds: float) -> str:
    """A time as Docker writes a container's StartedAt (nanoseconds, Z)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


class Container:
    def __init__(self, service: str, config_hash: str, image: str, status: str = "running", exit_code: int = 0,
                 started: float | None = None):
        self.labels = {"com.docker.compose.project": PROJECT, "com.docker.compose.service": service,
                       "com.docker.compose.config-hash": config_hash}
        self.attrs = {"Image": image, "State": {"Status": status, "ExitCode": exit_code,
                                                "StartedAt": stamp(started if started is not None else time.time())}}


class Client:
    def __init__(self, containers: list[Container], images: dict[str, str]):
        self.containers = SimpleNamespace(list=lambda all=False, filters=None: containers)
        self.images = SimpleNamespace(get=lambda ref: SimpleNamespace(id=images[ref]))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "door").mkdir()
    cfg = tmp_path / "door" / "haproxy.cfg"
    cfg.write_text("global\n")
    old = time.time() - 3600
    os.utime(cfg, (old, old))
    services = {
        "model-make": {"image": "kit:1", "restart": "no", "volumes": []},
        "vllm": {"image": "kit:1", "restart": "unless-stopped", "volumes": [{"type": "volume", "source": "models"}]},
        "door": {"image": "door:1", "restart": "unless-stopped",
                 "volumes": [{"type": "bind", "source": str(cfg), "target": "/usr/local/etc/haproxy/haproxy.cfg"}]},
    }
    hashes = {"model-make": "h-make", "vllm": "h-vllm", "door": "h-door"}

    def run(self, *args, **kw):
        if args[:2] == ("config", "--hash"):
            return SimpleNamespace(stdout="".join(f"{k} {v}\n" for k, v in hashes.items()))
        assert args[:3] == ("config", "--format", "json"), args
        return SimpleNamespace(stdout=json.dumps({"name": PROJECT, "services": services}))

    monkeypatch.setattr(Stack, "run", run)
    return SimpleNamespace(path=tmp_path, cfg=cfg, services=services, hashes=hashes, started=old + 60)


def containers(folder, **changes) -> list[Container]:
    made = {"model-make": Container("model-make", "h-make", "sha-kit", status="exited", started=folder.started),
            "vllm": Container("vllm", "h-vllm", "sha-kit", started=folder.started),
            "door": Container("door", "h-door", "sha-door", started=folder.started)}
    made.update(changes)
    return [c for c in made.values() if c is not None]


def stale(folder, monkeypatch, found, images=None) -> dict[str, str]:
    client = Client(found, images or {"kit:1": "sha-kit", "door:1": "sha-door"})
    monkeypatch.setattr(workflow, "docker_client", lambda: client)
    return stale_services(Stack(folder.path, PROJECT))


def test_an_unchanged_running_stack_has_nothing_stale(folder, monkeypatch):
    # The completed one-shot (exit 0, restart no) is as compose leaves it after `up`: not a change.
    assert stale(folder, monkeypatch, containers(folder)) == {}


def test_each_kind_of_change_names_only_its_service(folder, monkeypatch):
    assert stale(folder, monkeypatch, containers(folder, vllm=Container("vllm", "h-old", "sha-kit",
                                                                        started=folder.started))) == {
        "vllm": "its configuration changed"}
    assert stale(folder, monkeypatch, containers(folder), images={"kit:1": "sha-rebuilt", "door:1": "sha-door"}) == {
        "model-make": "its image changed", "vllm": "its image changed"}
    assert stale(folder, monkeypatch, containers(folder, door=None)) == {"door": "not running"}
    failed = Container("model-make", "h-make", "sha-kit", status="exited", exit_code=1, started=folder.started)
    assert stale(folder, monkeypatch, containers(folder, **{"model-make": failed})) == {"model-make": "not running"}
    gone = Container("webui", "h-webui", "sha-webui", started=folder.started)
    assert stale(folder, monkeypatch, containers(folder, webui=gone)) == {"webui": "no longer in the files"}


def test_a_mounted_file_rewritten_after_the_container_started_recreates_that_service(folder, monkeypatch):
    folder.cfg.write_text("global\n  maxconn 10\n")  # a re-render rewrote the door's config: the container has the old
    assert stale(folder, monkeypatch, containers(folder)) == {"door": MOUNTED_FILE_CHANGED}
    started_after = Container("door", "h-door", "sha-door", started=time.time() + 5)
    assert stale(folder, monkeypatch, containers(folder, door=started_after)) == {}


def test_up_leaves_a_serving_unchanged_stack_running_and_updates_only_what_changed(tmp_path, monkeypatch):
    """workflow.up on a running stack: no `down`, no start from scratch; compose's `up` only when something changed,
    and a forced recreate only for the services whose mounted files changed."""
    from kit.deploy.pipeline import prepare

    out = tmp_path / "deploy"
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(workflow, "render_into", lambda *a, **k: [])
    monkeypatch.setattr(workflow, "fill_env", lambda *a, **k: None)
    monkeypatch.setattr("kit.run.ops.refuse_foreign_project", lambda *a: None)
    monkeypatch.setattr(workflow, "ensure_image", lambda *a, **k: None)
    monkeypatch.setattr(workflow, "_serving", lambda stack, front: True)
    monkeypatch.setattr(workflow, "wait_for_door", lambda *a: None)
    monkeypatch.setattr(Stack, "wait_healthy", lambda self, *a, **k: 0.0)
    monkeypatch.setattr(Stack, "down", lambda self, **k: calls.append(("down",)))
    monkeypatch.setattr(Stack, "run", lambda self, *args, **k: calls.append(args))
    monkeypatch.setattr(workflow, "start", lambda *a, **k: calls.append(("start",)))
    prepared = prepare("cpu")

    monkeypatch.setattr(workflow, "stale_services", lambda stack: {})
    done = workflow.up(prepared, out)
    assert done.unchanged and calls == []

    monkeypatch.setattr(workflow, "stale_services", lambda stack: {"vllm": "its configuration changed",
                                                                    "door": MOUNTED_FILE_CHANGED})
    done = workflow.up(prepared, out)
    assert not done.unchanged and done.updated == ("door", "vllm")
    assert calls == [("up", "-d", "--no-build", "--remove-orphans"),
                     ("up", "-d", "--no-build", "--no-deps", "--force-recreate", "door")]


def test_a_stack_that_does_not_serve_is_replaced_as_before(tmp_path, monkeypatch):
    from kit.deploy.pipeline import prepare

    calls: list[str] = []
    monkeypatch.setattr(workflow, "render_into", lambda *a, **k: [])
    monkeypatch.setattr(workflow, "fill_env", lambda *a, **k: None)
    monkeypatch.setattr("kit.run.ops.refuse_foreign_project", lambda *a: None)
    monkeypatch.setattr(workflow, "_serving", lambda stack, front: False)
    monkeypatch.setattr(Stack, "down", lambda self, **k: calls.append("down"))
    monkeypatch.setattr(workflow, "start", lambda *a, **k: (calls.append("start"), 42.0))
    done = workflow.up(prepare("cpu"), Path(tmp_path))
    assert calls == ["down", "start"] and done.ready_seconds == 42.0 and not done.unchanged
