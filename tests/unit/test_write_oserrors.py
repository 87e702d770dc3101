"""OS errors on --out are one line naming the path, exit 1, no traceback, and nothing half-written.

The read-only and full-disk cases mount a real tmpfs (read-only, or a few pages big) in a private
mount namespace of the child only (`unshare --mount`), so nothing outlives the test; they are skipped
where the machine does not allow that.
"""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kit.core.write import JOURNAL, LOCK_FILE, STAGING
from tests.conftest import environment_refuses, require_tool
from tests.unit.kit_process import manifest_matches_disk, run_kit, snapshot, warm_up

REPO = Path(__file__).resolve().parents[2]
OLD = ["render", "preset=cpu", "--replace"]
NEW = ["render", "preset=rtx4090-awq", "--target", "k8s", "--replace"]


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    warm_up([OLD, NEW], tmp_path_factory.mktemp("warm"))


def refused(run, path):
    """Exit 1, the first line names the path, no traceback."""
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert run.lines[0].startswith(str(path)) or run.lines[0].startswith(f"--out {path}"), run.lines
    return run.lines[0]


def rendered(tmp_path, name="out"):
    out = tmp_path / name
    out.mkdir()
    assert run_kit([*OLD, "--out", str(out)]).code == 0
    return out


def test_out_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("mine\n")
    assert refused(run_kit([*OLD, "--out", str(target)]), target) == f"--out {target}: is a regular file, not a directory"
    assert target.read_text() == "mine\n"


def test_out_below_a_file(tmp_path):
    (tmp_path / "file").write_text("mine\n")
    out = tmp_path / "file" / "sub"
    assert "Not a directory" in refused(run_kit([*OLD, "--out", str(out)]), out)


def test_out_is_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "is a FIFO, not a directory" in refused(run_kit([*OLD, "--out", str(fifo)], timeout=20), fifo)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_fifo_where_a_file_goes_is_refused_without_blocking(tmp_path, dry_run):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "compose.yaml")  # reading it would block forever
    run = run_kit([*OLD, "--out", str(out), "--force", *(["--dry-run"] if dry_run else [])], timeout=20)
    assert "is a FIFO" in refused(run, out / "compose.yaml")
    assert sorted(p.name for p in out.iterdir()) in (["compose.yaml"], [LOCK_FILE, "compose.yaml"])


def test_a_device_where_a_file_goes_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    try:
        os.mknod(out / "Dockerfile", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # the null device
    except PermissionError:
        environment_refuses("mknod (making a device node) is not allowed to this user")
    assert "is a character device" in refused(run_kit([*OLD, "--out", str(out), "--force"]), out / "Dockerfile")
    assert stat.S_ISCHR(os.lstat(out / "Dockerfile").st_mode)


def test_a_directory_where_a_file_goes_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / "compose.yaml").mkdir(parents=True)
    assert "is a directory" in refused(run_kit([*OLD, "--out", str(out), "--force"]), out / "compose.yaml")


@pytest.fixture
def world_readable_dir():
    """A folder an unprivileged user can reach (pytest's tmp_path sits under a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="kit-write-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.parametrize("sub", ["", "sub"])
def test_permission_denied_for_an_ordinary_user(world_readable_dir, sub):
    """Root ignores permission bits, so the kit runs as `nobody` against a folder it may not write."""
    if os.geteuid() != 0:
        environment_refuses("running the kit as another user needs root")
    locked = world_readable_dir / "locked"
    locked.mkdir(mode=0o555)
    out = locked / sub if sub else locked
    run = run_kit([*OLD, "--out", str(out)], uid=65534)
    line = refused(run, out if sub else out / LOCK_FILE)
    assert line.endswith("Permission denied (EACCES)")
    assert list(locked.iterdir()) == []


def test_a_symlink_pointing_outside_is_refused_even_with_force(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    out = rendered(tmp_path)
    before = snapshot(out)
    (out / "Dockerfile").unlink()
    (out / "Dockerfile").symlink_to(outside)
    line = refused(run_kit([*OLD, "runtime.port=8201", "--out", str(out), "--force"]), out / "Dockerfile")
    assert "symbolic link" in line and str(outside) in line
    assert outside.read_text() == "not yours\n"
    assert snapshot(out)["compose.yaml"] == before["compose.yaml"]  # all or nothing: nothing else changed


def test_a_symlinked_folder_pointing_outside_is_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    out = rendered(tmp_path)
    (out / "k8s").symlink_to(outside)
    assert "symbolic link" in refused(run_kit([*NEW, "--out", str(out)]), out / "k8s")
    assert list(outside.iterdir()) == []
    assert not (out / STAGING).exists() and not (out / JOURNAL).exists()


def test_out_itself_may_be_a_link_the_user_chose(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert run_kit([*OLD, "--out", str(tmp_path / "link")]).code == 0
    assert (real / "Dockerfile").is_file() and manifest_matches_disk(real)


def test_a_fifo_as_the_lock_file_is_refused_without_blocking(tmp_path):
    out = rendered(tmp_path)
    (out / LOCK_FILE).unlink()
    os.mkfifo(out / LOCK_FILE)
    assert "is a FIFO" in refused(run_kit([*OLD, "--out", str(out)], timeout=20), out / LOCK_FILE)


def test_a_journal_the_kit_did_not_write_is_one_line(tmp_path):
    out = rendered(tmp_path)
    (out / JOURNAL).write_text('{"version": 1, "moves": [{"staged": "0", "target": "../../etc/passwd", "sha256": "x"}]}')
    line = refused(run_kit([*OLD, "--out", str(out)]), out / JOURNAL)
    assert "not a journal this kit wrote" in line


# --- a real read-only and a real full filesystem ---------------------------------------------------

# In the child's own mount namespace: mount a tmpfs on $2 (options $1), seed it from $3, make it read-only
# unless $5 is rw, run the kit, copy what it left into $4 for the test to look at. The mount dies with
# the namespace.
IN_NAMESPACE = ('mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; [ -z "$(ls -A "$3")" ] || cp -a "$3"/. "$2"/ || exit 99; '
                '[ "$5" = rw ] || mount -o remount,ro "$2" || exit 99; '
                'mnt=$2; snap=$4; shift 5; "$@"; rc=$?; cp -a "$mnt"/. "$snap"/; exit $rc')


def run_on_tmpfs(options, mount_point, seed, snap, args, out, *, writable=True):
    unshare = require_tool("unshare", "util-linux (Debian's base system)")
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        environment_refuses("a private mount namespace (unshare --mount) is not allowed here")
    for folder in (mount_point, seed, snap):
        folder.mkdir(exist_ok=True)
    proc = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", IN_NAMESPACE, "sh",
         options, str(mount_point), str(seed), str(snap), "rw" if writable else "ro",
         sys.executable, "-m", "kit.cli.main", *args, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    if proc.returncode == 99:
        environment_refuses(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    return proc


def test_read_only_out(tmp_path):
    mnt = tmp_path / "mnt"
    proc = run_on_tmpfs("size=1m", mnt, tmp_path / "seed", tmp_path / "snap", OLD, mnt / "sub", writable=False)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == f"{mnt / 'sub'}: Read-only file system (EROFS)"


def test_full_disk_leaves_the_old_set(tmp_path):
    seed = rendered(tmp_path, "seed")
    old = snapshot(seed)
    page = os.sysconf("SC_PAGE_SIZE")  # tmpfs charges whole pages
    pages = sum(-(-len(data) // page) for data in old.values())
    # Two pages more than the old set needs: the new set's staging (8 files) runs out of space part way.
    mnt = tmp_path / "mnt"
    proc = run_on_tmpfs(f"size={(pages + 2) * page}", mnt, seed, tmp_path / "snap", NEW, mnt)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(str(mnt / STAGING)) and lines[0].endswith("No space left on device (ENOSPC)"), lines
    assert "none of the rendered files was changed" in proc.stderr
    assert snapshot(tmp_path / "snap") == old  # the old set, no staging folder, no journal


def test_something_else_at_the_manifest_path_is_refused_before_anything_is_staged(tmp_path):
    out = rendered(tmp_path)
    (out / ".vllm-kit.json").unlink()
    (out / ".vllm-kit.json").mkdir()
    run = run_kit([*OLD, "runtime.port=8202", "--out", str(out), "--force"])
    assert "is a directory" in refused(run, out / ".vllm-kit.json")
    assert not (out / STAGING).exists() and not (out / JOURNAL).exists()


def test_a_read_only_directory_with_nothing_to_change_renders(tmp_path):
    """The lock file is opened read-only there; the render finds every file identical and writes nothing."""
    # Rendered where the tmpfs will be mounted: the record names the folder's own compose project (a hash of its
    # path), so only a render made at that path is identical there.
    mnt = rendered(tmp_path, "mnt")
    seed = tmp_path / "seed"
    shutil.copytree(mnt, seed, symlinks=True)
    proc = run_on_tmpfs("size=1m", mnt, seed, tmp_path / "snap", OLD, mnt, writable=False)
    assert proc.returncode == 0, proc.stderr
    # every rendered file: fetch_files.py, serve_watchdog.py, tinymodel.py, door/haproxy.cfg and the record
    # vllm-kit.yaml among them
    assert proc.stdout.count("identical") == 11
    changed = run_on_tmpfs("size=1m", mnt, seed, tmp_path / "snap2", [*OLD, "runtime.port=8203"], mnt, writable=False)
    assert changed.returncode == 1 and changed.stderr.splitlines()[0].endswith("Read-only file system (EROFS)")
    assert snapshot(tmp_path / "snap2") == snapshot(seed)
