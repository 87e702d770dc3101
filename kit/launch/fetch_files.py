"""The one-shot model fetch, run inside the image (compose's model-fetch service, the k8s init container).

The render ships it beside the Dockerfile and the image holds it at /opt/vllm-kit/fetch_files.py
(kit/deploy/deployment.py FETCH_SCRIPT_PATH). Its one argument is JSON, built by kit.config.hubfetch from kit/data/fetch.yaml:
{"rules": {...}, "artefacts": [{"role", "ref", "revision", "mode", "field"}]}. It needs only the standard
library to import; huggingface_hub (in every vLLM image) is imported when a hub artefact is fetched.
It downloads what vLLM will read and nothing else, one file at a time with a progress line per file
on stderr, so the server can start with HF_HUB_OFFLINE=1. The kit imports `select_files` for its tests.

Every artefact is fetched at one commit (the hub's answer for the revision asked, model_info's `sha`). Each file is
streamed into the repo's blobs/ and hashed on the way, never past the size the hub's tree listing at that commit gives,
then compared with the listing: an LFS file's `lfs.oid` (its sha256), any other file's git blob id (sha1 of
"blob SIZE\\0" + content). A mismatch (or a body longer or shorter than listed) keeps no blob, removes that
revision's snapshot folder, and fails as "corrupt". The snapshot folder is computed from the repo id and the commit;
a listed name that is not a plain relative path, or a revision that is not a commit or a ref name, is refused before
anything is written. A sound fetch writes vllm-kit-manifest.json
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
        except FetchFailed:  # the fetch's own verdict (a refused name, a corrupt file): final as it is
            raise
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


_REF_FORBIDDEN = set(" ~^:?*[\\")


def revision_problem(revision):
    """Why ``revision`` is neither a 40-hex commit nor a ref name as git check-ref-format takes one, or None.
    A revision becomes a file under the cache's refs/ folder (_point_ref): `../../x` would be written outside it.
    `kit validate` applies this rule too (kit.config.hubrevision runs it from this file's text)."""
    if not isinstance(revision, str) or not revision:
        return "is empty"
    if is_commit(revision):
        return None
    if len(revision) > 255:
        return "is longer than 255 characters"
    if any(ord(c) < 0x20 or ord(c) == 0x7F or c in _REF_FORBIDDEN for c in revision):
        return "holds a space, a control character or one of ~^:?*[\\"
    if ".." in revision or "@{" in revision or revision == "@" or revision.endswith((".", "/")):
        return "holds '..' or '@{', or ends with '.' or '/'"
    for part in revision.split("/"):
        if not part or part.startswith(".") or part.endswith(".lock"):
            return "has an empty part, a part starting with '.' or ending with '.lock'"
    return None


def name_problem(name):
    """Why a listed file name is not a plain relative path inside a snapshot, or None. Refused, not repaired: a
    mirror that lists `a////b`, `../x`, `/etc/x`, `a\\b` or a NUL is not one to take files from."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if "\0" in name or "\\" in name or any(ord(c) < 0x20 for c in name):
        return "holds a NUL, a backslash or a control character"
    if name.startswith("/"):
        return "is absolute"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' part"
    return None


def _hub_ref_problem(ref):
    parts = ref.split("/") if isinstance(ref, str) else []
    if not 1 <= len(parts) <= 2 or any(name_problem(p) or p.startswith(".") or "--" in p for p in parts):
        return "is not a hub id"
    return None


def repo_folder(ref):
    """The HF cache's folder of a model repo, from its id as huggingface_hub names it (file_download.py
    repo_folder_name: models--ORG--NAME)."""
    return os.path.join(hub_cache(), "--".join(["models", *ref.split("/")]))


def _inside(path, folder):
    folder = os.path.realpath(folder)
    return os.path.commonpath([os.path.realpath(path), folder]) == folder


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


def _discard_snapshot(repo, snapshot):
    """A file did not match: remove the revision's snapshot folder (computed from the repo and the commit, never from a
    listed name), so nothing half-checked stays where vLLM (HF_HUB_OFFLINE=1) would load it. The bad bytes never
    became a blob; the other blobs stay as cache, and only the checked snapshot links them."""
    import shutil

    if _inside(snapshot, os.path.join(repo, "snapshots")) and os.path.realpath(snapshot) != os.path.realpath(
            os.path.join(repo, "snapshots")):
        shutil.rmtree(snapshot, ignore_errors=True)


def _write_manifest(snapshot, manifest):
    target = os.path.join(snapshot, MANIFEST)
    temporary = target + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(temporary, flags, 0o644), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(temporary, target)


_READ_TIMEOUT_S = 60


def _download(ref, rev, name, size, expected, repo, snapshot):
    """One listed file, streamed into the repo's blobs/ and hashed on the way: never more bytes than the listing
    gives (an endless body stops there), then linked into the snapshot as huggingface_hub links it (blobs named by
    their etag: the sha256 of an LFS file, the git blob id of another). Returns (path, sha256, size)."""
    import huggingface_hub
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    kind, want = expected
    if not want or name_problem(want):
        raise FetchFailed("corrupt", "%s: the listing gives no usable digest (%r)" % (name, want))
    blobs = os.path.join(repo, "blobs")
    os.makedirs(blobs, exist_ok=True)
    temporary = os.path.join(blobs, "%s.%d.incomplete" % (want, os.getpid()))
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)  # noqa: S324 - git's blob id
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    url = huggingface_hub.hf_hub_url(ref, name, revision=rev)
    try:
        with get_session().stream("GET", url, headers=build_hf_headers(), follow_redirects=True,
                                  timeout=_READ_TIMEOUT_S) as response:
            hf_raise_for_status(response)
            with os.fdopen(os.open(temporary, flags, 0o644), "wb") as handle:
                for chunk in response.iter_bytes(1 << 20):
                    written += len(chunk)
                    if written > size:
                        raise FetchFailed("corrupt", "%s: the mirror sent more than the %d bytes its listing says"
                                          % (name, size))
                    handle.write(chunk)
                    sha256.update(chunk)
                    sha1.update(chunk)
        if written != size:
            raise FetchFailed("corrupt", "%s: %d bytes, the hub's listing says %d" % (name, written, size))
        got = sha256.hexdigest() if kind == "sha256" else sha1.hexdigest()
        if got != want:
            raise FetchFailed("corrupt", "%s: %s %s, the hub's listing says %s" % (name, kind, got, want))
        blob = os.path.join(blobs, want)
        os.replace(temporary, blob)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
    link = os.path.join(snapshot, *name.split("/"))
    if not _inside(os.path.dirname(link), snapshot):
        raise FetchFailed("refused", "%s: not a path inside the snapshot" % name)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    return link, sha256.hexdigest(), written


def _fetch_hub(art, spec):
    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile

    api = huggingface_hub.HfApi()
    ref, asked = art["ref"], art.get("revision") or None
    problem = _hub_ref_problem(ref) or (asked and revision_problem(asked) and "revision %r %s" % (
        asked, revision_problem(asked)))
    if problem:
        raise FetchFailed("refused", "%s %s" % (ref, problem) if problem == "is not a hub id" else problem)
    # One commit for the listing, the downloads and the manifest: a branch that moves mid-fetch cannot mix two.
    info = _with_retries(lambda: api.model_info(ref, revision=asked), "model info")
    rev = info.sha
    if not is_commit(rev) or (is_commit(asked) and rev != asked):
        raise FetchFailed("failed", "the hub answered commit %r for revision %r" % (rev, asked))
    tree = _with_retries(lambda: list(api.list_repo_tree(ref, revision=rev, recursive=True)), "file list")
    entries = {e.path: e for e in tree if isinstance(e, RepoFile)}
    for name in sorted(entries):
        if name_problem(name):
            raise FetchFailed("refused", "the listing names %r, which %s: not a plain path inside the snapshot"
                              % (name, name_problem(name)))
    sizes = {path: e.size or 0 for path, e in entries.items()}
    repo = repo_folder(ref)
    snapshot = os.path.join(repo, "snapshots", rev)  # from the repo and the commit, never from a listed name
    files = {}

    def download(name):
        path, sha256, size = _with_retries(
            lambda: _download(ref, rev, name, sizes[name], expected_digest(entries[name]), repo, snapshot), name)
        files[name] = {"sha256": sha256, "size": size, "checked": expected_digest(entries[name])[0]}
        return path

    weight_map = None
    index = spec["rules"]["safetensors_index"]
    try:
        if art["mode"] == "weights" and index in sizes:
            with open(download(index)) as handle:
                weight_map = json.load(handle).get("weight_map")
        chosen, note = select_files(list(sizes), spec["rules"], art["mode"], spec.get("load_format", "auto"),
                                    spec.get("ignore_patterns"), weight_map)
        total = sum(sizes[f] for f in chosen)
        _say("%s %s@%s: %d of %d files, %s (%s)" % (art["role"], ref, rev[:12], len(chosen), len(sizes), _mib(total),
                                                      note))
        done, start = 0, time.monotonic()
        for number, name in enumerate(chosen, 1):
            kind = expected_digest(entries[name])[0]
            if name not in files:
                download(name)
            done += sizes[name]
            rate = done / max(time.monotonic() - start, 1e-3)
            _say("  [%d/%d] %s %s (%s of %s, %s/s) %s ok" % (number, len(chosen), name, _mib(sizes[name]),
                                                            _mib(done), _mib(total), _mib(rate), kind))
    except FetchFailed as failure:
        if failure.kind == "corrupt":
            _discard_snapshot(repo, snapshot)
        raise
    files = {name: files[name] for name in chosen}
    if files:
        _write_manifest(snapshot, {"format": MANIFEST_FORMAT, "repo": ref, "revision": rev, "asked": asked,
                                   "files": files})
        _say("  manifest %s: %d files, sha256 each" % (MANIFEST, len(files)))
        if not is_commit(asked):
            _point_ref(repo, asked or "main", rev)


def _point_ref(repo, revision, commit):
    """refs/REVISION -> commit, as hf_hub_download does for a branch (file_download.py
    _cache_commit_hash_for_specific_revision), written only once every file checked: vLLM offline asks for "main".
    The revision is a ref name (revision_problem), so the file stays under the repo's refs/."""
    if revision_problem(revision):
        raise FetchFailed("refused", "revision %r %s" % (revision, revision_problem(revision)))
    refs = os.path.join(repo, "refs")
    ref = os.path.join(refs, *revision.split("/"))
    if not _inside(ref, refs):
        raise FetchFailed("refused", "revision %r: not a name under refs/" % revision)
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    temporary = "%s.%d.tmp" % (ref, os.getpid())
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(temporary, flags, 0o644), "w") as handle:
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
    revision = revision or "main"
    if _hub_ref_problem(ref) or revision_problem(revision):
        return None
    repo = repo_folder(ref)
    if not is_commit(revision):
        try:
            with open(os.path.join(repo, "refs", revision)) as handle:
                revision = handle.read(64).strip()
        except OSError:
            return None
        if not is_commit(revision):
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
    if failure.kind == "refused" and not failure.detail.startswith("HTTP "):
        return "refused: %s" % failure.detail
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
