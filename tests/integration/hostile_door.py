"""The rendered front door (kit/deploy/door.py) against a recording backend, for hostile requests.

Shared by tests/integration/test_door_hostile.py (a fixed set) and bench/fuzz_door.py (`make fuzz`, generated ones).
Two containers on a network of their own: the door's stand-in image (tests/integration/standins/haproxy/) running
the config `kit render` writes for a preset, published on 127.0.0.1 only, and a recording backend on the same image's
Python (the local base's python3), answering as the server's name (`vllm`) on that network, that prints one JSON line
per request it receives. Requests are raw bytes on a socket, so header tricks reach the door as written.

What may reach the backend (``violations``): an allowed route by exact path and method, one Host header naming the
door, the key on every route but the open ones, one Content-Length within the cap, no Transfer-Encoding, no Origin.
"""

from __future__ import annotations

import json
import random
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kit.deploy.door import Route, door_data, loopback_host

KEY = "fuzz-key-0123456789"
HOST = "127.0.0.1:8000"  # as a client of a stack published on runtime.port 8000 sends it
CASE_HEADER = "X-Fuzz-Case"

# The recording backend: any method, any path; the body read by Content-Length or chunks; one JSON line per request,
# written to a file before the answer, so a client that has its answer finds the line there (`docker logs` lags).
RECORDER = r'''
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _any(self):
        entry = {"method": self.command, "path": self.path, "version": self.request_version,
                 "headers": [[k, v] for k, v in self.headers.items()]}
        try:
            if self.headers.get("Transfer-Encoding"):
                size = 0
                while True:
                    n = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if n == 0:
                        self.rfile.readline()
                        break
                    size += len(self.rfile.read(n))
                    self.rfile.readline()
            else:
                size = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            entry["body"] = size
        except Exception as exc:
            entry["body_error"] = repr(exc)
        with LOCK:
            LOG.write(json.dumps(entry) + "\n")
            LOG.flush()
        out = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._any
        raise AttributeError(name)

    def log_message(self, *args):
        pass

LOCK = threading.Lock()
LOG = open("/tmp/requests.jsonl", "a", encoding="utf-8")
ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Recorder).serve_forever()
'''


@dataclass
class Case:
    label: str
    raw: bytes
    expect: set[int] | None = None  # door statuses the case must get (None: any, the invariant alone decides)
    must_reach: bool = False  # a control: a legitimate request that has to reach the backend
    read_timeout: float = 10.0
    status: int = -1  # filled by send(): 0 when the door closed without an answer
    reached: list[dict] = field(default_factory=list)


def request(method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"", *,
            version: str = "HTTP/1.1", case_id: str = "") -> bytes:
    lines = [f"{method} {target} {version}", *(f"{k}: {v}" for k, v in headers)]
    if case_id:
        lines.append(f"{CASE_HEADER}: {case_id}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def auth() -> tuple[str, str]:
    return ("Authorization", f"Bearer {KEY}")


def json_body(size: int = 0) -> bytes:
    text = json.dumps({"model": "m", "prompt": "x" * max(0, size - 32), "max_tokens": 1})
    return text.encode()


def post(path: str, body: bytes, *extra: tuple[str, str], host: str = HOST, key: bool = True) -> list[tuple[str, str]]:
    return [("Host", host), *([auth()] if key else []), ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))), *extra]


def send(port: int, case: Case, *, connect_timeout: float = 5.0) -> int:
    """Send the case's bytes to 127.0.0.1:port and return the status of the first answer (0: none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=connect_timeout) as sock:
        sock.settimeout(case.read_timeout)
        try:
            sock.sendall(case.raw)
        except OSError:  # the door answered and closed before the whole body went (a 413): read what it said
            pass
        data = b""
        deadline = time.monotonic() + case.read_timeout
        try:
            while b"\r\n" not in data and time.monotonic() < deadline:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    first = data.split(b"\r\n", 1)[0].split()
    case.status = int(first[1]) if len(first) >= 2 and first[0].startswith(b"HTTP/") and first[1].isdigit() else 0
    return case.status


def violations(entry: dict, routes: list[Route], hosts: list[str], key: str) -> list[str]:
    """Why a request the backend received should not have passed the door (empty: it may)."""
    problems = []
    headers = [(k.lower(), v) for k, v in entry["headers"]]
    values = {name: [v for k, v in headers if k == name] for name in
              ("host", "authorization", "content-length", "transfer-encoding", "origin")}
    path = entry["path"].split("?", 1)[0]
    route = next((r for r in routes if r.path == path), None)
    if route is None:
        problems.append(f"path {entry['path']!r} is no route")
    elif entry["method"] not in route.methods:
        problems.append(f"method {entry['method']!r} not allowed on {path}")
    if len(values["host"]) != 1 or (values["host"][0].lower() not in hosts and not loopback_host(values["host"][0])):
        problems.append(f"Host {values['host']!r}")
    if route is not None and not route.open and values["authorization"] != [f"Bearer {key}"]:
        problems.append(f"Authorization {values['authorization']!r}")
    cap = int(door_data()["body_max_bytes"])
    if values["transfer-encoding"]:
        problems.append(f"Transfer-Encoding {values['transfer-encoding']!r}")
    if len(values["content-length"]) > 1 or any(not v.isdigit() or int(v) > cap for v in values["content-length"]):
        problems.append(f"Content-Length {values['content-length']!r}")
    if entry.get("body", 0) > cap:
        problems.append(f"a body of {entry['body']} bytes")
    if values["origin"]:
        problems.append("Origin reached the server")
    return problems


@dataclass
class Bench:
    port: int
    recorder: object  # docker container
    door: object

    def entries(self) -> list[dict]:
        out = []
        code, text = self.recorder.exec_run(["cat", "/tmp/requests.jsonl"])
        if code != 0:
            raise RuntimeError(f"the recording backend's log: {text[:300]!r}")
        for line in text.decode(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def door_logs(self, tail: int = 20) -> str:
        return self.door.logs(tail=tail).decode(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def door_bench(client, image: str, config_text: str, *, prefix: str = "door-hostile",
               backend: str = "vllm", key: str = KEY, pod_namespace: str | None = None,
               health_host: str = HOST) -> Iterator[Bench]:
    """The door and its recording backend, started and removed (even on failure); waits until /health passes.

    Compose: the backend answers as ``backend`` on the bench's network, port 8000. Kubernetes (``pod_namespace``):
    the backend shares the door's network namespace, as the server shares its pod's, on 127.0.0.1:8001, and the door
    gets POD_NAMESPACE as the downward API gives it."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    config_path = door_data()["config_path"]
    network = client.networks.create(name, driver="bridge")
    made = []

    def recorder_container(listen: list[str], **kwargs):
        container = client.containers.create(image, ["python3", "-u", "-c", RECORDER, *listen],
                                             name=f"{name}-backend", read_only=True, cap_drop=["ALL"],
                                             tmpfs={"/tmp": "size=64m"}, **kwargs)
        made.append(container)
        return container

    try:
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            cfg = Path(tmp) / "haproxy.cfg"
            cfg.write_text(config_text)
            cfg.chmod(0o644)
            Path(tmp).chmod(0o755)
            if pod_namespace is None:
                recorder = recorder_container(["0.0.0.0", "8000"], network=name)
                network.disconnect(recorder)
                network.connect(recorder, aliases=[backend])
                recorder.start()
            port = free_port()
            door = client.containers.create(
                image, ["haproxy", "-db", "-f", config_path], entrypoint=[], name=f"{name}-door", network=name,
                environment={"VLLM_API_KEY": key, **({"POD_NAMESPACE": pod_namespace} if pod_namespace else {})},
                volumes={str(cfg): {"bind": config_path, "mode": "ro"}},
                ports={"8000/tcp": ("127.0.0.1", port)}, read_only=True, cap_drop=["ALL"])
            made.append(door)
            door.start()
            if pod_namespace is not None:
                recorder = recorder_container(["127.0.0.1", "8001"], network_mode=f"container:{door.id}")
                recorder.start()
            bench = Bench(port=port, recorder=recorder, door=door)
            deadline = time.monotonic() + 30
            probe = Case("health", request("GET", "/health", [("Host", health_host)]), read_timeout=2)
            while True:
                try:
                    if send(port, probe, connect_timeout=2) == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    door.reload()
                    raise RuntimeError(f"the door did not pass /health in 30 s ({door.status}): {bench.door_logs()}")
                time.sleep(0.3)
            yield bench
    finally:
        for container in reversed(made):
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - cleanup must not hide the result
                pass
        network.remove()


def run_cases(bench: Bench, cases: list[Case], routes: list[Route], hosts: list[str]) -> dict[str, object]:
    """Send each case, then match what the backend received to the cases (by their header) and check it."""
    for case in cases:
        send(bench.port, case)
    by_id = {c.label.split(" ", 1)[0]: c for c in cases}
    stray = []
    for entry in bench.entries():
        case_id = next((v for k, v in entry["headers"] if k.lower() == CASE_HEADER.lower()), None)
        if case_id in by_id:
            by_id[case_id].reached.append(entry)
        elif entry["path"] != "/health":  # the readiness probe carries no case header
            stray.append(entry)
    bad: list[str] = []
    failed = 0
    for case in cases:
        problems = [f"reached the backend: {p}" for entry in case.reached for p in violations(entry, routes, hosts, KEY)]
        if case.expect is not None and case.status not in case.expect:
            problems.append(f"door answered {case.status}, expected {sorted(case.expect)}")
        if case.must_reach and not case.reached:
            problems.append(f"a legitimate request did not reach the backend (door answered {case.status})")
        failed += bool(problems)
        bad += [f"{case.label}: {p}" for p in problems]
    for entry in stray:  # a request whose case header the door dropped or changed: checked all the same
        for problem in violations(entry, routes, hosts, KEY) or ["no case header"]:
            bad.append(f"unmatched request {entry['method']} {entry['path']!r}: {problem}")
    return {"cases": len(cases), "reached": sum(1 for c in cases if c.reached), "passed": len(cases) - failed,
            "failures": bad}


def fixed_cases(post_route: str = "/v1/completions") -> list[Case]:
    """Known attacks, each with the status the door must give; and controls that must pass (``post_route``: an
    inference route of the preset's server)."""
    cap = int(door_data()["body_max_bytes"])
    status = int(door_data()["host_refused_status"])
    out: list[Case] = []

    def add(label: str, method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"",
            expect: set[int] | None = None, **kw) -> None:
        case_id = f"f{len(out)}"
        out.append(Case(f"{case_id} {label}", request(method, target, headers, body, case_id=case_id,
                                                      version=kw.pop("version", "HTTP/1.1")), expect, **kw))

    chat = json_body(64)
    # Controls: what a client of the stack sends.
    add("control: health", "GET", "/health", [("Host", HOST)], expect={200}, must_reach=True)
    add("control: models with key", "GET", "/v1/models", [("Host", "localhost:8000"), auth()], expect={200},
        must_reach=True)
    add("control: inference", "POST", post_route, post(post_route, chat), chat, expect={200}, must_reach=True)
    add("control: Host without port, upper case", "GET", "/v1/models", [("Host", "LOCALHOST"), auth()],
        expect={200}, must_reach=True)
    # A forwarded port (`ssh -L 9000:127.0.0.1:8000`, `kubectl port-forward ... 9000:8000`): the local end's port.
    for host in ("localhost:9000", "127.0.0.1:18000", "[::1]:8000"):
        add(f"control: loopback Host {host!r}", "GET", "/v1/models", [("Host", host), auth()], expect={200},
            must_reach=True)
    # DNS rebinding: the page's own name as Host, with the key a user pasted or without.
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil.example:8000",
                 "127.0.0.1:123456", "0x7f000001:8000", "127.1:8000", "localhost:8000.evil.example",
                 "", " 127.0.0.1:8000x"):
        add(f"Host {host!r}", "POST", "/v1/completions", post("/v1/completions", chat, host=host), chat,
            expect={status})
    add("no Host (HTTP/1.0)", "GET", "/v1/models", [auth()], expect={status, 400}, version="HTTP/1.0")
    add("two Host headers", "GET", "/v1/models", [("Host", HOST), ("Host", "evil.example"), auth()],
        expect={status, 400})
    add("Host list evil,door", "GET", "/v1/models", [("Host", f"evil.example,{HOST}"), auth()], expect={status, 400})
    add("absolute URI of another host", "GET", "http://evil.example/v1/models", [("Host", HOST), auth()],
        expect={status, 400})
    add("absolute URI of the door, Host evil", "GET", f"http://{HOST}/v1/models", [("Host", "evil.example"), auth()],
        expect={status, 400})
    # Bodies.
    big = b"x" * (64 * 1024)
    add("Content-Length over the cap", "POST", "/v1/completions",
        [("Host", HOST), auth(), ("Content-Length", str(cap + 1))], big, expect={413})
    add("chunked body", "POST", "/v1/completions",
        [("Host", HOST), auth(), ("Transfer-Encoding", "chunked")], b"5\r\nhello\r\n0\r\n\r\n", expect={400})
    add("chunked and Content-Length", "POST", "/v1/completions",
        [("Host", HOST), auth(), ("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
        b"5\r\nhello\r\n0\r\n\r\n", expect={400})
    add("two Content-Lengths", "POST", "/v1/completions",
        [("Host", HOST), auth(), ("Content-Length", "5"), ("Content-Length", "6")], b"hello!", expect={400})
    add("POST without a length", "POST", "/v1/completions", [("Host", HOST), auth()], expect={400})
    # Routes: refused whatever the Host (the earlier door's rules, still holding).
    for target in ("/invocations", "/tokenize", "/v1//completions", "/v1/completions/", "/v1/%63ompletions",
                   "/v1/./completions", "/v1/x/../completions", "/V1/COMPLETIONS", "/v1/load_lora_adapter"):
        add(f"route {target}", "POST", target, post(target, chat), chat, expect={403, 400})
    return out


# Pieces the generator combines.
METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "get", "POST ", "CONNECT"]
PATHS = ["/health", "/v1/models", "/metrics", "/v1/completions", "/v1/chat/completions", "/invocations", "/tokenize",
         "/detokenize", "/v1/load_lora_adapter", "/reset_prefix_cache", "/sleep", "/pooling", "/v1/embeddings", "/"]


def mutate_path(rng: random.Random, path: str) -> str:
    choice = rng.randrange(14)
    if choice == 0:
        return path.replace("/", "//", 1)
    if choice == 1:
        return path + "/"
    if choice == 2:
        i = rng.randrange(1, len(path)) if len(path) > 1 else 1
        return path[:i] + f"%{ord(path[i - 1]):02X}" + path[i:] if path[i - 1] != "/" else path + "%2F"
    if choice == 3:
        return path.replace("/", "/./", 1)
    if choice == 4:
        return "/x/.." + path
    if choice == 5:
        return path.upper()
    if choice == 6:
        return path + ";a=b"
    if choice == 7:
        return path + "?a=" + rng.choice(["1", "%00", "..%2F", "/v1/completions"])
    if choice == 8:
        return path + "#frag"
    if choice == 9:
        return path.replace("/", "\\")
    if choice == 10:
        return f"http://{rng.choice([HOST, 'evil.example', 'localhost'])}{path}"
    if choice == 11:
        return path + "%00"
    if choice == 12:
        return "*" if rng.random() < 0.5 else path.replace("/", "%2f")
    return path


HOSTS = [HOST, "127.0.0.1", "localhost", "localhost:8000", "LocalHost:8000", "evil.example", "evil.example:8000",
         "127.0.0.1.nip.example", "localhost:80", "127.0.0.1:8000 ", "[::1]:8000", "127.0.0.1:08000", "127.0.0.1:+8000",
         "127.0.0.1:8000,evil.example", "evil.example,127.0.0.1:8000", "0.0.0.0:8000", "127.0.0.01", "local\thost"]


def generated_case(rng: random.Random, index: int, routes: list[Route]) -> Case:
    """A legitimate request for one of ``routes`` with 0-3 hostile changes (0: a control that must reach the backend)."""
    cap = int(door_data()["body_max_bytes"])
    route = rng.choice(routes)
    method = rng.choice(route.methods)
    target = route.path
    version = "HTTP/1.1"
    host: list[tuple[str, str]] = [("Host", rng.choice([HOST, "127.0.0.1", "localhost", "localhost:8000"]))]
    key: list[tuple[str, str]] = [auth()]
    body = json_body(rng.choice([10, 1000, 20000])) if method == "POST" else b""
    length: list[tuple[str, str]] = [("Content-Length", str(len(body)))] if method == "POST" else []
    extra: list[tuple[str, str]] = []
    changes = rng.choice([0, 0, 1, 1, 1, 2, 3])
    for _ in range(changes):
        kind = rng.randrange(9)
        if kind == 0:
            method = rng.choice(METHODS)
        elif kind == 1:
            target = mutate_path(rng, rng.choice([target, *PATHS]))
        elif kind == 2:
            mode = rng.randrange(4)
            host = ([("Host", rng.choice(HOSTS))] if mode == 0 else [] if mode == 1 else
                    [("Host", rng.choice(HOSTS)), ("Host", rng.choice(HOSTS))] if mode == 2 else
                    [(rng.choice(["host", "HOST", "Host ", " Host"]), rng.choice(HOSTS))])
        elif kind == 3:
            key = rng.choice([[], [("Authorization", rng.choice([f"bearer {KEY}", f"Bearer  {KEY}", f"Bearer {KEY}x",
                                                                   "Basic x", f"Bearer {KEY}, Bearer x"]))],
                              [auth(), ("Authorization", "Bearer x")]])
        elif kind == 4:
            mode = rng.randrange(5)
            if mode == 0:
                body, length = b"x" * 70000, [("Content-Length", str(rng.choice([cap + 1, cap * 4, 2 ** 63])))]
            elif mode == 1:
                body = b"5\r\nhello\r\n0\r\n\r\n"
                length = [(rng.choice(["Transfer-Encoding", "Transfer-encoding", "Transfer-Encoding "]),
                           rng.choice(["chunked", "Chunked", "chunked, identity", " chunked", "xchunked"]))]
            elif mode == 2:
                body = b"hello"
                length = [("Content-Length", "5"), ("Content-Length", rng.choice(["5", "6", "-1", "+5", "0x5"]))]
            elif mode == 3:
                body, length = b"hello", [("Content-Length", "5"), ("Transfer-Encoding", "chunked")]
            else:
                length = [("Content-Length", rng.choice(["-1", "abc", "1e3", " 5", "99999999999999999999"]))]
        elif kind == 5:
            extra.append(rng.choice([("Origin", "http://evil.example"), ("X-Forwarded-Host", "evil.example"),
                                     ("Expect", "100-continue"), ("X-Long", "a" * rng.choice([100, 8000, 20000])),
                                     ("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"),
                                     ("Upgrade", "websocket"), ("Forwarded", "host=evil.example")]))
        elif kind == 6:
            version = rng.choice(["HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.2", "http/1.1"])
        elif kind == 7:
            body, length = b"", []
        else:
            target = target + rng.choice(["?x=1", "?", "#x", "?a=%00", "/"])
    headers = host + key + length + extra
    if changes:
        rng.shuffle(headers)
    case_id = f"g{index}"
    return Case(f"{case_id} {method} {target!r} {version} {headers!r}"[:300],
                request(method, target, headers, body, version=version, case_id=case_id), read_timeout=5,
                must_reach=changes == 0, expect={200} if changes == 0 else None)
