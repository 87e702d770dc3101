"""Preset -> problems: everything that makes a validated preset unfit to deploy.

Public entry point: ``check_preset(name, path, preset) -> CheckReport``. Each check returns problems
(errors) and warnings; every one names the preset file and field and says how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.config.flags import FlagError, check_engine, load_snapshot
from kit.config.hubfetch import ArtefactError, artefact_problems, speculative_config
from kit.config.preset import Preset
from kit.config.preset_files import display_path
from kit.config.strategy import strategy_of
from kit.core.datafiles import gpu_catalog, load_yaml, prune_rules
from kit.core.errors import Problem
from kit.core.units import ram_in_bytes
from kit.deploy import deployment as dep
from kit.deploy.compat import check_compat, model_spec_or_none
from kit.deploy.router import replica_problems
from kit.memory.preset_plan import plan_preset, summary_lines

if TYPE_CHECKING:
    from kit.memory.plan import Plan


@dataclass
class CheckReport:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    plan: Plan | None = None  # the memory plan, when the planner ran
    plan_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_flags(where: str, preset: Preset) -> tuple[list[Problem], list[Problem]]:

    errors: list[Problem] = []
    warnings: list[Problem] = []
    try:
        found = check_engine(preset.engine.flags(), preset.image.vllm_version)
    except FlagError as exc:
        return [Problem(f"{where}: image.vllm_version", exc.message, exc.hint)], []
    for p in found:
        (warnings if p.severity == "warning" else errors).append(Problem(f"{where}: {p.field}", p.message, p.hint))
    return errors, warnings


def check_parallelism(where: str, preset: Preset) -> list[Problem]:
    hw, eng = preset.hardware, preset.engine
    problems = []
    ranks = eng.tp * eng.pp
    if hw.gpu is not None:
        gpus = hw.count * hw.nodes
        per_host = gpu_catalog().get(hw.gpu, {}).get("per_host")
        if per_host is not None and hw.count > per_host:
            problems.append(Problem(
                f"{where}: hardware.count",
                f"{hw.count} GPUs per node, but a {hw.gpu} host has {per_host} (kit/data/gpus.yaml per_host)",
                f"set hardware.count to {per_host} (more hosts: hardware.nodes)",
            ))
        if ranks > gpus:
            problems.append(Problem(
                f"{where}: engine.tensor_parallel_size",
                f"tensor x pipeline parallel = {eng.tp} x {eng.pp} = {ranks} GPUs, but the hardware has "
                f"{hw.count} per node x {hw.nodes} node(s) = {gpus}",
                "lower the parallel sizes or raise hardware.count / hardware.nodes",
            ))
        elif ranks * preset.runtime.replicas < gpus:
            problems.append(Problem(
                f"{where}: engine.tensor_parallel_size",
                f"only {ranks * preset.runtime.replicas} of the {gpus} GPUs mapped into the stack would be used",
                "raise tensor_parallel_size (or pipeline_parallel_size), or lower hardware.count",
            ))
        if hw.nodes > 1 and eng.distributed_executor_backend not in (None, "ray"):
            problems.append(Problem(f"{where}: engine.distributed_executor_backend",
                                    "more than one node needs the ray backend", "set it to ray"))
    else:
        problems += cpu_backend_problems(where, preset)
    return problems


CPU_ID_LIST = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")


def cpu_backend_problems(where: str, preset: Preset) -> list[Problem]:
    """What vLLM's CPU build (0.32.0) refuses at start in the kit's CPU settings: VLLM_CPU_KVCACHE_SPACE is read
    with int() (vllm/platforms/cpu.py), and a thread binding by hand needs one core list per local rank
    (`len(omp_cpuids_list) == local_world_size`, vllm/utils/ompmultiprocessing.py)."""
    rt, eng = preset.runtime, preset.engine
    problems = []
    space = rt.cpu_kvcache_space_gib
    if space is not None and space != int(space):
        problems.append(Problem(f"{where}: runtime.cpu_kvcache_space_gib",
                                f"{space:g} GiB: vLLM reads VLLM_CPU_KVCACHE_SPACE as a whole number of GiB "
                                "(per rank)", f"use {max(1, round(space))}"))
    bind = rt.cpu_omp_threads_bind
    ranks = eng.tp * eng.pp // max(preset.hardware.nodes, 1)
    if bind is not None and bind not in ("auto", "nobind"):
        lists = bind.split("|")
        if not all(CPU_ID_LIST.match(part) for part in lists):
            problems.append(Problem(f"{where}: runtime.cpu_omp_threads_bind",
                                    "not auto, nobind or core lists such as 0-3|4-7 (one per rank, '|' between)",
                                    "e.g. 0-3 for one rank, 0-3|4-7 for two"))
        elif len(lists) != ranks:
            problems.append(Problem(f"{where}: runtime.cpu_omp_threads_bind",
                                    f"{len(lists)} core list(s) for {ranks} rank(s) (tensor x pipeline parallel "
                                    f"{eng.tp} x {eng.pp}): vLLM's CPU workers need one list per rank",
                                    "give one list per rank separated by '|' (0-3|4-7), or leave it unset: the "
                                    "ranks then split the container's CPUs"))
    return problems


def parallel_layout_problems(where: str, preset: Preset, target: str = "compose") -> list[Problem]:
    """The errors `kit validate` finds in how the ranks (tensor x pipeline parallel x replicas) map onto the GPUs."""
    return check_parallelism(where, preset) + replica_problems(where, preset, target) + \
        check_cluster(where, preset, target)[0]


def _leader_pod_clashes(where: str, taken: dict[str, int], target: str) -> list[Problem]:
    """Kubernetes: the leader pod also holds the API server behind its door, on the pod's loopback."""
    if target == "compose":
        return []
    return [Problem(f"{where}: {name}",
                    f"port {port} clashes: the API server takes it in the leader pod, behind the front door",
                    f"give {name} another port")
            for name, port in taken.items() if port == dep.POD_SERVER_PORT and name.startswith("cluster.")]


def check_cluster(where: str, preset: Preset, target: str = "compose") -> tuple[list[Problem], list[Problem]]:
    """Several nodes: the layout of ranks over nodes, the head's address, and ports that must not clash.

    On Kubernetes (target k8s) every pod has its own network namespace and LeaderWorkerSet hands workers the
    leader's address, so cluster.network and cluster.head_address do not apply there.
    """
    hw, eng, cl, rt = preset.hardware, preset.engine, preset.cluster, preset.runtime
    errors: list[Problem] = []
    warnings: list[Problem] = []
    if hw.nodes <= 1:
        return errors, warnings
    ranks = eng.tp * eng.pp
    layout = (f"tensor x pipeline parallel = {eng.tp} x {eng.pp} = {ranks} ranks over hardware.nodes = "
              f"{hw.nodes}")
    if ranks % hw.nodes:
        errors.append(Problem(
            f"{where}: engine.pipeline_parallel_size",
            f"{layout}: the ranks do not split evenly over the nodes",
            "make tensor_parallel_size x pipeline_parallel_size a multiple of hardware.nodes "
            "(vLLM's guide: tensor parallel = GPUs per node, pipeline parallel = nodes)",
        ))
    # ranks against hardware.count x nodes: check_parallelism
    elif hw.gpu is not None and eng.tp > hw.count:
        warnings.append(Problem(
            f"{where}: engine.tensor_parallel_size",
            f"tensor parallel {eng.tp} spans nodes ({hw.count} GPUs per node): every layer's all-reduce crosses "
            "the network",
            "prefer tensor parallel = GPUs per node and pipeline parallel = nodes",
        ))
    if hw.gpu is None:
        warnings.append(Problem(
            f"{where}: hardware.nodes",
            f"vLLM's CPU build ({preset.image.vllm_version}) has no Ray device (its platform's ray_device_key is "
            "empty): the Ray cluster forms, but `vllm serve --distributed-executor-backend ray` stops with "
            "'current platform cpu does not support ray.'",
            "use GPUs for several nodes; the CPU stack proves the cluster wiring only",
        ))
    host_network = target == "compose" and cl.network == "host"
    if host_network and not cl.head_address:
        errors.append(Problem(
            f"{where}: cluster.head_address",
            f"hardware.nodes = {hw.nodes} with cluster.network = host: the worker stack needs the head's address",
            "set cluster.head_address=<the head host's IP or DNS name> (or cluster.network=bridge to run every "
            "node on this Docker host)",
        ))
    if target == "compose" and cl.network == "bridge" and rt.bind_address not in LOOPBACK:
        warnings.append(Problem(f"{where}: cluster.network",
                                "bridge networking keeps every node on one Docker host; it is not a production layout",
                                "use cluster.network=host with one node per host"))
    server_port = dep.server_listen_for(preset)[1] if target == "compose" else dep.CONTAINER_PORT
    server_field = "runtime.port" if host_network else f"the server's container port {server_port}"
    taken = {
        "cluster.ray_port": cl.ray_port,
        "cluster.dashboard_port": cl.dashboard_port,
        f"Ray's client server port {dep.RAY_CLIENT_PORT}": dep.RAY_CLIENT_PORT,
        f"Ray's dashboard agent port {dep.RAY_DASHBOARD_AGENT_PORT}": dep.RAY_DASHBOARD_AGENT_PORT,
    }
    names = list(taken)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            if taken[first] == taken[second]:
                errors.append(Problem(f"{where}: {first}", f"port {taken[first]} is also {second}",
                                      f"give {first} another port"))
    server_name = "runtime.port" if host_network else "cluster.ray_port"
    for name, port in taken.items():
        if port == server_port:
            errors.append(Problem(
                f"{where}: {server_name}",
                f"port {port} clashes: {server_field} and {name} both take it on the head",
                "give the API server (runtime.port) or Ray (cluster.ray_port, cluster.dashboard_port) another port",
            ))
    errors += _leader_pod_clashes(where, taken, target)
    low, high = dep.RAY_WORKER_PORTS
    for name, port in [(server_field, server_port), ("cluster.ray_port", cl.ray_port),
                       ("cluster.dashboard_port", cl.dashboard_port)]:
        if host_network or name.startswith("cluster."):
            if low <= port <= high:
                errors.append(Problem(
                    f"{where}: {server_name if name == server_field else name}",
                    f"port {port} is inside Ray's worker port range {low}-{high} on every node",
                    f"pick a port outside {low}-{high}",
                ))
    return errors, warnings


LOOPBACK = ("127.0.0.1", "::1")


def check_exposure(where: str, preset: Preset, target: str = "compose") -> list[Problem]:
    """A stack that may run without a key: only when the preset asks for it by name (runtime.require_api_key=false),
    and then on every validate, render and up.

    The key itself is only ever in .env (VLLM_API_KEY), which the checks never read: with the key required (the
    default) the stack refuses to start without one (compose's required interpolation, a non-optional
    secretKeyRef) and kit render writes a random one into .env, so then there is nothing to warn of."""
    rt = preset.runtime
    if rt.require_api_key:
        return []
    reach = ("every pod that reaches the Service" if target != "compose" else
             f"anyone who reaches {rt.bind_address}:{rt.port}, beyond this host's loopback"
             if rt.bind_address not in LOOPBACK else
             f"every program on this host, and a web page in a browser here, through {rt.bind_address}:{rt.port}")
    return [Problem(
        f"{where}: runtime.require_api_key",
        "false: unless .env sets VLLM_API_KEY, the stack runs keyless, and every route it serves "
        f"(/v1/models, /metrics, the inference routes) is open to {reach}",
        "drop runtime.require_api_key=false: kit render then writes a random VLLM_API_KEY into .env, and the stack "
        "does not start without one",
    )]


def check_shm(where: str, preset: Preset) -> list[Problem]:
    """A /dev/shm the preset sets smaller than the kit would size it (kit/deploy/deployment.py `shm_size_for`): NCCL's
    shared-memory transport, vLLM's broadcast queues and Ray's object store live there and fail when it fills
    (Docker's 64 MiB default with tensor parallel is the classic case). A warning on every validate and render: the
    user may know their workload needs less."""
    rt = preset.runtime
    if rt.shm_size is None or rt.ipc == "host":
        return []
    sized = dep.shm_size_for(preset.model_copy(update={"runtime": rt.model_copy(update={"shm_size": None})}))
    if sized.shm_size is None or ram_in_bytes(rt.shm_size) >= ram_in_bytes(sized.shm_size):
        return []
    return [Problem(
        f"{where}: runtime.shm_size",
        f"{rt.shm_size} is smaller than the kit sizes it for this deployment ({sized.shm_size}: {sized.reason}); "
        "NCCL, vLLM's shared-memory queues and Ray's object store fail when /dev/shm fills (vLLM issues #1710, #6574: "
        "tensor parallel on Docker's 64 MiB default)",
        f"drop runtime.shm_size to let the kit size it, or runtime.shm_size={sized.shm_size}",
    )]


COMMIT_RE = r"[0-9a-f]{40}"


def _env_problems(where: str, preset: Preset, rules: dict[str, Any]) -> tuple[list[Problem], list[Problem]]:
    """runtime.env against the allow-list (kit/data/env_allow.yaml), runtime.unsafe_env warned about every time, and
    both against the names refused outright and those the kit sets itself."""
    allowed = load_yaml("env_allow.yaml")["names"]
    errors: list[Problem] = []
    warnings: list[Problem] = []
    kit_env = {**rules["kit_env"], **{name: "the image sets it (its Dockerfile ENV)"
                                      for name in strategy_of(preset).image_env(preset)}}
    fields = [("runtime.env", name) for name in preset.runtime.env]
    fields += [("runtime.unsafe_env", name) for name in preset.runtime.unsafe_env]
    for field_name, name in fields:
        at = f"{where}: {field_name}.{name}"
        rule = rules["env"].get(name)
        if rule and rule["action"] == "refuse":
            errors.append(Problem(at, f"refused: {name} {rule['reason']} ({rule['source']})",
                                  f"remove it from {field_name}"))
        elif name in kit_env:
            errors.append(Problem(
                at, f"the kit sets {name} itself ({kit_env[name]}); a value here would silently replace it",
                f"remove it from {field_name}" + ("" if not kit_env[name].startswith("set from runtime.")
                                                  else f"; {kit_env[name].removeprefix('set from ')} sets it")))
        elif field_name == "runtime.unsafe_env":
            why = f": {name} {rule['reason']} ({rule['source']})" if rule else ""
            warnings.append(Problem(at, f"unsafe: set in the server unchecked (the kit does not know it to be "
                                    f"harmless; it may load code or files){why}",
                                    "keep it only if you have read what it does; runtime.env takes the names in "
                                    "kit/data/env_allow.yaml"))
        elif name not in allowed:
            errors.append(Problem(
                at, f"{name} is not on the kit's list of harmless server variables (kit/data/env_allow.yaml): an "
                "unknown variable can load code or files into the server (LD_AUDIT, GCONV_PATH, PYTHONWARNINGS, "
                "VLLM_LOGGING_CONFIG_PATH do)",
                f"if you need it and know what it does, set it as runtime.unsafe_env.{name} instead (every render "
                "then warns about it)"))
    return errors, warnings


def _engine_problems(where: str, preset: Preset, rules: dict[str, Any]) -> tuple[list[Problem], list[Problem]]:
    """engine flags that load code or open files (kit/data/switches.yaml engine): refused unless
    runtime.unsafe_engine_flags names them, then warned about every time."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    flags = preset.engine.flags()
    acknowledged = set(preset.runtime.unsafe_engine_flags)
    for index, name in enumerate(preset.runtime.unsafe_engine_flags):
        if name not in rules["engine"] or rules["engine"][name]["action"] == "refuse-without-revision":
            errors.append(Problem(f"{where}: runtime.unsafe_engine_flags[{index}]",
                                  f"{name} is not an engine flag the kit holds back (kit/data/switches.yaml engine)",
                                  "list only the flags `kit validate` refused; set any other flag under engine"))
    for flag, rule in rules["engine"].items():
        value = flags.get(flag)
        if value in (None, False, "", []):
            continue
        if rule["action"] == "refuse-without-revision":
            revision = preset.model.revision
            if preset.model.is_local or (revision and re.fullmatch(COMMIT_RE, revision)):
                continue
            pinned = f"model.revision {revision} is a branch or tag, which moves" if revision else "no model.revision"
            errors.append(Problem(
                f"{where}: engine.{flag}",
                f"refused with {pinned}: it {rule['reason']} ({rule['source']})",
                "pin model.revision to the commit you reviewed (its 40-hex id, from the model's commit history on the "
                "hub; `kit lock --out DIR` records the commit a branch is at now), or drop trust_remote_code"))
            continue
        if rule["action"] == "unsafe-unless-suggested":
            spec = load_snapshot(preset.image.vllm_version).flags.get(flag)
            if spec is not None and value in spec.suggestions:
                continue
        if flag in acknowledged:
            warnings.append(Problem(f"{where}: engine.{flag}", f"unsafe: loads code or opens files: it "
                                    f"{rule['reason']} ({rule['source']})",
                                    "set it only with code and folders you control"))
        else:
            errors.append(Problem(
                f"{where}: engine.{flag}", f"refused: it {rule['reason']} ({rule['source']})",
                f"if you control that code or folder, also list it: runtime.unsafe_engine_flags=[{flag}] (every "
                "render then warns about it)"))
    return errors, warnings


def check_switches(where: str, preset: Preset) -> tuple[list[Problem], list[Problem]]:
    """Switches that open the server or load code (kit/data/switches.yaml, kit/data/env_allow.yaml), in runtime.env
    and engine flags alike, and runtime.env naming a variable the kit sets itself (it would silently replace the
    kit's value)."""
    rules = load_yaml("switches.yaml")
    env_errors, env_warnings = _env_problems(where, preset, rules)
    flag_errors, flag_warnings = _engine_problems(where, preset, rules)
    return env_errors + flag_errors, env_warnings + flag_warnings


def has_registry_host(repository: str) -> bool:
    """Whether an image name starts with a registry host, as Docker reads it (distribution/reference
    normalize.go splitDockerDomain: the first component is a host when it holds a '.' or ':', is localhost, or has
    an uppercase letter)."""
    first, slash, _ = repository.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost" or first.lower() != first)


def check_k8s_image(where: str, name: str, preset: Preset) -> list[Problem]:
    """Kubernetes pulls every image on the node: a name with no registry host is Docker Hub's, which the kit's
    locally built image never is (and whoever owns that name there supplies what the cluster runs)."""
    repository = preset.image.repository or f"vllm-kit/{name}"
    if has_registry_host(repository):
        return []
    field = "image.repository" if preset.image.repository else "image"
    return [Problem(
        f"{where}: {field}",
        f"the manifests name the image {repository}, which has no registry host: the cluster's nodes would pull it "
        "from Docker Hub (whoever owns that name there supplies what runs) or fail to pull it; the image built here "
        "is on this host only",
        f"push it: kit push preset={name} --registry HOST[:PORT], then render with the image.repository=HOST/... "
        "and image.pin_digest=... it prints",
    )]


def check_memory(where: str, preset: Preset, report: CheckReport, allow_no_fit: bool) -> None:

    result, warnings = plan_preset(where, preset)
    report.warnings += warnings
    if result is None:
        return
    report.plan = result
    report.plan_lines = summary_lines(result)
    if not result.fits:
        fixes = "; ".join(s["message"] for s in result.suggestions[:3]) or None
        problem = Problem(f"{where}: engine", f"does not fit in memory: vLLM would fail with: {result.error}",
                          fixes if allow_no_fit else f"{fixes}; or --allow-no-fit to render it anyway" if fixes
                          else "--allow-no-fit renders it anyway")
        (report.warnings if allow_no_fit else report.errors).append(problem)


def feature_use(feature: str, preset: Preset) -> str | None:
    """Why ``preset`` uses ``feature`` (kit/data/prune.yaml features: ``uses``), or None when it does not."""
    uses = prune_rules()["features"][feature]["uses"]
    flags = preset.engine.flags()
    try:
        spec_config = speculative_config(flags.get("speculative_config"))
    except ArtefactError:
        spec_config = None  # artefact_problems names the bad JSON
    if spec_config is not None:
        method = spec_config.get("method") or spec_config.get("model")
        if method in uses.get("speculative_methods", ()):
            return f"engine.speculative_config uses method {method}"
    for flag in uses.get("flags_true", ()):
        if flags.get(flag):
            return f"engine.{flag} is set"
    for flag, values in uses.get("flags_equal", {}).items():
        if flags.get(flag) in values:
            return f"engine.{flag} is {flags[flag]}"
    traits = uses.get("model", ())
    if traits:
        spec = model_spec_or_none(preset)
        if spec is None:
            return None
        if "mla" in traits and spec.is_mla:
            return f"{preset.model.id} uses multi-head latent attention"
        if "vision" in traits and spec.has_vision:
            return f"{preset.model.id} has a vision encoder"
    return None


def leave_out_warnings(where: str, preset: Preset) -> list[Problem]:
    """leave_out on another strategy does nothing: a warning, not an error, so the documented switch of a slim preset
    (`image.strategy=official image.cuda=12.9` for an older driver) works as one override."""
    if preset.image.leave_out and not strategy_of(preset).honours_leave_out:
        return [Problem(f"{where}: image.leave_out",
                        f"has no effect: only slim images are cut to the floor (this one is {preset.image.strategy})",
                        "nothing to do; it applies again with image.strategy=slim")]
    return []


def check_leave_out(where: str, preset: Preset) -> list[Problem]:
    """A slim image may leave a feature's packages out only when the preset does not use the feature."""
    if not strategy_of(preset).honours_leave_out:
        return []
    problems = []
    for index, feature in enumerate(preset.image.leave_out):
        why = feature_use(feature, preset)
        if why:
            problems.append(Problem(f"{where}: image.leave_out[{index}]",
                                    f"leaves out {feature}, which this preset uses: {why}",
                                    f"drop {feature} from image.leave_out"))
    return problems


def check_preset(name: str, path: Path, preset: Preset, *, allow_no_fit: bool = False,
                 target: str = "compose") -> CheckReport:
    """``allow_no_fit`` turns a memory misfit into a warning (the flags and parallelism must still be right)."""
    where = display_path(path)
    report = CheckReport()
    flag_errors, flag_warnings = check_flags(where, preset)
    report.errors += flag_errors
    report.warnings += flag_warnings
    switch_errors, switch_warnings = check_switches(where, preset)
    report.errors += switch_errors
    report.warnings += switch_warnings
    report.errors += check_parallelism(where, preset)
    report.warnings += check_exposure(where, preset, target)
    report.warnings += check_shm(where, preset)
    if target != "compose":
        report.warnings += check_k8s_image(where, name, preset)
    report.errors += replica_problems(where, preset, target)
    cluster_errors, cluster_warnings = check_cluster(where, preset, target)
    report.errors += cluster_errors
    report.warnings += cluster_warnings
    report.errors += artefact_problems(where, preset)
    report.errors += check_leave_out(where, preset)
    report.warnings += leave_out_warnings(where, preset)
    compat_errors, compat_warnings = check_compat(where, preset)
    report.errors += compat_errors
    report.warnings += compat_warnings
    if not report.errors:
        check_memory(where, preset, report, allow_no_fit)
    return report
