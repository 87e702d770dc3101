"""Which commit a hub model's revision is now: what `kit lock` pins as `model.revision`.

Public entry point: ``commit_of(model_id, revision, environ)``. It asks the hub's API as huggingface_hub 2.4.0's
``HfApi.model_info(repo_id, revision=R)`` does (hf_api.py: GET {endpoint}/api/models/{repo_id}/revision/{R},
the revision URL-quoted, an ``Authorization: Bearer`` token when one is set) and reads the answer's ``sha``
(ModelInfo.sha). The endpoint is ``HF_ENDPOINT`` (a mirror) or the hub's own (constants.py ENDPOINT), the token
``HF_TOKEN``: the same two variables the in-image fetch honours, read from the deployment's .env or the environment.
Standard library only, so the CLI needs no huggingface_hub.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from kit.config.fetchscript import shipped_fetch_functions
from kit.core.envfile import env_value
from kit.core.errors import KitError

HUB_ENDPOINT = "https://huggingface.co"  # huggingface_hub constants.py _HF_DEFAULT_ENDPOINT
COMMIT = re.compile(r"[0-9a-f]{40}")
TIMEOUT_S = 30


def revision_problem(revision: str) -> str | None:
    """Why a revision is neither a 40-hex commit nor a git ref name, or None. The in-image fetch writes a revision as
    a file under the cache's refs/ folder, so `../../x` would land outside it: its rule (fetch_files.py
    revision_problem) is the one `kit validate` applies, read from the script the render ships."""
    problem: str | None = shipped_fetch_functions()["revision_problem"](revision)
    return problem


def is_commit(revision: str | None) -> bool:
    return bool(revision) and COMMIT.fullmatch(revision or "") is not None


def env_file_values(path: Path, keys: tuple[str, ...]) -> dict[str, str]:
    """The keys asked of a compose .env, as compose reads them (kit/core/envfile.py); the file may be absent."""
    found = {key: env_value(path, key) for key in keys}
    return {key: value for key, value in found.items() if value is not None}


def commit_of(model_id: str, revision: str | None, environ: dict[str, str]) -> str:
    """The 40-hex commit ``revision`` (default: main) of a hub model is at now, or a KitError naming model.id."""
    endpoint = (environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")
    url = f"{endpoint}/api/models/{model_id}/revision/{quote(revision or 'main', safe='')}"
    if not endpoint.startswith(("http://", "https://")):
        raise KitError(f"HF_ENDPOINT: {endpoint!r} is not an http(s) URL", hint="e.g. HF_ENDPOINT=https://mirror.example")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - scheme checked above
    if environ.get("HF_TOKEN"):
        request.add_header("Authorization", f"Bearer {environ['HF_TOKEN']}")
    where = f"model.id: {model_id}" + (f" at model.revision {revision}" if revision else "")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - scheme checked above
            data = json.load(answer)
    except urllib.error.HTTPError as exc:
        code = exc.headers.get("X-Error-Code") or f"HTTP {exc.code}"
        hint = ("check model.id and model.revision" if exc.code == 404 else
                "set HF_TOKEN (.env) to a token that may read it" if exc.code in (401, 403) else
                "the hub (HF_ENDPOINT) answered with an error: try again, or pin model.revision=COMMIT yourself")
        raise KitError(f"{where}: the hub refused the revision lookup ({code})", hint=hint) from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise KitError(f"{where}: the hub did not answer the revision lookup ({type(exc).__name__})",
                       hint="check HF_ENDPOINT and the network, or pin model.revision=COMMIT yourself "
                            "(kit lock --offline asks no hub)") from None
    sha = data.get("sha") if isinstance(data, dict) else None
    if not is_commit(sha):
        raise KitError(f"{where}: the hub's answer names no commit (sha {sha!r})", hint="check HF_ENDPOINT")
    return str(sha)
