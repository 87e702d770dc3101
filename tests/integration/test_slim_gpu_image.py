"""The `rtx4090-awq` slim image, built on the local stand-in base from its wheelhouse.

There is no GPU here: this proves the image contract (pinned vLLM and torch, the preset's CUDA, non-root,
no package lists), not serving. The wheelhouse is several GB; it is kept in the host cache between runs.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kit.core.datafiles import PRESETS_DIR
from kit.deploy.pipeline import Prepared, prepare
from kit.core.errors import BuildError
from kit.image.build import BuildRequest, BuildResult, build_image
from kit.image.lock import LOCKED_BASE_REPOSITORY, build_base
from kit.image.wheelhouse import build_wheelhouse, probe_base_image
from kit.run.workflow import build, render_into
from tests.integration.conftest import BASE_IMAGE, CACHE, build_cache_ids, remove_build_cache, session_progress

pytestmark = pytest.mark.slow


@dataclass
class SlimBuild:
    prepared: Prepared
    result: BuildResult
    wheelhouse: Path


@pytest.fixture(scope="module")
def slim_build(docker_client, tmp_path_factory):
    prepared = prepare("rtx4090-awq", base_image=BASE_IMAGE)
    probed = probe_base_image(BASE_IMAGE)
    assert probed is not None, BASE_IMAGE
    wheelhouse = CACHE / "wheelhouse-rtx4090-awq"
    build_wheelhouse(prepared.deployment, wheelhouse, python_version=probed.python_version, glibc=probed.glibc,
                     progress=session_progress)
    out = tmp_path_factory.mktemp("rtx4090-render")
    render_into(prepared, out)
    cache_before = build_cache_ids(docker_client)
    result = build(prepared, out, wheelhouse=wheelhouse, progress=session_progress)
    yield SlimBuild(prepared, result, wheelhouse)
    # ~20 GB of image, wheelhouse image and builder stage: give the disk back (the wheelhouse stays in the host
    # cache). Only this build's own images, never a prune: the engine is shared.
    for tag in result.tags:
        docker_client.images.remove(tag, force=True)
    if result.wheelhouse_image:
        docker_client.images.remove(result.wheelhouse_image, force=True)
    remove_build_cache(docker_client, cache_before)


@pytest.fixture(scope="module")
def slim_image(slim_build, docker_client):
    return slim_build.prepared, docker_client.images.get(slim_build.result.image_id)


def test_pinned_versions_and_cuda(slim_image, docker_client):
    prepared, image = slim_image
    script = ("import json, torch, vllm; print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, "
              "'cuda': torch.version.cuda}))")
    out = docker_client.containers.run(image.id, ["python3", "-c", script], entrypoint=[], remove=True,
                                       network_disabled=True).decode().strip().splitlines()[-1]
    found = json.loads(out)
    assert found["vllm"] == prepared.preset.image.vllm_version == "0.33.0"
    assert found["torch"].split("+")[0] == "2.14.0"
    assert found["cuda"].startswith(prepared.deployment.image.cuda)  # "13.0"


def test_slim_contract(slim_image, docker_client):
    prepared, image = slim_image
    assert image.attrs["Config"]["User"] == "10001:10001"
    assert image.labels["io.vllm-kit.cuda"] == "13.0"
    out = docker_client.containers.run(
        image.id, ["sh", "-c", "ls /var/lib/apt/lists | grep -v -x -e lock -e partial; command -v gcc; id -u"],
        entrypoint=[], remove=True, network_disabled=True).decode().split()
    # Triton's launcher needs gcc at run time on a GPU; package lists are gone; the user is not root.
    assert out[-2:] == ["/usr/bin/gcc", "10001"], out


def test_the_cute_dsl_loads_its_cuda13_flavour_without_the_cuda12_one(slim_image, docker_client):
    # kit/data/prune.yaml leaves nvidia-cutlass-dsl-libs-cu12 out of CUDA 13 images: the DSL's loader binds the
    # newest flavour installed that the driver supports (here no driver: the newest installed), so vLLM's CuTe
    # kernels still import.
    _, image = slim_image
    script = ("import importlib.metadata as m, sys, cutlass.cute; "
              "print(sys.modules['cutlass._mlir._mlir_libs._cutlass_ir'].__file__.rsplit('/', 1)[-1]); "
              "print(sorted(d.metadata['Name'] for d in m.distributions() if 'cutlass-dsl-libs' in d.metadata['Name']))")
    out = docker_client.containers.run(image.id, ["python3", "-c", script], entrypoint=[], remove=True,
                                       network_disabled=True).decode().strip().splitlines()
    assert out[-2].startswith("_cutlass_ir.cu13."), out
    assert "nvidia-cutlass-dsl-libs-cu12" not in out[-1] and "nvidia-cutlass-dsl-libs-cu13" in out[-1], out


# Libraries that kept ELF files link against and the slim image does not hold, each with why that is right. Any
# other unresolved name means a prune rule removed something a kept library needs at load time.
UNRESOLVED_OK = {
    "libcuda.so.1": "the driver: the NVIDIA container runtime mounts it from the host",
    "libfabric.so.1": "NVSHMEM's libfabric transport plug-in, dlopened only on a libfabric network",
    "libibverbs.so.1": "InfiniBand verbs: cuFile's RDMA and NVSHMEM's IB transports, only on an RDMA fabric",
    "libmlx5.so.1": "Mellanox provider of the same RDMA transports",
    "librdmacm.so.1": "RDMA connection manager of the same",
    "libmpi.so.40": "NVSHMEM's MPI bootstrap plug-in, only when launched under MPI",
    "liboshmem.so.40": "NVSHMEM's OpenSHMEM bootstrap plug-in, only under OpenSHMEM",
    "libpmix.so.2": "NVSHMEM's PMIx bootstrap plug-in, only under a PMIx launcher",
    "libucp.so.0": "NVSHMEM's UCX transport plug-in, only with UCX",
    "libucs.so.0": "the same UCX transport",
    "libtbb.so.12": "numba's optional TBB threading layer (numba falls back to its workqueue layer)",
}
LDD_SCAN = """
import json, os, site, subprocess
sp = site.getsitepackages()[0]
names = set()
for root in (sp, '/usr/lib', '/lib', '/usr/local/lib'):
    for d, _, files in os.walk(root):
        names.update(files)
missing, scanned = {}, 0
for d, _, files in os.walk(sp):
    for f in files:
        p = os.path.join(d, f)
        if '.so' not in f or os.path.islink(p):
            continue
        with open(p, 'rb') as fh:
            if fh.read(4) != b'\\x7fELF':
                continue
        scanned += 1
        for line in subprocess.run(['ldd', p], capture_output=True, text=True).stdout.splitlines():
            if 'not found' in line and line.split()[0] not in names:
                missing.setdefault(line.split()[0], []).append(os.path.relpath(p, sp))
print(json.dumps({'scanned': scanned, 'missing': missing}))
"""


def test_every_library_a_kept_library_links_against_is_in_the_image(slim_image, docker_client):
    # A static likeness check of the prune rules at the pinned vLLM (0.33; the GPU proof ran 0.26): ldd over every
    # ELF file in site-packages; a needed name found nowhere in the image is a removal that breaks a load.
    _, image = slim_image
    out = docker_client.containers.run(image.id, ["python3", "-c", LDD_SCAN], entrypoint=[], remove=True,
                                       network_disabled=True).decode().strip().splitlines()[-1]
    found = json.loads(out)
    assert found["scanned"] > 200, found["scanned"]  # torch, the CUDA wheels, vLLM's kernels, triton ...
    unexpected = {name: users for name, users in found["missing"].items() if name not in UNRESOLVED_OK}
    assert unexpected == {}


FLASHINFER_JIT = """
import json, os, re, shutil, subprocess, time
from pathlib import Path
import torch
from vllm.utils.flashinfer import has_flashinfer
from flashinfer.jit import env as jit_env
from flashinfer.jit.core import gen_jit_spec
cuda_home = os.environ['CUDA_HOME']
nvcc = subprocess.run([os.path.join(cuda_home, 'bin', 'nvcc'), '--version'], capture_output=True, text=True).stdout
probe = Path('/tmp/kit-jit-probe/cub_probe.cu')
probe.parent.mkdir(parents=True, exist_ok=True)
probe.write_text(CUB_PROBE)
spec = gen_jit_spec('kit_jit_probe', [jit_env.FLASHINFER_CSRC_DIR / 'flashinfer_sampling_binding.cu', probe])
started = time.monotonic()
spec.build()
library = spec.jit_library_path
needed = [line.split('[')[1].rstrip(']') for line in
          subprocess.run(['readelf', '-d', str(library)], capture_output=True, text=True).stdout.splitlines()
          if '(NEEDED)' in line]
print(json.dumps({'has_flashinfer': has_flashinfer(), 'torch_cuda': torch.version.cuda,
                  'nvcc': re.search(r'release [0-9.]+, V([0-9.]+)', nvcc).group(1),
                  'cxx': shutil.which('c++'), 'library': str(library), 'size': library.stat().st_size,
                  'needed': needed, 'seconds': round(time.monotonic() - started, 1)}))
"""
# A kernel on CCCL's block primitives, launched from the host: the toolkit's CCCL headers against its runtime
# headers (13.5's CCCL refuses 13.0's), and a launch that links the CUDA runtime.
CUB_PROBE = r"""
#include <cub/block/block_reduce.cuh>
__global__ void kit_probe_sum(const float* in, float* out) {
  using Reduce = cub::BlockReduce<float, 128>;
  __shared__ typename Reduce::TempStorage storage;
  float total = Reduce(storage).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = total;
}
void kit_probe_launch(const float* in, float* out, cudaStream_t stream) { kit_probe_sum<<<1, 128, 0, stream>>>(in, out); }
"""


def driver_stand_in(tmp_path) -> str:
    """A library named libcuda.so.1, as the NVIDIA Container Toolkit mounts the host driver's into a container: a
    file of that name in the distribution's library folder (the property the JIT's link step relies on). Built
    with the host's C compiler; it defines no driver function, so nothing here runs a kernel."""
    source = tmp_path / "cuda.c"
    source.write_text("int vllm_kit_driver_stand_in;\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(source)], check=True)
    return str(library)


def test_flashinfer_jit_builds_a_module_with_the_images_toolchain(slim_image, docker_client, tmp_path):
    # FlashInfer JIT-compiles, at first use, every module the image did not compile ahead of time (the sampler is
    # precompiled: the test below), with nvcc (the CUDA compiler wheels, pinned to torch's toolkit: kit/data/vllm.yaml
    # jit_toolchain) and g++, found through CUDA_HOME laid out by images/cuda_jit_layout.sh. Here it builds a small
    # module through FlashInfer's own JIT (gen_jit_spec: its nvcc and linker flags, its include paths): FlashInfer's
    # sampling binding source (the TVM-FFI headers every module includes) and a CCCL block-reduce kernel launched
    # from the host. Small on purpose: the AOT step in the image build already compiled the sampler's kernels with
    # this toolkit; this proves the runtime side, in the running image, in about a tenth of that time.
    # No GPU here: the module is compiled for the preset's compute capability and linked against a stand-in of the
    # driver library, mounted where the container runtime mounts the real one; it is not loaded. The GPU proof
    # (kit/data/floor/proof-h200-vllm-0.33.0.json) built, loaded and ran the sampler this way.
    prepared, image = slim_image
    arch = prepared.deployment.image.prune_arch  # "8.9"
    out = docker_client.containers.run(
        image.id, ["python3", "-c", f"CUB_PROBE = {CUB_PROBE!r}\n{FLASHINFER_JIT}"], entrypoint=[], remove=True,
        network_disabled=True, environment={"FLASHINFER_CUDA_ARCH_LIST": arch},
        volumes={driver_stand_in(tmp_path): {"bind": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "mode": "ro"}},
    ).decode().strip().splitlines()[-1]
    found = json.loads(out)
    print(f"FlashInfer JIT in the image: {found}")
    assert found["has_flashinfer"] is True, found  # vLLM turns FlashInfer off when it cannot find nvcc
    # The compiler is the toolkit torch was built with (13.5's CCCL refuses 13.0's runtime headers).
    assert found["nvcc"].startswith(f"{found['torch_cuda']}."), found  # "13.0.88"
    assert found["cxx"], found
    # Built into FlashInfer's cache on the vLLM cache volume (FLASHINFER_WORKSPACE_BASE), kept across containers.
    assert found["library"].startswith("/home/vllm/.cache/vllm/.cache/flashinfer/"), found
    assert found["library"].endswith("/kit_jit_probe/kit_jit_probe.so") and found["size"] > 10_000, found
    # Linked against the CUDA runtime torch loads (the host launch). FlashInfer's `-lcuda` resolved through
    # lib64/stubs/libcuda.so (INPUT(libcuda.so.1)) against the mounted driver library: without that file the link
    # fails ("cannot find libcuda.so.1", seen here before the mount). No driver function is called, so no NEEDED
    # entry stays.
    assert "libcudart.so.13" in found["needed"], found


FLASHINFER_AOT = """
import json, subprocess
from flashinfer.jit import env as jit_env
from flashinfer.jit.sampling import gen_sampling_module
spec = gen_sampling_module()
library = spec.get_library_path()
needed = [line.split('[')[1].rstrip(']') for line in
          subprocess.run(['readelf', '-d', str(library)], capture_output=True, text=True).stdout.splitlines()
          if '(NEEDED)' in line]
print(json.dumps({'is_aot': spec.is_aot, 'library': str(library), 'aot_dir': str(jit_env.FLASHINFER_AOT_DIR),
                  'size': library.stat().st_size, 'needed': needed, 'jit_dir_made': spec.build_dir.exists()}))
"""


def test_the_sampler_is_compiled_into_the_image_and_resolves_to_the_precompiled_file(slim_image, docker_client):
    # images/flashinfer_aot.py compiled FlashInfer's sampling module for the preset's compute capability while the
    # image was built, and put it where FlashInfer looks for precompiled modules first: what vLLM calls at its first
    # sample (flashinfer/sampling.py get_sampling_module: build_and_load, which tries JitSpec.try_load on the AOT
    # artifacts before any build) resolves to that library. No GPU here: it is resolved, not loaded or run (a library
    # that fails to load falls back to the JIT); on the H200 the same script's module loaded and nine first starts
    # built nothing (kit/data/calibration/h200-vllm-0.34.0/flashinfer-aot.txt).
    prepared, image = slim_image
    assert prepared.deployment.image.flashinfer_aot == ["sampling"]
    out = docker_client.containers.run(
        image.id, ["python3", "-c", FLASHINFER_AOT], entrypoint=[], remove=True, network_disabled=True,
        environment={"FLASHINFER_CUDA_ARCH_LIST": prepared.deployment.image.prune_arch},  # no GPU to read it from
    ).decode().strip().splitlines()[-1]
    found = json.loads(out)
    print(f"FlashInfer sampler in the image: {found}")
    assert found["is_aot"] is True, found
    assert found["library"] == f"{found['aot_dir']}/sampling/sampling.so" and found["size"] > 100_000, found
    # linked as the JIT links it: the CUDA runtime torch loads, no driver library (the build's stand-in left nothing)
    assert "libcudart.so.13" in found["needed"] and "libcuda.so.1" not in found["needed"], found
    assert found["jit_dir_made"] is False, found  # nothing compiled into the cache volume


def test_the_wheels_reach_the_build_as_an_image_and_stay_out_of_the_image(slim_build, docker_client):
    """Issue 37: the wheelhouse is a local image the venv's step mounts (kit/image/buildkit.py), not 3.5 GB of
    build context: the context holds no wheels, the build read the wheelhouse image, and neither mount point
    keeps a file in the image."""
    result = slim_build.result
    ref = result.wheelhouse_image
    assert ref.startswith("vllm-kit/wheelhouse:") and result.steps[0].instruction.endswith(f", {ref})")
    docker_client.images.get(ref)
    context = result.log_path.parent / "build-context"
    assert (context / "Dockerfile").is_file() and not (context / "wheels").exists()
    assert f"--build-arg KIT_WHEELHOUSE={ref}" in result.script_path.read_text()
    assert f"load metadata for docker.io/{ref}" in result.log_path.read_text()
    listing = docker_client.containers.run(result.image_id, ["-c", "ls -A /srv /mnt"], entrypoint="sh", remove=True)
    assert listing.decode().split() == ["/mnt:", "/srv:"]


def test_a_renamed_preset_rebuilds_from_the_cache_without_sending_the_wheels(slim_build, docker_client, tmp_path):
    """Issue 37: a preset change that does not touch the image (here its name, so its labels) rebuilds in seconds:
    the wheelhouse image is there already, and every step but the labels' comes from the cache."""
    copy = tmp_path / "my-awq.yaml"
    copy.write_text(yaml.safe_dump(yaml.safe_load((PRESETS_DIR / "rtx4090-awq.yaml").read_text())))
    renamed = prepare(str(copy), base_image=BASE_IMAGE)
    out = tmp_path / "my-awq"
    render_into(renamed, out)
    result = build(renamed, out, wheelhouse=slim_build.wheelhouse, progress=session_progress)
    try:
        first = result.steps[0]
        assert result.wheelhouse_image == slim_build.result.wheelhouse_image
        assert first.instruction.startswith("(the wheelhouse as an image: there, ") and first.cached
        runs = [s for s in result.steps if "] RUN " in s.instruction]  # packages, venv, byte-code, FlashInfer
        assert len(runs) == 4 and all(s.cached for s in runs), [(s.instruction[:60], s.cached) for s in runs]
        assert result.image_id != slim_build.result.image_id  # its labels name the copy
    finally:
        for tag in result.tags:
            docker_client.images.remove(tag, force=True)


def test_buildkit_builds_on_a_base_locked_by_its_image_id(docker_client, tmp_path):
    """`kit build --locked` of a slim preset on a local base (`kit lock --offline` pins it by image ID): BuildKit
    reads `FROM sha256:<id>` as a repository named "sha256" and asks a registry for it, so the build names the base
    by a local tag that spells the ID out (kit/image/lock.py build_base); the classic builder keeps the ID."""
    base_id = docker_client.images.get(BASE_IMAGE).id
    lock = SimpleNamespace(base=SimpleNamespace(kind="image-id", digest=base_id, pinned=base_id))  # the fields read
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo built > /built\n")
    assert build_base(docker_client, lock, "classic") == base_id
    tags = ["vllm-kit/test-locked-base:raw", "vllm-kit/test-locked-base:alias"]
    try:
        with pytest.raises(BuildError, match="sha256"):
            build_image(BuildRequest(context_dir=tmp_path, tags=tags[:1], base_image=base_id, builder="buildkit"),
                        tmp_path / "raw")
        ref = build_base(docker_client, lock, "buildkit")
        assert ref == f"{LOCKED_BASE_REPOSITORY}:{base_id.replace(':', '-')}"
        assert docker_client.images.get(ref).id == base_id
        result = build_image(BuildRequest(context_dir=tmp_path, tags=tags[1:], base_image=ref, builder="buildkit"),
                             tmp_path / "alias")
        base_layers = docker_client.images.get(base_id).attrs["RootFS"]["Layers"]
        assert docker_client.images.get(result.image_id).attrs["RootFS"]["Layers"][: len(base_layers)] == base_layers
    finally:
        for tag in tags + [f"{LOCKED_BASE_REPOSITORY}:{base_id.replace(':', '-')}"]:
            if docker_client.images.list(name=tag):
                docker_client.images.remove(tag)  # a tag only: the base keeps its own
