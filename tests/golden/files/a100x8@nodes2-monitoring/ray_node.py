"""Start one node of a vLLM Ray cluster. Rendered by vllm-kit beside the compose files; runs in the image.

    ray_node.py head --nodes N [--port 6379] [--dashboard-port 8265] [--join-timeout S] [--node-grace S] -- SERVER...
    ray_node.py worker --address HEAD:PORT [--join-timeout S]

head: `ray start --head`, wait until N nodes are alive (at most --join-timeout seconds, else exit 3), run
the server, and stop it (exit 4) when a node has been gone for --node-grace seconds: vLLM's Ray executor does
not notice a lost node until a request fails, so without this /health would keep answering 200.
worker: wait until the head's Ray port answers (at most --join-timeout seconds, else exit 3), then
`ray start --block`, which exits (and so ends the container) when this node's Ray processes stop.

The node's address is VLLM_HOST_IP when set (host networking), else Ray's own choice. Standard library
and Ray only: this file runs in the image's Python, not the kit's.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

EXIT_JOIN_TIMEOUT = 3
EXIT_NODE_LOST = 4
POLL_SECONDS = 2.0


def log(message: str) -> None:
    print(f"[ray-node] {message}", file=sys.stderr, flush=True)


def ray_cli() -> list[str]:
    """The `ray` command of the interpreter running this file (the image's environment)."""
    beside = os.path.join(os.path.dirname(sys.executable), "ray")
    return [beside] if os.path.exists(beside) else [sys.executable, "-m", "ray.scripts.scripts"]


def node_ip_args(env: dict[str, str]) -> list[str]:
    ip = env.get("VLLM_HOST_IP", "").strip()
    return ["--node-ip-address", ip] if ip else []


def head_start_argv(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    return [*ray_cli(), "start", "--head", "--port", str(args.port), "--dashboard-port", str(args.dashboard_port),
            "--disable-usage-stats", *node_ip_args(env)]


def worker_start_argv(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    return [*ray_cli(), "start", "--block", "--address", args.address, "--disable-usage-stats", *node_ip_args(env)]


def wait_until(ready: Callable[[], bool], timeout: float, interval: float = POLL_SECONDS,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Poll ``ready`` until it is true or ``timeout`` seconds pass (bounded in time and in count)."""
    deadline = clock() + timeout
    for _ in range(int(timeout / interval) + 2):
        if ready():
            return True
        if clock() >= deadline:
            return False
        sleep(interval)
    return False


def port_answers(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def alive_nodes() -> int:
    """Nodes the Ray GCS reports alive; 0 when the GCS does not answer."""
    import ray  # the image's Ray; imported here so `--help` and the tests need no Ray

    try:
        if not ray.is_initialized():
            ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        return sum(1 for node in ray.nodes() if node.get("Alive"))
    except Exception as exc:  # noqa: BLE001 - the GCS is gone or restarting: no node counts
        log(f"cannot read the cluster state: {type(exc).__name__}: {str(exc)[:200]}")
        return 0


def stop(server: subprocess.Popen, grace: float = 20.0) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=grace)


def supervise(server: subprocess.Popen, alive: Callable[[], int], expected: int, grace: float,
              interval: float = 5.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> int:
    """Run as long as the server does; stop it when fewer than ``expected`` nodes stay alive for ``grace`` s."""
    missing_since: float | None = None
    while True:
        code = server.poll()
        if code is not None:
            log(f"the server exited with code {code}")
            return code
        count = alive()
        if count >= expected:
            missing_since = None
        else:
            now = clock()
            if missing_since is None:
                missing_since = now
                log(f"{count} of {expected} nodes alive; stopping the server if that lasts {grace:g} s")
            elif now - missing_since >= grace:
                log(f"{count} of {expected} nodes alive for {grace:g} s: stopping the server "
                    "(a pipeline or tensor parallel rank is gone; the restart policy restarts the cluster)")
                stop(server)
                return EXIT_NODE_LOST
        sleep(interval)


def run_head(args: argparse.Namespace) -> int:
    if not args.server:
        log("head: no server command after --")
        return 2
    subprocess.run(head_start_argv(args, dict(os.environ)), check=True)
    log(f"Ray head started on port {args.port}; waiting up to {args.join_timeout} s for {args.nodes} nodes")
    counts: list[int] = []

    def all_joined() -> bool:
        counts.append(alive_nodes())
        return counts[-1] >= args.nodes

    if not wait_until(all_joined, args.join_timeout):
        log(f"only {counts[-1] if counts else 0} of {args.nodes} nodes joined within {args.join_timeout} s: "
            "start the worker stacks, and check that they reach this host's Ray port")
        return EXIT_JOIN_TIMEOUT
    log(f"all {args.nodes} nodes joined; starting the server")
    server = subprocess.Popen(args.server)

    def forward(signum: int, _frame: object) -> None:
        if server.poll() is None:
            server.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return supervise(server, alive_nodes, args.nodes, args.node_grace)


def run_worker(args: argparse.Namespace) -> int:
    log(f"waiting up to {args.join_timeout} s for the Ray head at {args.address}")
    if not wait_until(lambda: port_answers(args.address), args.join_timeout):
        log(f"the Ray head at {args.address} did not answer within {args.join_timeout} s: start the head stack "
            "first, and check the head's address and that its Ray port is reachable from this host")
        return EXIT_JOIN_TIMEOUT
    argv = worker_start_argv(args, dict(os.environ))
    log("joining: " + " ".join(argv))
    os.execv(argv[0], argv)
    return 0  # not reached


def parse_args(argv: list[str]) -> argparse.Namespace:
    server: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, server = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="ray_node.py", description=__doc__.split("\n\n")[0])
    roles = parser.add_subparsers(dest="role", required=True)
    head = roles.add_parser("head", help="Ray head; runs the server once every node has joined")
    head.add_argument("--nodes", type=int, required=True, help="nodes in the cluster, the head included")
    head.add_argument("--port", type=int, default=6379, help="Ray GCS port")
    head.add_argument("--dashboard-port", type=int, default=8265)
    head.add_argument("--join-timeout", type=float, default=600)
    head.add_argument("--node-grace", type=float, default=30)
    worker = roles.add_parser("worker", help="Ray worker; joins the head")
    worker.add_argument("--address", required=True, help="the head's HOST:PORT")
    worker.add_argument("--join-timeout", type=float, default=600)
    args = parser.parse_args(argv)
    args.server = server
    if args.role == "head" and args.nodes < 2:
        parser.error("--nodes must be at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    return run_head(args) if args.role == "head" else run_worker(args)


if __name__ == "__main__":
    sys.exit(main())
