"""A deployment at another vLLM release: what moving ``image.vllm_version`` to it changes, before anything is written.

One entry point, ``plan_upgrade(request, out_dir, to) -> Upgrade`` (`kit upgrade`). It reads the folder's record
(kit/deploy/record.py), the flag snapshots of both releases (kit/data/flags/) and the preset, and returns:

- the flags that touch this deployment: an engine flag the preset sets that the new release removed, renamed,
  refuses the value of, deprecated or spells differently on the command line; an option the kit itself passes
  (``--served-model-name``, ``--host``, ...) that the new release dropped; and every flag the command leaves to vLLM
  whose default changed (the command relies on that default);
- the checks `kit validate` runs, at the new release (``load_and_check`` with ``image.vllm_version=TO``);
- the memory plan at both releases;
- the diff a render at the new release would make: against the folder (what `kit render --out DIR
  image.vllm_version=TO --diff` prints), or, without a folder, against a render at the current release.

A release the kit does not ship is read from the user's config folder (kit/core/userdata.py): its snapshot in
``$XDG_CONFIG_HOME/vllm-kit/flags/``, its row in ``$XDG_CONFIG_HOME/vllm-kit/vllm.yaml``.

It writes nothing: ``Upgrade.files`` is the set `--apply` writes (the record then holds the override, so later
renders of the folder keep the release).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kit.config.flags import FlagError, FlagSnapshot, available_versions, check_engine, engine_to_argv, \
    load_snapshot, renamed_flag
from kit.config.preset_files import display_path
from kit.config.presetload import load_preset
from kit.core.errors import KitError, Problem
from kit.core.filediff import diff_file_sets, diff_files
from kit.core.userdata import VERSIONS_FILE, user_config_dir
from kit.deploy.deployment import serve_args_for, served_name_for, server_command_for
from kit.deploy.pipeline import prepare_resolved
from kit.deploy.record import Request, Resolved, resolve
from kit.memory.preset_plan import plan_preset
from kit.memory.rules import rules_for

if TYPE_CHECKING:
    from kit.memory.plan import Plan
    from kit.config.preset import Preset
    from kit.deploy.pipeline import Prepared

UPGRADE_FIELD = "image.vllm_version"
# How to make a snapshot (kit/config/flagsnap.py): in a throwaway venv with that release, or where vLLM is installed.
SNAPSHOT_COMMAND = "python -m kit.config.flagsnap --regenerate {version}"
SNAPSHOT_IN_PLACE = "python -m kit.config.flagsnap"


class NoSnapshot(KitError):
    """The kit has no flag snapshot of a release, so it cannot say which flags the upgrade touches."""


@dataclass(frozen=True)
class FlagChange:
    """One flag of this deployment that the new release treats differently."""

    flag: str  # vLLM's name for it: the engine key (snake_case), or the option the kit passes
    change: str  # removed | renamed | value | deprecated | option | default | meaning
    source: str  # preset (engine.FLAG is set) | kit (the kit's part of the command) | default (left to vLLM)
    message: str
    hint: str | None = None
    blocking: bool = False  # the new release refuses the command: the upgrade has a problem
    before: Any = None
    after: Any = None

    def as_data(self) -> dict[str, Any]:
        return {"flag": self.flag, "change": self.change, "source": self.source, "message": self.message,
                "hint": self.hint, "blocking": self.blocking, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class Side:
    """The deployment at one release: its checks, its plan and its rendered files."""

    version: str
    problems: tuple[Problem, ...] = ()  # what `kit validate` (or the render) refuses
    warnings: tuple[Problem, ...] = ()
    plan: Plan | None = None  # None (see plan_note)
    plan_note: str | None = None
    files: dict[str, str] | None = None  # None: the render is refused (problems say why)
    dropped_pin: str | None = None  # the image.pin_digest the render drops: the image changes under it
    overrides: tuple[str, ...] | None = None  # what the render used (the pin dropped); None when refused
    repository: str | None = None  # image.repository (where a pinned image was pushed)
    prepared: Prepared | None = field(default=None, repr=False)  # the render itself (a locked folder's drift)

    @property
    def fits(self) -> bool | None:
        return None if self.plan is None else bool(self.plan.fits)


@dataclass(frozen=True)
class Upgrade:
    preset: str
    out_dir: Path | None
    current: str
    target: str
    overrides: tuple[str, ...]  # what the render at the target uses, and `--apply` records
    flags: tuple[FlagChange, ...]
    before: Side
    after: Side
    diff: str | None  # None: no render at the target (after.problems say why)
    diff_against: str  # "folder" (the folder's files) or "current" (a render at the current release)
    stale: bool  # the folder differs from a render at the current release too (the preset or kit changed since)
    resolved: Resolved = field(repr=False)

    @property
    def new_warnings(self) -> list[Problem]:
        seen = {str(w) for w in self.before.warnings}
        return [w for w in self.after.warnings if str(w) not in seen]

    @property
    def blocking_flags(self) -> list[FlagChange]:
        return [f for f in self.flags if f.blocking]

    @property
    def problems(self) -> list[Problem]:
        """Everything that makes the upgrade unclean: flags the new release refuses, failed checks, no fit."""
        found = [Problem(f"engine.{f.flag}" if f.source == "preset" else f.flag, f.message, f.hint)
                 for f in self.blocking_flags]
        flagged = {f"engine.{f.flag}" for f in self.blocking_flags}
        # the flag table says those already, in the upgrade's words
        found += [p for p in self.after.problems if not any(p.where.endswith(where) for where in flagged)]
        if self.after.fits is False and not any("does not fit" in p.message for p in self.after.problems):
            found.append(Problem("engine", f"does not fit in memory at vLLM {self.target}: vLLM would fail with: "
                                           f"{self.after.plan.error if self.after.plan else '?'}"))
        return found

    @property
    def writable(self) -> bool:
        """No problems: `--apply` writes it (exit 0)."""
        return not self.problems and self.after.files is not None

    @property
    def clean(self) -> bool:
        """Writable, and nothing to do after but build: a pinned image that changes needs a push and a new pin."""
        return self.writable and self.dropped_pin is None

    @property
    def dropped_pin(self) -> str | None:
        """The recorded image.pin_digest the upgrade drops: the new release, or an override given with it (an
        extra_pip at the same release), makes another image than the pinned one."""
        return self.after.dropped_pin

    @property
    def after_repository(self) -> str | None:
        return self.after.repository

    @property
    def files(self) -> dict[str, str] | None:
        """What `--apply` writes: the render at the target, its record holding the override."""
        return self.after.files

    def as_data(self) -> dict[str, Any]:
        def plan_data(side: Side) -> dict[str, Any] | None:
            return None if side.plan is None else side.plan.to_json()

        return {
            "preset": self.preset,
            "out": str(self.out_dir) if self.out_dir is not None else None,
            "from": self.current,
            "to": self.target,
            "overrides": list(self.overrides),
            "clean": self.clean,
            "dropped_pin": self.dropped_pin,
            "flags": [f.as_data() for f in self.flags],
            "compatibility": {
                "problems": [str(p) for p in self.after.problems],
                "new_warnings": [str(w) for w in self.new_warnings],
                "problems_before": [str(p) for p in self.before.problems],
            },
            "plan": {"before": plan_data(self.before), "after": plan_data(self.after),
                     "before_note": self.before.plan_note, "after_note": self.after.plan_note},
            "diff": self.diff,
            "diff_against": self.diff_against,
            "stale": self.stale,
        }


# --------------------------------------------------------------------------- snapshots


def snapshot_for(version: str) -> FlagSnapshot:
    """The release's flag snapshot (the kit's, or the user's from their config folder), or NoSnapshot saying how
    to make one."""
    try:
        return load_snapshot(version)
    except FlagError:
        known = ", ".join(available_versions()) or "none"
        folder = user_config_dir() or Path("~/.config/vllm-kit")
        raise NoSnapshot(
            f"no vLLM flag snapshot for {version} (the kit and {folder}/flags/ have: {known}): the flags it removed "
            "or changed cannot be told",
            hint=f"make one from vLLM {version} itself: `{SNAPSHOT_COMMAND.format(version=version)}` installs it in "
                 f"a throwaway venv and writes {folder}/flags/vllm-{version}.json from its `vllm serve` parser (or, "
                 f"where that vLLM is installed, `{SNAPSHOT_IN_PLACE}`); the release also needs its row, in "
                 f"{folder}/{VERSIONS_FILE} (README: Releases the kit does not ship)") from None


def _options_of(snapshot: FlagSnapshot) -> dict[str, str]:
    """Every option string the release's parser takes -> the flag (dest key) it sets."""
    found: dict[str, str] = {}
    for key, spec in snapshot.flags.items():
        for option in (*spec.options, *spec.hidden_options):
            found.setdefault(option, key)
    return found


def _shown(value: Any) -> str:
    if value is None:
        return "None (vLLM decides at start)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _argv_text(argv: Sequence[str]) -> str:
    return " ".join(word if len(word) <= 60 else word[:57] + "..." for word in argv)


# --------------------------------------------------------------------------- flags


def _removed(key: str, old: FlagSnapshot, new: FlagSnapshot, current: str, target: str) -> FlagChange:
    """An engine key the new release does not take: renamed (to what) or removed (what to do instead)."""
    spec = old.flags[key]
    took = f"vLLM {current} took it" + (f" ({spec.help})" if spec.help else "")
    if key in new.aliases:
        canonical, negative = new.aliases[key]
        if negative:  # e.g. disable_log_requests: 0.33 accepts --disable-log-requests as enable_log_requests false
            return FlagChange(key, "renamed", "preset",
                              f"vLLM {target} accepts it as the command-line form of {canonical}: false",
                              f"write engine.{canonical}: false", blocking=True, after=canonical)
        return FlagChange(key, "renamed", "preset", f"is another name for {canonical} in vLLM {target}",
                          f"write engine.{canonical}", blocking=True, after=canonical)
    entry = renamed_flag(key)
    if entry is not None:
        replacement = entry.get("replacement")
        note = entry.get("note") or ""
        if replacement and replacement in new.flags:
            verb = "renamed" if entry.get("status") == "renamed" else "removed"
            return FlagChange(key, verb, "preset", f"{verb} by vLLM {target}: {note}".rstrip(": "),
                              f"use {entry.get('value') or replacement}", blocking=True, after=replacement)
        return FlagChange(key, "removed", "preset", f"removed by vLLM {target}: {note}".rstrip(": "), "delete it",
                          blocking=True)
    moved = {found for option in (*spec.options, *spec.hidden_options)
             if (found := _options_of(new).get(option)) is not None}
    if moved:
        other = sorted(moved)[0]
        return FlagChange(key, "renamed", "preset", f"its option now sets {other} in vLLM {target}",
                          f"write engine.{other}", blocking=True, after=other)
    return FlagChange(key, "removed", "preset", f"removed by vLLM {target}: {took}", "delete it", blocking=True)


def flag_changes(engine: Mapping[str, Any], current: str, target: str,
                 kit_options: Sequence[str] = ()) -> list[FlagChange]:
    """The flags of this deployment that vLLM ``target`` treats differently from ``current``: the engine flags the
    preset sets, the options the kit passes itself (``kit_options``), and the defaults of every other flag."""
    old, new = snapshot_for(current), snapshot_for(target)
    changes: list[FlagChange] = []
    refused_before = {p.field for p in check_engine(engine, current) if p.severity == "error"}
    warned_before = {p.field for p in check_engine(engine, current) if p.severity == "warning"}
    at_target = check_engine(engine, target)
    for key in sorted(engine):
        value, where = engine[key], f"engine.{key}"
        if where in refused_before:
            continue  # refused already at the current release: the checks before the upgrade say so
        errors = [p for p in at_target if p.field == where and p.severity == "error"]
        if errors and key in old.flags and key not in new.flags:
            changes.append(replace(_removed(key, old, new, current, target), before=value))
            continue
        if errors:
            changes.append(FlagChange(key, "value" if key in new.flags else "removed", "preset",
                                      f"vLLM {target} refuses it: " + "; ".join(p.message for p in errors),
                                      errors[0].hint, blocking=True, before=value))
            continue
        deprecated = [p for p in at_target if p.field == where and p.severity == "warning"]
        if deprecated and where not in warned_before:
            changes.append(FlagChange(key, "deprecated", "preset", deprecated[0].message,
                                      "it still works; move off it before the release that removes it",
                                      before=value))
        then, now = engine_to_argv({key: value}, current), engine_to_argv({key: value}, target)
        if then != now:
            changes.append(FlagChange(key, "option", "preset",
                                      f"`{_argv_text(then)}` becomes `{_argv_text(now)}` in the command (the "
                                      f"same setting, as vLLM {target} spells it)",
                                      before=then, after=now))
    changes += _meaning_changes(engine, current, target)
    old_options, new_options = _options_of(old), _options_of(new)
    kit_keys = set()
    for option in kit_options:
        key = old_options.get(option) or new_options.get(option) or option.lstrip("-").replace("-", "_")
        kit_keys.add(key)
        if option in old_options and option not in new_options:
            changes.append(FlagChange(key, "removed", "kit", f"the kit passes {option}, which vLLM {target} does "
                                      "not take", "the kit needs a change before this upgrade: report it",
                                      blocking=True, before=option))
    for key in sorted(set(old.flags) & set(new.flags) - set(engine) - kit_keys):
        then, now = old.flags[key].default, new.flags[key].default
        if then == now:
            continue
        spec = new.flags[key]
        note = f"; deprecated in {target}: {spec.help}" if spec.deprecated and not old.flags[key].deprecated else ""
        keep = then is not None and not spec.deprecated
        changes.append(FlagChange(key, "default", "default", f"default {_shown(then)} -> {_shown(now)}{note}",
                                  f"set engine.{key} to keep the old default" if keep else None,
                                  before=then, after=now))
    return changes


def _meaning_changes(engine: Mapping[str, Any], current: str, target: str) -> list[FlagChange]:
    """A flag the preset sets whose value means something else at ``target``: gpu_memory_utilization below 1.0 where
    the target sizes an extensible KV cache from measured memory (0.34: vllm/v1/worker/extensible_kv_cache.py
    `measure_kv_cache_blocks` warns for 0.7 < value < 1.0 when it withholds 1 GiB or more)."""
    util = engine.get("gpu_memory_utilization")
    before = rules_for(current).kv_sizing
    sizing = rules_for(target).kv_sizing
    off = engine.get("enable_extensible_kv_cache") is False or engine.get("kv_cache_memory_bytes") is not None \
        or engine.get("num_gpu_blocks_override") is not None
    if util is None or off or not (sizing and sizing.extensible_default) or (before and before.extensible_default) \
            or not 0.7 < float(util) < 1.0:
        return []
    return [FlagChange(
        "gpu_memory_utilization", "meaning", "preset",
        f"vLLM {target} sizes the KV cache from the memory free after warm-up and CUDA-graph capture (the extensible "
        f"KV cache) and leaves it unset (1.0) by default; {util:g} now only caps the cache, keeping "
        f"{1 - float(util):.0%} of the card from it (vLLM warns at start when that is 1 GiB or more)",
        "keep it if something vLLM does not see needs that memory later (a desktop session that grows, another "
        "process on the GPU); otherwise drop engine.gpu_memory_utilization", before=util, after=util)]


def _kit_options(preset: Preset) -> list[str]:
    """The options of the server command that the kit writes itself (model, served name, host, port, ...)."""
    bare = preset.model_copy(update={"engine": type(preset.engine).model_validate({})})  # the command without the preset's flags
    args = serve_args_for(bare, served_name_for(bare), "MODEL", server_command_for(bare))
    return [word for word in args if word.startswith("--")]


# --------------------------------------------------------------------------- each side


def _problems_of(error: KitError) -> tuple[Problem, ...]:
    return tuple(error.problems) if error.problems else (Problem("", error.message, error.hint),)


def _side(resolved: Resolved, version: str) -> Side:
    """The checks, plan and render of one release, as `kit validate`, `kit plan` and `kit render` see them."""
    try:
        prepared = prepare_resolved(resolved)
    except KitError as error:
        problems = _problems_of(error)
    else:
        return Side(version, warnings=tuple(prepared.report.warnings), plan=prepared.report.plan,
                    plan_note=None if prepared.report.plan is not None else "no memory plan (see the warnings)",
                    files=prepared.files, dropped_pin=prepared.dropped_pin,
                    repository=prepared.preset.image.repository, prepared=prepared,
                    overrides=tuple(prepared.resolved.overrides) if prepared.resolved else None)
    # The render is refused; the plan may still be there (a misfit, a compatibility rule).
    try:
        _, path, preset = load_preset(resolved.ref, resolved.overrides)
        plan, notes = plan_preset(display_path(path), preset)
    except KitError as error:
        return Side(version, problems=problems, plan_note=f"no memory plan: {_problems_of(error)[0]}")
    note = None if plan is not None else "; ".join(str(n) for n in notes) or "no memory plan"
    return Side(version, problems=problems, plan=plan, plan_note=note)


def plan_upgrade(request: Request, out_dir: Path | None, to: str) -> Upgrade:
    """What moving the deployment of ``request`` (over the record of ``out_dir``) to vLLM ``to`` changes."""
    snapshot_for(to)  # refused first: without it nothing below can be told
    before_resolved = resolve(request, out_dir)
    _, _, preset = load_preset(before_resolved.ref, before_resolved.overrides)
    current = preset.image.vllm_version
    snapshot_for(current)
    override = f"{UPGRADE_FIELD}={to}"
    after_resolved = resolve(replace(request, overrides=(*request.overrides, override)), out_dir)
    flags = flag_changes(preset.engine.flags(), current, to, _kit_options(preset)) if current != to else []
    before = _side(before_resolved, current)
    after = _side(after_resolved, to) if current != to else before
    # With a folder: what `kit render --out DIR image.vllm_version=TO --diff` prints. Without: render against render.
    if after.files is None:
        diff = None
    elif out_dir is not None:
        diff = diff_files(after.files, out_dir)
    else:
        diff = diff_file_sets(before.files, after.files) if before.files is not None else None
    recorded = before_resolved.recorded is not None
    stale = bool(out_dir is not None and recorded and before.files is not None and diff_files(before.files, out_dir))
    return Upgrade(preset=before_resolved.record.preset_name, out_dir=out_dir, current=current, target=to,
                   overrides=after.overrides if after.overrides is not None else tuple(after_resolved.overrides), flags=tuple(flags), before=before, after=after,
                   diff=diff, diff_against="folder" if out_dir is not None else "current", stale=stale, resolved=after_resolved)

