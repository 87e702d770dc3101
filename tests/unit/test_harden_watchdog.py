"""kit/launch/serve_watchdog.py against a real HTTP server process on 127.0.0.1 (no mocks).

The watchdog runs as it does in the container: `python serve_watchdog.py [options] -- SERVER ARGV`, with a
tiny standard-library server as SERVER that writes its pid to a file. A test stops that process with SIGSTOP
(as a hung vLLM looks from outside: the kernel still accepts connections, nothing answers).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.launch.serve_watchdog import Watch
from tests.integration.conftest import free_port

pytestmark = pytest.mark.unit

WATCHDOG = Path(__file__).resolve().parents[2] / "kit" / "launch" / "serve_watchdog.py"

SERVER = """
import http.server, os, signal, sys, time
port, pid_file, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
open(pid_file, "w").write(str(os.getpid()))
if sys.argv[4:] == ["exit"]:
    sys.exit(3)
time.sleep(delay)  # "loading the model"
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def start(tmp_path: Path, *, delay: float = 0.0, grace: float = 30, extra: list[str] | None = None,
          failures: int = 2) -> tuple[subprocess.Popen, Path]:
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    pid_file = tmp_path / "server.pid"
    port = free_port()
    argv = [sys.executable, str(WATCHDOG), "--url", f"http://127.0.0.1:{port}/health", "--grace", str(grace),
            "--interval", "0.3", "--timeout", "0.5", "--failures", str(failures), "--kill-after", "3",
            "--", sys.executable, str(server), str(port), str(pid_file), str(delay), *(extra or [])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIT_WATCHDOG_")}
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env), pid_file


def server_pid(pid_file: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError("the server never wrote its pid")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) is not alive either.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def wait_for_log(proc: subprocess.Popen, text: str, timeout: float = 20) -> str:
    """The watchdog's stderr up to the line holding ``text`` (read from the pipe's descriptor, unbuffered, so
    `proc.stderr.read()` later returns the rest); fails at the deadline or when the watchdog exits first."""
    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} from the watchdog in {timeout} s: {seen.decode()}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            assert chunk, f"the watchdog exited before {text!r}: {seen.decode()}"
            seen += chunk
    return seen.decode()


def wait_healthy_log(proc: subprocess.Popen, pid_file: Path) -> int:
    pid = server_pid(pid_file)
    wait_for_log(proc, "starting -> up")  # the watchdog saw the server answer
    assert proc.poll() is None
    return pid


def test_state_machine_tolerates_start_then_counts_consecutive_failures():
    watch = Watch(grace=100, failures=3, now=0)
    assert watch.observe(False, 10) == "starting"  # loading: failures do not count inside the grace
    assert watch.observe(True, 20) == "up"
    assert watch.observe(False, 21) == "failing"  # once healthy, the grace no longer applies
    assert watch.observe(False, 22) == "failing"
    assert watch.observe(True, 23) == "up"  # a success resets the count
    assert [watch.observe(False, 24 + i) for i in range(3)] == ["failing", "failing", "hung"]
    never = Watch(grace=5, failures=2, now=0)
    assert never.observe(False, 4) == "starting"
    assert never.observe(False, 6) == "failing"
    assert never.observe(False, 7) == "hung"


def test_stopped_server_is_killed_and_the_watchdog_exits_nonzero(tmp_path):
    proc, pid_file = start(tmp_path)
    pid = wait_healthy_log(proc, pid_file)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        code = proc.wait(timeout=15)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    took = time.monotonic() - stopped_at
    log = proc.stderr.read()
    assert code == 1, log
    assert not alive(pid), "the hung server must be gone before the watchdog exits"
    assert "failed 2 times in a row" in log
    # 2 polls of at most 0.5 s each, 0.3 s apart, plus the SIGTERM (delivered after SIGCONT): well under 10 s.
    assert took < 10, took


def test_server_exit_status_is_passed_through(tmp_path):
    proc, _ = start(tmp_path, extra=["exit"])
    assert proc.wait(timeout=15) == 3


def test_sigterm_is_forwarded_and_stops_promptly(tmp_path):
    proc, pid_file = start(tmp_path)
    pid = wait_healthy_log(proc, pid_file)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    assert code == 0, proc.stderr.read()  # the server's own SIGTERM handler exits 0
    assert time.monotonic() - sent < 3
    assert not alive(pid)


def test_failures_inside_the_start_grace_do_not_count(tmp_path):
    # The server answers only after 2 s; with a 20 s grace the watchdog waits for it instead of killing it.
    proc, pid_file = start(tmp_path, delay=2.0, grace=20)
    pid = server_pid(pid_file)
    # Polls fail for 2 s, inside the grace; then the server answers and the watchdog counts it up, not hung.
    log = wait_for_log(proc, "starting -> up")
    assert "hung" not in log and proc.poll() is None, log
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert not alive(pid)


def test_server_that_never_answers_is_stopped_after_the_grace(tmp_path):
    proc, pid_file = start(tmp_path, delay=60, grace=1)
    pid = server_pid(pid_file)
    code = proc.wait(timeout=20)
    assert code == 1
    assert not alive(pid)


def test_environment_overrides_the_timings(tmp_path):
    from kit.launch.serve_watchdog import options

    args = options(["--interval", "15", "--", "srv"], {"KIT_WATCHDOG_INTERVAL": "2", "KIT_WATCHDOG_FAILURES": "5"})
    assert (args.interval, args.failures, args.timeout, args.server) == (2.0, 5, 10.0, ["srv"])
    with pytest.raises(SystemExit):
        options(["--interval", "15"], {})
