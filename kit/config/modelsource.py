"""Where a Hugging Face id's config.json and safetensors headers come from when no local folder is named: the
Hugging Face cache on this machine, or the hub through ``huggingface_hub``.

Public entry points: ``cached_snapshot(model_id, revision, environ)`` (the cache, laid out as huggingface_hub 2.4.0
writes it: ``{HF_HUB_CACHE}/models--{org}--{name}/refs/{revision}`` holds a commit, ``snapshots/{commit}/`` the
files; file_download.py and constants.py) and ``from_hub(model_id, revision, environ)``, which downloads
config.json (into that cache, as huggingface_hub does) and reads the safetensors headers with ranged requests
(``HfApi.get_safetensors_metadata``), never the weights. Both read the environment they are given, at call time:
HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE. The token goes to
huggingface_hub only: no message, log or file of the kit's carries it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kit.config.modelfiles import LOCAL_MODEL_HINT, StoredTensors, load_json, safetensors_header_bytes
from kit.core.errors import PlanError
from kit.core.hubid import is_namespaced_repo_id

COMMIT = re.compile(r"[0-9a-f]{40}")
# constants.py ENV_VARS_TRUE_VALUES: how huggingface_hub reads HF_HUB_OFFLINE
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


class HubUnreachable(PlanError):
    """No answer from the hub (network, DNS, timeout): a cached config.json may stand in."""


# hub look-ups of this process, by (id, revision, endpoint, cache): one command plans a model more than once
_LOOKED_UP: dict[tuple[str, str | None, str | None, str], tuple[Any, Any]] = {}
# and those that met no connection at all (_connects): asked once per command
_UNREACHED: dict[tuple[str, str | None, str | None, str], HubUnreachable] = {}


def is_hub_id(ref: str) -> bool:
    """An org/name id huggingface_hub accepts (kit/core/hubid.py): the kit plans org/name ids only."""
    return is_namespaced_repo_id(ref)


def hub_offline(environ: dict[str, str]) -> bool:
    return environ.get("HF_HUB_OFFLINE", "").strip().upper() in TRUE_VALUES


def hub_cache_dir(environ: dict[str, str]) -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub (constants.py HF_HOME, HF_HUB_CACHE)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    home = environ.get("HF_HOME") or str(Path(environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(model_id: str, revision: str | None, environ: dict[str, str]) -> Path | None:
    """The cached snapshot folder of ``model_id`` at ``revision`` (default main) when it holds a config.json."""
    if not is_hub_id(model_id):
        return None
    repo = hub_cache_dir(environ) / ("models--" + model_id.replace("/", "--"))
    rev = revision or "main"
    if COMMIT.fullmatch(rev):
        commit = rev
    else:
        if "/" in rev or rev.startswith("."):
            return None
        try:
            commit = (repo / "refs" / rev).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not COMMIT.fullmatch(commit):
            return None
    snapshot = repo / "snapshots" / commit
    return snapshot if (snapshot / "config.json").is_file() else None


def has_weights(snapshot: Path) -> bool:
    """The snapshot says what its weights store: a safetensors index or safetensors files are cached."""
    return (snapshot / "model.safetensors.index.json").is_file() or any(snapshot.glob("*.safetensors"))


def from_hub(model_id: str, revision: str | None, environ: dict[str, str]) -> tuple[Any, Any]:
    """(config.json as a dict, StoredTensors or None) of a hub model; a PlanError naming the model otherwise."""
    where = f"model {model_id}" + (f" at revision {revision}" if revision else "")
    cache = hub_cache_dir(environ)
    if hub_offline(environ):
        raise PlanError(f"{where}: not in the bundled catalog nor in the Hugging Face cache ({cache}), and "
                        "HF_HUB_OFFLINE is set, so the hub was not asked",
                        hint="unset HF_HUB_OFFLINE to look it up on the hub, download it first, or " + LOCAL_MODEL_HINT)
    try:
        from huggingface_hub import HfApi
        from huggingface_hub import errors as hub_errors
    except ImportError:
        raise PlanError(f"{where}: not in the bundled catalog nor in the Hugging Face cache ({cache}), and "
                        "huggingface_hub is not installed to ask the hub",
                        hint="pip install huggingface_hub, or " + LOCAL_MODEL_HINT) from None
    endpoint = environ.get("HF_ENDPOINT") or None
    token = environ.get("HF_TOKEN") or None
    key = (model_id, revision, endpoint, str(cache))
    if key in _LOOKED_UP:
        return _LOOKED_UP[key]
    if key in _UNREACHED:  # one command asks once: a plan made twice does not wait on the network twice
        raise _UNREACHED[key]
    api = HfApi(endpoint=endpoint, token=token)
    unreachable: tuple[type[Exception], ...] = (OSError, *_transport_errors())
    asked = f"the hub at {endpoint}" if endpoint else "the hub"
    try:
        _connects(model_id, revision, endpoint, token)
    except HubUnreachable as exc:
        _UNREACHED[key] = HubUnreachable(f"{where}: {asked} could not be reached ({exc})",
                                         hint="check the network or HF_ENDPOINT; offline, " + LOCAL_MODEL_HINT)
        raise _UNREACHED[key] from None
    try:
        config_path = Path(api.hf_hub_download(model_id, "config.json", revision=revision, cache_dir=str(cache)))
        config = load_json(config_path)
        try:
            metadata = api.get_safetensors_metadata(model_id, revision=revision)
        except (hub_errors.NotASafetensorsRepoError, hub_errors.EntryNotFoundError):
            metadata = None  # a .bin or GGUF checkpoint: the weights are counted from the config's shapes
    except hub_errors.LocalEntryNotFoundError:  # what hf_hub_download raises when the connection fails
        raise HubUnreachable(f"{where}: {asked} could not be reached and the file is not cached",
                        hint="check the network or HF_ENDPOINT; offline, " + LOCAL_MODEL_HINT
                        ) from None
    except hub_errors.GatedRepoError:
        raise PlanError(f"{where}: {asked} refused it (gated): it needs a token whose account accepted the model's "
                        "licence" + ("; HF_TOKEN is set but has no access" if token else ""),
                        hint="accept the licence on the model's page, then set HF_TOKEN to that account's token"
                        ) from None
    except hub_errors.RevisionNotFoundError:
        raise PlanError(f"{where}: {asked} has no such revision", hint="check model.revision") from None
    except hub_errors.RepositoryNotFoundError:
        raise PlanError(f"{where}: {asked} has no such model, or it is private",
                        hint="check the id; for a private model set HF_TOKEN") from None
    except hub_errors.EntryNotFoundError:
        raise PlanError(f"{where}: {asked} has no config.json for it",
                        hint=LOCAL_MODEL_HINT) from None
    except hub_errors.SafetensorsParsingError:
        raise PlanError(f"{where}: a safetensors header on {asked} could not be read") from None
    except hub_errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "no status"
        hint = "set HF_TOKEN to a token with access" if status in (401, 403) else "try again, or set HF_ENDPOINT"
        raise PlanError(f"{where}: {asked} answered HTTP {status}", hint=hint) from None
    except unreachable as exc:  # no connection, timeouts, DNS
        raise HubUnreachable(f"{where}: {asked} could not be reached ({type(exc).__name__})",
                        hint="check the network or HF_ENDPOINT; offline, " + LOCAL_MODEL_HINT
                        ) from None
    _LOOKED_UP[key] = (config, _stored(metadata, where))
    return _LOOKED_UP[key]


def _connects(model_id: str, revision: str | None, endpoint: str | None, token: str | None) -> None:
    """HubUnreachable (its text: why) when no connection to the hub can be made at all: a name that does not resolve,
    a refused port. hf_hub_download falls back to its cache at once but, with nothing cached, retries such an error
    five times with back-off (23 s, logging each retry); a name that does not resolve does not resolve a second later.
    One metadata request without retries tells them apart; anything else it meets (an HTTP status, a timeout) is
    left to hf_hub_download, which maps it to its own message and retries what may pass."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(model_id, "config.json", revision=revision, endpoint=endpoint)
    try:
        get_hf_file_metadata(url, token=token, endpoint=endpoint, timeout=10, retry_on_errors=False)
    except _connect_errors() as exc:
        raise HubUnreachable(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'no connection'}"
                             ) from None
    except Exception:  # noqa: BLE001 - not a connection failure: the full request says what it is
        return


def _connect_errors() -> tuple[type[Exception], ...]:
    """The HTTP client's "no connection could be made" errors (DNS, refused)."""
    return _client_errors("ConnectError")


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP client's "no answer" errors."""
    return _client_errors("TransportError")


def _client_errors(name: str) -> tuple[type[Exception], ...]:
    """The error class ``name`` of each HTTP client huggingface_hub may use: 2.x talks through httpx2, 1.x httpx."""
    import importlib

    found = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _stored(metadata: Any, where: str) -> Any:
    """The stored bytes the headers describe, every shard's, per dtype (data_offsets, as the local reader counts)."""
    if metadata is None:
        return None
    stored = StoredTensors(total=0)
    for name, file in sorted(metadata.files_metadata.items()):
        header = {tensor: {"dtype": info.dtype, "data_offsets": list(info.data_offsets)}
                  for tensor, info in file.tensors.items()}
        stored = stored.add(safetensors_header_bytes(header, f"{where}: {name}", None))
    return stored if stored.total else None
