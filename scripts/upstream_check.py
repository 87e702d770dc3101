"""`make upstream-check`: every pin the kit holds against the package indexes it installs from.

Python pins (kit/data/vllm.yaml releases, their torch and CPU builds, the JIT toolchain and Ray; the router and Open
WebUI versions) are looked up with `pip index versions NAME` on the indexes pip is configured for; Debian packages the
CPU image installs (kit/data/vllm.yaml `cpu.runtime_packages`) with `apt-cache policy NAME` on this host's sources.
Printed: one line per pin, `newer` where the index has a later release, `missing` where it lacks the pinned one (or,
with --download, where `pip download --no-deps` finds no file of it). Exit 1 when a pin is missing; a newer release is
reported, not an error. Needs the network (or a configured mirror); not part of the default test run.

    python scripts/upstream_check.py [--download] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from kit.core.datafiles import load_yaml, vllm_table


@dataclass(frozen=True)
class Pin:
    name: str  # the distribution as the index names it
    version: str  # the pinned release ("" for a Debian package the kit installs unpinned)
    where: str  # the data file and key that hold it
    kind: str = "python"  # python | debian


@dataclass(frozen=True)
class Finding:
    pin: Pin
    status: str  # current | newer | missing | unknown
    detail: str = ""


def _requirement_pin(text: str, where: str) -> Pin:
    req = Requirement(text)
    [spec] = list(req.specifier)
    return Pin(req.name, spec.version, where)


def python_pins() -> list[Pin]:
    """Every Python distribution the kit pins to one release, with the key that pins it."""
    table = vllm_table()
    pins: list[Pin] = []
    for release, row in table["versions"].items():
        at = f"kit/data/vllm.yaml versions.{release}"
        pins.append(_requirement_pin(row["pip"], f"{at}.pip"))
        pins.append(Pin("torch", row["torch"], f"{at}.torch"))
        if row.get("jit_toolchain"):
            pins.append(_requirement_pin(row["jit_toolchain"]["pip"], f"{at}.jit_toolchain.pip"))
        if row.get("cpu"):
            pins.append(_requirement_pin(row["cpu"]["pip"], f"{at}.cpu.pip"))
            pins.append(Pin("torch", row["cpu"]["torch"], f"{at}.cpu.torch"))
    pins.append(_requirement_pin(table["ray"]["pip"], "kit/data/vllm.yaml ray.pip"))
    router = load_yaml("router.yaml")
    pins.append(Pin(router["package"], str(router["version"]), "kit/data/router.yaml version"))
    pins.append(Pin("open-webui", str(load_yaml("webui.yaml")["version"]), "kit/data/webui.yaml version"))
    return pins


def debian_packages() -> list[Pin]:
    return [Pin(name, "", "kit/data/vllm.yaml cpu.runtime_packages", kind="debian")
            for name in vllm_table()["cpu"]["runtime_packages"]]


def parse_pip_index(text: str) -> list[str]:
    """The releases `pip index versions NAME` lists, newest first ([] when the index does not know NAME)."""
    found = re.search(r"^Available versions:\s*(.+)$", text, re.M)
    return [v.strip() for v in found.group(1).split(",") if v.strip()] if found else []


def parse_apt_policy(text: str) -> str | None:
    """The candidate `apt-cache policy NAME` names, or None (no such package on this host's sources)."""
    found = re.search(r"^\s*Candidate:\s*(\S+)", text, re.M)
    return found.group(1) if found and found.group(1) != "(none)" else None


def _release(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def judge(pin: Pin, available: list[str]) -> Finding:
    """Compare a Python pin with the releases its index lists. A local label (torch's `+cpu`) is a build on another
    index: its public release is what is checked."""
    if not available:
        return Finding(pin, "missing", f"the index knows no releases of {pin.name}")
    pinned = _release(pin.version)
    if pinned is None:
        return Finding(pin, "unknown", f"{pin.version!r} is not a version")
    public = pinned.public
    releases = [v for v in (_release(a) for a in available) if v is not None and not v.is_prerelease]
    note = f" (local label +{pinned.local}: {public} checked)" if pinned.local else ""
    if Version(public) not in releases:  # PEP 440 equality: 13.0.3 is the index's 13.0.3.0
        return Finding(pin, "missing", f"{public} is not on the index{note}")
    newest = max(releases)
    if newest > Version(public):
        return Finding(pin, "newer", f"{newest} is out{note}")
    return Finding(pin, "current", note.strip())


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    return result.stdout


def check_python(pin: Pin, download: bool) -> Finding:
    finding = judge(pin, parse_pip_index(_run([sys.executable, "-m", "pip", "index", "versions", pin.name])))
    if download and finding.status in ("current", "newer"):
        version = _release(pin.version)
        with tempfile.TemporaryDirectory() as into:
            got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", into,
                                  f"{pin.name}=={version.public if version else pin.version}"],
                                 capture_output=True, text=True, timeout=1800, check=False)
        if got.returncode != 0:
            last = (got.stderr.strip().splitlines() or ["no output"])[-1][:160]
            return Finding(pin, "missing", f"pip download --no-deps found no file: {last}")
    return finding


def check_debian(pin: Pin) -> Finding:
    candidate = parse_apt_policy(_run(["apt-cache", "policy", pin.name]))
    if candidate is None:
        return Finding(pin, "missing", "apt-cache policy gives no candidate on this host's sources")
    return Finding(pin, "current", f"candidate {candidate} (this host's sources)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--download", action="store_true", help="also fetch each pinned file (pip download --no-deps)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    seen: set[tuple[str, str]] = set()
    findings: list[Finding] = []
    for pin in python_pins():
        if (pin.name, pin.version) in seen:
            continue
        seen.add((pin.name, pin.version))
        print(f"checking {pin.name}=={pin.version}", file=sys.stderr)
        findings.append(check_python(pin, args.download))
    findings += [check_debian(pin) for pin in debian_packages()]
    if args.json:
        data: list[dict[str, Any]] = [{**asdict(f.pin), "status": f.status, "detail": f.detail} for f in findings]
        print(json.dumps(data, indent=2))
    else:
        for f in findings:
            pinned = f"{f.pin.name}=={f.pin.version}" if f.pin.version else f.pin.name
            print(f"{f.status:8} {pinned:40} {f.pin.where}{'  ' + f.detail if f.detail else ''}")
    return 1 if any(f.status == "missing" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
