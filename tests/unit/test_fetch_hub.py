"""The fetch script against a hub stand-in on 127.0.0.1: real huggingface_hub, real downloads, then offline reads.

The stand-in answers the calls the script makes the way the hub's API does at huggingface_hub 2.4.0 (the version
in the kit's images and in the test extra; its hf_api.py and file_download.py are the reference):
- `model_info(repo, revision=R)`: GET /api/models/{repo}[/revision/{R}] -> JSON with `id` and `sha`, the commit
  (ModelInfo.__init__ pops "id", "sha", "siblings" [{"rfilename"}]).
- `list_repo_tree(recursive=True)`: GET /api/models/{repo}/tree/{rev} -> [{"type": "file", "oid", "size", "path"}]
  where `oid` is the git blob id (RepoFile.blob_id), and an LFS file adds "lfs": {"oid": sha256, "size",
  "pointerSize"} (RepoFile.__init__ -> BlobLfsInfo(sha256=lfs["oid"])); its own `oid` is the blob id of its
  pointer file, as git stores it.
- HEAD/GET of resolve URLs with the headers get_hf_file_metadata reads: X-Repo-Commit, ETag (the git blob id),
  and for LFS files X-Linked-Etag (the sha256) and X-Linked-Size.
It fails as the hub fails, with the X-Error-Code huggingface_hub's hf_raise_for_status reads (utils/_http.py):
404 RepoNotFound for an unknown repo, 404 EntryNotFound for an unknown file, 401 GatedRepo for a gated repo's
files without a token that has access (the listing of a gated repo is public, as on the hub); and as a file
server fails: 503 for a file's GET (the listing and HEAD answer), or the connection closed before an answer.
A tampered mirror serves other bytes than the listing describes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from kit.config.presetload import load_preset
from tests.conftest import require_module
from tests.unit.test_fetch import host_command
from tests.unit.test_model_sources import AWQ_CONFIG, AWQ_TENSORS, GEMMA2, safetensors_file, stored_bytes

pytestmark = pytest.mark.unit
huggingface_hub = require_module("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
WEIGHT_MAP = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
REPOS = {
    "org/llama": {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer.json": b"{}",
        "model.safetensors.index.json": json.dumps({"weight_map": WEIGHT_MAP}).encode(),
        "model-00001-of-00002.safetensors": b"A" * 300_000,
        "model-00002-of-00002.safetensors": b"B" * 200_000,
        "pytorch_model.bin": b"C" * 500_000,
        "original/consolidated.00.pth": b"D" * 400_000,
        "original/params.json": b"{}",
    },
    "org/adapter": {"adapter_config.json": b"{}", "adapter_model.safetensors": b"E" * 1000, "README.md": b"x"},
    "org/gated": {"config.json": b"{}", "model.safetensors": b"G" * 100},
    "org/down": {"config.json": b"{}", "model.safetensors": b"H" * 100},  # every file's GET answers 503
    "org/flaky": {"config.json": b"{}", "model.safetensors": b"F" * 100},  # 503 for the first FLAKY_FAILURES GETs
    "org/cut": {"config.json": b"{}", "model.safetensors": b"C" * 100},  # every GET: the connection drops
    # a mirror whose files are not the ones its listing describes: an LFS weight, and a plain git file
    "org/tampered": {"config.json": b"{}", "model.safetensors": b"T" * 100},
    "org/tampered-config": {"config.json": b"{}", "model.safetensors": b"U" * 100},
}
# Models the planner reads from the hub: config.json and safetensors headers (ranged reads), never the weights.
GEMMA2_TENSORS = {"model.embed_tokens.weight": ("BF16", [4096, 256]), "model.norm.weight": ("BF16", [256]),
                  "model.layers.0.self_attn.q_proj.weight": ("BF16", [2048, 256])}
AWQ_SHARDS = {"model-00001-of-00002.safetensors": dict(list(AWQ_TENSORS.items())[:3]),
              "model-00002-of-00002.safetensors": dict(list(AWQ_TENSORS.items())[3:])}
REPOS["org/gemma2"] = {"config.json": json.dumps(GEMMA2).encode(),  # no tie_word_embeddings key, as on the hub
                       "model.safetensors": safetensors_file(GEMMA2_TENSORS)}
REPOS["org/awq"] = {"config.json": json.dumps(AWQ_CONFIG).encode(),
                    "model.safetensors.index.json": json.dumps({"metadata": {"total_size": 1}, "weight_map": {
                        name: shard for shard, tensors in AWQ_SHARDS.items() for name in tensors}}).encode(),
                    **{shard: safetensors_file(tensors) for shard, tensors in AWQ_SHARDS.items()}}
# Same sizes as listed, other bytes: only the digest tells them apart.
TAMPERED = {("org/tampered", "model.safetensors"): b"X" * 100, ("org/tampered-config", "config.json"): b"[]"}
LFS_SUFFIXES = (".safetensors", ".bin", ".pth")  # what .gitattributes sends to LFS in a hub repo
GATED = {"org/gated"}
GATED_TOKEN = "hf_accepted_the_licence"  # the one token the stand-in lets through to gated files
DOWN, CUT = {"org/down"}, {"org/cut"}
FLAKY, FLAKY_FAILURES = {"org/flaky"}, 2
# Hostile mirrors: a listing that names a file outside the snapshot (each with a body whose digest does not match,
# so a fetch that took the name would go on to discard a folder), and a file whose body never ends.
ESCAPES = {
    "org/slashes": "a////../../../../../../keep.txt",
    "org/slashes-only": "a////b.json",
    "org/dotdot": "../../../../keep.txt",
    "org/absolute": "/tmp/keep.txt",
    "org/backslash": "a\\..\\..\\keep.txt",
    "org/nul": "a\x00b.json",
    "org/dot": "./config.json",
}
for _repo in ESCAPES:
    REPOS[_repo] = {"config.json": b"{}", "model.safetensors": b"S" * 100}
ENDLESS = {"org/endless"}
REPOS["org/endless"] = {"config.json": b"{}", "model.safetensors": b"E" * 100}
ENDLESS_CAP = 64 << 20  # the stand-in stops after this much, so a fetch that does not stop still ends
# requests seen, by (method, repo): a test reads how often the script asked
SEEN: dict[tuple[str, str], int] = {}


def git_blob_id(body: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


def lfs_pointer(body: bytes) -> bytes:
    # git-lfs's pointer file, what git itself stores for an LFS file
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
        hashlib.sha256(body).hexdigest().encode(), len(body))


def tree_entry(path: str, body: bytes) -> dict:
    if path.endswith(LFS_SUFFIXES):
        pointer = lfs_pointer(body)
        return {"type": "file", "oid": git_blob_id(pointer), "size": len(body), "path": path,
                "lfs": {"oid": hashlib.sha256(body).hexdigest(), "size": len(body), "pointerSize": len(pointer)}}
    return {"type": "file", "oid": git_blob_id(body), "size": len(body), "path": path}


class Hub(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def _error(self, status: int, code: str | None, message: str, with_body: bool = True):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def _resolve(self, with_body: bool):
        """A resolve URL answered: True when a file was sent, else the error as the hub sends it."""
        parts = unquote(urlparse(self.path).path).strip("/").split("/")
        # /{org}/{name}/resolve/{revision}/{path...}
        if len(parts) < 5 or parts[2] != "resolve":
            self._error(404, None, "Not Found", with_body)
            return
        name = f"{parts[0]}/{parts[1]}"
        key = (self.command, name)
        SEEN[key] = SEEN.get(key, 0) + 1
        if name not in REPOS:
            self._error(404, "RepoNotFound", "Repository not found", with_body)
        elif name in GATED and self.headers.get("Authorization") != f"Bearer {GATED_TOKEN}":
            self._error(401, "GatedRepo", f"Access to model {name} is restricted. You must have access to it "
                        "and be authenticated to access it. Please log in.", with_body)
        elif with_body and (name in DOWN or (name in FLAKY and SEEN[key] <= FLAKY_FAILURES)):
            self._error(503, None, "Service Unavailable", with_body)
        elif with_body and name in CUT:
            self.close_connection = True  # no status line: the client reads "disconnected without a response"
        elif with_body and name in ENDLESS and parts[-1] == "model.safetensors":
            self._send_endless()
        elif "/".join(parts[4:]) not in REPOS[name]:
            self._error(404, "EntryNotFound", "Entry not found", with_body)
        else:
            path = "/".join(parts[4:])
            self._send_file(path, REPOS[name][path], TAMPERED.get((name, path)), with_body)

    def _send_file(self, path: str, body: bytes, served: bytes | None, with_body: bool):
        entry = tree_entry(path, body)
        served = body if served is None else served
        self.send_response(206 if self.headers.get("Range", "").startswith("bytes=") and with_body else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"%s"' % entry["oid"])
        if "lfs" in entry:
            self.send_header("X-Linked-Etag", '"%s"' % entry["lfs"]["oid"])
            self.send_header("X-Linked-Size", str(entry["size"]))
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and with_body:  # what parse_safetensors_file_metadata asks: the header only
            first, _, last = ranged.removeprefix("bytes=").partition("-")
            served = served[int(first):int(last) + 1 if last else None]
        self.send_header("Content-Length", str(len(served)))
        self.end_headers()
        if with_body:
            SEEN[("bytes", path)] = SEEN.get(("bytes", path), 0) + len(served)
            self.wfile.write(served)

    def _send_endless(self):
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()  # no length: the body runs until the client stops reading
        self.close_connection = True
        chunk, sent = b"E" * 65536, 0
        try:
            while sent < ENDLESS_CAP:
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass
        SEEN[("endless bytes", "org/endless")] = sent

    def _json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self):
        self._resolve(False)

    def do_GET(self):
        path = unquote(urlparse(self.path).path)
        parts = path.strip("/").split("/")
        if path.startswith("/api/models/") and (len(parts) == 4 or (len(parts) == 6 and parts[4] == "revision")):
            name = "/".join(parts[2:4])
            SEEN[("info", name)] = SEEN.get(("info", name), 0) + 1
            if name not in REPOS:
                self._error(404, "RepoNotFound", "Repository not found")
            elif len(parts) == 6 and parts[5] not in ("main", COMMIT):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {parts[5]}")
            else:
                self._json({"_id": "0" * 24, "id": name, "sha": COMMIT, "private": False,
                            "gated": "auto" if name in GATED else False, "disabled": False,
                            "siblings": [{"rfilename": f} for f in sorted(REPOS[name])]})
            return
        if path.startswith("/api/models/") and "/tree/" in path:
            name = "/".join(path.split("/")[3:5])
            SEEN[("tree", name)] = SEEN.get(("tree", name), 0) + 1
            if name not in REPOS:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            listing = [tree_entry(path, body) for path, body in sorted(REPOS[name].items())]
            if name in ESCAPES:  # a name outside the snapshot, listed with a digest its body will not match
                listing.append({**tree_entry(ESCAPES[name], b"not what is served"), "path": ESCAPES[name]})
            self._json(listing)
            return
        self._resolve(True)


@pytest.fixture()
def hub(monkeypatch):
    # huggingface_hub read the suite's HF_HUB_OFFLINE=1 (tests/conftest.py) when it was imported: in this process,
    # calls to the stand-in are online
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    SEEN.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_downloads_what_vllm_reads_then_serves_offline(hub, tmp_path):
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama", 'engine.lora_modules=["sql=org/adapter"]'])
    command = host_command("rtx4090-awq", preset, "org/llama", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "model ready: org/llama, org/adapter"
    # progress: a summary per artefact and a line per file with bytes so far
    assert f"model org/llama@{COMMIT[:12]}: 6 of 8 files" in result.stderr
    assert "[6/6]" in result.stderr and f"lora sql org/adapter@{COMMIT[:12]}: 3 of 3 files" in result.stderr

    snapshot = tmp_path / "hf" / "hub" / "models--org--llama" / "snapshots" / COMMIT
    got = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    fetched = ["config.json", "tokenizer.json", "model.safetensors.index.json", *WEIGHT_MAP.values(),
               "original/params.json"]
    assert got == sorted([*fetched, "vllm-kit-manifest.json"])
    manifest = json.loads((snapshot / "vllm-kit-manifest.json").read_text())
    assert manifest["revision"] == COMMIT and manifest["repo"] == "org/llama"
    assert {name: entry["sha256"] for name, entry in manifest["files"].items()} == {
        name: hashlib.sha256(REPOS["org/llama"][name]).hexdigest() for name in fetched}
    assert manifest["files"]["config.json"]["checked"] == "git-sha1"
    assert manifest["files"][WEIGHT_MAP["a"]]["checked"] == "sha256"

    # What vLLM does at start with HF_HUB_OFFLINE=1: snapshot_download(local_files_only) of its weight pattern,
    # and of the adapter; both must resolve from the cache alone.
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    probe = ("import huggingface_hub as h, pathlib; "
             "p = h.snapshot_download('org/llama', allow_patterns=[list(%r)], local_files_only=True); "
             "a = h.snapshot_download('org/adapter', local_files_only=True); "
             "print(sorted(x.name for x in pathlib.Path(p).glob('*.safetensors')), "
             "(pathlib.Path(a) / 'adapter_config.json').is_file())") % (sorted(WEIGHT_MAP.values()),)
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=offline, timeout=60)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == f"{sorted(WEIGHT_MAP.values())} True"


def test_a_missing_repo_fails_naming_the_flag(hub, tmp_path):
    spec = json.dumps({"model": "org/nowhere", "num_speculative_tokens": 2})
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama", f"engine.speculative_config={spec}"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run(host_command("rtx4090-awq", preset, "org/llama", tmp_path), capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert result.stdout.strip() == ("model not fetched: org/nowhere (engine.speculative_config.model): "
                                     "not found on the hub")
    assert "draft model org/nowhere: RepositoryNotFoundError" in result.stderr
    assert Path(tmp_path / "hf" / "hub" / "models--org--llama").is_dir()  # the rest was still fetched
    assert SEEN[("info", "org/nowhere")] == 1  # a 404 is final: not retried


def fetch(hub, tmp_path, model, **env_extra):
    _, _, preset = load_preset("rtx4090-awq", [f"model.id={model}"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KIT_FETCH_"))}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1", KIT_FETCH_RETRY_S="0.05",
               **env_extra)
    started = time.monotonic()
    result = subprocess.run(host_command("rtx4090-awq", preset, model, tmp_path), capture_output=True, text=True,
                            env=env, timeout=120)
    return result, time.monotonic() - started


def test_an_unknown_repo_is_not_found_at_once(hub, tmp_path):
    result, took = fetch(hub, tmp_path, "org/nowhere")
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == "model not fetched: org/nowhere (model.id): not found on the hub"
    assert took < 15, took  # the stand-in that dropped the connection had huggingface_hub retry for 24 s


def test_a_gated_repo_says_it_needs_a_token_and_the_licence(hub, tmp_path):
    result, _ = fetch(hub, tmp_path, "org/gated")
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == ("model not fetched: org/gated (model.id): gated: set HF_TOKEN (.env) to a token "
                                     "of an account that accepted its licence on the hub")
    assert "GatedRepoError" in result.stderr
    assert SEEN[("GET", "org/gated")] == 1  # not retried
    ok, _ = fetch(hub, tmp_path, "org/gated", HF_TOKEN=GATED_TOKEN)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "model ready: org/gated"


def test_a_hub_that_answers_503_is_unreachable_after_bounded_attempts(hub, tmp_path):
    result, _ = fetch(hub, tmp_path, "org/down", KIT_FETCH_ATTEMPTS="3")
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == ("model not fetched: org/down (model.id): hub unreachable (HTTP 503, after 3 "
                                     "attempts): check HF_ENDPOINT and the network")
    assert result.stderr.count("hub unreachable (HTTP 503); attempt") == 2
    assert SEEN[("GET", "org/down")] == 3  # the first file, three times, then the artefact gives up


def test_a_passing_5xx_is_retried_and_the_fetch_completes(hub, tmp_path):
    result, _ = fetch(hub, tmp_path, "org/flaky")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "model ready: org/flaky"
    assert result.stderr.count("hub unreachable (HTTP 503); attempt") == FLAKY_FAILURES


def test_a_dropped_connection_is_unreachable(hub, tmp_path):
    # huggingface_hub retries a dropped download itself (about 5 s): one attempt of the kit's is enough here.
    result, took = fetch(hub, tmp_path, "org/cut", KIT_FETCH_ATTEMPTS="1")
    assert result.returncode == 1, result.stderr
    verdict = result.stdout.strip()
    assert verdict.startswith("model not fetched: org/cut (model.id): hub unreachable ("), verdict
    assert verdict.endswith(", no retry): check HF_ENDPOINT and the network"), verdict
    assert took < 30, took


def test_the_stand_in_lists_what_huggingface_hub_reads(hub):
    """The properties the fetch reads, through huggingface_hub's own parsers (not the stand-in's JSON)."""
    api = huggingface_hub.HfApi(endpoint=hub)
    assert api.model_info("org/llama").sha == COMMIT
    assert api.model_info("org/llama", revision=COMMIT).sha == COMMIT
    files = {e.path: e for e in api.list_repo_tree("org/llama", revision=COMMIT, recursive=True)}
    config, shard = files["config.json"], files[WEIGHT_MAP["a"]]
    body = REPOS["org/llama"]["config.json"]
    # git's own blob id, checked against git itself
    git = subprocess.run(["git", "hash-object", "--stdin"], input=body, capture_output=True, check=True)
    assert config.blob_id == git.stdout.decode().strip() and config.lfs is None
    assert shard.lfs.sha256 == hashlib.sha256(REPOS["org/llama"][WEIGHT_MAP["a"]]).hexdigest()
    assert shard.lfs.size == shard.size == 300_000 and shard.lfs.pointer_size == len(lfs_pointer(b"A" * 300_000))
    head = huggingface_hub.get_hf_file_metadata(huggingface_hub.hf_hub_url("org/llama", WEIGHT_MAP["a"],
                                                                           revision=COMMIT, endpoint=hub))
    assert head.commit_hash == COMMIT and head.etag == shard.lfs.sha256 and head.size == 300_000


def snapshot_of(tmp_path, repo):
    return tmp_path / "hf" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / COMMIT


@pytest.mark.parametrize(("repo", "name", "kind"), [("org/tampered", "model.safetensors", "sha256"),
                                                     ("org/tampered-config", "config.json", "git-sha1")])
def test_a_file_that_differs_from_the_listing_is_refused_and_removed(hub, tmp_path, repo, name, kind):
    result, _ = fetch(hub, tmp_path, repo)
    assert result.returncode == 1, result.stderr
    verdict = result.stdout.strip()
    assert verdict.startswith(f"model not fetched: {repo} (model.id): refused: {name}: {kind} "), verdict
    assert "the hub's listing says" in verdict and "snapshot was removed" in verdict
    snapshot = snapshot_of(tmp_path, repo)
    assert not snapshot.exists()  # nothing half-checked where vLLM would load it
    blobs = snapshot.parent.parent / "blobs"
    bad = hashlib.sha256(TAMPERED[(repo, name)]).hexdigest()
    assert all(b.read_bytes() != TAMPERED[(repo, name)] for b in blobs.iterdir()), bad


def test_a_pinned_commit_is_fetched_and_an_unknown_one_refused(hub, tmp_path):
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/adapter", f"model.revision={COMMIT}"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KIT_FETCH_"))}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    command = host_command("rtx4090-awq", preset, "org/adapter", tmp_path)
    assert json.loads(command[-1])["artefacts"][0]["revision"] == COMMIT
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads((snapshot_of(tmp_path, "org/adapter") / "vllm-kit-manifest.json").read_text())["revision"] == COMMIT
    other = "f" * 40
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/adapter", f"model.revision={other}"])
    result = subprocess.run(host_command("rtx4090-awq", preset, "org/adapter", tmp_path), capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert result.stdout.strip() == "model not fetched: org/adapter (model.id): not found on the hub"


def test_verify_finds_a_file_changed_after_the_fetch(hub, tmp_path):
    result, _ = fetch(hub, tmp_path, "org/flaky")
    assert result.returncode == 0, result.stderr
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/flaky"])
    command = host_command("rtx4090-awq", preset, "org/flaky", tmp_path)
    verify = [command[0], command[1], "--verify", command[2]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    ok = subprocess.run(verify, capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "manifest ok"
    weights = snapshot_of(tmp_path, "org/flaky") / "model.safetensors"
    blob = weights.resolve()
    blob.write_bytes(b"Z" * 100)  # same size, other bytes: a swapped blob in the cache volume
    bad = subprocess.run(verify, capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[-1].startswith(
        "manifest check failed: org/flaky (model.id): model.safetensors: sha256 " + hashlib.sha256(b"Z" * 100).hexdigest())


def test_commit_of_reads_the_revisions_sha_as_model_info_does(hub):
    from kit.config.hubrevision import commit_of
    from kit.core.errors import KitError

    assert commit_of("org/llama", None, {"HF_ENDPOINT": hub}) == COMMIT
    assert commit_of("org/llama", "main", {"HF_ENDPOINT": hub}) == COMMIT
    with pytest.raises(KitError, match=r"model.id: org/nowhere: the hub refused the revision lookup \(RepoNotFound\)"):
        commit_of("org/nowhere", None, {"HF_ENDPOINT": hub})
    with pytest.raises(KitError, match=r"at model.revision v9: the hub refused .* \(RevisionNotFound\)"):
        commit_of("org/llama", "v9", {"HF_ENDPOINT": hub})


def test_kit_lock_pins_the_model_revision_in_the_record(hub, tmp_path, monkeypatch):
    """kit lock asks the hub (HF_ENDPOINT from the folder's .env) and records model.revision=COMMIT, so a later
    render of the folder (and its fetch) uses that commit; the printed line says so."""
    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.deploy.record import read_record
    from kit.image import lock as lockmod
    from kit.image.registry import BaseDigest
    from tests.unit.test_lock import BASE, IMAGE_ID
    from tests.unit.test_lock import wheelhouse as make_wheelhouse

    monkeypatch.setattr(lockmod, "resolve_base_digest",
                        lambda ref, *, offline: BaseDigest(ref, IMAGE_ID, "image-id", IMAGE_ID))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    wheels = make_wheelhouse.__wrapped__(tmp_path)
    out = tmp_path / "deploy"
    out.mkdir()
    (out / ".env").write_text(f"HF_ENDPOINT={hub}\n")
    result = CliRunner().invoke(cli, ["lock", "preset=cpu", "model=org/llama", "--base-image", BASE, "--out", str(out),
                                      "--wheelhouse", str(wheels)])
    assert result.exit_code == 0, result.output
    assert f"model     org/llama main -> {COMMIT} (model.revision, in vllm-kit.yaml)" in result.output
    assert f"model.revision={COMMIT}" in read_record(out).overrides
    assert f'"revision":"{COMMIT}"' in (out / "compose.yaml").read_text().replace(" ", "").replace("\\", "")
    again = CliRunner().invoke(cli, ["lock", "--out", str(out), "--wheelhouse", str(wheels), "--offline"])
    assert again.exit_code == 0, again.output
    assert f"model     org/llama @ {COMMIT} (model.revision, pinned already)" in again.output


def test_kit_lock_pins_a_trust_remote_code_preset_that_validate_refuses_until_pinned(hub, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.image import lock as lockmod
    from kit.image.registry import BaseDigest
    from tests.unit.test_lock import BASE, IMAGE_ID
    from tests.unit.test_lock import wheelhouse as make_wheelhouse

    monkeypatch.setattr(lockmod, "resolve_base_digest",
                        lambda ref, *, offline: BaseDigest(ref, IMAGE_ID, "image-id", IMAGE_ID))
    monkeypatch.setenv("HF_ENDPOINT", hub)
    args = ["preset=cpu", "model=org/llama", "engine.trust_remote_code=true"]
    refused = CliRunner().invoke(cli, ["validate", *args])
    assert refused.exit_code == 1 and "refused with no model.revision" in refused.output
    out = tmp_path / "deploy"
    locked = CliRunner().invoke(cli, ["lock", *args, "--base-image", BASE, "--out", str(out), "--wheelhouse",
                                      str(make_wheelhouse.__wrapped__(tmp_path))])
    assert locked.exit_code == 0, locked.output
    assert f"model     org/llama main -> {COMMIT}" in locked.output
    assert CliRunner().invoke(cli, ["validate", *args, f"model.revision={COMMIT}"]).exit_code == 0


@pytest.fixture()
def hub_env(hub, tmp_path, monkeypatch):
    """The planner's hub look-up pointed at the stand-in, with an empty cache of the test's own."""
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


def test_a_hub_model_is_planned_from_its_config_and_safetensors_headers(hub_env, monkeypatch):
    from kit.config.modelinfo import load_model_spec

    spec = load_model_spec("org/gemma2", hub=True)
    assert spec.source == "hub:org/gemma2"
    assert spec.tie_word_embeddings is True  # Gemma2Config's default: config.json has no such key
    assert dict(spec.weights_bytes_by_dtype) == stored_bytes(GEMMA2_TENSORS)
    assert spec.weights_bytes == sum(stored_bytes(GEMMA2_TENSORS).values())
    weights = REPOS["org/gemma2"]["model.safetensors"]
    assert 0 < SEEN[("bytes", "model.safetensors")] < len(weights) // 10  # the header, not the weights
    asked = dict(SEEN)
    again = load_model_spec("org/gemma2", hub=True)  # the same command plans it again: same bytes, no request
    assert again.weights_bytes == spec.weights_bytes and asked == SEEN
    # config.json is now in the cache: offline, the same id plans from there, without a request
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached = load_model_spec("org/gemma2", hub=True)
    assert cached.source == "hf-cache:org/gemma2" and cached.tie_word_embeddings is True
    assert asked == SEEN


def test_a_sharded_awq_checkpoint_on_the_hub_counts_what_each_shard_stores(hub_env):
    from kit.config.modelinfo import load_model_spec

    spec = load_model_spec("org/awq", hub=True)
    assert dict(spec.weights_bytes_by_dtype) == stored_bytes(AWQ_TENSORS)  # qweight, qzeros I32; scales, fp16 layers
    assert spec.quantization.method == "awq"
    assert spec.stored_bytes_as_loaded("float16") == spec.weights_bytes


def test_offline_mode_refuses_the_network_naming_the_model(hub_env, monkeypatch):
    from kit.config.modelinfo import load_model_spec
    from kit.core.errors import PlanError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PlanError) as info:
        load_model_spec("org/gemma2", hub=True)
    assert "model org/gemma2" in info.value.message and "HF_HUB_OFFLINE is set" in info.value.message
    assert SEEN == {}


def test_a_gated_model_names_hf_token_and_never_echoes_it(hub_env, monkeypatch):
    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.config.modelinfo import load_model_spec
    from kit.core.errors import PlanError

    with pytest.raises(PlanError) as info:
        load_model_spec("org/gated", hub=True)
    assert "model org/gated" in info.value.message and "(gated)" in info.value.message
    assert "HF_TOKEN" in info.value.hint
    secret = "hf_wrong_token_do_not_print_42"
    monkeypatch.setenv("HF_TOKEN", secret)
    result = CliRunner().invoke(cli, ["plan", "--model", "org/gated", "--gpu", "rtx4090"])
    assert result.exit_code == 1
    assert "org/gated" in result.output and "HF_TOKEN is set but has no access" in result.output
    assert secret not in result.output
    assert SEEN[("HEAD", "org/gated")] >= 1  # the stand-in was asked (with the token), and said 401
    with pytest.raises(PlanError, match="has no such model, or it is private"):
        load_model_spec("org/nowhere", hub=True)


def test_kit_render_plans_a_hub_model_and_writes_no_token(hub_env, monkeypatch, tmp_path):
    from click.testing import CliRunner

    from kit.cli.main import cli

    secret = "hf_reader_token_not_for_files_7"
    monkeypatch.setenv("HF_TOKEN", secret)
    out = tmp_path / "deploy"
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "model=org/gemma2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    compose = (out / "compose.yaml").read_text()
    assert "org/gemma2" in compose and "KV cache" in compose  # planned: the plan's summary is in the file
    for path in out.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_an_unreachable_hub_falls_back_to_a_cached_config_and_says_so_without_one(hub_env, monkeypatch, tmp_path):
    import socket

    from kit.config.modelinfo import load_model_spec
    from kit.core.errors import PlanError
    from tests.unit.test_model_sources import hf_cache

    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on (refused at once, no retries)
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    with pytest.raises(PlanError, match=rf"model org/gemma2: the hub at {dead} could not be reached"):
        load_model_spec("org/gemma2", hub=True)
    hf_cache(tmp_path / "hub-cache", "org/gemma2", {"config.json": REPOS["org/gemma2"]["config.json"]})
    spec = load_model_spec("org/gemma2", hub=True)  # config only in the cache: the hub was tried first
    assert spec.source == "hf-cache:org/gemma2" and spec.weights_bytes is None


def test_no_connection_fails_at_once_and_is_asked_once_per_command(hub_env, monkeypatch):
    """A hub with no connection at all (here a refused port; offline, a name that does not resolve) is refused on
    the first request: huggingface_hub's five retries with back-off (23 s, a log line each) wait for nothing, and a
    command that plans twice asks once."""
    import socket

    from huggingface_hub.utils import _http

    from kit.config import modelsource
    from kit.config.modelinfo import load_model_spec
    from kit.core.errors import PlanError

    slept: list[float] = []
    monkeypatch.setattr(_http.time, "sleep", slept.append)
    asked: list[str] = []
    connects = modelsource._connects
    monkeypatch.setattr(modelsource, "_connects", lambda *a: (asked.append(a[0]), connects(*a))[1])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    for _ in range(2):
        with pytest.raises(PlanError, match=rf"model org/llama: the hub at {dead} could not be reached \(ConnectError"):
            load_model_spec("org/llama", hub=True)
    assert slept == [] and asked == ["org/llama"]


@pytest.mark.parametrize("ref", ["org/m.git", "org/m\u00f6del", "org//m", "org/-m"])
def test_an_id_huggingface_hub_refuses_is_refused_as_not_an_id(ref):
    """The planner's hub ids and the preset's model.id hold to huggingface_hub's own rule (kit/core/hubid.py): an id
    it refuses never reaches it (it raised HFValidationError, an internal error, before)."""
    from click.testing import CliRunner

    from kit.cli.main import cli
    from kit.config import modelsource, preset

    assert not modelsource.is_hub_id(ref) and not preset.is_hub_id(ref)
    result = CliRunner().invoke(cli, ["plan", "--model", ref, "--gpu", "h100"])
    assert result.exit_code == 1, result.output
    assert f"model {ref!r}: no such file or folder, and not a Hugging Face id" in result.output
    assert "internal error" not in result.output


def sentinels(tmp_path):
    """Files a fetch must never remove or write: beside the cache, in HF_HOME, and above it."""
    keep = [tmp_path / "keep.txt", tmp_path / "hf" / "keep.txt", tmp_path / "hf" / "hub" / "keep.txt"]
    for path in keep:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    return keep


def files_under(folder):
    """Every file and link below ``folder``, but the fetch script the test puts there itself (host_command)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.name != "fetch_files.py")


@pytest.mark.parametrize("repo", sorted(ESCAPES))
def test_a_listed_name_outside_the_snapshot_is_refused_and_nothing_outside_is_touched(hub, tmp_path, repo):
    keep = sentinels(tmp_path)
    before = files_under(tmp_path)
    result, _ = fetch(hub, tmp_path, repo)
    assert result.returncode == 1, result.stderr
    verdict = result.stdout.strip()
    assert verdict.startswith(f"model not fetched: {repo} (model.id): refused: the listing names "
                              f"{ESCAPES[repo]!r}, which "), verdict
    assert verdict.endswith(": not a plain path inside the snapshot"), verdict
    assert all(path.read_text() == "mine" for path in keep)
    # refused from the listing alone: no file fetched, no snapshot, no ref, no manifest, anywhere
    assert files_under(tmp_path) == before
    assert not any(SEEN.get((method, repo)) for method in ("GET", "HEAD"))


def test_an_endless_body_stops_at_the_listed_size(hub, tmp_path):
    result, took = fetch(hub, tmp_path, "org/endless", KIT_FETCH_ATTEMPTS="1")
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == (
        "model not fetched: org/endless (model.id): refused: model.safetensors: the mirror sent more than the 100 "
        "bytes its listing says (that revision's snapshot was removed; check HF_ENDPOINT, the mirror may serve "
        "other files)")
    written = sum(p.stat().st_size for p in (tmp_path / "hf").rglob("*") if p.is_file() and not p.is_symlink())
    assert written < 1000, written  # config.json and nothing of the endless body
    assert not snapshot_of(tmp_path, "org/endless").exists()
    assert took < 30, took


def test_a_revision_that_is_no_ref_name_is_refused_by_the_preset_and_by_the_fetch(hub, tmp_path):
    from click.testing import CliRunner

    from kit.cli.main import cli

    for revision in ("../../x", "main/../../x", "a//b", "/abs", "x\\y", ".hidden", "v1.lock", "a b"):
        result = CliRunner().invoke(cli, ["validate", "preset=rtx4090-awq", "model.id=org/llama",
                                          f"model.revision={revision}"])
        assert result.exit_code == 1, (revision, result.output)
        assert "override model.revision: " in result.output and "a revision is a 40-hex commit" in result.output
    for revision in ("main", "v1.0", "refs/pr/1", COMMIT):
        result = CliRunner().invoke(cli, ["validate", "preset=rtx4090-awq", "model.id=org/llama",
                                          f"model.revision={revision}"])
        assert "override model.revision: " not in result.output, (revision, result.output)
    # The fetch's own check, for a spec written by hand (or an older render): nothing asked, nothing written.
    keep = sentinels(tmp_path)
    _, _, preset = load_preset("rtx4090-awq", ["model.id=org/llama"])
    command = host_command("rtx4090-awq", preset, "org/llama", tmp_path)
    spec = json.loads(command[-1])
    spec["artefacts"][0]["revision"] = "../../../../x"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KIT_FETCH_"))}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    before = files_under(tmp_path)
    result = subprocess.run([*command[:-1], json.dumps(spec)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert result.stdout.strip() == ("model not fetched: org/llama (model.id): refused: revision '../../../../x' "
                                     "holds '..' or '@{', or ends with '.' or '/'")
    assert files_under(tmp_path) == before and all(path.read_text() == "mine" for path in keep)
    assert not SEEN


def test_the_snapshot_ref_and_manifest_stay_in_the_repos_folder(hub, tmp_path):
    keep = sentinels(tmp_path)
    result, _ = fetch(hub, tmp_path, "org/adapter")
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "hf" / "hub" / "models--org--adapter"
    written = set(files_under(tmp_path))
    outside = {w for w in written if not w.startswith("hf/hub/models--org--adapter/")}
    assert outside == {str(k.relative_to(tmp_path)) for k in keep}
    assert (repo / "refs" / "main").read_text() == COMMIT
    assert (repo / "snapshots" / COMMIT / "vllm-kit-manifest.json").is_file()
    for link in (repo / "snapshots" / COMMIT).iterdir():
        if link.name != "vllm-kit-manifest.json":
            assert link.is_symlink() and link.resolve().parent == (repo / "blobs").resolve()

