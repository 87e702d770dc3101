"""Run the real `kit` CLI in a child process, cheaply, and look at what it left in a directory.

The child is forked from the test process (the kit is already imported, so a run costs milliseconds,
not an interpreter start) and runs the same entry point as the console script. It is a real process:
it can be SIGKILLed, and it takes real flocks against its siblings.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from kit.core.write import LOCK_FILE, MANIFEST


@dataclass(frozen=True)
class Run:
    code: int  # exit status, or minus the signal that ended the process
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def start_kit(args: list[str], env: dict[str, str] | None = None,
              uid: int | None = None) -> tuple[int, tempfile._TemporaryFileWrapper]:
    """Fork a child running `kit ARGS` (as ``uid`` when given); returns its pid and the file its stderr goes to."""
    err = tempfile.NamedTemporaryFile(prefix="kit-stderr-")
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.environ.update(env or {})
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(err.fileno(), 2)
            # Like a fresh process: no descriptor of the test's (a held flock among them) lives on in the child.
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd > 2:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            # pytest's capture replaced sys.stdout/stderr; the CLI must write to the real fds.
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from kit.cli.main import cli
            from kit.core.docker_engine import docker_client

            # No Docker for these writers: the parent's cached engine connection lost its socket with the fds
            # closed above, and a render that switches a folder to k8s asks the engine whether its stack runs
            # (kit/cli/render.py refuse_target_switch); with no engine to ask, nothing of this host runs from it.
            docker_client.cache_clear()
            os.environ["DOCKER_HOST"] = "unix:///nonexistent/vllm-kit-unit-test/docker.sock"

            cli.main(args, prog_name="kit", standalone_mode=True)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001 - a traceback is what the tests look for
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid, err


def warm_up(renders: list[list[str]], scratch: Path) -> None:
    """Import and cache in the test process what the children need, so each forked child starts warm."""
    from click.testing import CliRunner

    from kit.cli.main import cli

    for args in renders:
        result = CliRunner().invoke(cli, [*args, "--dry-run", "--out", str(scratch / "warm")])
        assert result.exit_code == 0, result.output


def wait_kit(pid: int, err, timeout: float = 60.0) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"kit {pid} did not finish within {timeout} s")
        time.sleep(0.005)
    err.seek(0)
    text = err.read().decode("utf-8", "replace")
    err.close()
    return Run(os.waitstatus_to_exitcode(status), text)


def run_kit(args: list[str], env: dict[str, str] | None = None, timeout: float = 60.0, uid: int | None = None) -> Run:
    return wait_kit(*start_kit(args, env, uid), timeout=timeout)


DIRECTORY = b"<directory>"


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under the directory (relative path -> bytes), the writer's empty lock file left out, and every
    folder (``path/`` -> DIRECTORY), so a folder left behind or removed shows too."""
    files = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if path.is_file() and not path.is_symlink() and rel != LOCK_FILE:
            files[rel] = path.read_bytes()
        elif path.is_dir() and not path.is_symlink():
            files[rel + "/"] = DIRECTORY
        elif rel != LOCK_FILE:
            files[rel] = b"<not a regular file>"
    return files


def manifest_matches_disk(directory: Path, edited: tuple[str, ...] = ()) -> bool:
    """Every file the manifest names is on disk with exactly the recorded sha256 (but the ``edited`` ones,
    which the user changed on purpose)."""
    files = json.loads((directory / MANIFEST).read_text())["files"]
    return all(
        (directory / rel).is_file() and hashlib.sha256((directory / rel).read_bytes()).hexdigest() == digest
        for rel, digest in files.items() if rel not in edited
    )
