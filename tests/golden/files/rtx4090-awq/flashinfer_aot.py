"""Compile FlashInfer's JIT modules while the image is built, so a first start on the GPU compiles nothing.

Run by the image's own Python (vllm-kit renders it beside the Dockerfile):
    python flashinfer_aot.py --arch 8.9 [--root DIR] sampling [rope]
With --root, the libraries go under DIR as if DIR were / (DIR/opt/venv/.../flashinfer/data/aot/...), for a stage of
their own whose DIR the image copies onto its root: the compile then runs beside the venv's byte-code.
For each module it builds what FlashInfer's JIT builds at first use (flashinfer/jit/core.py JitSpec.build: nvcc and
g++ from CUDA_HOME, for the compute capability in FLASHINFER_CUDA_ARCH_LIST) in a scratch workspace, then installs the
library where FlashInfer looks for precompiled modules before it compiles (flashinfer/jit/env.py get_aot_artifacts:
FLASHINFER_AOT_DIR/<name>/<name>.so, loaded by JitSpec.try_load; a library that does not load falls back to the JIT).
The link step resolves -lcuda through CUDA_HOME's stub (INPUT(libcuda.so.1)): a stand-in libcuda.so.1 made here in
the scratch folder answers it (the modules call the CUDA runtime, not the driver, so no NEEDED entry stays), and the
container runtime mounts the host's real one at run time. The scratch folder is removed; only the libraries stay.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# module name -> (module, generator) of its JitSpec in flashinfer/jit/
GENERATORS = {"sampling": ("flashinfer.jit.sampling", "gen_sampling_module"),
              "rope": ("flashinfer.jit.rope", "gen_rope_module")}


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--arch", required=True, help="compute capability, as FLASHINFER_CUDA_ARCH_LIST takes it (8.9)")
    cli.add_argument("--root", type=Path, default=Path("/"), help="install under this folder as if it were /")
    cli.add_argument("modules", nargs="+", choices=sorted(GENERATORS))
    args = cli.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="kit-flashinfer-aot-"))
    try:
        stub = scratch / "stub"
        stub.mkdir()
        subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-Wl,-soname,libcuda.so.1", "-o",
                        str(stub / "libcuda.so.1"), "-"], input=b"int vllm_kit_driver_stand_in;\n", check=True)
        # read by flashinfer.jit when it is imported below: the scratch workspace and the one target
        os.environ["FLASHINFER_WORKSPACE_BASE"] = str(scratch)
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = args.arch
        os.environ["LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(stub), os.environ.get("LIBRARY_PATH")]))
        from flashinfer.jit import env as jit_env

        for name in args.modules:
            module, generator = GENERATORS[name]
            spec = getattr(importlib.import_module(module), generator)()
            started = time.monotonic()
            spec.build(verbose=False)
            target = args.root / (jit_env.FLASHINFER_AOT_DIR / name / f"{name}.so").relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(spec.jit_library_path, target)
            print(f"flashinfer_aot: {name} for compute capability {args.arch} in {time.monotonic() - started:.0f} s: "
                  f"{target} ({target.stat().st_size} bytes)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
