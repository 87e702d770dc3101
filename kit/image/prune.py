"""Cut a Python environment to the floor: remove distributions and files a preset's server never loads.

One rule set (kit/data/prune.yaml, rendered as JSON into the build context) and this one file do the work in
three places: `kit` (sizes, tests), the slim image's builder stage (copied into the build context as
prune_site.py and run there) and the GPU machine's environment, where the same rules were proved to serve
(scripts/floor/). So it uses the standard library only and imports nothing from the kit.

    python3 prune_site.py RULES.json SITE_DIR [SITE_DIR ...] [--arch 8.9] [--dry-run] [--report FILE]

A rule's pattern is a path relative to site-packages: `*` matches within one path segment, `**` any number of
segments. A rule with `below_arch: "9.0"` applies only when the target GPU's compute capability is lower
(kernels for newer GPU families); `from_arch` only when it is at least that (kernels for older families).
A distribution rule with `cuda_from: "13.0"` is in the rules only for images of that CUDA or later (the kit
filters them when it renders the rules; kit.core.datafiles.prune_rules). A distribution is removed as pip
uninstalls it: every file its RECORD lists, the dist-info folder too, so no
`importlib.metadata` lookup finds a package that cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path


def normalise_name(name: str) -> str:
    """PEP 503 name: what dist-info folder names and lock files are compared by."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pattern_regex(pattern: str) -> re.Pattern:
    out = []
    for i, part in enumerate(pattern.split("/")):
        sep = "/" if i else ""
        if part == "**":
            out.append(f"(?:{sep}[^/]+)*" if i else "(?:[^/]+/)*")
            continue
        body = "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in part)
        out.append((sep if not (i and out and out[-1].startswith("(?:[^/]+/)")) else "") + body)
    text = "".join(out).replace("(?:[^/]+/)*/", "(?:[^/]+/)*")
    return re.compile(text + r"\Z")


def _arch_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in str(text).split("."))


def rule_applies(rule: dict, arch: str | None) -> bool:
    if arch is None:
        return not (rule.get("below_arch") or rule.get("from_arch"))  # no GPU named: only rules for every GPU
    if rule.get("below_arch") and not _arch_tuple(arch) < _arch_tuple(rule["below_arch"]):
        return False
    if rule.get("from_arch") and not _arch_tuple(arch) >= _arch_tuple(rule["from_arch"]):
        return False
    return True


def file_rules(rules: dict, arch: str | None) -> list[tuple[dict, re.Pattern]]:
    """The file rules for ``arch``; a `keep` rule (listed first, marked) wins over every removal."""
    keep = [({**rule, "keep": True}, pattern_regex(rule["pattern"])) for rule in rules.get("keep", [])]
    return keep + [(rule, pattern_regex(rule["pattern"])) for rule in rules.get("files", [])
                   if rule_applies(rule, arch)]


def matching_rule(path: str, compiled: list[tuple[dict, re.Pattern]]) -> dict | None:
    """The removal rule that matches ``path``, or None (none matches, or a keep rule does)."""
    for rule, regex in compiled:
        if regex.match(path):
            return None if rule.get("keep") else rule
    return None


def dist_records(site: Path) -> dict[str, tuple[Path, list[str]]]:
    """Normalised distribution name -> (dist-info folder, paths its RECORD lists, relative to site)."""
    out = {}
    for info in sorted(site.glob("*.dist-info")):
        record = info / "RECORD"
        name = normalise_name(info.name[: -len(".dist-info")].split("-")[0])
        paths = []
        if record.is_file():
            for line in record.read_text(errors="replace").splitlines():
                rel = line.rsplit(",", 2)[0]
                if rel:
                    paths.append(os.path.normpath(rel))
        out[name] = (info, paths)
    return out


def plan(rules: dict, site: Path, arch: str | None) -> list[tuple[str, str, int]]:
    """(path relative to site, why, bytes) for every file the rules remove from ``site``."""
    removals: dict[str, tuple[str, int]] = {}
    excluded = {normalise_name(d["name"]) for d in rules.get("distributions", [])}
    for name, (info, paths) in dist_records(site).items():
        if name not in excluded:
            continue
        for rel in paths + [os.path.relpath(p, site) for p in info.rglob("*") if p.is_file()]:
            full = site / rel
            if not rel.startswith("..") and full.is_file() and not full.is_symlink():
                removals[rel] = (f"distribution {name}", full.stat().st_size)
    compiled = file_rules(rules, arch)
    for dirpath, _dirs, files in os.walk(site):
        for filename in files:
            path = os.path.join(dirpath, filename)
            rel = os.path.relpath(path, site)
            if rel in removals or os.path.islink(path):
                continue
            rule = matching_rule(rel, compiled)
            if rule:
                removals[rel] = (rule["pattern"], os.path.getsize(path))
    return sorted((rel, why, size) for rel, (why, size) in removals.items())


def apply(site: Path, removals: list[tuple[str, str, int]]) -> None:
    for rel, _why, _size in removals:
        (site / rel).unlink()
    for dirpath, _dirs, _files in sorted(os.walk(site), key=lambda entry: -len(entry[0])):
        if dirpath != str(site) and not os.listdir(dirpath):
            os.rmdir(dirpath)  # folders the removals emptied (a removed distribution's package folder)


def summary(removals: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for _rel, why, size in removals:
        entry = out.setdefault(why, {"files": 0, "bytes": 0})
        entry["files"] += 1
        entry["bytes"] += size
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rules", type=Path)
    parser.add_argument("sites", type=Path, nargs="+")
    parser.add_argument("--arch", help="the target GPU's compute capability, e.g. 8.9")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--report", type=Path)
    args = parser.parse_args(argv)
    rules = json.loads(args.rules.read_text())
    report = {}
    for site in args.sites:
        removals = plan(rules, site, args.arch)
        if not args.dry_run:
            apply(site, removals)
        report[str(site)] = {"bytes": sum(r[2] for r in removals), "by_rule": summary(removals),
                             "files": [list(r) for r in removals]}
        print(f"{'would remove' if args.dry_run else 'removed'} {len(removals)} files, "
              f"{sum(r[2] for r in removals) / 1e6:.1f} MB from {site.name}")
        for why, entry in sorted(summary(removals).items(), key=lambda kv: -kv[1]["bytes"]):
            print(f"  {entry['bytes'] / 1e6:9.1f} MB {entry['files']:6d} files  {why}")
    if args.report:
        args.report.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
