"""Every image reference the kit can produce has evidence that it exists (kit/data/image_evidence.yaml).

What the kit can produce is enumerated through the code, not retyped: the base each strategy picks for every shipped
preset, pinned vLLM release, CUDA build and L4T row the preset model accepts; the images `kit doctor`'s driver advice
leads to (each override run it prints, applied); every rendered golden file's base and compose images; and the image
references in the README and docs/.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.config.strategy import STRATEGIES, strategy_of
from kit.core.datafiles import load_yaml, vllm_table
from kit.core.errors import PresetError
from kit.host.doctor import driver_alternatives

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "files"
EVIDENCE = load_yaml("image_evidence.yaml")["images"]
KINDS = {"release-script", "public-pin", "public-scan", "registry-manifest", "upstream-file"}
# repository[:tag][@digest], the repository with at least one slash or one of Docker's library images the kit names
REF = re.compile(r"(?<![\w./:@-])((?:[a-z0-9][a-z0-9.-]*/)*[a-z0-9][a-z0-9._-]*):([A-Za-z0-9_][A-Za-z0-9._-]{0,127})"
                 r"(?:@(sha256:[0-9a-f]{64}))?")
LIBRARY = {name.split(":")[0] for name in EVIDENCE if "/" not in name.split(":")[0]}
LOCAL = ("vllm-kit/",)  # images the kit builds itself
# An override as advice prints it (tests/unit/test_advice.py reads advice the same way).
OVERRIDE = re.compile(r"(?<![\w.=/-])[a-z_]+(?:\.[A-Za-z0-9_-]+)+=[^\s;,()`]+")


def refs_in(text: str) -> set[tuple[str, str | None]]:
    """(repository:tag, digest or None) of every image reference in ``text``."""
    found = set()
    text = re.sub(r"\$\{\w+:-", " ", text)  # compose's ${VAR:-default}: the default is the image
    for match in REF.finditer(text):
        repo, tag, digest = match.groups()
        if repo.startswith(LOCAL) or ("/" not in repo and repo not in LIBRARY):
            continue
        if "/" in repo and "." in repo.split("/")[-1]:  # a file path with a line number (vllm/x.py:12)
            continue
        found.add((f"{repo}:{tag}", digest))
    return found


def missing_evidence(refs: dict[tuple[str, str | None], str]) -> list[str]:
    """Each reference without an entry, or whose digest is not the recorded one, with where it came from."""
    problems = []
    for (ref, digest), where in sorted(refs.items()):
        entry = EVIDENCE.get(ref)
        if entry is None:
            problems.append(f"{ref} ({where}): no evidence in kit/data/image_evidence.yaml")
        elif digest and entry.get("digest") != digest:
            problems.append(f"{ref}@{digest} ({where}): the recorded digest is {entry.get('digest')}")
    return problems


def _variants(every_cuda: bool) -> list[list[str]]:
    """Strategy/release/CUDA (or L4T) override sets to try on a preset; the preset model decides which hold."""
    table = vllm_table()
    cudas = ["null", *table["cuda"]] if every_cuda else ["null"]
    runs = []
    for strategy in STRATEGIES:
        for version in table["versions"]:
            base = [f"image.strategy={strategy}", f"image.vllm_version={version}"]
            if strategy == "jetson":
                runs += [[*base, "image.cuda=null", f"hardware.l4t={l4t}"] for l4t in table["jetson"]["l4t"]]
            else:
                runs += [[*base, f"image.cuda={cuda}"] for cuda in cudas]
    return runs


def strategy_refs() -> dict[tuple[str, str | None], str]:
    """The base of every preset under every strategy, release and architecture; every CUDA build once per kind of
    hardware (a base depends on the image fields, on whether there is a GPU or a board, and for vLLM's CPU image on
    hardware.arch, not on which GPU: strategy.base())."""
    found: dict[tuple[str, str | None], str] = {}
    kinds_seen = set()
    arches = sorted({arch for rule in load_yaml("compat.yaml")["platforms"].values() for arch in rule["arches"]})
    for name in preset_names():
        hardware = load_preset(name)[2].hardware
        kind = (hardware.gpu is None, hardware.l4t is not None)
        for run in _variants(every_cuda=kind not in kinds_seen):
            for arch_run in ([*run, f"hardware.arch={arch}"] for arch in arches):
                try:
                    _, _, preset = load_preset(name, arch_run)
                except PresetError:
                    continue
                image = strategy_of(preset).base(preset).image
                for ref in refs_in(image) or {(image, None)}:
                    found.setdefault(ref, f"preset={name} {' '.join(arch_run)}")
        kinds_seen.add(kind)
    return found


def _driver_grid() -> list[str]:
    """Each CUDA row's minimum driver, one just below it, and the ended forward-compatibility branches."""
    drivers = {"530.0", "535.0"}
    for row in vllm_table()["cuda"].values():
        major, minor, *_ = row["min_driver"].split(".")
        drivers |= {row["min_driver"], f"{major}.{int(minor) - 1}", f"{int(major) + 4}.0"}
    return sorted(drivers)


def doctor_refs() -> dict[tuple[str, str | None], str]:
    """Images the driver advice names or leads to: each printed override run, applied to the preset it was for."""
    found: dict[tuple[str, str | None], str] = {}
    for name in preset_names():
        for tweak in ([], ["image.strategy=official"]):
            try:
                _, _, preset = load_preset(name, tweak)
            except PresetError:
                continue
            base = strategy_of(preset).base(preset)
            if not base.cuda or not base.min_driver or strategy_of(preset).nvidia_runtime:
                continue
            for driver in _driver_grid():
                options, note = driver_alternatives(driver, base.cuda, preset, [])
                text = "; ".join(options + [note or ""])
                for ref in refs_in(text):
                    found.setdefault(ref, f"kit doctor, preset={name}, driver {driver}")
                for option in options:
                    run = OVERRIDE.findall(option)
                    if not run:
                        continue
                    # Advice that does not validate as printed is a bug of its own.
                    _, _, advised = load_preset(name, [*tweak, *run])
                    image = strategy_of(advised).base(advised).image
                    found.setdefault((image, None), f"kit doctor, preset={name}, driver {driver}: {' '.join(run)}")
    return found


def golden_refs() -> dict[tuple[str, str | None], str]:
    found: dict[tuple[str, str | None], str] = {}
    for path in sorted(GOLDEN.rglob("*")):
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.match(r"\s*(ARG BASE_IMAGE=|FROM |image:)", line):
                for ref in refs_in(line):
                    found.setdefault(ref, str(path.relative_to(REPO)))
    return found


def doc_refs() -> dict[tuple[str, str | None], str]:
    # The README and every page of the docs site: an image a reader is told about must exist too.
    found: dict[tuple[str, str | None], str] = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        pieces = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
        pieces += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for piece in pieces:
            for ref in refs_in(piece):
                found.setdefault(ref, str(path.relative_to(REPO)))
    return found


@pytest.fixture(scope="module")
def produced() -> dict[str, dict[tuple[str, str | None], str]]:
    return {"strategies": strategy_refs(), "doctor": doctor_refs(), "golden": golden_refs(), "docs": doc_refs()}


def test_every_image_the_kit_can_name_has_evidence(produced):
    problems = [p for refs in produced.values() for p in missing_evidence(refs)]
    assert problems == []


def test_the_enumeration_reaches_every_kind_of_source(produced):
    # Not vacuous: each source yields what it is known to name.
    strategies = {ref for ref, _ in produced["strategies"]}
    assert {"vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.16.0", "vllm/vllm-openai-cpu:v0.32.0-x86_64",
            "vllm/vllm-openai-cpu:v0.32.0-arm64", "debian:bookworm-slim", "nvcr.io/nvidia/l4t-jetpack:r36.4.0"} <= strategies
    # the slim strategy builds on a release's own CUDA only: the CUDA table's bases of the pinned releases' CUDA
    table = vllm_table()
    own = {str(entry["cuda"]) for entry in table["versions"].values() if entry.get("cuda")}
    assert {ref for ref in strategies if ref.startswith("nvidia/cuda:")} == {
        row["base_image"] for cuda, row in table["cuda"].items() if str(cuda) in own}
    # The 575-579 advice leads to vLLM 0.16.0's official CUDA 12.9 image, not a -cu129 tag of 0.33.
    assert ("vllm/vllm-openai:v0.16.0", None) in produced["doctor"]
    assert not [ref for ref, _ in produced["doctor"] if "cu129" in ref]
    prometheus = load_yaml("monitoring.yaml")["images"]["prometheus"]
    assert (f"prom/prometheus:{prometheus['tag']}", prometheus["digest"]) in produced["golden"]
    assert ("vllm/vllm-openai-cpu:v0.32.0-x86_64", None) in produced["docs"]


def test_a_reference_without_evidence_is_reported():
    # The shapes the kit has shipped by mistake: a guessed variant tag, a moved digest, a board base nobody shows.
    problems = missing_evidence({("vllm/vllm-openai:v0.33.0-cu129", None): "preset",
                                 ("prom/prometheus:v3.13.4", "sha256:" + "0" * 64): "compose",
                                 ("nvcr.io/nvidia/l4t-jetpack:r38.2.0", None): "jetson"})
    assert [p.split(" ")[0] for p in problems] == ["nvcr.io/nvidia/l4t-jetpack:r38.2.0",
                                                   "prom/prometheus:v3.13.4@sha256:" + "0" * 64,
                                                   "vllm/vllm-openai:v0.33.0-cu129"]


def test_the_reference_reader_skips_what_is_not_an_image():
    text = ("vllm/v1/worker/gpu_worker.py:273 vllm:num_requests_running 127.0.0.1:8000 vllm-kit/cpu:0.32.0-abc "
            "FROM debian:bookworm-slim ${DOOR:-haproxy:3.4.5-alpine3.24} nvidia/cuda:13.0.2-base-ubuntu24.04@sha256:" + "a" * 64)
    assert refs_in(text) == {("debian:bookworm-slim", None), ("haproxy:3.4.5-alpine3.24", None),
                             ("nvidia/cuda:13.0.2-base-ubuntu24.04", "sha256:" + "a" * 64)}


def test_each_entry_says_what_was_read_and_when(produced):
    names = {ref for refs in produced.values() for ref, _ in refs}
    for ref, entry in EVIDENCE.items():
        assert entry["evidence"], ref
        assert {e["kind"] for e in entry["evidence"]} <= KINDS, ref
        assert all(e["source"].strip() for e in entry["evidence"]), ref
        assert datetime.date.fromisoformat(entry["checked"]) <= datetime.date.today(), ref
        if "digest" in entry:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", entry["digest"]), ref
        # Evidence for an image nothing names any more is stale: drop it with the reference.
        assert ref in names, f"{ref}: kit/data/image_evidence.yaml has evidence, but nothing the kit renders names it"


def test_the_ray_pin_is_the_checked_one():
    from packaging.requirements import Requirement

    [(name, entry)] = load_yaml("image_evidence.yaml")["pins"].items()
    pinned = Requirement(vllm_table()["ray"]["pip"])
    assert f"{pinned.name}[{','.join(sorted(pinned.extras))}]" == name
    assert str(pinned.specifier) == f"=={entry['version']}"
    # vLLM 0.33's sharded weight transfer needs Ray >= 2.56.0 (RDT_MIN_RAY_VERSION).
    assert pinned.specifier.contains("2.60.0") and not pinned.specifier.contains("2.55.0")


def test_the_arm64_cpu_image_is_accepted_only_with_its_evidence(produced, monkeypatch):
    # hardware.arch=arm64 with image.strategy=official and no GPU names vLLM's arm64 CPU tag (the enumeration above
    # varies hardware.arch); its release-script evidence is what lets it through.
    ref = ("vllm/vllm-openai-cpu:v0.32.0-arm64", None)
    assert ref in produced["strategies"] and missing_evidence({ref: "preset"}) == []
    monkeypatch.delitem(EVIDENCE, ref[0])
    assert missing_evidence({ref: "preset"}) == [f"{ref[0]} (preset): no evidence in kit/data/image_evidence.yaml"]
