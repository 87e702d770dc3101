"""Copy installed distributions, by their RECORD, from one site-packages to another (GPU machine, stdlib only).

    python3 copy_dists.py FROM_SITE TO_SITE NAME [NAME ...]

Every file the distribution's RECORD lists, its dist-info included, is copied unless TO_SITE already has it, so
what the carried environment holds wins. Prints each distribution's version and size; a name FROM_SITE lacks is an
error.
"""

from __future__ import annotations

import csv
import re
import shutil
import sys
from pathlib import Path


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    src, dst, names = Path(argv[0]), Path(argv[1]), {normalise(n) for n in argv[2:]}
    found = {}
    for info in src.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        if normalise(name) in names:
            found[normalise(name)] = (version, info)
    missing = sorted(names - set(found))
    if missing:
        print(f"copy_dists.py: {src} has no {', '.join(missing)}", file=sys.stderr)
        return 1
    for name, (version, info) in sorted(found.items()):
        size = 0
        with open(info / "RECORD", newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                rel = Path(row[0])
                if rel.is_absolute() or ".." in rel.parts:
                    continue
                target = dst / rel
                if (src / rel).is_file() and not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / rel, target)
                    size += target.stat().st_size
        print(f"{name} {version}: {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
