"""Merge floor runs (record_floor.py's OUT/floor.json, one or more calls) into the committed floor file.

    python3 scripts/floor/pack_floor.py OUT.json.xz NOTES.json RUN_DIR [RUN_DIR ...]

Each RUN_DIR holds a floor.json and provenance.txt from one call on the GPU machine; a model served in several
calls is taken from the first RUN_DIR that has it. NOTES.json gives `about`, `command`, `machine`,
`environment_notes` and `sites` (what each site key was). The output has the layout kit/core/datafiles.py's
floor_files() reads: `columns` and one row per file (where, path, bytes, distribution, signals, models), the
union over the runs; request bodies are dropped from `runs`, statuses kept.
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

COLUMNS = ["where", "path", "bytes", "distribution", "signals", "models"]


def main(argv: list[str]) -> int:
    out, notes, run_dirs = Path(argv[0]), json.loads(Path(argv[1]).read_text()), [Path(p) for p in argv[2:]]
    runs, files, provenance, taken = [], {}, [], set()
    for run_dir in run_dirs:
        floor = json.loads((run_dir / "floor.json").read_text())
        picked = [r for r in floor["runs"] if r["name"] not in taken]
        if not picked:
            continue
        names = {r["name"] for r in picked}
        taken |= names
        provenance.append({"models": sorted(names), "lines": (run_dir / "provenance.txt").read_text().splitlines()})
        for run in picked:
            run = dict(run, answers=[[a["request"], a["status"]] for a in run["answers"]])
            runs.append(run)
        for row in floor["files"]:
            models = [m for m in row["models"] if m in names]
            if not models:
                continue
            key = (row["where"], row["path"])
            entry = files.setdefault(key, [row["where"], row["path"], row["size"], row["dist"], set(), set()])
            entry[4].update(row["signals"])
            entry[5].update(models)
    rows = [[w, p, size, dist, sorted(signals), sorted(models)]
            for (w, p), (w, p, size, dist, signals, models) in sorted(files.items())]
    packed = {**notes, "provenance": provenance, "runs": runs, "columns": COLUMNS, "files": rows}
    with lzma.open(out, "wt", encoding="utf-8", preset=9) as fh:
        json.dump(packed, fh, separators=(",", ":"))
    site_bytes = sum(r[2] for r in rows if r[0] != "system")
    print(f"{out}: {len(rows)} files, {sum(r[2] for r in rows) / 1e6:,.0f} MB "
          f"({site_bytes / 1e6:,.0f} MB in site-packages), models {sorted(taken)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
