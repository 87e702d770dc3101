"""The one-shot model fetch, run inside the image (compose's model-fetch service, the k8s init container).

The render ships it beside the Dockerfile and the image holds it at /opt/vllm-kit/fetch_files.py
(kit/deploy/deployment.py FETCH_SCRIPT_PATH). Its one argument is JSON, built by kit.config.hubfetch from kit/data/fetch.yaml:
{"rules": {...}, "artefacts": [{"role", "ref", "revision", "mode", "field"}]}. It needs only the standard
library to import; huggingface_hub (in every vLLM image) is imported when a hub artefact is fetched.
It downloads what vLLM will read and nothing else, one file at a time with a progress line per file
on stderr, so the server can start with HF_HUB_OFFLINE=1. The kit imports `select_files` for its tests.
"""

import fnmatch
import json
import os
import sys
import time


def _hub_match(path, pattern):
    # huggingface_hub's filter_repo_objects: fnmatchcase, `*` crosses `/`, a trailing `/` means the folder.
    return fnmatch.fnmatchcase(path, pattern + "*" if pattern.endswith("/") else pattern)


def _is_weight(path, rules):
    return path.endswith(tuple(rules["weight_suffixes"]))


def select_files(files, rules, mode="weights", load_format="auto", ignore_patterns=None, weight_map=None):
    """(files to fetch, note) from a repo listing, choosing weights as vLLM's default loader does.

    mode "weights": the weight files vLLM loads plus every other file (config, tokenizer, index...);
    "tokenizer": the non-weight files only; "all": the whole repo (what vLLM's LoRA resolver downloads).
    weight_map: the safetensors index's weight_map, when the repo has one at its top level.
    """
    files = sorted(files)
    if mode == "all":
        return files, "whole repository"
    ignore = rules["default_ignore_patterns"] if ignore_patterns is None else list(ignore_patterns)
    kept = [f for f in files if not any(_hub_match(f, p) for p in ignore)]
    others = [f for f in kept if not _is_weight(f, rules)]
    if mode == "tokenizer":
        return others, "tokenizer and config files"
    fmt = load_format
    if fmt == "auto":
        # vLLM probes every file's base name, ignore patterns not applied (repo_utils.list_filtered_repo_files)
        fmt = "mistral" if any(fnmatch.fnmatch(f.rsplit("/", 1)[-1], rules["mistral_probe"]) for f in files) else "hf"
    if fmt not in rules["load_formats"]:
        return kept, "load_format %s: every file not ignored" % fmt
    patterns = rules["load_formats"][fmt]
    if not patterns:
        return others, "load_format %s: no weights" % fmt
    top = [f for f in files if "/" not in f]
    if "*.safetensors" in patterns and rules["safetensors_index"] in top and weight_map:
        # snapshot_download still applies the ignore patterns to the index's files
        chosen, how = sorted(set(weight_map.values()) & set(kept)), "the files in %s" % rules["safetensors_index"]
    else:
        pattern = next((p for p in patterns if fnmatch.filter(top, p)), None)
        if pattern is None:  # vLLM then tries each pattern over the whole snapshot
            pattern = next((p for p in patterns if any(_hub_match(f, p) for f in kept)), None)
        if pattern is None:
            raise LookupError("no weight files for load_format %s (looked for %s)" % (fmt, ", ".join(patterns)))
        chosen, how = [f for f in kept if _hub_match(f, pattern)], pattern
    chosen = [f for f in chosen if not f.endswith(tuple(rules["not_needed"]))]
    return sorted(set(others) | set(chosen)), "weights: %s (load_format %s)" % (how, fmt)


def _say(text):
    print(text, file=sys.stderr, flush=True)


def _mib(size):
    return "%.1f MiB" % ((size or 0) / 2**20)


def _fetch_hub(art, spec):
    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile

    api = huggingface_hub.HfApi()
    ref, rev = art["ref"], art.get("revision") or None
    tree = api.list_repo_tree(ref, revision=rev, recursive=True)
    sizes = {e.path: e.size or 0 for e in tree if isinstance(e, RepoFile)}
    weight_map = None
    index = spec["rules"]["safetensors_index"]
    if art["mode"] == "weights" and index in sizes:
        with open(huggingface_hub.hf_hub_download(ref, index, revision=rev)) as handle:
            weight_map = json.load(handle).get("weight_map")
    chosen, note = select_files(list(sizes), spec["rules"], art["mode"], spec.get("load_format", "auto"),
                                spec.get("ignore_patterns"), weight_map)
    total = sum(sizes[f] for f in chosen)
    _say("%s %s: %d of %d files, %s (%s)" % (art["role"], ref, len(chosen), len(sizes), _mib(total), note))
    done, start = 0, time.monotonic()
    for number, name in enumerate(chosen, 1):
        huggingface_hub.hf_hub_download(ref, name, revision=rev)
        done += sizes[name]
        rate = done / max(time.monotonic() - start, 1e-3)
        _say("  [%d/%d] %s %s (%s of %s, %s/s)" % (number, len(chosen), name, _mib(sizes[name]), _mib(done),
                                                   _mib(total), _mib(rate)))


def main(argv):
    spec = json.loads(argv[1])
    failed = []
    for art in spec["artefacts"]:
        ref = art["ref"]
        if ref.startswith(("/", "./", "../", "~")):
            path = os.path.expanduser(ref)
            marker = art.get("marker")
            ok = os.path.isfile(os.path.join(path, marker)) if marker else os.path.exists(path)
            _say("%s %s: %s" % (art["role"], ref, "present" if ok else "missing" + (" (no %s)" % marker if marker else "")))
            if not ok:
                failed.append("%s (%s)" % (ref, art["field"]))
            continue
        try:
            _fetch_hub(art, spec)
        except Exception as exc:  # one line per artefact: the user sees which flag names the broken one
            _say("%s %s: %s: %s" % (art["role"], ref, type(exc).__name__, exc))
            failed.append("%s (%s)" % (ref, art["field"]))
    if failed:
        print("model missing: " + ", ".join(failed))
        return 1
    print("model ready: " + ", ".join(a["ref"] for a in spec["artefacts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
