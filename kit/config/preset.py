"""The preset model: hardware, model, engine, image, runtime and cluster, typed and validated (pydantic,
``extra="forbid"``), and the checks their fields make.

Loading one (file -> overrides -> this model, every problem at once) is ``load_preset`` in kit/config/presetload.py.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from kit.config.flags import UnreadInteger, read_engine_integers
from kit.config.hubrevision import revision_problem
from kit.config.strategy import StrategyName, strategy_for
from kit.config.vllmint import AUTO
from kit.core.datafiles import load_yaml, prune_rules
from kit.core.gpus import gpu_key, unknown_gpu_hint
from kit.core.hubid import is_repo_id
from kit.core.tables import vllm_model
from kit.core.units import ram_in_bytes
from kit.core.versions import VERSION_RE
from kit.core.safevalue import (
    check_argument,
    check_image_ref,
    check_repository,
    check_requirement,
    check_text,
)
from kit.core.userdata import VERSIONS_FILE, user_config_dir

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)", re.IGNORECASE)


# One GPU as the NVIDIA runtime and `nvidia-smi -L` name it: an index, a GPU UUID (GPU-8-4-4-4-12 hex) or a MIG
# device's UUID (MIG-8-4-4-4-12 hex).
_UUID = r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
GPU_ID = re.compile(rf"(?:0|[1-9][0-9]{{0,3}})|(?:GPU|MIG)-{_UUID}", re.ASCII)

def is_hub_id(text: str) -> bool:
    return is_repo_id(text)  # huggingface_hub's own rule (kit/core/hubid.py)


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
    # The schema spells the names out, as presets/schema.json always has (no $ref to the enum's own definition).
    strategy: Annotated[StrategyName, WithJsonSchema({"enum": [s.value for s in StrategyName], "title": "Strategy",
                                                      "type": "string"})] = Field(
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
        known = vllm_model().versions
        if value not in known:
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
    fork_engine: bool = Field(
        True, description="GPU, vLLM 0.33+: VLLM_WORKER_MULTIPROC_METHOD=fork, so the engine core process inherits "
        "the API server's imports instead of importing torch and vLLM again (about 12 s of an 8B restart, "
        "kit/data/startcache.yaml); false keeps `vllm serve`'s spawn")
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
        table = vllm_model()
        if hw.l4t and hw.l4t not in table.jetson.l4t:
            raise ValueError(f"hardware.l4t {hw.l4t} is unknown (known: {', '.join(table.jetson.l4t)})")
        strategy.check_build(img)
        if img.cuda is not None and img.cuda not in table.cuda:
            raise ValueError(f"image.cuda {img.cuda} is unknown (known: {', '.join(table.cuda)})")
        strategy.check_variant(img)
        return self


def check_pinned_ref(ref: str) -> None:
    """Refuse image references that can change under the user: no tag, or ``latest``."""
    if "@sha256:" in ref:
        return
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError(f"{ref!r} has no tag; pin a version tag (and ideally a digest), never latest")
    if last.rsplit(":", 1)[1] == "latest":
        raise ValueError(f"{ref!r} uses latest, which changes under you; pin a version tag")


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
