"""Where a vLLM start goes, with real-size weights: run on the lent GPU machine (issue 24).

Writes random safetensors with each model's true tensor names, shapes and dtypes into a Hugging Face cache in the
layout a hub checkout has (blobs named by their sha256, a snapshot of links, refs/main), then starts `vllm serve
ORG/NAME` offline from that cache, case after case, and times each start: every output line gets the harness's
clock (`[+SECONDS] line`), /health is polled every 0.25 s, and a streamed completion is sent as soon as it answers
(its first chunk is the first token). bench/start_report.py (`make bench-start`) splits the committed logs into
phases with kit/run/startphases.py.

Each case says which caches survive from an earlier case, as the kit's volumes would keep them:
- `volumes: today`: what the kit rendered before issue 24: VLLM_CACHE_ROOT and FlashInfer's workspace on the
  volume; Triton's, inductor's and CUDA's caches in HOME and /tmp, which are tmpfs in the container (fresh here).
- `volumes: kit`: every cache on the volume (kit/data/startcache.yaml).
- `pyc: false`: no byte-code (the image deleted it and its root is read-only): PYTHONDONTWRITEBYTECODE with an
  empty PYTHONPYCACHEPREFIX, so Python compiles every module it imports, in every process.
- `drop: true`: the weights' page cache dropped first (drop_caches, else posix_fadvise DONTNEED per file; the
  residency measured with mincore before and after).

    python3 bench/start_timing.py --out $OUT --work /root/st24 --budget 560 [--cases a,b]
Results accumulate in --work (a second call on the still warm machine carries on); OUT/start.tar.xz holds the logs.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import hashlib
import http.client
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Serve flags: the 8B on the H200 at 0.90 with max_num_seqs 256 (capture sizes up to 512, vLLM 0.33's default
# min(2 * max_num_seqs, 512)); the AWQ model with rtx4090-awq's own flags and 0.90 of a 24 GiB card's bytes.
MODELS = {
    "q8": dict(id="Qwen/Qwen3-8B", shards=5,
               flags=["--dtype", "bfloat16", "--max-model-len", "8192", "--max-num-seqs", "256",
                      "--gpu-memory-utilization", "0.9"]),
    "awq": dict(id="Qwen/Qwen3-8B-AWQ", shards=2,
                flags=["--dtype", "float16", "--max-model-len", "8192", "--max-num-seqs", "16",
                       "--quantization", "awq_marlin", "--gpu-memory-utilization", "0.1522",
                       "--max-num-batched-tokens", "2048"]),
}

# name -> model, cache set, fresh (start the cache set empty), volumes, pyc, plan (VLLM_ENABLE_STARTUP_PLAN),
# drop (page cache), loader (--load-format), flashinfer (share another set's FlashInfer workspace),
# fork (runtime.fork_engine).
CASES: dict[str, dict] = {
    "q8-first": dict(model="q8", cache="Q", fresh=True, volumes="kit", pyc=True, plan=True, drop=True),
    "q8-restart-today": dict(model="q8", cache="Q", volumes="today", pyc=False, plan=False, drop=False),
    "q8-restart": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=False),
    "q8-restart-dropped": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=True),
    "q8-fastsafetensors": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=True,
                               loader="fastsafetensors"),
    "q8-instanttensor": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=True,
                             loader="instanttensor"),
    "q8-runai": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=True, loader="runai_streamer"),
    "q8-restart-noplan": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=False, drop=False),
    "awq-first": dict(model="awq", cache="A", fresh=True, volumes="kit", pyc=True, plan=True, drop=True,
                      flashinfer="Q"),
    "awq-restart": dict(model="awq", cache="A", volumes="kit", pyc=True, plan=True, drop=False),
    "awq-restart-dropped": dict(model="awq", cache="A", volumes="kit", pyc=True, plan=True, drop=True),
    "awq-restart-today": dict(model="awq", cache="A", volumes="today", pyc=False, plan=False, drop=False),
    # Issue 37 at vLLM 0.34 (--vllm-version 0.34.0), FlashInfer's sampler compiled ahead of time as a slim image
    # ships it. `vllm serve` sets VLLM_WORKER_MULTIPROC_METHOD=spawn unless the environment names a method
    # (vllm/entrypoints/common/startup.py cli_env_setup), so the engine core process imports torch and vLLM again;
    # `fork` (the library's default; vllm/utils/system_utils.py still forces spawn once CUDA is initialised) lets it
    # inherit the API server's imports.
    "q8-restart-fork": dict(model="q8", cache="Q", volumes="kit", pyc=True, plan=True, drop=False, fork=True),
    "awq-restart-fork": dict(model="awq", cache="A", volumes="kit", pyc=True, plan=True, drop=False, fork=True),
    # First starts as the kit renders them now (fork), caches empty and the weights' page cache dropped; the AWQ one
    # shares no FlashInfer workspace (its sampler is the image's precompiled one, as the 8B's).
    "q8-first-fork": dict(model="q8", cache="Q", fresh=True, volumes="kit", pyc=True, plan=True, drop=True, fork=True),
    "awq-first-fork": dict(model="awq", cache="A", fresh=True, volumes="kit", pyc=True, plan=True, drop=True,
                           fork=True),
}
VLLM_VERSION = "0.33.0"  # the release the kit's cache layout is asked for (--vllm-version)

PROMPT = "The capital of France is"


# --------------------------------------------------------------------------- weights in a hub layout
def tensor_specs(config: dict, quant: dict | None) -> list[tuple[str, list[int], str]]:
    """(name, shape, dtype) of a Qwen3 checkpoint as published: HF names, AWQ GEMM packing when quantised
    (qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 [in/g, out])."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv, d = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    dense = "bfloat16" if config.get("torch_dtype") == "bfloat16" else "float16"
    specs: list[tuple[str, list[int], str]] = [("model.embed_tokens.weight", [vocab, h], dense)]

    def linear(name: str, out_f: int, in_f: int) -> None:
        if quant is None:
            specs.append((f"{name}.weight", [out_f, in_f], dense))
            return
        g, pack = quant["group_size"], 32 // quant["bits"]
        specs.extend([(f"{name}.qweight", [in_f, out_f // pack], "int32"),
                      (f"{name}.qzeros", [in_f // g, out_f // pack], "int32"),
                      (f"{name}.scales", [in_f // g, out_f], "float16")])

    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        specs += [(f"{p}.input_layernorm.weight", [h], dense), (f"{p}.post_attention_layernorm.weight", [h], dense),
                  (f"{p}.self_attn.q_norm.weight", [d], dense), (f"{p}.self_attn.k_norm.weight", [d], dense)]
        linear(f"{p}.self_attn.q_proj", heads * d, h)
        linear(f"{p}.self_attn.k_proj", kv * d, h)
        linear(f"{p}.self_attn.v_proj", kv * d, h)
        linear(f"{p}.self_attn.o_proj", h, heads * d)
        linear(f"{p}.mlp.gate_proj", inter, h)
        linear(f"{p}.mlp.up_proj", inter, h)
        linear(f"{p}.mlp.down_proj", h, inter)
    specs += [("model.norm.weight", [h], dense), ("lm_head.weight", [vocab, h], dense)]
    return specs


def make_tensor(name: str, shape: list[int], dtype: str):
    import torch

    dt = getattr(torch, dtype)
    if dtype == "int32":
        return torch.randint(-2**31, 2**31 - 1, shape, dtype=dt, device="cuda").cpu()
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=dt)
    scale = 0.002 if name.endswith(".scales") else 0.02
    return (torch.randn(shape, dtype=torch.float32, device="cuda") * scale).to(dt).cpu()


def write_hub_model(hf_home: Path, key: str) -> dict:
    """The model's files in HF_HOME/hub/models--ORG--NAME as a hub download leaves them; returns facts."""
    from safetensors.torch import save as st_save

    from kit.config.modelinfo import catalog_path
    from kit.config.tinymodel import make_tiny_model
    from kit.run.probe import TOKENIZER_FILES

    model = MODELS[key]
    repo = hf_home / "hub" / ("models--" + model["id"].replace("/", "--"))
    done = repo / "kit-written.json"
    if done.is_file():
        return json.loads(done.read_text())
    started = time.monotonic()
    config = {k: v for k, v in json.loads(catalog_path(model["id"]).read_text()).items() if not k.startswith("_")}
    specs = tensor_specs(config, config.get("quantization_config"))
    per_shard = -(-len(specs) // model["shards"])
    revision = hashlib.sha1(model["id"].encode(), usedforsecurity=False).hexdigest()  # commit-shaped; no hub here
    blobs, snap = repo / "blobs", repo / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)

    def put(name: str, data: bytes) -> None:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        link = snap / name
        link.unlink(missing_ok=True)
        link.symlink_to(Path("../../blobs") / digest)

    weight_map, total = {}, 0
    n = model["shards"]
    for s in range(n):
        shard = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        tensors = {name: make_tensor(name, shape, dt) for name, shape, dt in specs[s * per_shard:(s + 1) * per_shard]}
        for name, t in tensors.items():
            weight_map[name] = shard
            total += t.numel() * t.element_size()
        put(shard, st_save(tensors, metadata={"format": "pt"}))
        del tensors
    put("model.safetensors.index.json",
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode())
    put("config.json", json.dumps(config, indent=2).encode())
    put("generation_config.json", json.dumps({"do_sample": False, "eos_token_id": 2}).encode())
    tiny = make_tiny_model(hf_home / "tiny-tokenizer")
    for name in sorted(os.listdir(tiny)):
        if name in TOKENIZER_FILES or name.startswith(("tokenizer", "special_tokens")):
            put(name, (tiny / name).read_bytes())
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    os.sync()
    facts = {"model": model["id"], "bytes": total, "files": sorted(os.listdir(snap)), "revision": revision,
             "tensors": len(specs), "write_s": round(time.monotonic() - started, 1),
             "tokenizer": "the kit's tiny model's (kit/config/tinymodel.py): no hub here"}
    done.write_text(json.dumps(facts, indent=2))
    return facts


def weight_files(hf_home: Path, key: str) -> list[Path]:
    repo = hf_home / "hub" / ("models--" + MODELS[key]["id"].replace("/", "--"))
    return sorted((repo / "blobs").iterdir())


# --------------------------------------------------------------------------- page cache
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_fraction(files: list[Path]) -> float:
    page = mmap.PAGESIZE
    total = resident = 0
    for path in files:
        size = path.stat().st_size
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            pages = (size + page - 1) // page
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) == 0:
                resident += sum(b & 1 for b in vec.raw)
            total += pages
            _libc.munmap(addr, size)
        finally:
            os.close(fd)
    return round(resident / total, 4) if total else 0.0


def drop_page_cache(files: list[Path]) -> dict:
    before = resident_fraction(files)
    os.sync()
    method = "drop_caches"
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        method = f"posix_fadvise DONTNEED (drop_caches: {exc.strerror})"
    if resident_fraction(files) > 0.01:
        if method == "drop_caches":
            method = "drop_caches, then posix_fadvise DONTNEED"
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return {"method": method, "resident_before": before, "resident_after": resident_fraction(files)}


# --------------------------------------------------------------------------- a case
def venv_site() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def case_env(case: dict, work: Path, run_dir: Path) -> dict[str, str]:
    cache = work / "cache" / case["cache"]
    home = run_dir / "home"  # the container's HOME and /tmp are tmpfs: fresh every start
    tmp = run_dir / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "TMPDIR": str(tmp), "HF_HOME": str(work / "hf"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1",
           "VLLM_CACHE_ROOT": str(cache / "vllm"),
           "FLASHINFER_WORKSPACE_BASE": str(work / "cache" / case.get("flashinfer", case["cache"]) / "vllm"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "TRITON_CACHE_DIR": str(home / ".triton" / "cache")}
    if case["volumes"] == "kit":
        from kit.deploy.startcache import cache_env

        # fork: the kit's runtime.fork_engine (VLLM_WORKER_MULTIPROC_METHOD=fork); off, `vllm serve` spawns, as the
        # kit rendered before and as the recorded restarts without it ran.
        env.update(cache_env(str(cache / "vllm"), gpu=True, vllm_version=VLLM_VERSION,
                             fork_engine=bool(case.get("fork"))))
        if case.get("flashinfer"):
            env["FLASHINFER_WORKSPACE_BASE"] = str(work / "cache" / case["flashinfer"] / "vllm")
    env["VLLM_ENABLE_STARTUP_PLAN"] = "1" if case.get("plan") else "0"
    if not case.get("pyc", True):
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(run_dir / "no-pyc")  # an empty tree: no __pycache__ is read
    return env


def health(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def first_token(port: int, served: str, t0: float) -> dict:
    body = json.dumps({"model": served, "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "stream": True})
    sent = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = None
        chunks = 0
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data:") and b"[DONE]" not in line:
                chunks += 1
                first = first or time.monotonic()
        conn.close()
        return {"status": resp.status, "chunks": chunks, "sent_at": round(sent - t0, 3),
                "first_token_at": round(first - t0, 3) if first else None,
                "first_token_after_request_s": round(first - sent, 3) if first else None,
                "done_at": round(time.monotonic() - t0, 3)}
    except OSError as exc:
        return {"error": str(exc)}


def run_case(name: str, case: dict, work: Path, timeout: float) -> dict:
    from kit.run.probe import free_port

    model = MODELS[case["model"]]
    run_dir = work / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    cache = work / "cache" / case["cache"]
    if case.get("fresh"):
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    facts: dict = {"case": case}
    if case.get("drop"):
        facts["page_cache"] = drop_page_cache(weight_files(work / "hf", case["model"]))
    else:
        facts["page_cache"] = {"resident_before": resident_fraction(weight_files(work / "hf", case["model"]))}
    env = case_env(case, work, run_dir)
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model["id"], "--served-model-name", "m",
            "--host", "127.0.0.1", "--port", str(port), *model["flags"]]
    if case.get("loader"):
        argv += ["--load-format", case["loader"]]
    facts.update(argv=argv, env=env)
    log = open(work / f"{name}.log", "w")  # noqa: SIM115
    t0 = time.monotonic()
    facts["wall_start"] = time.time()
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            log.write(f"[+{time.monotonic() - t0:.3f}] {raw.decode(errors='replace').rstrip()}\n")
            log.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    ready_at = None
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        if health(port):
            ready_at = time.monotonic() - t0
            break
        time.sleep(0.25)
    facts["ready_s"] = round(ready_at, 3) if ready_at else None
    if ready_at:
        facts["completion"] = first_token(port, "m", t0)
    facts["exit_code"] = proc.poll()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    reader.join(5)
    log.close()
    facts["left_in_home"] = du_tree(run_dir / "home")
    facts["left_in_tmp"] = du_tree(run_dir / "tmp")
    facts["cache_set"] = du_tree(cache / "vllm")
    shutil.rmtree(run_dir, ignore_errors=True)
    return facts


def du_tree(root: Path, depth: int = 2) -> dict[str, int]:
    """Bytes under each folder up to `depth` below root (what a start left where)."""
    sizes: dict[str, int] = {}
    if not root.is_dir():
        return sizes
    for dirpath, _dirs, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        key = str(Path(*rel.parts[:depth])) if rel.parts else "."
        sizes[key] = sizes.get(key, 0) + sum((Path(dirpath) / f).lstat().st_size for f in files)
    return {k: v for k, v in sorted(sizes.items()) if v}


# --------------------------------------------------------------------------- setup steps
def install_loaders(wheels: Path) -> str:
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if not found:
        return "no loader wheels carried"
    site = venv_site()
    done = subprocess.run(["python3", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade",
                           "--target", str(site), *map(str, found)], capture_output=True, text=True, timeout=300)
    return f"exit {done.returncode}: {[p.name for p in found]} {done.stderr[-800:]}"


def import_seconds(pyc: bool, scratch: Path) -> float:
    env = dict(os.environ)
    if not pyc:
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(scratch / f"no-pyc-{time.time_ns()}"))
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vllm.entrypoints.cli.main, vllm.entrypoints.openai.api_server, "
                    "vllm.v1.engine.core"], env=env, check=True, capture_output=True, timeout=300)
    return round(time.monotonic() - started, 2)


def pyc_bytes(site: Path) -> int:
    return sum(p.stat().st_size for p in site.rglob("*.pyc"))


def setup(work: Path, results: dict, wheels: Path, models: list[str], quick: bool = False) -> None:
    """``quick``: no import timings without byte-code (a minute), only the byte-code and the named models."""
    if "setup" in results:
        return
    facts: dict = {"loaders": install_loaders(wheels)}
    site = venv_site()
    facts["pyc_bytes_before"] = pyc_bytes(site)
    if not quick:
        facts["import_s_no_pyc"] = [import_seconds(False, work), import_seconds(False, work)]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode",
                           "unchecked-hash", str(site)], capture_output=True, text=True, timeout=400)
    facts["compileall_s"] = round(time.monotonic() - started, 1)
    facts["compileall_exit"] = done.returncode
    facts["pyc_bytes_after"] = pyc_bytes(site)
    facts["import_s_pyc"] = [import_seconds(True, work)] if quick else [import_seconds(True, work),
                                                                       import_seconds(True, work)]
    for key in models:
        facts[f"weights_{key}"] = write_hub_model(work / "hf", key)
    facts["nproc"] = os.cpu_count()
    facts["disk"] = shutil.disk_usage(work)._asdict()
    results["setup"] = facts


def pack(work: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "start.tar.xz.tmp"
    with tarfile.open(tmp, "w:xz") as tar:
        for path in sorted(work.iterdir()):
            if path.is_file():
                tar.add(path, arcname=f"start/{path.name}")
    tmp.replace(out / "start.tar.xz")


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--out", type=Path, required=True)
    cli.add_argument("--work", type=Path, default=Path("/root/st24"))
    cli.add_argument("--budget", type=float, default=560)
    cli.add_argument("--cases", default="")
    cli.add_argument("--wheels", type=Path, default=ROOT / ".gpl")
    cli.add_argument("--vllm-version", default="0.33.0", help="the release the kit's cache layout is asked for")
    cli.add_argument("--quick-setup", action="store_true", help="skip the import timings without byte-code")
    args = cli.parse_args()
    global VLLM_VERSION
    VLLM_VERSION = args.vllm_version
    started = time.monotonic()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    results_path = work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    names = [n for n in (args.cases.split(",") if args.cases else CASES) if n]
    try:
        setup(work, results, args.wheels, sorted({CASES[n]["model"] for n in names}), quick=args.quick_setup)
    finally:
        results_path.write_text(json.dumps(results, indent=2, default=str))
        pack(work, args.out)
    print("setup:", json.dumps({k: v for k, v in results.get("setup", {}).items() if not k.startswith("weights")}),
          flush=True)
    for name in names:
        if results.get(name, {}).get("ready_s"):
            continue
        left = args.budget - (time.monotonic() - started)
        need = 200 if CASES[name].get("fresh") else 75
        if left < need:
            print(f"[{name}] skipped: {left:.0f} s left, needs ~{need}", flush=True)
            continue
        try:
            results[name] = run_case(name, CASES[name], work, timeout=min(420, left - 30))
        except Exception as exc:  # noqa: BLE001 - one broken case must not cost the rest of the call
            results[name] = {"driver_error": f"{type(exc).__name__}: {exc}"}
        r = results[name]
        print(f"[{name}] ready={r.get('ready_s')} first_token={r.get('completion', {}).get('first_token_at')} "
              f"page={r.get('page_cache')} exit={r.get('exit_code')} err={r.get('driver_error')}", flush=True)
        results_path.write_text(json.dumps(results, indent=2, default=str))
        pack(work, args.out)
    print("done:", [n for n in CASES if results.get(n, {}).get("ready_s")], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
