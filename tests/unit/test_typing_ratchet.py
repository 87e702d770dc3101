"""Typing and imports only get stricter (issue 38). The mypy overrides in pyproject.toml may shrink, never grow, and
what they hide is counted by running mypy without them; `: Any` annotations in kit/ have a ceiling; kit/ has no import
circle at module level, and the imports inside functions outside kit/cli (each a circle broken by hand) have a
ceiling. Lower a ceiling when you fix what it counts."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import require_module

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
OVERRIDE_BLOCKS_MAX = 0  # 2026-12-04: the last one (kit.image.prune) fixed
HIDDEN_ERRORS_MAX = 0
ANY_ANNOTATIONS_MAX = 50
OVERRIDE = re.compile(r"\[\[tool\.mypy\.overrides\]\][^\n]*\nmodule = [^\n]*\ndisable_error_code = [^\n]*\n")


def test_override_blocks_do_not_grow():
    text = (REPO / "pyproject.toml").read_text()
    blocks = OVERRIDE.findall(text)
    # every block is in the one shape this test strips (module, then disable_error_code), nothing else overrides
    assert len(blocks) == len(tomllib.loads(text)["tool"]["mypy"].get("overrides", []))
    assert len(blocks) <= OVERRIDE_BLOCKS_MAX


def test_what_the_overrides_hide_does_not_grow(tmp_path):
    require_module("mypy")
    config = tmp_path / "mypy.toml"
    mypy_section = (REPO / "pyproject.toml").read_text().split("[tool.mypy]", 1)[1].split("\n[tool.", 1)[0]
    config.write_text("[tool.mypy]" + OVERRIDE.sub("", mypy_section))
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
                           str(tmp_path / "cache"), "--no-error-summary"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode in (0, 1), done.stderr
    assert len(errors) <= HIDDEN_ERRORS_MAX, "\n".join(errors)


def test_any_annotations_do_not_grow():
    found = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "kit").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r":\s*Any\b", line)]
    assert len(found) <= ANY_ANNOTATIONS_MAX, "\n".join(found)


# --------------------------------------------------------------------------- import structure (issue 38)
FUNCTION_LEVEL_IMPORTS_MAX = 0  # 2026-12-04 (138 -> 0: hoisted, circles broken a layer down); keep it there


def _kit_modules() -> dict[str, Path]:
    mods = {}
    for path in (REPO / "kit").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _kit_targets(node: ast.AST, package: str, mods: dict[str, Path]) -> list[str]:
    """The kit modules an import statement loads (the longest module prefix of each name it imports)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{a.name}" for a in node.names]
    found = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name.startswith("kit"):
            found.append(name)
    return found


def _import_graph() -> tuple[dict[str, set[str]], int]:
    """Module-level kit imports per kit module (what loads at import time; TYPE_CHECKING blocks excluded), and the
    number of import statements inside functions outside kit/cli (each one a circle broken by hand)."""
    mods = _kit_modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    inside = 0
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in tree.body:
            graph[module].update(t for t in _kit_targets(node, package, mods) if t != module)
        if module.startswith("kit.cli"):
            continue
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        nested = {id(s) for f in functions for s in ast.walk(f) if s is not f
                  and isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for function in functions:
            if id(function) in nested:
                continue  # counted with the function it is in
            inside += sum(1 for s in ast.walk(function) if isinstance(s, (ast.Import, ast.ImportFrom))
                          and _kit_targets(s, package, mods))
    return graph, inside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_at_module_level():
    graph, _ = _import_graph()
    assert graph["kit.cli.main"], "the graph reads imports"  # a sanity check that the walk sees something
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_level_kit_imports_outside_the_cli_do_not_grow():
    _, inside = _import_graph()
    assert inside <= FUNCTION_LEVEL_IMPORTS_MAX
