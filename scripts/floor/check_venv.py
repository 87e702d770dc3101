"""First look at a carried environment on the GPU machine (after `source scripts/floor/device_venv.sh`).

Prints, as JSON: versions, the GPU, where the CUDA libraries torch loaded come from, vLLM's `has_flashinfer()`, and
FlashInfer's JIT building its sampler with the environment's toolchain (CUDA_HOME) and running it on the GPU.
    python3 scripts/floor/check_venv.py
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
import time
import traceback

out: dict = {"python": sys.version.split()[0], "prefix": sys.prefix, "cuda_home": os.environ.get("CUDA_HOME")}
for dist in ("torch", "vllm", "triton", "flashinfer-python", "transformers", "cuda-toolkit", "nvidia-cuda-runtime",
             "nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-cccl", "nvidia-cublas", "nvidia-cudnn-cu13",
             "nvidia-nccl-cu13", "nvidia-cusparselt-cu13", "nvidia-nvshmem-cu13", "numba", "torchvision"):
    try:
        out[dist] = md.version(dist)
    except md.PackageNotFoundError:
        out[dist] = None
try:
    import torch

    out.update(torch_cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
               capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    import vllm  # noqa: F401
    from vllm.utils.flashinfer import has_flashinfer

    out["has_flashinfer"] = has_flashinfer()
    import flashinfer.sampling as sampling

    probs = torch.softmax(torch.randn(4, 32000, device="cuda"), dim=-1)
    started = time.monotonic()
    samples = sampling.top_k_top_p_sampling_from_probs(probs, top_k=50, top_p=0.9)
    torch.cuda.synchronize()
    out["sampler_first_call_s"] = round(time.monotonic() - started, 1)
    out["samples"] = samples.tolist()
    out["sampler_ok"] = bool(((samples >= 0) & (samples < 32000)).all())
except Exception:  # noqa: BLE001 - report what broke, then the libraries loaded so far
    out["error"] = traceback.format_exc()[-3000:]
with open("/proc/self/maps") as fh:
    out["cuda_libraries"] = sorted({line.split()[-1] for line in fh if "/" in line and any(
        key in line for key in ("libcu", "libnccl", "libnv", "flashinfer"))})
print(json.dumps(out, indent=1))
