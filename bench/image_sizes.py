"""Slim images' sizes beside the official image's published size (printed, not asserted).

For every local image the kit built with strategy slim (label io.vllm-kit.strategy=slim), prints `kit
image-size`'s breakdown and the ratio to each published official size (kit/data/vllm.yaml
official_image_sizes). With IMAGE arguments, those images instead.

    python bench/image_sizes.py [IMAGE ...]
    python bench/image_sizes.py --wheelhouse DIR --arch 8.9   # what pruning takes from that wheelhouse's lock

The second form needs no image: it sums the installed size of every wheel the lock names (file sizes in the
wheels) and what kit/image/prune.py's rules would remove from them, per rule: the after-size of a slim image
without building it.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from kit.core.datafiles import FLOOR_NAME, floor_files, prune_rules, vllm_table
from kit.core.docker_engine import docker_client
from kit.image.build import wheels_for_lock
from kit.image.imagesize import format_breakdown, human, image_sizes
from kit.image.prune import file_rules, matching_rule, normalise_name


def site_path(name: str) -> str:
    """A wheel member's path as installed under site-packages, versions dropped from dist-info folder names."""
    parts = name.split("/")
    if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
        parts = parts[2:]
    if parts[0].endswith(".dist-info"):
        parts[0] = parts[0].split("-")[0].lower() + ".dist-info"
    return re.sub(r"\.cpython-3\d+-", ".cpython-3-", "/".join(parts))  # the floor's Python is 3.12


def prune_estimate(wheelhouse: Path, arch: str) -> None:
    """What the wheels install, what the prune rules take, and what remains beside the floor (read on the H200)."""
    rules = prune_rules()
    compiled = file_rules(rules, arch)
    excluded = {normalise_name(d["name"]) for d in rules["distributions"]}
    floor = {site_path(f["path"]) for f in floor_files() if f["where"] != "system"}
    total, removed, by_rule = 0, 0, {}
    left: dict[str, list[int]] = {}  # distribution -> [bytes kept, of them read in the floor run]
    for wheel in wheels_for_lock(wheelhouse):  # a reused wheelhouse also holds wheels of earlier pins
        name = normalise_name(wheel.name.split("-")[0])
        for info in zipfile.ZipFile(wheel).infolist():
            if info.is_dir():
                continue
            total += info.file_size
            why = f"distribution {name}" if name in excluded else (matching_rule(info.filename, compiled) or {}).get("pattern")
            if why:
                removed += info.file_size
                by_rule[why] = by_rule.get(why, 0) + info.file_size
                continue
            kept = left.setdefault(name, [0, 0])
            kept[0] += info.file_size
            kept[1] += info.file_size if site_path(info.filename) in floor else 0
    print(f"{wheelhouse.name}: wheels install {human(total)}; the prune rules (arch {arch}) remove {human(removed)}, "
          f"leaving {human(total - removed)}")
    for why, size in sorted(by_rule.items(), key=lambda kv: -kv[1]):
        print(f"  {human(size):>10}  {why}")
    kept_total = sum(k for k, _ in left.values())
    read_total = sum(r for _, r in left.values())
    print(f"\nwhat remains ({human(kept_total)}), by distribution, beside the floor (same path read on the H200, "
          f"{FLOOR_NAME}): {human(read_total)} read, "
          f"{human(kept_total - read_total)} not read")
    print(f"  {'kept':>10}  {'read':>10}  {'not read':>10}  distribution")
    for name, (kept, read) in sorted(left.items(), key=lambda kv: -kv[1][0]):
        if kept >= 2**20:
            print(f"  {human(kept):>10}  {human(read):>10}  {human(kept - read):>10}  {name}")
    features = rules.get("features", {})
    if features:
        print("\nfeatures a preset may leave out (image.leave_out; all five left out in the H200 floor run):")
        saved = 0
        for feature, spec in features.items():
            size = sum(left.get(normalise_name(n), [0, 0])[0] for n in spec["distributions"])
            saved += size
            print(f"  {human(size):>10}  {feature} ({', '.join(spec['distributions'])})")
        print(f"  with every feature left out: {human(kept_total - saved)} of wheels remain")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--wheelhouse"]:
        prune_estimate(Path(argv[1]), argv[argv.index("--arch") + 1] if "--arch" in argv else "9.0")
        return 0
    refs = argv or sorted({img.tags[0] for img in docker_client().images.list(
        filters={"label": "io.vllm-kit.strategy=slim"}) if img.tags})
    if not refs:
        print("no slim image on this engine (build one: kit build preset=rtx4090-awq --wheelhouse DIR)")
        return 0
    for ref in refs:
        result = image_sizes(ref, progress=lambda m: print(m, file=sys.stderr))
        print(format_breakdown(result))
        size = docker_client().images.get(ref).attrs["Size"]
        for point in vllm_table()["official_image_sizes"]:
            official = point["gb"] * 1e9
            print(f"  vs {point['image']} ({point['date']}, {point['gb']} GB; {point['source']}): "
                  f"{human(size)} = {size / official:.2f}x")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
