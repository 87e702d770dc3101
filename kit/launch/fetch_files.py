"""The one-shot model fetch, run inside the image (compose's model-fetch service, the k8s init container).

The render ships it beside the Dockerfile and the image holds it at /opt/vllm-kit/fetch_files.py
(kit/deploy/deployment.py FETCH_SCRIPT_PATH). Its one argument is JSON, built by kit.config.hubfetch from kit/data/fetch.yaml:
{"rules": {...}, "artefacts": [{"role", "ref", "revision", "mode", "field"}]}. It needs only the standard
library to import; huggingface_hub (in every vLLM image) is imported when a hub artefact is fetched.
It downloads what vLLM will read and nothing else, one file at a time with a progress line per file
on stderr, so the server can start with HF_HUB_OFFLINE=1. The kit imports `select_files` for its tests.

Every artefact is fetched at one commit (the hub's answer for the revision asked, model_info's `sha`). Each file is
hashed as it lies on disk after the download and compared with the hub's tree listing at that commit: an LFS file's
`lfs.oid` (its sha256), any other file's git blob id (sha1 of "blob SIZE\\0" + content). A mismatch removes that
revision's snapshot folder and the bad blob, and fails as "corrupt". A sound fetch writes vllm-kit-manifest.json
(revision, sha256 and size of every file) into the snapshot folder; `--verify SPEC` checks it again (kit smoke, in
the server's container).

A failure is told by kind in the last line (stdout), one entry per artefact: "not found" (no such repo, revision
or file), "gated" (the hub wants HF_TOKEN of an account that accepted the model's licence), "unreachable" (5xx,
429, a timeout, a refused or dropped connection), or "missing" for a local path. Only "unreachable" is worth
another try. huggingface_hub retries the repo listing and a file's HEAD itself (http_backoff: 5xx, 429, timeouts,
connection errors; 5 retries over about 23 s), and a dropped download, but not a 5xx answer to the GET that
downloads the file (only 408 and 429), so each file download is tried KIT_FETCH_ATTEMPTS times in all (default 3),
KIT_FETCH_RETRY_S seconds apart, doubling (default 5). A 404 or a 401 is final at once.
"""

import fnmatch
import hashlib
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


# Exception class names (any in the MRO) that mean the hub could not be reached: httpx's and requests'
# transport errors, the standard library's. huggingface_hub's own classes are checked by type in _failure_kind.
_UNREACHABLE_NAMES = {"TransportError", "TimeoutException", "NetworkError", "RemoteProtocolError", "Timeout",
                      "ConnectionError", "TimeoutError", "OfflineModeIsEnabled"}
_RETRY_STATUS = (408, 429)


def _first_line(exc):
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _causes(exc):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _failure_kind(exc):
    """("not found" | "gated" | "unreachable" | "refused" | "failed", detail) for an exception of a hub call."""
    from huggingface_hub import errors

    def classes(*names):
        return tuple(c for c in (getattr(errors, n, None) for n in names) if isinstance(c, type))

    for cause in _causes(exc):
        if isinstance(cause, classes("GatedRepoError")):  # a RepositoryNotFoundError too: first
            return "gated", ""
        if isinstance(cause, classes("RepositoryNotFoundError", "RevisionNotFoundError", "RemoteEntryNotFoundError",
                                     "DisabledRepoError")):
            return "not found", type(cause).__name__
        status = getattr(getattr(cause, "response", None), "status_code", None)
        if isinstance(status, int):
            if status >= 500 or status in _RETRY_STATUS:
                return "unreachable", "HTTP %d" % status
            if status in (401, 403):
                return "refused", "HTTP %d" % status
            return "failed", "HTTP %d" % status
        if any(c.__name__ in _UNREACHABLE_NAMES for c in type(cause).__mro__):
            return "unreachable", type(cause).__name__
    if isinstance(exc, classes("LocalEntryNotFoundError")):
        # hf_hub_download found no metadata and no cached copy: "most likely a connection issue or Hub downtime"
        return "unreachable", type(exc).__name__
    return "failed", type(exc).__name__


class FetchFailed(Exception):
    def __init__(self, kind, detail, attempts=1):
        super().__init__(kind)
        self.kind, self.detail, self.attempts = kind, detail, attempts


def _attempts():
    try:
        return max(1, int(os.environ.get("KIT_FETCH_ATTEMPTS", "3")))
    except ValueError:
        return 3


def _with_retries(call, what):
    """call(), tried again while it fails as "unreachable" (bounded); any other failure is final at once."""
    attempts, pause = _attempts(), float(os.environ.get("KIT_FETCH_RETRY_S", "5") or 0)
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:  # classified here; the kinds not worth a retry raise at once
            kind, detail = _failure_kind(exc)
            if kind != "unreachable" or attempt == attempts:
                raise FetchFailed(kind, detail or _first_line(exc), attempt) from exc
            _say("  %s: hub unreachable (%s); attempt %d of %d in %gs" % (what, detail, attempt + 1, attempts, pause))
            time.sleep(pause)
            pause *= 2
    raise AssertionError("not reached")


MANIFEST = "vllm-kit-manifest.json"
MANIFEST_FORMAT = "vllm-kit/model-manifest/1"
_COMMIT_CHARS = set("0123456789abcdef")


def is_commit(revision):
    return bool(revision) and len(revision) == 40 and set(revision) <= _COMMIT_CHARS


def file_digests(path):
    """(sha256, git blob sha1, size) of a file, read once. The git blob id is sha1 of "blob SIZE\\0" + content."""
    size = os.path.getsize(path)
    # git names a non-LFS file by sha1 only, and that id is all the hub lists for it; the manifest keeps sha256
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)  # noqa: S324
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest(), size


def expected_digest(entry):
    """("sha256" | "git-sha1", hex) the hub's tree listing gives for a file: an LFS file's lfs.sha256 (RepoFile.lfs,
    huggingface_hub hf_api.py BlobLfsInfo), else the git blob id (RepoFile.blob_id, the listing's "oid")."""
    lfs = getattr(entry, "lfs", None)
    if lfs is not None:
        return "sha256", lfs["sha256"] if isinstance(lfs, dict) else lfs.sha256
    return "git-sha1", entry.blob_id


def _discard_snapshot(snapshot, bad_file):
    """A file did not match: remove that blob and the revision's snapshot folder, so nothing half-checked stays
    where vLLM (HF_HUB_OFFLINE=1) would load it. The other blobs stay as cache; only the checked snapshot links them."""
    import shutil

    blobs = os.path.join(os.path.realpath(os.path.dirname(os.path.dirname(snapshot))), "blobs") + os.sep
    blob = os.path.realpath(bad_file)
    if blob.startswith(blobs) and os.path.isfile(blob):
        os.unlink(blob)

    shutil.rmtree(snapshot, ignore_errors=True)


def _write_manifest(snapshot, manifest):
    target = os.path.join(snapshot, MANIFEST)
    temporary = target + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(temporary, flags, 0o644), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(temporary, target)


def _fetch_hub(art, spec):
    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile

    api = huggingface_hub.HfApi()
    ref, asked = art["ref"], art.get("revision") or None
    # One commit for the listing, the downloads and the manifest: a branch that moves mid-fetch cannot mix two.
    info = _with_retries(lambda: api.model_info(ref, revision=asked), "model info")
    rev = info.sha
    if not is_commit(rev) or (is_commit(asked) and rev != asked):
        raise FetchFailed("failed", "the hub answered commit %r for revision %r" % (rev, asked))
    tree = _with_retries(lambda: list(api.list_repo_tree(ref, revision=rev, recursive=True)), "file list")
    entries = {e.path: e for e in tree if isinstance(e, RepoFile)}
    sizes = {path: e.size or 0 for path, e in entries.items()}
    weight_map = None
    index = spec["rules"]["safetensors_index"]
    if art["mode"] == "weights" and index in sizes:
        with open(_with_retries(lambda: huggingface_hub.hf_hub_download(ref, index, revision=rev), index)) as handle:
            weight_map = json.load(handle).get("weight_map")
    chosen, note = select_files(list(sizes), spec["rules"], art["mode"], spec.get("load_format", "auto"),
                                spec.get("ignore_patterns"), weight_map)
    total = sum(sizes[f] for f in chosen)
    _say("%s %s@%s: %d of %d files, %s (%s)" % (art["role"], ref, rev[:12], len(chosen), len(sizes), _mib(total),
                                                  note))
    done, start, files, snapshot = 0, time.monotonic(), {}, None
    for number, name in enumerate(chosen, 1):
        path = _with_retries(lambda name=name: huggingface_hub.hf_hub_download(ref, name, revision=rev), name)
        snapshot = path[: -len(name)].rstrip("/")
        sha256, git_sha1, size = file_digests(path)
        kind, expected = expected_digest(entries[name])
        got = sha256 if kind == "sha256" else git_sha1
        if got != expected:
            _discard_snapshot(snapshot, path)
            raise FetchFailed("corrupt", "%s: %s %s, the hub's listing says %s" % (name, kind, got, expected))
        files[name] = {"sha256": sha256, "size": size, "checked": kind}
        done += sizes[name]
        rate = done / max(time.monotonic() - start, 1e-3)
        _say("  [%d/%d] %s %s (%s of %s, %s/s) %s ok" % (number, len(chosen), name, _mib(sizes[name]), _mib(done),
                                                        _mib(total), _mib(rate), kind))
    if snapshot is not None:
        _write_manifest(snapshot, {"format": MANIFEST_FORMAT, "repo": ref, "revision": rev, "asked": asked,
                                   "files": files})
        _say("  manifest %s: %d files, sha256 each" % (MANIFEST, len(files)))
        if not is_commit(asked):
            _point_ref(snapshot, asked or "main", rev)


def _point_ref(snapshot, revision, commit):
    """refs/REVISION -> commit, as hf_hub_download does for a branch (file_download.py
    _cache_commit_hash_for_specific_revision), written only once every file checked: vLLM offline asks for "main"."""
    ref = os.path.join(os.path.dirname(os.path.dirname(snapshot)), "refs", revision)
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    temporary = "%s.%d.tmp" % (ref, os.getpid())
    with open(temporary, "w") as handle:
        handle.write(commit)
    os.replace(temporary, ref)


def hub_cache():
    """huggingface_hub's HF_HUB_CACHE as its constants.py derives it, so --verify needs only the standard library."""
    home = os.path.expandvars(os.path.expanduser(os.getenv(
        "HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
                                "huggingface"))))
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return os.path.expandvars(os.path.expanduser(os.getenv("HF_HUB_CACHE", legacy)))


def snapshot_folder(ref, revision):
    """The HF cache's snapshot folder of a repo at a revision (a commit, or a ref the cache recorded), or None."""
    repo = os.path.join(hub_cache(), "models--" + ref.replace("/", "--"))
    revision = revision or "main"
    if not is_commit(revision):
        try:
            with open(os.path.join(repo, "refs", revision)) as handle:
                revision = handle.read().strip()
        except OSError:
            return None
    return os.path.join(repo, "snapshots", revision)


def verify_manifest(snapshot):
    """Problems (empty when sound) of a snapshot against its manifest: every file there, sha256 as recorded."""
    try:
        with open(os.path.join(snapshot, MANIFEST)) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as exc:
        return ["%s: no readable manifest (%s)" % (os.path.join(snapshot, MANIFEST), type(exc).__name__)]
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        return ["%s: not a manifest the fetch wrote (no files)" % os.path.join(snapshot, MANIFEST)]
    problems = []
    if manifest.get("revision") != os.path.basename(snapshot):
        problems.append("%s: manifest names revision %r" % (snapshot, manifest.get("revision")))
    for name, want in sorted(files.items()):
        want = want.get("sha256") if isinstance(want, dict) else None
        if os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] in ("..", ""):
            problems.append("%r: not a path inside the snapshot" % name)
            continue
        path = os.path.join(snapshot, name)
        if not os.path.isfile(path):
            problems.append("%s: missing" % name)
            continue
        sha256 = file_digests(path)[0]
        if sha256 != want:
            problems.append("%s: sha256 %s, the manifest says %s" % (name, sha256, want))
    return problems


def verify(spec):
    """`--verify SPEC`: check every hub artefact's snapshot against its manifest (kit smoke runs this in the server's
    container). Local paths were never fetched and have no manifest."""
    failed = []
    for art in spec["artefacts"]:
        ref = art["ref"]
        if ref.startswith(("/", "./", "../", "~")):
            print("%s %s: local path, no manifest" % (art["role"], ref))
            continue
        snapshot = snapshot_folder(ref, art.get("revision"))
        problems = verify_manifest(snapshot) if snapshot else ["%s: not in the HF cache" % ref]
        if problems:
            failed.append("%s (%s): %s" % (ref, art["field"], "; ".join(problems)))
        else:
            print("%s %s@%s: manifest ok" % (art["role"], ref, os.path.basename(snapshot)))
    if failed:
        print("manifest check failed: " + " | ".join(failed))
        return 1
    print("manifest ok")
    return 0


def _reason(failure):
    if failure.kind == "not found":
        return "not found on the hub"
    if failure.kind == "gated":
        return "gated: set HF_TOKEN (.env) to a token of an account that accepted its licence on the hub"
    if failure.kind == "refused":
        return "refused (%s): check HF_TOKEN" % failure.detail
    if failure.kind == "corrupt":
        return ("refused: %s (that revision's snapshot was removed; check HF_ENDPOINT, the mirror may serve other "
                "files)" % failure.detail)
    if failure.kind == "unreachable":
        tries = "after %d attempts" % failure.attempts if failure.attempts > 1 else "no retry"
        return "hub unreachable (%s, %s): check HF_ENDPOINT and the network" % (failure.detail, tries)
    return "failed (%s)" % failure.detail


def main(argv):
    if len(argv) == 3 and argv[1] == "--verify":
        return verify(json.loads(argv[2]))
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
                failed.append("%s (%s): missing" % (ref, art["field"]))
            continue
        try:
            try:
                _fetch_hub(art, spec)
            except FetchFailed:
                raise
            except Exception as exc:  # the listing, or a rule: classified like a download
                kind, detail = _failure_kind(exc)
                raise FetchFailed(kind, detail or type(exc).__name__) from exc
        except FetchFailed as failure:  # one entry per artefact: the user sees which flag names the broken one
            cause = failure.__cause__
            _say("%s %s: %s" % (art["role"], ref, "%s: %s" % (type(cause).__name__, _first_line(cause)) if cause
                                 else failure.detail))
            failed.append("%s (%s): %s" % (ref, art["field"], _reason(failure)))
    if failed:
        print("model not fetched: " + "; ".join(failed))
        return 1
    print("model ready: " + ", ".join(a["ref"] for a in spec["artefacts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
