"""The one resolver from a GPU's name to its entry in the catalog (kit/data/gpus.yaml).

Every caller that takes a GPU name from a person or a tool goes through here: preset validation
(``hardware.gpu``), ``kit plan --gpu``, the fit search and ``kit doctor`` (nvidia-smi's names). One
normalisation makes "RTX 4090", "rtx-4090", "NVIDIA GeForce RTX 4090" and "4090" the same name: case,
spaces, dashes, underscores and the vendor words nvidia-smi puts in front ("NVIDIA", "GeForce", "Tesla")
do not count.
"""

from __future__ import annotations

import difflib
import functools
import re

from kit.core.datafiles import gpu_catalog

# Words nvidia-smi (and marketing) put before the model name; they tell no two catalog entries apart.
_VENDOR_WORDS = re.compile(r"\b(nvidia|geforce|tesla)\b")
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
# Two cards of one name with different memory (the RTX 4060 Ti: 8 or 16 GB): a reported size decides.
_MEMORY_TOLERANCE = 0.1


def normalised_gpu_name(name: str) -> str:
    """``name`` as the catalog compares it: lower case, vendor words dropped, only letters and digits kept."""
    return _NOT_ALNUM.sub("", _VENDOR_WORDS.sub(" ", name.lower()))


@functools.cache
def _names() -> dict[str, tuple[str, ...]]:
    """{normalised name: catalog keys, in catalog order} over every key, alias and full name in the catalog."""
    names: dict[str, tuple[str, ...]] = {}
    for key, entry in gpu_catalog().items():
        for name in (key, str(entry["name"]), *(str(a) for a in entry.get("aliases", []))):
            found = names.get(normalised_gpu_name(name), ())
            if key not in found:
                names[normalised_gpu_name(name)] = (*found, key)
    return names


def gpu_key(name: str, memory_mib: float | None = None) -> str | None:
    """The catalog key ``name`` stands for, or None.

    With ``memory_mib`` (a size a tool reported, nvidia-smi's memory.total) the entry must also agree on
    memory within 10 %: an 8 GB card that shares a 16 GB card's name is not that card.
    """
    keys = _names().get(normalised_gpu_name(name), ())
    if memory_mib:
        catalog = gpu_catalog()
        keys = tuple(k for k in keys
                     if abs(float(catalog[k]["memory_gib"]) * 1024 - memory_mib) / memory_mib < _MEMORY_TOLERANCE)
    return keys[0] if keys else None


def near_gpu_names(name: str, limit: int = 3) -> list[str]:
    """Catalog keys whose names are close to ``name`` (for "did you mean"), closest first."""
    names = _names()
    close = difflib.get_close_matches(normalised_gpu_name(name), list(names), n=limit * 3, cutoff=0.5)
    keys = list(dict.fromkeys(k for c in close for k in names[c]))
    return keys[:limit]


def unknown_gpu_hint(name: str) -> str:
    """What to say when ``name`` is in no catalog entry: the near matches, else where the list is."""
    close = near_gpu_names(name)
    return f"did you mean {', '.join(close)}?" if close else "run `kit gpus` to list the catalog"
