"""What `docker compose up` of a rendered stack takes from a registry, and the note an offline host needs before the
line `kit render` prints (issue 36: every printed step works as printed).

Public entry points: ``stack_images(files, values)`` (each image the compose files name, as compose resolves it, and
whether compose pulls it or the kit builds it) and ``offline_note(...)``. Read from the rendered
compose files as data (the services' ``image`` and ``pull_policy``), with the values compose interpolates.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.deploy.deployment import BUILT_PULL_POLICY

# A whole `image:` value that is compose's interpolation with a default: `${NAME:-pinned}` (the door's).
_WITH_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")


@dataclass(frozen=True)
class StackImage:
    ref: str  # as compose resolves it with ``values``
    services: tuple[str, ...]
    built: bool  # compose builds it when the engine lacks it (the kit's images); otherwise compose pulls it
    variable: str | None  # the .env name that may replace it (`${NAME:-pinned}`), if any
    from_variable: bool  # ``ref`` is that variable's value, not the pinned default


def _resolve(image: str, values: Mapping[str, str]) -> tuple[str, str | None, bool]:
    found = _WITH_DEFAULT.fullmatch(image)
    if found is None:
        return image, None, False
    name, default = found.groups()
    value = (values.get(name) or "").strip()
    return (value, name, True) if value else (default, name, False)


def stack_images(files: dict[str, str], values: Mapping[str, str]) -> list[StackImage]:
    """Every image the rendered compose files name, once each in the files' order, resolved with ``values`` (what
    compose interpolates: .env under the shell's environment)."""
    import yaml

    found: dict[str, StackImage] = {}
    for rel in sorted(files):
        if not (rel.startswith("compose") and rel.endswith(".yaml")):
            continue
        for service, spec in ((yaml.safe_load(files[rel]) or {}).get("services") or {}).items():
            if not isinstance(spec, dict) or not spec.get("image"):
                continue
            ref, variable, from_variable = _resolve(str(spec["image"]), values)
            built = spec.get("pull_policy") == BUILT_PULL_POLICY
            known = found.get(ref)
            services = (*known.services, service) if known else (service,)
            found[ref] = StackImage(ref, services, built, variable, from_variable)
    return list(found.values())


def offline_note(files: dict[str, str], values: Mapping[str, str], *, base_image: str, base_given: bool,
                 out_dir: Path, kit: str, on_engine: Callable[[str], bool] | None = None) -> list[str]:
    """The `note:` lines after `kit render`'s `next:` line, which builds the kit's images when the engine lacks them
    (`kit build`) and lets compose pull the rest. An image ``on_engine`` says this engine has is left out (compose
    neither pulls nor builds it); so is a site image a variable names (VLLM_KIT_DOOR_IMAGE, kit/data/service_env.yaml
    ``images_from_environment``).

    - The images compose pulls from a registry, each with what stands in for it on a host without one (a site image
      in .env, or `docker load`): an upstream image is told apart from the kit's own, which are built, never pulled.
    - The base the line's `kit build` pulls, when the engine lacks it and an image of the kit's is to be built, with
      the render onto a base this engine has (--base-image).
    - On a render made for a host without a registry (its base given: --base-image, or a site image set) whose
      image the engine lacks: the build from a wheelhouse, in place of the line's `kit build` (which installs from
      the package index).
    None of these when nothing is left to name."""
    images = stack_images(files, values)
    offline = base_given or any(i.from_variable for i in images)
    folder = shlex.quote(str(out_dir))
    pulled: list[str] = []
    build = False
    for image in images:
        if image.from_variable:
            continue  # the site's own image, which the variable names for this host
        if on_engine is not None and on_engine(image.ref):
            continue  # already here: compose uses it as it is
        services = ", ".join(image.services)
        if image.built:
            build = True
        elif image.variable:
            pulled.append(f"{image.ref} ({services}; or {image.variable}=IMAGE in {out_dir / '.env'}, an image this "
                          "engine has)")
        else:
            pulled.append(f"{image.ref} ({services}; `docker load` it from a connected host)")
    notes = []
    if pulled:
        notes.append("note: compose pulls from a registry what this engine lacks; on a host without a registry, "
                     "it needs here first: " + "; ".join(pulled))
    if build and not (on_engine is not None and on_engine(base_image)):
        notes.append(f"note: the line's `{kit} build` pulls its base {base_image}, which this engine lacks; on a host "
                     f"without a registry, render onto a base this engine has first: `{kit} render --out {folder} "
                     "--base-image REF`")
    if build and offline:
        notes.append(f"note: on a host without a package index, build from wheels in place of the line's `{kit} build`: "
                     f"`{kit} wheelhouse --out {folder} --wheelhouse WHEELHOUSE` fetches them on a connected host, then "
                     f"`{kit} build --out {folder} --wheelhouse WHEELHOUSE` builds from base {base_image} on this engine")
    return notes
