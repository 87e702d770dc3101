"""Install the kit as a user does (sdist -> wheel -> fresh venv) and use it from outside the checkout.

No Docker: this proves the wheel carries the presets, templates and data, that its declared dependencies
are enough for the CLI, and that nothing reads the checkout. The venv has no system site-packages, so a
dependency missing from pyproject.toml fails here instead of being hidden by the host's packages.
Dependencies come from the configured pip index (the same one `make install` uses).
"""

from __future__ import annotations

import email.parser
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_module

pytestmark = pytest.mark.package

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (REPO / "presets").glob("*.yaml"))
SHIPPED = {  # top-level folder in the checkout -> where the wheel puts it (pyproject.toml's package-dir)
    "presets": "kit/_presets",
    "images": "kit/_images",
    "compose": "kit/_compose",
}


def run(argv: list[object], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def ok(argv: list[object], cwd: Path, timeout: float = 300) -> str:
    proc = run(argv, cwd, timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@dataclass
class Installed:
    sdist: Path
    wheel: Path
    venv: Path
    elsewhere: Path  # a working directory outside the checkout

    @property
    def kit(self) -> Path:
        return self.venv / "bin" / "kit"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    require_module("build")
    # Build from a copy of the files git would commit, as on a fresh clone: setuptools reuses build/ and
    # *.egg-info/SOURCES.txt left in a checkout, which would hide a file that is no longer packaged.
    source = tmp_path_factory.mktemp("source")
    listed = ok(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    # `python -m build` makes the sdist, then the wheel from the unpacked sdist: a file missing from the
    # sdist is then missing from the wheel too.
    ok([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", dist, source], cwd=source, timeout=600)
    (sdist,) = dist.glob("vllm_kit-*.tar.gz")
    (wheel,) = dist.glob("vllm_kit-*.whl")
    venv = tmp_path_factory.mktemp("venv")
    ok([sys.executable, "-m", "venv", venv], cwd=dist)
    ok([venv / "bin" / "python", "-m", "pip", "install", wheel], cwd=dist, timeout=600)
    return Installed(sdist, wheel, venv, tmp_path_factory.mktemp("elsewhere"))


def test_sdist_carries_the_top_level_folders(installed):
    with tarfile.open(installed.sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for folder in SHIPPED:
        tracked = {p.relative_to(REPO).as_posix() for p in (REPO / folder).iterdir() if p.is_file()}
        assert tracked and tracked <= names, f"sdist lacks {sorted(tracked - names)}"


def test_wheel_ships_every_preset_and_template_inside_the_package(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for folder, inside in SHIPPED.items():
        for path in (REPO / folder).iterdir():
            assert f"{inside}/{path.name}" in names, f"wheel lacks {folder}/{path.name}"
    assert "kit/data/gpus.yaml" in names and "kit/launch/ray_node.py" in names
    assert not any(n.startswith(("presets/", "images/", "compose/", "tests/")) for n in names)


def test_runtime_dependencies_leave_testinfra_to_the_smoke_extra(installed):
    with zipfile.ZipFile(installed.wheel) as whl:
        (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(whl.read(meta).decode())
    requires = metadata.get_all("Requires-Dist")
    runtime = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("pytest", "testinfra")) for r in runtime), runtime
    assert any(r.startswith("pytest-testinfra") and 'extra == "smoke"' in r for r in requires), requires


def test_installed_kit_reads_nothing_from_the_checkout(installed):
    out = ok([installed.venv / "bin" / "python", "-c",
              "import kit.core.datafiles as d; print(d.PRESETS_DIR); print(d.IMAGES_DIR); print(d.checkout_root())"],
             cwd=installed.elsewhere)
    presets_dir, images_dir, root = out.splitlines()
    assert Path(presets_dir).is_relative_to(installed.venv) and Path(images_dir).is_relative_to(installed.venv)
    assert root == "None"


def test_presets_lists_every_preset(installed):
    # --json is the machine-readable form; the table is for people (a header and a rule above the rows).
    listed = [row["name"] for row in json.loads(ok([installed.kit, "presets", "--json"],
                                                      cwd=installed.elsewhere))["data"]]
    assert sorted(listed) == PRESETS
    table = ok([installed.kit, "presets"], cwd=installed.elsewhere).splitlines()
    assert table[0].split()[0] == "preset"
    assert sorted(line.split()[0] for line in table[2:] if line.strip()) == PRESETS


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def folder_free(files: dict[str, str]) -> dict[str, str]:
    """The render with what names its own folder taken out: the compose project (the folder's name and a hash of its
    path, one stack per folder; in the record and as compose.yaml's name) and the manifest's digests of those files."""
    record = files["vllm-kit.yaml"]
    [project] = [line for line in record.splitlines() if line.startswith("project: ")]
    name = project.removeprefix("project: ")
    out = {path: text.replace(name, "PROJECT") for path, text in files.items()}
    manifest = json.loads(out[".vllm-kit.json"])
    for path, text in files.items():  # the record, and the compose files that carry the project as their name
        if name in text:
            manifest["files"].pop(path, None)
    out[".vllm-kit.json"] = json.dumps(manifest, sort_keys=True)
    if ".env" in out:  # random secrets each render writes: the names must agree, the values never do
        out[".env"] = "\n".join(line.split("=", 1)[0] for line in out[".env"].splitlines())
    return out


def render_both(installed: Installed, name: str, *options: str) -> tuple[dict[str, str], dict[str, str]]:
    """Render with the installed entry point (outside the checkout) and with the checkout's code, each into a folder
    of the same name (the compose project starts with it)."""
    label = "-".join((name,) + options).replace("-", "_")
    mine, theirs = installed.elsewhere / "installed" / label, installed.elsewhere / "checkout" / label
    ok([installed.kit, "render", *options, f"preset={name}", "--out", mine], cwd=installed.elsewhere)
    ok([sys.executable, "-m", "kit.cli.main", "render", *options, f"preset={name}", "--out", theirs], cwd=REPO)
    return folder_free(tree(mine)), folder_free(tree(theirs))


@pytest.mark.parametrize("name", PRESETS)
def test_render_every_preset_from_the_installed_kit(installed, name):
    files, expected = render_both(installed, name)
    assert any(line.startswith("FROM ") for line in files["Dockerfile"].splitlines())
    assert any(path.startswith("compose") and "services:" in text for path, text in files.items())
    assert files == expected, "the installed kit renders differently from the checkout"


def test_render_k8s_from_the_installed_kit(installed):
    files, expected = render_both(installed, "rtx4090-awq", "--target", "k8s")
    assert "kind: Deployment" in files["k8s/deployment.yaml"] and "k8s/kustomization.yaml" in files
    assert files == expected, "the installed kit renders differently from the checkout"


def test_smoke_without_the_extra_says_how_to_install_it(installed):
    proc = run([installed.kit, "smoke", "preset=cpu"], cwd=installed.elsewhere)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'pytest-testinfra" in lines[0] and "[smoke]" in lines[0], proc.stderr
