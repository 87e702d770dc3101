"""The package layout shows the flow (docs/architecture/index.md): stages import only from core and earlier stages.

Imports inside functions count too: a lazy import against the flow is still a dependency against it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kit

pytestmark = pytest.mark.unit

PACKAGE = Path(kit.__file__).resolve().parent
# The flow, first to last; core is below every stage.
STAGES = ["core", "config", "memory", "deploy", "image", "run", "host"]
TOP = {*STAGES, "cli", "launch"}


def kit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a kit module in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "kit":
            if node.module == "kit":
                found += [(node.lineno, f"kit.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kit"]
    return found


def modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).glob("*.py"))


def test_no_flat_modules_left_at_the_top():
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"kit/ holds only packages; put {flat} in the stage it belongs to"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == TOP


@pytest.mark.parametrize("package", sorted(TOP))
def test_every_package_says_what_it_holds(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"kit/{package}/__init__.py: say what the package holds"


@pytest.mark.parametrize("stage", STAGES)
def test_stages_import_only_core_and_earlier_stages(stage):
    allowed = {"kit", "core", *STAGES[: STAGES.index(stage) + 1]}
    against = []
    for path in modules(stage):
        for line, module in kit_imports(path):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else "kit"
            if target not in allowed:
                against.append(f"kit/{stage}/{path.name}:{line} imports {module}")
    assert against == []


def test_core_imports_no_stage():
    for path in modules("core"):
        assert all(m.split(".")[1:2] in (["core"], []) for _, m in kit_imports(path)), path


def test_in_image_programs_and_the_flag_snapshotter_import_nothing_of_the_kit():
    # kit/launch runs inside the image; flagsnap and tinymodel run in a bare vLLM venv or container.
    for path in [*modules("launch"), PACKAGE / "config" / "flagsnap.py", PACKAGE / "config" / "tinymodel.py"]:
        assert kit_imports(path) == [], path


def test_only_the_cli_imports_the_cli():
    for package in STAGES + ["launch"]:
        for path in modules(package):
            assert not [m for _, m in kit_imports(path) if m.startswith("kit.cli")], path


def test_the_architecture_map_names_every_module():
    # The map of where the code is: docs/architecture/index.md, "Where the code is" (the README links to it).
    page = (PACKAGE.parent / "docs" / "architecture" / "index.md").read_text()
    section = page[page.index("## Where the code is"):]
    missing = [f"kit/{p}/{m.name}" for p in STAGES for m in modules(p)
               if m.name != "__init__.py" and m.name not in section]
    assert missing == [], "docs/architecture/index.md's map does not name these modules"


def test_every_kit_import_outside_the_package_resolves():
    # bench/ and scripts/ are not imported by the test suite: an import left behind by a move fails only here.
    import importlib
    import importlib.util

    root = PACKAGE.parent
    unresolved = []
    for path in sorted([*root.glob("bench/*.py"), *root.glob("scripts/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "kit"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name) and importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                    unresolved.append(f"{path.relative_to(root)}:{node.lineno} from {node.module} import {alias.name}")
    assert unresolved == []
