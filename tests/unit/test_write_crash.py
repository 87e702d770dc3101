"""All or nothing across files: `kit render` killed with SIGKILL at every step of its write, and two
renders racing into one directory.

Two writes over an earlier render, each killed at every step. Kubernetes over compose: the `rtx4090-awq` preset
as Kubernetes manifests over the `cpu` preset's compose files changes files, creates a new folder (k8s/) with
files in it, leaves others alone, and removes the compose files it no longer writes, except one the user edited
(kept). Compose over Kubernetes: the other way round, it removes the k8s/ files and the folder they leave empty.
The user's own files in the directory must come through every crash untouched.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.core.write import CRASH_ENV, DELAY_ENV, JOURNAL, LOCK_FILE, LOCK_WAIT_ENV, MANIFEST, STAGING
from tests.unit.kit_process import (
    DIRECTORY,
    manifest_matches_disk,
    run_kit,
    snapshot,
    start_kit,
    wait_kit,
    warm_up,
)

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
COMPOSE = ["render", "preset=cpu", "--replace"]
K8S = ["render", "preset=rtx4090-awq", "--target", "k8s", "--replace"]
OLD, NEW = COMPOSE, K8S  # the tests below that need one write, not the two scenarios
USER_FILES = {".env": "HF_TOKEN=secret\n", "notes/mine.txt": "keep me\n"}
EDITED = "serve_watchdog.py"  # compose only: the user's edit makes it a kept file when k8s replaces compose
MAX_STEPS = 200  # a bound on the loop below, far above the write's real step count


@dataclass(frozen=True)
class Scenario:
    old_args: list[str]
    new_args: list[str]
    old: dict[str, bytes]  # snapshot after the old render
    new: dict[str, bytes]  # snapshot after the new render over it
    edited: bool  # the old set holds a file the user edited, so re-rendering the old set is refused
    # The one folder every render of the scenario happens in: the record names the folder's own compose project
    # (its real path's hash), so old and new sets are the same bytes only in the same folder.
    work: Path

    @property
    def edited_files(self) -> tuple[str, ...]:
        return (EDITED,) if self.edited else ()


def render(args, out, env=None):
    result = run_kit([*args, "--out", str(out)], env)
    assert result.code == 0, result.stderr
    return result


def with_user_files(directory):
    for rel, text in USER_FILES.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)


SCENARIOS = ["k8s-over-compose", "compose-over-k8s"]
# Killing a write at every step is most of this file's time, and k8s-over-compose most of that (about 55 of 75 s;
# `--durations`): `make test-unit` runs it for compose-over-k8s and leaves the other scenario to `make test` (CI),
# which runs both (the slow_unit marker, pyproject.toml).
EVERY_STEP = pytest.mark.parametrize("sets", [pytest.param("k8s-over-compose", marks=pytest.mark.slow_unit),
                                              "compose-over-k8s"], indirect=True)


@pytest.fixture(scope="module", params=SCENARIOS)
def sets(request, tmp_path_factory):
    """The directory as the old render leaves it, and as the new render over it leaves it."""
    warm_up([COMPOSE, K8S], tmp_path_factory.mktemp("warm"))
    edited = request.param == "k8s-over-compose"
    old_args, new_args = (COMPOSE, K8S) if edited else (K8S, COMPOSE)
    ref = tmp_path_factory.mktemp("crash") / "work"
    ref.mkdir()
    with_user_files(ref)
    render(old_args, ref)
    if edited:
        with open(ref / EDITED, "a") as fh:
            fh.write("# my change\n")
    old = snapshot(ref)
    render(new_args, ref)
    new = snapshot(ref)
    changed = {rel for rel in new if old.get(rel) != new[rel]}
    assert {"Dockerfile", MANIFEST} <= changed  # changes, the manifest
    rendered_both = [rel for rel in new if rel in old and rel not in USER_FILES and not rel.endswith("/")]
    assert any(old[rel] == new[rel] for rel in rendered_both)  # and files it leaves as they are
    assert all(new[rel] == old[rel] for rel in USER_FILES)
    gone = set(old) - set(new)
    if edited:  # creations, removals, a kept edit
        assert "k8s/deployment.yaml" in new and "k8s/deployment.yaml" not in old
        assert "compose.yaml" in gone and new[EDITED] == old[EDITED]
    else:  # removals, the folder they empty
        assert {"k8s/deployment.yaml", "k8s/", "prune_site.py"} <= gone and old["k8s/"] == DIRECTORY
        assert "notes/" in new
    shutil.rmtree(ref)
    return Scenario(old_args, new_args, old, new, edited, ref)


def fresh_old(work, name, old):
    """The scenario's folder holding exactly what the old render left (copied from its snapshot); ``name`` says
    which attempt it is, for the reader."""
    out = work
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    for rel, data in old.items():
        if data == DIRECTORY:
            (out / rel).mkdir(parents=True, exist_ok=True)
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def check_after_crash(out, old, new, step, edited=()):
    """Right after the kill: the old set (plus, at most, a staging folder), or a committed journal."""
    now = snapshot(out)
    if (out / JOURNAL).exists():
        # Committed: every file is already new or still old, and the journal names what is left to do.
        for rel in set(old) | set(new):
            if not rel.startswith((STAGING + "/", JOURNAL)):
                assert now.get(rel) in (old.get(rel), new.get(rel)), f"step {step}: {rel} is neither old nor new"
        return "committed"
    # Not committed (the old set, perhaps beside staged files) or finished (the new set).
    rest = {rel: data for rel, data in now.items() if not rel.startswith(STAGING + "/")}
    assert rest in (old, new), f"step {step}: neither the old nor the new set"
    assert manifest_matches_disk(out, edited if rest == old else ()), f"step {step}"
    assert rest == old or now == new, f"step {step}: staged files left beside a finished write"
    return "old" if rest == old else "new"


@EVERY_STEP
def test_kill_at_every_step_leaves_the_old_or_the_new_set(tmp_path, sets):
    """Kill the write at step 1, 2, 3, ... until it runs to the end; after each kill, the next kit run
    (a render of the new set, a render of the old set, or a dry run) starts by recovering."""
    old, new, OLD, NEW = sets.old, sets.new, sets.old_args, sets.new_args  # noqa: N806 - the module's names
    seen = {}
    for step in range(1, MAX_STEPS + 1):
        out = fresh_old(sets.work, f"step{step}", old)
        crashed = run_kit([*NEW, "--out", str(out)], {CRASH_ENV: str(step)})
        if crashed.code == 0:  # the write has fewer steps than this: it ran to the end
            assert snapshot(out) == new
            break
        assert crashed.code == -9, crashed.stderr
        state = check_after_crash(out, old, new, step, sets.edited_files)
        seen[step] = state
        # The next run rolls back (not committed) or forward (committed), then does its own work.
        # Which run comes next varies with the step, so every recovery path meets every state.
        if step % 2 and state == "committed":
            # A dry run completes the committed write, writes nothing else (--force: the old set's edited file,
            # kept by the new write, would be a conflict for the old render).
            after, want = [*OLD, "--dry-run", *(["--force"] if sets.edited else [])], new
        elif step % 2 and state == "old" and not sets.edited:
            after, want = OLD, old  # rolled back, the old render has nothing to change
        else:
            after, want = NEW, new
        again = run_kit([*after, "--out", str(out)])
        assert again.code == 0, f"step {step}: {again.stderr}"
        assert snapshot(out) == want, f"step {step}: after {after}"  # no staging, no journal, no temp file
        assert manifest_matches_disk(out)
    else:
        pytest.fail(f"the write did not finish within {MAX_STEPS} steps")
    states = list(seen.values())
    moved = sum(old.get(rel) != data for rel, data in new.items() if data != DIRECTORY)
    removed = sum(rel not in new for rel, data in old.items() if data != DIRECTORY)
    print(f"a write of {moved} files (manifest included) and {removed} removals killed at each of its "
          f"{len(seen)} steps: "
          + ", ".join(f"{states.count(k)} {k}" for k in ("old", "committed", "new")))  # pytest -s
    if sets.edited:
        assert EDITED not in json.loads(new[MANIFEST])["files"] and json.loads(new[MANIFEST])["kept"] == [EDITED]
    # Kills before the commit point, then after it, then after the journal is gone; in that order.
    assert states == sorted(states, key=["old", "committed", "new"].index), seen
    assert states.count("old") >= 3 and states.count("committed") >= 3, seen


@EVERY_STEP
def test_kill_during_recovery_recovers_the_same_way(tmp_path, sets):
    """A committed write interrupted, then its recovery interrupted at every step: still old-or-new, then new."""
    old, new, NEW = sets.old, sets.new, sets.new_args  # noqa: N806
    out = fresh_old(sets.work, "first", old)
    for step in range(1, MAX_STEPS):  # the first kill that leaves a committed journal
        assert run_kit([*NEW, "--out", str(out)], {CRASH_ENV: str(step)}).code == -9
        if (out / JOURNAL).exists():
            break
        out = fresh_old(sets.work, f"first{step}", old)
    committed = snapshot(out)
    for step in range(2, MAX_STEPS):  # step 1 is taking the lock; recovery starts at step 2
        again = fresh_old(sets.work, f"again{step}", committed)
        run = run_kit([*NEW, "--out", str(again)], {CRASH_ENV: str(step)})
        if run.code == 0:
            assert snapshot(again) == new
            break
        assert run.code == -9, run.stderr
        assert check_after_crash(again, old, new, step, sets.edited_files) in ("committed", "new")
        assert run_kit([*NEW, "--out", str(again)]).code == 0
        assert snapshot(again) == new
    else:
        pytest.fail("the recovery never finished")


def test_the_console_entry_point_honours_the_crash_hook(tmp_path, sets):
    """The same kill through a fresh interpreter (`python -m kit.cli.main`), not a fork of the tests."""
    old, new, NEW = sets.old, sets.new, sets.new_args  # noqa: N806
    # After the commit point, the hardest state to leave behind (k8s over compose: steps 16 to 31 of 32;
    # compose over k8s: 10 to 27 of 28).
    step = 20
    out = fresh_old(sets.work, f"proc{step}", old)
    proc = subprocess.run([sys.executable, "-m", "kit.cli.main", *NEW, "--out", str(out)], cwd=REPO,
                          env={**os.environ, CRASH_ENV: str(step)}, capture_output=True, timeout=120)
    assert proc.returncode == -9
    assert check_after_crash(out, old, new, step, sets.edited_files) == "committed"
    render(NEW, out)
    assert snapshot(out) == new


def test_two_renders_at_once_leave_one_complete_set(tmp_path):
    """Both writers crawl (a delay at every step) so that, without the lock, their renames would interleave."""
    # Each complete set as a render leaves it in the race's own folder (the record names the folder's project).
    out = tmp_path / "race"
    out.mkdir()
    wants = []
    for port in ("8101", "8102"):
        render(OLD, out)
        render([*OLD, f"runtime.port={port}", "engine.max_model_len=1024"], out)
        wants.append(snapshot(out))
    want_a, want_b = wants
    assert want_a != want_b
    render(OLD, out)
    slow = {DELAY_ENV: "0.03"}
    children = [start_kit([*OLD, f"runtime.port={port}", "engine.max_model_len=1024", "--out", str(out)], slow)
                for port in ("8101", "8102")]
    runs = [wait_kit(*child) for child in children]
    assert [r.code for r in runs] == [0, 0], [r.stderr for r in runs]
    assert snapshot(out) in (want_a, want_b)
    assert manifest_matches_disk(out)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_held_lock_makes_the_second_writer_refuse_after_its_bounded_wait(tmp_path, dry_run):
    """A dry run waits too: it must not plan against a directory half-way through another write."""
    out = tmp_path / "out"
    out.mkdir()
    render(OLD, out)
    before = snapshot(out)
    with open(out / LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        refused = run_kit([*OLD, "runtime.port=8111", *dry_run, "--out", str(out)], {LOCK_WAIT_ENV: "0.3"})
        waited = time.monotonic() - started
    assert refused.code == 1
    assert refused.lines[0].startswith(str(out / LOCK_FILE)) and "another kit command" in refused.lines[0]
    assert "Traceback" not in refused.stderr
    assert 0.3 <= waited < 10
    assert snapshot(out) == before


def opened_by(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (its /proc/PID/fd links)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fds / fd) == path for fd in os.listdir(fds))
    except OSError:  # a descriptor closed while we looked
        return False


def test_a_writer_waits_for_the_lock_and_then_writes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    render(OLD, out)
    before = snapshot(out)
    held = open(out / LOCK_FILE, "a")
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        pid, err = start_kit([*OLD, "runtime.port=8112", "--out", str(out)])
        # Wait until the writer holds the lock file open (it then polls flock), not a fixed time.
        lock_path = str(out / LOCK_FILE)
        deadline = time.monotonic() + 30
        while not opened_by(pid, lock_path):
            assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the writer finished while the lock was held"
            assert time.monotonic() < deadline, "the writer never reached the lock"
            time.sleep(0.02)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the writer finished while the lock was held"
        assert snapshot(out) == before  # it must not write while the lock is held
    finally:
        held.close()
    assert wait_kit(pid, err).code == 0
    assert b"8112" in snapshot(out)["compose.yaml"]
