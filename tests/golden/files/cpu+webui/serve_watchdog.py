"""Runs the API server and restarts it (by exiting) when it stops answering /health while its process lives.

Compose restarts a container only when its main process exits; a server that hangs (a deadlock, a stopped
process) would stay "unhealthy" for ever. This launcher runs between tini (PID 1) and the server:

    python serve_watchdog.py [--url U] [--grace S] [--interval S] [--timeout S] [--failures N] -- SERVER ARGV...

It starts SERVER ARGV as a child (exec form, no shell), forwards SIGTERM/SIGINT to it, and polls the URL.
Until the first healthy answer, failures do not count for ``grace`` seconds (the healthcheck's start period:
the model is loading). After that, ``failures`` consecutive failed polls (each bounded by ``timeout``,
``interval`` apart) make it stop the server (SIGTERM, then SIGKILL after ``kill_after`` seconds) and exit 1,
so the restart policy starts a fresh container. When the server exits on its own, the launcher exits with
its status. KIT_WATCHDOG_GRACE / _INTERVAL / _TIMEOUT / _FAILURES in the environment override the options
(the tests shorten them). Standard library only: it runs in the image's Python.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request

ENV_PREFIX = "KIT_WATCHDOG_"


def log(message):
    print("[serve-watchdog] " + message, file=sys.stderr, flush=True)


def healthy(url, timeout):
    """True when the URL answers 200 within ``timeout`` seconds (a stopped server accepts, then never answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except Exception:  # noqa: BLE001 - refused, reset, timed out, HTTP error: all mean "not healthy"
        return False


class Watch:
    """The state machine: starting (failures tolerated until grace ends) -> up -> failing -> hung."""

    def __init__(self, grace, failures, now):
        self.deadline = now + grace
        self.failures = failures
        self.seen_healthy = False
        self.consecutive = 0

    def observe(self, ok, now):
        """Record one poll; return the state: starting | up | failing | hung."""
        if ok:
            self.seen_healthy, self.consecutive = True, 0
            return "up"
        if not self.seen_healthy and now < self.deadline:
            return "starting"
        self.consecutive += 1
        return "hung" if self.consecutive >= self.failures else "failing"


def stop(child, kill_after):
    """SIGTERM, wait at most ``kill_after`` seconds, then SIGKILL; returns the exit status."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        # SIGTERM is not delivered to a stopped process until it continues.
        child.send_signal(signal.SIGCONT)
        try:
            return child.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            log("server ignored SIGTERM for %d s: SIGKILL" % kill_after)
            child.kill()
    return child.wait()


def options(argv, env):
    if "--" not in argv:
        raise SystemExit("usage: serve_watchdog.py [options] -- SERVER ARGV...")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="serve_watchdog.py")
    parser.add_argument("--url", default="http://127.0.0.1:8000/health")
    parser.add_argument("--grace", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--failures", type=int, default=4)
    parser.add_argument("--kill-after", type=float, default=20.0)
    args = parser.parse_args(argv[:cut])
    for name, kind in (("grace", float), ("interval", float), ("timeout", float), ("failures", int)):
        text = env.get(ENV_PREFIX + name.upper())
        if text:
            setattr(args, name, kind(text))
    args.server = argv[cut + 1:]
    if not args.server or args.failures < 1 or min(args.interval, args.timeout) <= 0:
        raise SystemExit("serve_watchdog.py: need a server argv, failures >= 1, interval and timeout > 0")
    return args


def main(argv=None):
    args = options(list(sys.argv[1:] if argv is None else argv), os.environ)
    child = subprocess.Popen(args.server)
    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    log("server pid %d; polling %s every %gs after up to %gs start grace, %d failures stop it"
        % (child.pid, args.url, args.interval, args.grace, args.failures))
    watch = Watch(args.grace, args.failures, time.monotonic())
    state = "starting"
    while child.poll() is None and not stopping:
        # Sleep in small steps so a server exit or docker stop is noticed at once.
        wake = time.monotonic() + args.interval
        while child.poll() is None and not stopping and time.monotonic() < wake:
            time.sleep(min(0.5, args.interval))
        if child.poll() is not None or stopping:
            break
        previous, state = state, watch.observe(healthy(args.url, args.timeout), time.monotonic())
        if state != previous:
            log("%s -> %s" % (previous, state))
        if state == "hung":
            log("%s failed %d times in a row while the server process lives: stopping it so the container restarts"
                % (args.url, watch.consecutive))
            status = stop(child, args.kill_after)
            log("server stopped (status %s); exiting 1" % status)
            return 1
    if stopping:  # the signal went to the server already: give it kill_after seconds to finish
        try:
            child.wait(timeout=args.kill_after)
        except subprocess.TimeoutExpired:
            child.kill()
    status = child.wait()
    # A signal death reads as 128+N, as a shell reports it.
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main())
