"""`kit warm` refuses what it does not cover, before it touches Docker or writes a file: a multi-node Ray cluster
render and a Kubernetes render. (The warm run itself: tests/integration/test_warm.py.)"""

from __future__ import annotations

import json

from click.testing import CliRunner

from kit.cli.main import cli
from kit.run.warm import read_answer


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def folder_files(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_warm_refuses_a_ray_cluster_folder(tmp_path):
    out = tmp_path / "cluster"
    assert kit("render", "preset=cpu", "hardware.nodes=2", "cluster.network=bridge", "--out", str(out)).exit_code == 0
    assert (out / "compose.head.yaml").is_file() and not (out / "compose.yaml").exists()
    before = folder_files(out)
    result = kit("warm", "--out", str(out), "--json")
    assert result.exit_code == 1, result.output
    problem = json.loads(result.stdout)["problems"][0]
    assert problem["message"] == (f"{out}: a multi-node Ray cluster render (compose.head.yaml, compose.worker.yaml); "
                                  "kit warm covers one-host compose stacks")
    assert "CLUSTER.md" in problem["hint"]
    assert folder_files(out) == before  # refused before anything was written


def test_warm_refuses_a_kubernetes_folder(tmp_path):
    out = tmp_path / "k8s"
    assert kit("render", "preset=cpu", "--target", "k8s", "--out", str(out)).exit_code == 0
    assert (out / "k8s").is_dir() and not (out / "compose.yaml").exists()
    result = kit("warm", "--out", str(out))
    assert result.exit_code == 1
    assert f"{out}: a Kubernetes render (k8s/) only; kit warm covers one-host compose stacks" in result.stderr
    assert "the pod's first start fills the cache PVC" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_exec_that_printed_no_answer_is_a_request_with_no_status():
    got = read_answer("vllm", "/v1/completions", 1, "", "service \"vllm\" is not running\n")
    assert got.status is None and not got.ok and got.detail == 'service "vllm" is not running'
    line = json.dumps({"status": 200, "seconds": 0.5, "detail": "", "cache_root": "/c", "cache_env": {},
                       "cache_bytes": {"modelinfos": 10}})
    got = read_answer("vllm", "/v1/completions", 0, f"noise\n{line}\n", "")
    assert got.ok and got.cache_bytes == {"modelinfos": 10} and got.request == "POST /v1/completions"
