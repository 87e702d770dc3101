"""Record the floor: every file vLLM's server processes open, map or read while they serve (GPU machine).

For each model directory given, this starts `python3 -m vllm.entrypoints.cli.main serve DIR --load-format dummy`
with a cold compile cache, waits for /health, sends a few requests (models, completion, chat, streaming), stops
the server, and records three signals, each catching what the others miss:
- /proc/<pid>/maps, /proc/<pid>/fd and /proc/<pid>/exe of the server and all its descendants, polled every
  POLL_S seconds: shared libraries dlopened by C code (CUDA, cuBLAS, NCCL, Triton's libs);
- the audit hook of sitecustomize.py beside this file: every path Python opens (.py files read once at import),
  and every program started (ptxas, gcc for Triton's launcher);
- access times: before each run every file under the site dirs gets an old atime; with relatime, any read
  (also by gcc, ptxas or C++ code that never maps the file) sets it to now.
Then it writes, under OUT: floor.json (per model and the union, each path relative to its site dir, with its
size and distribution), inventory.tsv.xz (every file of the site dirs: site, path, size, distribution) and
provenance.json. Standard library only (the GPU machine's python3 has no kit dependencies).

    python3 scripts/floor/record_floor.py OUT NAME=MODEL_DIR[:extra serve args] ...
"""

from __future__ import annotations

import json
import lzma
import os
import shlex
import site
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

POLL_S = 0.25
# A cold start of vLLM 0.33 with FlashInfer's JIT (nvcc builds its sampler first) takes longer than 0.26 did.
READY_TIMEOUT_S = int(os.environ.get("FLOOR_READY_TIMEOUT_S", "170"))
OLD_ATIME = 978307200  # 2001-01-01: older than any mtime in a wheel, so relatime updates it on the next read
HERE = Path(__file__).resolve().parent


def site_dirs() -> list[Path]:
    """Where the server's packages live: PYTHONPATH entries and the interpreter's site-packages."""
    dirs = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p and Path(p).is_dir()]
    dirs += [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    seen, out = set(), []
    for d in dirs:
        r = d.resolve()
        if r not in seen and r != HERE:
            seen.add(r)
            out.append(r)
    return out


def regular_files(root: Path):
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                yield path


def age_atimes(roots: list[Path]) -> int:
    count = 0
    for root in roots:
        for path in regular_files(root):
            try:
                st = os.stat(path)
                os.utime(path, ns=(OLD_ATIME * 10**9, st.st_mtime_ns))
                count += 1
            except OSError:
                pass
    return count


def read_since(roots: list[Path], since: float) -> set[str]:
    out = set()
    for root in roots:
        for path in regular_files(root):
            try:
                if os.stat(path).st_atime >= since - 1:
                    out.add(path)
            except OSError:
                pass
    return out


def descendants(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.paths, self.pids, self.stop = pid, set(), set(), threading.Event()
        self.polls = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in descendants(self.pid):
                self.pids.add(pid)
                try:
                    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                        parts = line.split(None, 5)
                        if len(parts) == 6 and parts[5].startswith("/"):
                            self.paths.add(parts[5].replace(" (deleted)", ""))
                    fd_dir = f"/proc/{pid}/fd"
                    for fd in os.listdir(fd_dir):
                        try:
                            target = os.readlink(f"{fd_dir}/{fd}")
                        except OSError:
                            continue
                        if target.startswith("/"):
                            self.paths.add(target)
                    self.paths.add(os.readlink(f"/proc/{pid}/exe"))
                except OSError:
                    continue
            self.polls += 1
            self.stop.wait(POLL_S)


def http(method: str, url: str, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except Exception as error:  # noqa: BLE001 - recorded, not raised
        return getattr(error, "code", 0) or 0, str(error)


def requests(port: int, name: str) -> list[dict]:
    base = f"http://127.0.0.1:{port}"
    calls = [
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", {"model": name, "prompt": "Hello, my name is", "max_tokens": 16,
                                     "ignore_eos": True}),
        ("POST", "/v1/completions", {"model": name, "prompt": [1, 2, 3, 4, 5], "max_tokens": 8, "n": 2,
                                     "temperature": 0.8, "ignore_eos": True}),
        ("POST", "/v1/chat/completions", {"model": name, "max_tokens": 16, "ignore_eos": True,
                                          "messages": [{"role": "user", "content": "Say hi"}]}),
        ("POST", "/v1/chat/completions", {"model": name, "max_tokens": 8, "stream": True,
                                          "messages": [{"role": "user", "content": "Count"}]}),
    ]
    out = []
    for method, path, body in calls:
        status, text = http(method, base + path, body)
        out.append({"request": f"{method} {path}", "status": status, "body": text[:400]})
    return out


def serve_once(name: str, model_dir: str, extra: list[str], work: Path, port: int, roots: list[Path]) -> dict:
    audit = work / f"audit-{name}"
    cache = work / f"cache-{name}"  # cold: a fresh compile cache per model
    audit.mkdir(parents=True)
    env = dict(os.environ, FLOOR_AUDIT_DIR=str(audit), VLLM_CACHE_ROOT=str(cache),
               TRITON_CACHE_DIR=str(cache / "triton"), TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
               PYTHONPATH=f"{HERE}:{os.environ.get('PYTHONPATH', '')}")
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dir, "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy",
            "--gpu-memory-utilization", "0.3", "--max-model-len", "4096", "--max-num-seqs", "16",
            "--max-num-batched-tokens", "2048", *extra]
    aged = age_atimes(roots)
    started = time.time()
    log = open(work / f"{name}.log", "w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    ready_at, answers = None, []
    deadline = started + READY_TIMEOUT_S
    while time.time() < deadline and proc.poll() is None:
        if http("GET", f"http://127.0.0.1:{port}/health", timeout=5)[0] == 200:
            ready_at = time.time()
            break
        time.sleep(1)
    if ready_at:
        answers = requests(port, name)
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    sampler.stop.set()
    sampler.join()
    log.close()
    audited: dict[str, set[str]] = {"open": set(), "exec": set(), "dlopen": set()}
    for path in audit.glob("audit.*.txt"):
        for line in path.read_text(errors="replace").splitlines():
            kind, _, value = line.partition("\t")
            audited.setdefault(kind, set()).add(value)
    return {"name": name, "argv": argv, "ready_s": round(ready_at - started, 1) if ready_at else None,
            "answers": answers, "pids": len(sampler.pids), "polls": sampler.polls, "atime_aged": aged,
            "proc": sampler.paths, "audit_open": audited["open"], "audit_exec": audited["exec"],
            "audit_dlopen": audited["dlopen"], "atime": read_since(roots, started)}


def distributions(roots: list[Path]) -> dict[str, str]:
    """Absolute file path -> distribution name, from every dist-info RECORD (what the image's RECORDs say too)."""
    owner = {}
    for root in roots:
        for record in root.glob("*.dist-info/RECORD"):
            dist = record.parent.name.split("-")[0]
            for line in record.read_text(errors="replace").splitlines():
                rel = line.rsplit(",", 2)[0]
                if rel:
                    owner[os.path.normpath(str(root / rel))] = dist
    return owner


def normalise(path: str, roots: list[Path]) -> tuple[str, str] | None:
    """(site index or 'system', path relative to it); __pycache__/x.cpython-312.pyc counts as x.py."""
    path = os.path.normpath(path)
    if "/__pycache__/" in path and path.endswith(".pyc"):
        head, tail = path.split("/__pycache__/")
        path = f"{head}/{tail.split('.')[0]}.py"
    for i, root in enumerate(roots):
        if path.startswith(str(root) + "/"):
            return f"site{i}", path[len(str(root)) + 1:]
    if path.startswith(("/proc", "/dev", "/sys", "/tmp", "/root/floor", str(HERE.parent.parent) + "/")):
        return None
    return "system", path


def main() -> int:
    out = Path(sys.argv[1])
    work = Path("/root/floor")
    work.mkdir(parents=True, exist_ok=True)
    roots = site_dirs()
    runs = []
    for i, spec in enumerate(sys.argv[2:]):
        name, _, rest = spec.partition("=")
        model_dir, _, extra = rest.partition(":")
        print(f"[{time.strftime('%X')}] serving {name}", flush=True)
        run = serve_once(name, model_dir, shlex.split(extra), work, 18000 + i, roots)
        print(f"[{time.strftime('%X')}] {name}: ready {run['ready_s']} s, "
              f"{[a['status'] for a in run['answers']]}, {len(run['proc'])} mapped/open, "
              f"{len(run['audit_open'])} audited, {len(run['atime'])} read", flush=True)
        runs.append(run)
    owner = distributions(roots)
    files: dict[tuple[str, str], dict] = {}
    for run in runs:
        for signal in ("proc", "audit_open", "audit_exec", "audit_dlopen", "atime"):
            for raw in run[signal]:
                norm = normalise(raw, roots)
                if norm is None:
                    continue
                absolute = os.path.normpath(raw if norm[0] == "system" else str(roots[int(norm[0][4:])] / norm[1]))
                if not os.path.isfile(absolute):
                    continue
                entry = files.setdefault(norm, {"where": norm[0], "path": norm[1], "size": os.path.getsize(absolute),
                                                "dist": owner.get(absolute), "signals": set(), "models": set()})
                entry["signals"].add(signal)
                entry["models"].add(run["name"])
    floor = {"sites": {f"site{i}": str(r) for i, r in enumerate(roots)},
             "runs": [{**{k: v for k, v in run.items() if not isinstance(v, set)},
                       "programs": sorted(run["audit_exec"])} for run in runs],
             "files": sorted(({**e, "signals": sorted(e["signals"]), "models": sorted(e["models"])}
                              for e in files.values()), key=lambda e: (e["where"], e["path"]))}
    (out / "floor.json").write_text(json.dumps(floor, indent=1))
    rows = []
    for i, root in enumerate(roots):
        for path in regular_files(root):
            rows.append(f"site{i}\t{os.path.relpath(path, root)}\t{os.path.getsize(path)}\t{owner.get(path, '')}")
    with lzma.open(out / "inventory.tsv.xz", "wt") as handle:
        handle.write("\n".join(rows) + "\n")
    print(f"floor: {len(files)} files, {sum(e['size'] for e in files.values())} bytes; inventory {len(rows)} files")
    return 0 if all(r["ready_s"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
