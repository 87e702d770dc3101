"""Presets: YAML file -> overrides -> validated, typed model.

Public entry point: ``load_preset(ref, overrides)``. Every problem found is reported at once, each
naming the file and the dotted field, and nothing downstream ever sees an unvalidated preset.
"""

from __future__ import annotations

import copy
import difflib
import ipaddress
import os
import re
import types
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kit.config.flags import UnreadInteger, load_snapshot, read_engine_integers
from kit.config.strategy import strategy_for
from kit.config.preset_files import all_presets, find_named, looks_like_path, preset_folders, shipped_names
from kit.config.vllmint import AUTO
from kit.core.datafiles import PRESETS_DIR, load_yaml, prune_rules, vllm_table
from kit.core.gpus import gpu_key, unknown_gpu_hint
from kit.core.errors import PresetError, Problem, shown
from kit.core.inputfiles import NUMBER_MAX, decode_utf8, input_limits, read_capped, user_path
from kit.core.overrides import MalformedOverride, override_where, split_override
from kit.core.versions import VERSION_RE
from kit.core.safevalue import (
    UnsafeValue,
    check_argument,
    check_image_ref,
    check_repository,
    check_requirement,
    check_text,
)

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)", re.IGNORECASE)

# Docker's size grammar for memory and /dev/shm (docker/go-units size.go, RAMInBytes -> parseSize, v0.5.0): a
# number, then an optional unit, either after one space or directly; units are case-insensitive, binary
# (k=1024 ... p=1024**5), may end in "b" or "ib" ("4g", "4G", "4gb", "4GiB"), a bare "b" is bytes, and the
# product is truncated to whole bytes. Go's ParseFloat reads the number: decimal with an optional sign and
# exponent, or a hexadecimal float with a p exponent, "_" between digits. The kit refuses Inf/NaN and sizes past
# int64, which Docker turns into garbage.
_RAM_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DIGITS = r"\d(?:_?\d)*"  # Go literals allow "_" between digits ("1_000")
_HEX_DIGITS = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*"
_GO_DECIMAL = re.compile(rf"[+-]?(?:{_DIGITS}\.?(?:{_DIGITS})?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
_GO_HEX = re.compile(rf"[+-]?0[xX](?:_?{_HEX_DIGITS}\.?(?:{_HEX_DIGITS})?|\.{_HEX_DIGITS})[pP][+-]?{_DIGITS}")
_INT64_MAX = (1 << 63) - 1


def ram_in_bytes(text: str | int) -> int:
    """A size as Docker reads ``--shm-size``, ``--memory`` and compose's ``shm_size``; ValueError otherwise."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError("a size is a string such as 10.24g, 4G, 4gb, 4096m or a number of bytes")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"invalid size {text!r}: negative")
        return text
    number, space, suffix = text.partition(" ")
    if not space:
        last = max((text.rfind(ch) for ch in "0123456789."), default=-1)
        if last == -1:
            raise ValueError(f"invalid size {text!r}: no number")
        number, suffix = text[: last + 1], text[last + 1 :]
    if _GO_DECIMAL.fullmatch(number):
        value = float(number)
    elif _GO_HEX.fullmatch(number):
        value = float.fromhex(number.replace("_", ""))
    else:
        raise ValueError(f"invalid size {text!r}: {number!r} is not a number")
    if value < 0 or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"invalid size {text!r}: must be a finite number >= 0")
    unit = suffix.lower()
    if unit in ("", "b"):
        return _whole_bytes(text, value)
    if len(unit) > 3 or unit[0] not in _RAM_UNITS or unit[1:] not in ("", "b", "ib"):
        raise ValueError(f"invalid size {text!r}: unknown unit {suffix!r} (use b, k, m, g, t, p, optionally "
                         "followed by b or ib)")
    return _whole_bytes(text, value * _RAM_UNITS[unit[0]])


def _whole_bytes(text: str, value: float) -> int:
    # Go truncates toward zero when it converts to int64; past int64 the result is garbage, so refuse.
    if value > _INT64_MAX:
        raise ValueError(f"invalid size {text!r}: larger than 8 EiB")
    return int(value)


# One GPU as the NVIDIA runtime and `nvidia-smi -L` name it: an index, a GPU UUID (GPU-8-4-4-4-12 hex) or a MIG
# device's UUID (MIG-8-4-4-4-12 hex).
_UUID = r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
GPU_ID = re.compile(rf"(?:0|[1-9][0-9]{{0,3}})|(?:GPU|MIG)-{_UUID}", re.ASCII)

# A hub repository id as huggingface_hub 2.4 validates it (utils/_validators.py validate_repo_id): an optional
# namespace and a name, each [A-Za-z0-9_.-]{1,96} starting and ending with a word character (its \b ... \b), ASCII
# only, at most one '/', no '--' or '..', not ending in .git.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"(?:{_HUB_PART}/)?{_HUB_PART}", re.ASCII)


def is_hub_id(text: str) -> bool:
    return bool(_HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text and not text.endswith(".git")


def model_path_problem(path: str) -> str | None:
    """Why a local model path is refused (kit/data/switches.yaml model_paths), or None: a system folder, `..` out of
    the deployment folder, the whole home folder."""
    import posixpath

    rules = load_yaml("switches.yaml")["model_paths"]
    if path.startswith("~"):
        user, _, rest = path[1:].partition("/")
        if user:
            return "~user paths are not taken: write the folder's path (~/..., /..., ./...)"
        rest = posixpath.normpath(rest) if rest else "."
        if rest == "." or rest.startswith(".."):
            return "is the home folder itself or outside it: point at the model's own folder"
        return None
    normal = posixpath.normpath(path)
    if not path.startswith("/"):
        if normal == "." or normal == ".." or normal.startswith("../"):
            return ("leaves the deployment folder (..) or is the folder itself: point at the model's own folder "
                    "(./models/NAME, or an absolute path)")
        return None
    normal = "/" + normal.lstrip("/")  # POSIX keeps a leading // as is
    return _system_folder_problem(normal, rules) or _linked_path_problem(path, rules)


def _system_folder_problem(normal: str, rules: dict[str, Any]) -> str | None:
    if normal in rules["exact"] or any(normal == top or normal.startswith(top + "/") for top in rules["under"]):
        return (f"is a system folder ({normal}): a local model is mounted into the containers; point at the model's "
                "own folder (e.g. /srv/models/NAME)")
    return None


def _linked_path_problem(path: str, rules: dict[str, Any]) -> str | None:
    """The folder a path reaches on this host, links followed: a link to /etc passes as text, not as what Docker
    mounts. Checked only where a link is on the way (the path as written was checked above)."""
    import posixpath

    expanded = os.path.expanduser(path)
    try:
        real = os.path.realpath(expanded)
    except (OSError, ValueError):
        return None
    if real == posixpath.normpath(expanded):
        return None
    home = os.path.realpath(os.path.expanduser("~"))
    if real.startswith(home.rstrip("/") + "/"):
        return None  # below the user's own home, as ~/... is
    problem = _system_folder_problem(real, rules)
    return f"resolves, links followed, to {real}, which {problem}" if problem else None


class Strict(BaseModel):
    # allow_inf_nan=False: "inf" and "nan" pass every range check pydantic makes (nan compares false), so
    # they are refused as numbers outright.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Hardware(Strict):
    """What the stack runs on. ``gpu`` is a name from the GPU catalog (kit/data/gpus.yaml); none means CPU."""

    gpu: str | None = Field(None, description="GPU catalog name or alias (e.g. rtx4090, a100-80gb); omit for CPU")
    count: int = Field(1, ge=1, description="GPUs per node used by this stack")
    device_ids: list[str] | None = Field(
        None, description="Exact GPU ids or UUIDs to map (default: the first `count` GPUs)"
    )
    arch: Literal["amd64", "arm64"] = "amd64"
    nodes: int = Field(1, ge=1, description="Hosts in the deployment (Ray across hosts when > 1)")
    gpu_runtime: Literal["nvidia", "cdi"] = Field(
        "nvidia", description="How compose maps GPUs: the NVIDIA runtime's device requests, or CDI device names"
    )
    l4t: str | None = Field(None, description="Jetson only: the board's L4T release, e.g. r36.4")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is None:
            return None
        key = gpu_key(value)
        if key is None:
            raise ValueError(f"unknown GPU {value!r} ({unknown_gpu_hint(value)})")
        return key

    @field_validator("device_ids")
    @classmethod
    def _one_gpu_each(cls, value: list[str] | None) -> list[str] | None:
        # Each item is one device request id (compose device_ids, CDI nvidia.com/gpu=ID): an index or a UUID as
        # `nvidia-smi -L` prints them. "0,1,2,3" or "all" in one item would reach the runtime as one odd name.
        for index, item in enumerate(value or []):
            if not GPU_ID.fullmatch(item):
                raise ValueError(f"device_ids[{index}] is not one GPU: give each as its own item, an index (0, 1, ...) "
                                 "or a UUID as `nvidia-smi -L` prints it (GPU-..., MIG-...); for every GPU, set "
                                 "hardware.count and leave device_ids out")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("device_ids names a GPU twice")
        return value

    @model_validator(mode="after")
    def _device_ids_match_count(self) -> Hardware:
        if self.device_ids is not None and len(self.device_ids) != self.count:
            raise ValueError(f"device_ids lists {len(self.device_ids)} GPUs but count is {self.count}")
        if self.gpu is None and self.device_ids:
            raise ValueError("device_ids needs a gpu")
        return self


LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")


def looks_like_model_path(text: str) -> bool:
    return text.startswith(LOCAL_PATH_PREFIXES)


def model_name_for_path(path: str) -> str:
    """The model.id a host folder gets when model= names it: the folder's own name."""
    import posixpath

    return posixpath.basename(posixpath.normpath(path.rstrip("/"))) or path


class HostPath:
    """Marks a field whose text is a folder on the host: on the command line an unquoted ``~`` there is the home
    folder, as a shell user means it, not YAML's null (``value_kind``: kind "path")."""


class Model(Strict):
    id: str = Field(..., min_length=1, description="Hugging Face id (org/name); with host_path, the model's name")
    host_path: Annotated[str | None, HostPath()] = Field(
        None, description="A model folder on the host (absolute, ~/..., or relative to the deployment folder): "
        "mounted read-only into the containers; system folders are refused",
    )
    served_model_name: str | None = Field(
        None, description="Name clients use in requests (default: the id)"
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) to pin")
    generate: Literal["tiny-llama", "tiny-qwen3-embed"] | None = Field(
        None, description="Make a random-weight test model when it is missing (tests, CPU demo), as the server's "
        "non-root user, in the stack's own volume (runtime.models_volume); not with host_path"
    )

    @property
    def is_local(self) -> bool:
        """The server reads the model from a folder (a host folder, or the generated model's volume), not the hub."""
        return self.host_path is not None or self.generate is not None

    @property
    def local_path(self) -> str | None:
        """The host folder the model is mounted from, or None for a hub model."""
        return self.host_path

    @field_validator("id", "served_model_name", "revision", "host_path")
    @classmethod
    def _not_an_option(cls, value: str | None) -> str | None:
        # Each becomes the argument after --model/--served-model-name/--revision (or the positional model), or a
        # bind mount's source.
        return None if value is None else check_argument(value)

    @field_validator("revision")
    @classmethod
    def _commit_or_ref(cls, value: str | None) -> str | None:
        from kit.config.hubrevision import revision_problem

        problem = value is not None and revision_problem(value)
        if problem:
            raise ValueError(f"{problem}: a revision is a 40-hex commit or a branch or tag name (e.g. main, v1.0)")
        return value

    @field_validator("id")
    @classmethod
    def _hub_id(cls, value: str) -> str:
        if looks_like_model_path(value):
            # Before, a path here was bind-mounted silently; a host folder is now only ever taken by its own field.
            refused = model_path_problem(value)
            if refused is not None:  # model.host_path refuses it too: offer no spelling that is refused next
                raise ValueError(f"is a host path that model.host_path refuses too: {refused}")
            raise ValueError(f"is a host path: a model folder goes in model.host_path (mounted read-only), and "
                             f"model.id names it (host_path: {value}, id: {model_name_for_path(value)}; "
                             f"on the command line model={value} sets both)")
        if not is_hub_id(value):
            raise ValueError("is not a hub id (org/name: letters, digits, '-', '_', '.', each part starting and "
                             "ending with a letter or digit, at most 96 characters, no '--' or '..'); a model folder "
                             "on the host goes in model.host_path")
        return value

    @field_validator("host_path")
    @classmethod
    def _safe_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not looks_like_model_path(value):
            raise ValueError("must be a path: /abs/path, ~/path, or ./path relative to the deployment folder")
        problem = model_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _generate_not_into_a_host_folder(self) -> Model:
        # A host folder is the user's and is only ever mounted read-only; the generated model goes into the kit's own
        # volume, which the non-root model-make service can write without a capability.
        if self.generate and self.host_path is not None:
            raise ValueError("generate makes the model in the stack's own volume (runtime.models_volume), not in a host "
                             "folder: drop host_path to generate it, or drop generate (model.generate=null) to serve "
                             f"the folder {self.host_path} as it is")
        return self


class Engine(BaseModel):
    """``vllm serve`` flags, one key per flag, named as vLLM names them (snake_case).

    The flags the kit reasons about are typed here; any other key is checked against the flag
    snapshot of the pinned vLLM version (kit/data/flags/).
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True, allow_inf_nan=False)

    tensor_parallel_size: int | None = Field(None, ge=1)
    pipeline_parallel_size: int | None = Field(None, ge=1)
    # vLLM's ModelConfig takes -1 too (ge=-1): "auto", the model's own length or the longest that fits.
    max_model_len: int | None = Field(None, ge=-1, description="Context length: 16384, 16k, 16K, or auto (-1)")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    enforce_eager: bool | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    distributed_executor_backend: Literal["ray", "mp", "uni", "external_launcher"] | None = None
    block_size: int | None = Field(None, ge=1)
    trust_remote_code: bool | None = None

    @field_validator("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs",
                     "max_num_batched_tokens", "block_size", mode="before")
    @classmethod
    def _as_vllm_reads_it(cls, value: Any) -> Any:
        # Preset reads text by the pinned vLLM's converter (flags.read_engine_integers); text it refused lands here.
        if isinstance(value, UnreadInteger):
            raise ValueError(value.reason)
        return value

    @field_validator("max_model_len")
    @classmethod
    def _length_or_auto(cls, value: int | None) -> int | None:
        if value == 0:  # vLLM: "max_model_len must be a positive integer"
            raise ValueError("0 is no length: give 1 or more, or auto (-1) for the longest that fits")
        return value

    @property
    def auto_max_model_len(self) -> bool:
        """``max_model_len: auto`` (or -1): vLLM picks the model's length, or the longest that fits."""
        return self.max_model_len == AUTO

    @property
    def tp(self) -> int:
        return self.tensor_parallel_size or 1

    @property
    def pp(self) -> int:
        return self.pipeline_parallel_size or 1

    def flags(self) -> dict[str, Any]:
        """Every flag the user set, typed and extra, without the unset ones."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Image(Strict):
    vllm_version: str = Field(..., pattern=VERSION_RE, description="Pinned vLLM release, X.Y.Z (never latest)")
    strategy: Literal["slim", "official", "cpu", "jetson"] = Field(
        ...,
        description="slim: CUDA base + pinned wheels; official: the official vLLM image, pinned, plus what it "
        "lacks; cpu: vLLM's CPU build; jetson: an L4T base for Jetson boards",
    )
    cuda: str | None = Field(None, description="CUDA build to use (default: the release's); e.g. 12.9 for older drivers")
    base: str | None = Field(None, description="Base image override (a site's hardened image); pinned tag, never latest")
    base_digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$", description="Digest pin for the base")
    extra_pip: list[str] = Field(default_factory=list, description="Extra Python packages, each pinned name==version")
    pip_index_url: str | None = Field(None, description="Package index for the image's wheels (Jetson wheel index)")
    repository: str | None = Field(None, description="Image repository to tag (default: vllm-kit/<preset>)")
    pin_digest: str | None = Field(
        None, pattern=r"^sha256:[0-9a-f]{64}$",
        description="Production: compose runs image.repository@this digest (what `kit push` printed) instead of the tag",
    )
    leave_out: list[str] = Field(
        default_factory=list,
        description="Slim images: features whose packages the image leaves out (kit/data/prune.yaml features; "
        "served together on an H200 with vLLM 0.33; refused when the preset uses the feature)",
    )

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        known = vllm_table()["versions"]
        if value not in known:
            from kit.core.userdata import VERSIONS_FILE, user_config_dir

            raise ValueError(f"vLLM {value} is not in the kit's version table (known: {', '.join(known)}); a "
                             f"release the kit does not ship takes a row in {user_config_dir() or '~/.config/vllm-kit'}"
                             f"/{VERSIONS_FILE}")
        return value

    @field_validator("base")
    @classmethod
    def _pinned_base(cls, value: str | None) -> str | None:
        if value is not None:
            check_image_ref(value)
            check_pinned_ref(value)
        return value

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        return None if value is None else check_repository(value)

    @model_validator(mode="after")
    def _base_digest_agrees(self) -> Image:
        # A base written as name@sha256:A with base_digest sha256:B would build A and claim B.
        if self.base and "@" in self.base and self.base_digest and self.base.rsplit("@", 1)[1] != self.base_digest:
            raise ValueError("image.base is pinned to another digest than image.base_digest; keep one digest")
        return self

    @model_validator(mode="after")
    def _pin_needs_repository(self) -> Image:
        if self.pin_digest and not self.repository:
            raise ValueError("pin_digest needs image.repository: the registry repository the digest was pushed to")
        return self

    @field_validator("leave_out")
    @classmethod
    def _known_features(cls, value: list[str]) -> list[str]:
        known = prune_rules()["features"]
        for name in value:
            if name not in known:
                raise ValueError(f"no such feature {name!r} (kit/data/prune.yaml features: {', '.join(known)})")
        if len(set(value)) != len(value):
            raise ValueError("a feature is named twice")
        return value

    @field_validator("extra_pip")
    @classmethod
    def _pinned_pip(cls, value: list[str]) -> list[str]:
        for index, item in enumerate(value):
            check_requirement(item, f"extra_pip[{index}]")
        return value


DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def server_name(name: str, where: str) -> str:
    """A name the API is reached by, as the front door compares it with Host: an IP address (in its canonical form)
    or a DNS name of letters, digits and hyphens (lower-cased; no wildcard, no port, no trailing dot)."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    lowered = name.lower()
    labels = lowered.split(".")
    if (not name.isascii() or len(lowered) > 253 or not all(DNS_LABEL.fullmatch(label) for label in labels)
            or labels[-1].isdigit()):
        raise ValueError(f"{where}: not a DNS name or an IP address (letters, digits, hyphens and dots; no port, "
                         "wildcard or trailing dot)")
    return lowered


class Runtime(Strict):
    port: int = Field(8000, ge=1, le=65535, description="Host port the API is published on")
    bind_address: str = Field("127.0.0.1", description="Host address to publish on; 0.0.0.0 exposes it to the network")
    server_names: list[str] = Field(
        default_factory=list, max_length=32,
        description="Further names (DNS names or IP addresses) clients reach the API by, beside 127.0.0.1, localhost "
        "and bind_address: the front door refuses any other Host header (a web page rebound to this address)")
    shm_size: str | None = Field(
        None, description="/dev/shm size in any form Docker accepts: 10.24g, 4G, 4gb, 4096m, bytes "
        "(default: computed from the plan)",
    )
    ipc: Literal["host", "private", "shareable"] | None = Field(None, description="IPC mode (default: private + shm_size)")
    restart: Literal["no", "always", "on-failure", "unless-stopped"] = "unless-stopped"
    hf_cache_volume: str = Field("hf-cache", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
    compile_cache_volume: str = Field("vllm-cache", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
    models_volume: str = Field("models", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$",
                               description="Named volume of a generated model (model.generate), read-only to the server")
    healthcheck_start_period: int | None = Field(
        None, ge=10, description="Seconds the healthcheck allows for model loading (default: computed)"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra non-secret environment variables, from the kit's list of harmless "
        "ones (kit/data/env_allow.yaml); any other name goes in unsafe_env")
    unsafe_env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables the kit does not know to be harmless (they may load "
        "code or files into the server): set only what you have read; every render warns about each")
    unsafe_engine_flags: list[str] = Field(
        default_factory=list, description="engine flags that load code or open files (kit/data/switches.yaml engine, "
        "action unsafe), allowed by name here; every render warns about each")
    cpu_kvcache_space_gib: float | None = Field(None, gt=0, description="CPU backend: KV cache size (VLLM_CPU_KVCACHE_SPACE)")
    cpu_omp_threads_bind: str | None = Field(None, description="CPU backend: VLLM_CPU_OMP_THREADS_BIND (auto, nobind, 0-31)")
    startup_plan: bool = Field(
        True, description="GPU, vLLM 0.33+: VLLM_ENABLE_STARTUP_PLAN, so a restart reuses the first start's memory "
        "profile (kit/data/startcache.yaml); false profiles every start")
    replicas: int = Field(
        1, ge=1, le=64, description="Servers of this preset behind one vLLM router (vllm-router) on runtime.port; "
        "GPU replicas get disjoint GPUs (tensor x pipeline parallel each, out of hardware.count)",
    )
    router_policy: str | None = Field(
        None, description="With replicas: the router's load-balancing policy (kit/data/router.yaml lists them; "
        "default round_robin)",
    )
    require_api_key: bool = Field(
        True, description="The stack refuses to start without a non-empty VLLM_API_KEY in .env (compose) or the "
        "Secret's VLLM_API_KEY key (Kubernetes: the secretKeyRef is not optional); kit render writes a random one "
        "into .env when there is none. false (asked for by name) runs keyless when .env sets no key, and every "
        "validate, render and up warns; the key itself never goes in the preset",
    )
    k8s_runtime_class: str | None = Field(
        None, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$", max_length=253,
        description="Kubernetes target: the pods' runtimeClassName (e.g. nvidia where the NVIDIA runtime is not "
        "the node's default; Jetson presets default to nvidia; an empty string sets none)",
    )

    @field_validator("shm_size", mode="before")
    @classmethod
    def _docker_size(cls, value: Any) -> str | None:
        if value is None:
            return None
        if ram_in_bytes(value) == 0:
            raise ValueError("shm_size 0 gives Docker's 64 MiB default; omit it to let the kit size /dev/shm")
        return str(value)

    @field_validator("router_policy")
    @classmethod
    def _known_policy(cls, value: str | None) -> str | None:
        policies = load_yaml("router.yaml")["policies"]
        if value is not None and value not in policies:
            raise ValueError(f"unknown router policy {value!r} (one of {', '.join(policies)})")
        return value

    @field_validator("bind_address")
    @classmethod
    def _ip(cls, value: str) -> str:
        ipaddress.ip_address(value)
        return value

    @field_validator("server_names")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        names = []
        for index, name in enumerate(value):
            names.append(server_name(name, f"server_names[{index}]"))
        if len(set(names)) != len(names):
            raise ValueError("a server name is listed twice")
        return names

    @field_validator("env", "unsafe_env")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if SECRET_NAME.search(name):
                raise ValueError(f"{name} looks like a secret; put it in the .env file (see .env.example), not the preset")
            check_text(text, f"the value of {name}")
        return value


class Cluster(Strict):
    """Several nodes (hardware.nodes > 1): a Ray head and workers, as vLLM's multi-node guide runs them.

    Cluster-wide values live here; each host's own address and NICs come from its .env
    (VLLM_HOST_IP, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), since they differ per host.
    """

    network: Literal["host", "bridge"] = Field(
        "host",
        description="host: every node on its own host with host networking (production, vLLM's guide); "
        "bridge: all nodes as containers on one Docker host, on a private bridge network (trying out, tests)",
    )
    head_address: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$",
        description="Address (IP or DNS name) workers dial to reach the Ray head; required with network host",
    )
    ray_port: int = Field(6379, ge=1, le=65535, description="Ray GCS port on the head (ray start --port)")
    dashboard_port: int = Field(8265, ge=1, le=65535, description="Ray dashboard port on the head (on localhost)")
    join_timeout: int = Field(
        600, ge=10, le=86400, description="Seconds the head waits for every node to join before it gives up"
    )
    node_grace: int = Field(
        30, ge=5, le=3600,
        description="Seconds a node may be missing while serving before the head stops the server (and /health fails)",
    )


class Preset(Strict):
    description: str = Field("", description="One line shown by `kit presets`")
    hardware: Hardware
    model: Model
    engine: Engine = Field(default_factory=Engine)
    image: Image
    runtime: Runtime = Field(default_factory=Runtime)
    cluster: Cluster = Field(default_factory=Cluster)

    @model_validator(mode="before")
    @classmethod
    def _engine_integers(cls, data: Any) -> Any:
        # An integer flag takes what `vllm serve` takes at the pinned version (16k, 1M, auto): read once, here.
        if isinstance(data, dict) and isinstance(data.get("engine"), dict):
            image = data.get("image")
            version = image.get("vllm_version") if isinstance(image, dict) else None
            data = {**data, "engine": read_engine_integers(data["engine"], version)}
        return data

    @model_validator(mode="after")
    def _safe_text(self) -> Preset:
        # The rules every renderer applies (kit/core/safevalue.py), so `kit validate` refuses what `kit render` would.
        for where, text in _strings_with_paths(self.model_dump()):
            check_text(text, where)
        for key, value in self.engine.flags().items():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str):
                    check_argument(item, f"engine.{key}")
        return self

    @model_validator(mode="after")
    def _multi_node_defaults(self) -> Preset:
        # vLLM's multi-node guide: tensor parallel within a node, pipeline parallel across nodes, on Ray.
        # Only unset fields are filled; checks.py then verifies the layout against the hardware.
        if self.hardware.nodes > 1:
            if self.engine.pipeline_parallel_size is None:
                self.engine.pipeline_parallel_size = self.hardware.nodes
            if self.engine.distributed_executor_backend is None:
                self.engine.distributed_executor_backend = "ray"
        return self

    @model_validator(mode="after")
    def _jetson_runtime_class(self) -> Preset:
        # Jetson runs under the NVIDIA runtime (compose: `runtime: nvidia`); on Kubernetes that is a RuntimeClass.
        if strategy_for(self.image.strategy).nvidia_runtime and self.runtime.k8s_runtime_class is None:
            self.runtime.k8s_runtime_class = load_yaml("k8s.yaml")["jetson_runtime_class"]
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Preset:
        hw, img = self.hardware, self.image
        strategy = strategy_for(img.strategy)
        strategy.check_hardware(img, hw)
        if hw.l4t and hw.l4t not in vllm_table()["jetson"]["l4t"]:
            raise ValueError(f"hardware.l4t {hw.l4t} is unknown (known: {', '.join(vllm_table()['jetson']['l4t'])})")
        strategy.check_build(img)
        if img.cuda is not None and img.cuda not in vllm_table()["cuda"]:
            raise ValueError(f"image.cuda {img.cuda} is unknown (known: {', '.join(vllm_table()['cuda'])})")
        strategy.check_variant(img)
        return self


# ---------------------------------------------------------------------------------------------- loading


def check_pinned_ref(ref: str) -> None:
    """Refuse image references that can change under the user: no tag, or ``latest``."""
    if "@sha256:" in ref:
        return
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError(f"{ref!r} has no tag; pin a version tag (and ideally a digest), never latest")
    if last.rsplit(":", 1)[1] == "latest":
        raise ValueError(f"{ref!r} uses latest, which changes under you; pin a version tag")


def preset_names() -> list[str]:
    """The presets shipped with the kit (the suite's every-preset tests use these); ``all_presets`` adds the user's."""
    return shipped_names()


def find_preset(ref: str) -> Path:
    """A preset name (./presets, then the user's config folder, then the shipped ones: kit/config/preset_files.py),
    or a path to a preset file of the user's own."""
    if looks_like_path(ref):
        path, found = user_path(ref, error=PresetError)
        if found is None:
            raise PresetError(f"{ref}: no such preset file")
        return path  # a directory, FIFO or device is refused when read, with what it is
    entry = find_named(ref)
    if entry is not None:
        return entry.path
    names = [p.name for p in all_presets()]
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known presets: {', '.join(names)}"
    folders = ", ".join(_shown_folder(folder) for _, folder in preset_folders())
    raise PresetError(f"unknown preset {ref!r} (looked in {folders})", hint=hint)


def _shown_folder(folder: Path) -> str:
    return "the shipped presets" if folder == PRESETS_DIR else f"{_relative_to_cwd(folder)}/"


def _relative_to_cwd(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def display_path(path: Path) -> str:
    if path.resolve().parent == PRESETS_DIR.resolve():  # a shipped preset, wherever the kit is installed
        return f"presets/{path.name}"
    return _relative_to_cwd(path)


def preset_ref_for(name: str, path: Path) -> str:
    """What ``preset=`` takes to find this same preset again from here: its name when the name finds this file
    (a shipped, user or project preset, not shadowed), else the file's path (cwd-relative inside the working folder,
    absolute outside it). Hints the kit prints on the terminal (`kit push`) name the preset this way; rendered files
    do not (a path there would depend on where the render ran: kit/deploy/deployment.py preset_shipped)."""
    entry = find_named(name)
    if entry is not None and _same_file(entry.path, path):
        return name
    shown = _relative_to_cwd(path)
    return shown if looks_like_path(shown) else f"./{shown}"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# Python's parser recurses per nesting level; presets nest four deep. Deeper input is refused, not crashed on.
PRESET_MAX_DEPTH = 32


class PresetLoader(yaml.SafeLoader):
    """Safe YAML with a preset's rules.

    - No aliases: ``*name`` can expand a few hundred bytes into gigabytes (the "billion laughs"), and a
      preset this small gains nothing from them.
    - YAML 1.1's extra scalar types are not guessed: ``yes``/``no``/``on``/``off``, ``0x1f``, ``0o17``,
      ``1:30``, ``.inf``, ``.nan`` and dates stay text, so the field's type decides (pydantic reads
      ``yes`` as true for a boolean field, and ``no`` stays the string "no" for a name). Only ``true``/``false``,
      ``null``/``~``, decimal integers and decimal fractions are typed here.
    """

    yaml_implicit_resolvers: dict = {}
    values_composed = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML alias *{event.anchor} is not allowed in a preset; write the value out",
                event.start_mark,
            )
        # Counted while the text is read, so a file of many small values stops at the first one too many
        # (kit/data/input_limits.yaml preset_max_items, preset_max_values): reading it all costs seconds.
        limits = input_limits()["files"]
        self.values_composed += 1
        if self.values_composed > limits["preset_max_values"]:
            raise yaml.composer.ComposerError(
                None, None, f"more than {limits['preset_max_values']} values in one preset (a preset has a few dozen)",
                self.peek_event().start_mark)
        entries = len(parent.value) if isinstance(parent, (yaml.MappingNode, yaml.SequenceNode)) else 0
        if entries >= limits["preset_max_items"] and (index is None or isinstance(parent, yaml.SequenceNode)):
            raise yaml.composer.ComposerError(
                None, None, f"more than {limits['preset_max_items']} entries in one mapping or list (a preset sets a "
                "few dozen)", self.peek_event().start_mark)
        return super().compose_node(parent, index)


PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
# At most 18 digits: longer numbers stay text (and fail as the field's type), never a giant int.
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]{0,17})$"), list("-+0123456789"))
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]{1,18}\.[0-9]{0,18}|\.[0-9]{1,18})(?:[eE][-+]?[0-9]{1,3})?$"),
    list("-+0123456789."))


def _yaml_error(exc: yaml.YAMLError) -> str:
    """One line: where in the text, and what."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} at offset {exc.position} is not allowed in YAML"
    mark = getattr(exc, "problem_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return at + (getattr(exc, "problem", None) or "malformed YAML")


def _duplicate_key(node: yaml.Node) -> str | None:
    """The first mapping key given twice anywhere under ``node``, as 'path (lines a and b)'."""
    stack: list[tuple[yaml.Node, str, int]] = [(node, "", 0)]
    while stack:
        current, path, depth = stack.pop()
        if depth > PRESET_MAX_DEPTH:
            raise RecursionError
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in current.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                if isinstance(key, yaml.ScalarNode) and name in seen:
                    return (f"{path + '.' if path else ''}{name}: given twice (lines {seen[name] + 1} and "
                            f"{key.start_mark.line + 1}); a later value would silently win")
                seen[name] = key.start_mark.line
                stack.append((value, f"{path + '.' if path else ''}{name}", depth + 1))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(current.value))
    return None


_TEXT_TAG = "tag:yaml.org,2002:str"
_GUESSED_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")


def _plain_scalars_as_text(node: yaml.Node) -> None:
    """Every unquoted number or true/false under ``node`` read as the text it is (null stays null)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.ScalarNode):
            if current.style is None and current.tag in _GUESSED_TAGS:
                current.tag = _TEXT_TAG
        elif isinstance(current, yaml.MappingNode):
            stack.extend(value for _, value in current.value)  # keys keep their type: a key is checked as a name
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def load_preset_yaml(text: str, where: str, *, malformed_as_text: bool = False, text_scalars: bool = False) -> Any:
    """Parse preset YAML text by PresetLoader's rules; every problem is one PresetError line naming ``where``.

    ``malformed_as_text``: text that is not well-formed YAML is returned as it is (an override value); aliases,
    duplicate keys and too deep nesting are refused all the same. ``text_scalars``: unquoted numbers and
    true/false are text (the items of an override for a list or mapping of text: ``hardware.device_ids=[0, 1]``).
    """
    loader = None
    try:
        loader = PresetLoader(text)  # refuses unprintable characters already
        node = loader.get_single_node()
        if node is None:
            return None
        duplicate = _duplicate_key(node)
        if duplicate:
            raise PresetError(f"{where}: {duplicate}", hint="keep one of them")
        if text_scalars:
            _plain_scalars_as_text(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if malformed_as_text and isinstance(exc, (yaml.scanner.ScannerError, yaml.parser.ParserError)):
            return text
        syntax = not isinstance(exc, yaml.composer.ComposerError)  # an alias is refused, not misspelt
        raise PresetError(f"{where}: {_yaml_error(exc)}", hint="fix the YAML syntax" if syntax else None) from None
    except RecursionError:
        raise PresetError(f"{where}: nested more than {PRESET_MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def _strings_with_paths(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, text) for every string in a dumped preset, keys included."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [pair for key, item in value.items()
                for pair in (*_strings_with_paths(key, path), *_strings_with_paths(item, f"{path}.{key}" if path else str(key)))]
    if isinstance(value, list):
        return [pair for i, item in enumerate(value) for pair in _strings_with_paths(item, f"{path}[{i}]")]
    return []


def _strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings_in(k), *_strings_in(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings_in(item)]
    return []


# How an override's value is read, by the type of the field it sets (``value_kind``):
#   text        the field takes text: the value is the text typed (image.cuda=12.9, model.id=0.33, engine.x=true
#               for a text flag); null/~ unset it, and quotes are YAML's (image.cuda='null' is the text null)
#   path        a host folder (a field marked HostPath): as text, but ~ is the home folder (a shell's meaning,
#               which the field's check then refuses); only null unsets it
#   text-items  a list or mapping of text: a YAML flow list or mapping whose unquoted items stay text
#   yaml        anything else (numbers, booleans, JSON flags): typed like a preset file's plain scalar
_NULLS = ("~", "null", "Null", "NULL")
_PATH_NULLS = ("null", "Null", "NULL")


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _kind_of(annotation: Any) -> str:
    annotation = _without_none(annotation)
    if annotation is str or (get_origin(annotation) is Literal and all(isinstance(a, str) for a in get_args(annotation))):
        return "text"
    if get_origin(annotation) in (list, dict) and get_args(annotation):
        return "text-items" if _kind_of(get_args(annotation)[-1]) == "text" else "yaml"
    return "yaml"


def _engine_flag_kind(key: str, version: str | None) -> str | None:
    """How vLLM ``version`` reads flag ``key`` from its command line, as an override kind (None: no snapshot says)."""
    from kit.config.flags import FlagError

    if not version:
        return None
    try:
        spec = load_snapshot(version).flags.get(key)
    except FlagError:
        return None
    if spec is None or spec.kind != "store" or spec.type in ("json", "float"):
        return None
    if spec.type == "int":
        return None if spec.takes_list else "text"  # vLLM's integer reader takes the text (16k, auto, 1_000)
    return "text-items" if spec.takes_list else "text"


def value_kind(path: list[str], version: str | None = None) -> str:
    """How the value of an override of ``path`` is read (see above); ``version``: the preset's pinned vLLM, whose
    flag snapshot types the engine's flags."""
    current: Any = Preset
    for index, part in enumerate(path):
        if current is Engine and index == len(path) - 1:
            flag = _engine_flag_kind(part, version)
            if flag is not None:
                return flag
        fields = getattr(current, "model_fields", None)
        if fields is None:
            if get_origin(current) is dict and get_args(current):
                current = _without_none(get_args(current)[-1])
                continue
            return "yaml"
        if part not in fields:
            return "yaml"
        if index == len(path) - 1 and any(isinstance(mark, HostPath) for mark in fields[part].metadata):
            return "path"
        current = _without_none(fields[part].annotation)
    return _kind_of(current)


def parse_override_value(raw: str, where: str, kind: str = "yaml") -> Any:
    """The value of ``KEY=VALUE``, read by ``kind`` (``value_kind``: the type of the field it sets).

    A plain value is taken whole: ``#``, ``: ``, quotes inside, a leading ``*`` or ``!`` are text, never YAML
    syntax (a shell user writing ``runtime.env.X=a #1`` means the eight characters). For a field of text it is the
    text typed (``image.cuda=12.9``); otherwise it is typed like a preset file's plain scalar. Only a value in
    brackets or braces is parsed as a YAML flow list or mapping, and one in matching quotes as a quoted
    string, by the same rules as the file; one that is not well-formed stays text, and the field's type
    judges it (a list field refuses ``[1, 2``; a JSON-string flag takes ``{not json`` to check later).
    """
    if raw == "":
        return ""
    quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\""
    if kind == "text" and not quoted:
        return None if raw in _NULLS else raw
    if kind == "path" and not quoted:
        return None if raw in _PATH_NULLS else raw
    flow = raw[0] in "[{" or quoted
    if not flow:
        loader = PresetLoader("")
        try:  # the file's rules for a plain scalar, applied to the whole text
            tag = loader.resolve(yaml.ScalarNode, raw, (True, False))
            return loader.construct_object(yaml.ScalarNode(tag, raw))
        finally:
            loader.dispose()
    value = load_preset_yaml(raw, where, malformed_as_text=True, text_scalars=kind == "text-items")
    if sum(s.count("#") for s in _strings_in(value)) != raw.count("#"):
        raise PresetError(f"{where}: a # in this list or mapping starts a YAML comment",
                          hint="quote the item that holds the #")
    return value


def _split(text: str) -> tuple[list[str], str]:
    try:
        return split_override(text)
    except MalformedOverride as exc:
        raise PresetError(f"override {exc}") from None


def parse_override(text: str, version: str | None = None) -> tuple[list[str], Any]:
    path, raw = _split(text)
    return path, parse_override_value(raw, f"override {'.'.join(path)}", value_kind(path, version))


def _pinned_version(data: dict[str, Any], overrides: list[str]) -> str | None:
    """The vLLM release the preset pins once ``overrides`` apply: it decides how engine flags read their values."""
    version = None
    image = data.get("image")
    if isinstance(image, dict) and isinstance(image.get("vllm_version"), str):
        version = image["vllm_version"]
    for text in overrides:
        path, raw = _split(text)
        if path == ["image", "vllm_version"]:
            version = raw.strip("'\"")
    return version


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set each dotted path, its value read by the field's type; the result is validated exactly like the file."""
    version = _pinned_version(data, overrides)
    for text in overrides:
        path, value = parse_override(text, version)
        node: Any = data
        for part in path[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise PresetError(f"{override_where(text)}: {part} is not a section")
            node = child
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return data


def _field_parts(field: str) -> list[str]:
    """``image.leave_out[0]`` -> [image, leave_out]: the dotted path of a problem's field, list indexes dropped."""
    return [part for part in re.split(r"\.|\[\d+\]", field) if part]


def _has_path(data: Any, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def blame_overrides(problems: list[Problem], where: str, overrides: list[str] | None,
                    file_data: dict[str, Any] | None = None) -> list[Problem]:
    """``problems`` with each one about a value that came from the command line named as that override
    (``override engine.max_model_len``) instead of the preset file, which may not hold it. A problem is the
    override's when it is about the field the override set (or something inside it), or about a section or key
    the override brought in that ``file_data`` (the file, before overrides) lacks."""
    if not overrides:
        return problems
    paths = [(_split(text)[0], text) for text in overrides]
    prefix = f"{where}: "
    blamed = []
    for problem in problems:
        if not problem.where.startswith(prefix):
            blamed.append(problem)
            continue
        parts = _field_parts(problem.where[len(prefix):])
        culprit = None
        for path, text in reversed(paths):  # the last override of a field is the one that took effect
            introduced = (file_data is not None and parts and path[: len(parts)] == parts
                          and not _has_path(file_data, parts))
            if parts[: len(path)] == path or introduced:
                culprit = text
                break
        blamed.append(replace(problem, where=override_where(culprit)) if culprit else problem)
    return blamed


def read_preset_file(path: Path) -> dict[str, Any]:
    where = display_path(path)
    raw = read_capped(path, where, input_limits()["files"]["preset_max_bytes"], error=PresetError, what="preset file")
    data = load_preset_yaml(decode_utf8(raw, where, error=PresetError), where)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PresetError(f"{where}: a preset is a mapping of sections (hardware, model, engine, image, runtime)")
    return data


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid field names at ``loc`` (for did-you-mean on unknown keys)."""
    current: Any = model
    for part in loc[:-1]:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def problems_from_validation(exc: ValidationError, where: str) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc)
        hint = None
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _field_names(Preset, loc), n=1, cutoff=0.6)
            message = "unknown field"
            hint = f"did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?" if close else None
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] not in ("value_error",) and "input" in err and not isinstance(err["input"], (dict, list)):
                message += f" (got {shown(err['input'])})"
            if err["type"] == "string_type" and isinstance(err.get("input"), (bool, int, float)):
                hint = "YAML reads an unquoted number or true/false as one: quote the value"
        if not field:  # a check across sections (Preset._consistent) names the field it is about first
            named = _LEADING_FIELD.match(message)
            if named and named.group(1).split(".")[0] in Preset.model_fields:
                field, message = named.group(1), message[named.end():]
        problems.append(Problem(f"{where}: {field}" if field else where, message, hint))
    return problems


_LEADING_FIELD = re.compile(r"^([a-z_]+\.[a-z_]+) ")


def _out_of_range_numbers(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _out_of_range_numbers(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _out_of_range_numbers(item, f"{path}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > NUMBER_MAX:
        return [path]
    return []


def secret_problems(data: Any, where: str) -> list[Problem]:
    """A credential anywhere in the preset (file or override, runtime.env included): refused, never quoted.

    A preset is committed, shared and rendered into compose files, manifests and image labels; a secret
    belongs in .env (compose) or a Secret (Kubernetes), which the kit never writes."""
    from kit.core.secretrules import secret_values

    problems = []
    for field, kind in secret_values(data):
        what = "a password in a URL (user:password@)" if kind == "url_password" else f"a {kind} token"
        problems.append(Problem(
            f"{where}: {field}", f"holds {what}; secrets never go in a preset",
            "keep the URL here without credentials; the secret goes in .env (HF_TOKEN, VLLM_API_KEY, HF_ENDPOINT) "
            "or a Kubernetes Secret, an index's user:password in the PIP_INDEX_URL environment variable of the "
            "shell that runs `kit wheelhouse` / `kit lock`"))
    return problems


def load_preset(ref: str, overrides: list[str] | None = None) -> tuple[str, Path, Preset]:
    """Load, override and validate a preset. Returns (name, path, preset)."""
    path = find_preset(ref)
    where = display_path(path)
    data = read_preset_file(path)
    data.pop("$schema", None)
    overrides = list(overrides or [])
    file_data = copy.deepcopy(data)
    data = apply_overrides(data, overrides)
    try:  # the file's name is the preset's name, which rendered files carry (headers, labels, tags)
        check_text(path.stem, "the preset's file name")
    except UnsafeValue as exc:
        raise PresetError(f"{where}: {exc}") from None
    leaked = secret_problems(data, where)
    if leaked:
        raise PresetError(f"{where}: credentials in the preset",
                          problems=blame_overrides(leaked, where, overrides, file_data))
    try:
        preset = Preset.model_validate(data)
    except ValidationError as exc:
        raise PresetError(f"{where}: invalid preset", problems=blame_overrides(
            problems_from_validation(exc, where), where, overrides, file_data)) from None
    huge = _out_of_range_numbers(preset.model_dump())
    if huge:
        raise PresetError(f"{where}: invalid preset", problems=blame_overrides([
            Problem(f"{where}: {field}", f"beyond {NUMBER_MAX} (2**53), the largest number the kit takes")
            for field in huge], where, overrides, file_data))
    return path.stem, path, preset
