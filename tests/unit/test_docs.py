"""The docs a newcomer walks: the README as a front page, the rest a MkDocs site under docs/ (make docs).

`mkdocs build --strict` (make docs, in CI) catches broken links; these tests catch what it lets through: a page
written but left out of the nav (mkdocs only logs it), the README's two commands or a Makefile target gone from
the front page, and text that only makes sense on one machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
# The README's two commands, exactly as a newcomer copies them (STYLE.md: a Makefile target per job).
TWO_COMMANDS = (
    "$ make run      # the main job: the `cpu` preset with a small model made locally, served on 127.0.0.1:8000",
    "$ make test     # the whole test suite: unit, golden files, and real Docker builds against a real vLLM server",
)
# Hosts a package index or archive answers on: the docs name the package, never where this machine fetched it.
REGISTRY_HOSTS = ("pypi.org", "pythonhosted.org", "pypi.python.org", "debian.org", "npmjs.org", "npmjs.com",
                  "yarnpkg.com")


def nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def site_config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_every_page_under_docs_is_in_the_nav_and_every_nav_entry_exists():
    config = site_config()
    assert config["docs_dir"] == "docs" and config["strict"] is True
    listed = nav_pages(config["nav"])
    written = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(written) - set(listed)) == [], "pages under docs/ that mkdocs.yml's nav leaves out"
    assert sorted(set(listed) - set(written)) == [], "nav entries with no page"
    assert len(listed) == len(set(listed)), "a page listed twice"


def test_the_nav_check_sees_a_missing_page():
    # Not vacuous: a nav without one page is caught by the same comparison.
    listed = nav_pages(site_config()["nav"])
    assert "clients.md" in listed and "architecture/index.md" in listed
    assert "clients.md" not in nav_pages([{"Home": "index.md"}, {"Use it": [{"Presets": "guide/presets.md"}]}])


def test_the_readme_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    quickstart = text[text.index("## Quickstart: two commands"):]
    block = quickstart[quickstart.index("```console\n") + len("```console\n"):]
    block = block[: block.index("```")]
    assert block.splitlines() == list(TWO_COMMANDS)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^run: .*##", makefile, re.M) and re.search(r"^test: .*##", makefile, re.M)


def makefile_targets() -> list[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return re.findall(r"^([a-z][a-z0-9-]*):[^=\n]*##", text, re.M)


def test_every_makefile_target_is_documented_in_the_readme():
    targets = makefile_targets()
    assert {"run", "test", "docs", "lint", "bench-plan"} <= set(targets)
    text = README.read_text(encoding="utf-8")
    assert [t for t in targets if not re.search(rf"`make {re.escape(t)}`", text)] == []


def test_ci_lints_builds_the_docs_then_runs_the_test_command():
    steps = [line.split()[:2] for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert [s[1] for s in steps] == ["lint", "docs", "test"]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^docs: .*\n\t.*mkdocs build --strict", makefile, re.M)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"mkdocs>=[0-9.]+,<[0-9.]+"', pyproject), "mkdocs pinned to a range in the test extra"


def test_the_docs_name_no_registry_host_and_no_path_of_this_checkout():
    checkout = str(REPO)
    found = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(REPO)}: {host}" for host in REGISTRY_HOSTS if host in text]
        found += [f"{path.relative_to(REPO)}: {checkout}" for _ in [0] if checkout in text]
        found += [f"{path.relative_to(REPO)}: file://" for _ in [0] if "file://" in text]
    assert found == []


def test_the_docs_link_only_to_pages_that_exist():
    # The README is not part of the site (mkdocs checks the site's own links): its links into docs/ are checked here.
    text = README.read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    assert targets and [t for t in targets if not (REPO / t).exists()] == []
