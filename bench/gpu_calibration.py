"""Calibration matrix for the memory planner, run on a real GPU with `kit.run.probe` (native mode).

Each case starts a real vLLM server with dummy weights from a config-only model directory, waits for the
memory profile and /health, stops it, and keeps the raw log. Cases run one after another (two engines at once
would pollute vLLM's non-torch memory measurement). Results accumulate in --work (default /root/calib), so a
second call on the same, still warm machine carries on where the first stopped; every case's log, the
results and the host facts are packed into OUT/calib.tar.xz after each case.

Run on the GPU machine (vLLM importable):
    python3 bench/gpu_calibration.py --out $OUT --budget 560 [--matrix 0.33.0] [--cases a,b]
The raw logs it produced are committed under kit/data/calibration/; bench/plan_accuracy.py parses them.
`--matrix` picks the case list: 0.26.0 (the first calibration, vLLM 0.26.0) or 0.33.0 (the presets' pin, run with
the slim image's package set from scripts/floor/). Seen on the lent H200 with 0.33 (2026-12-01): about 50-100 s from
process start to "Model loading took", whatever the model, so an eager case takes 55-110 s and a compiled one about
230 s; on a fresh machine the first engine also JIT-compiles FlashInfer's sampler (about 100 s; --first-extra) and
an MLA model its rope module. A `preset` case needs presets/ on the machine, and kit doctor too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.run import probe

H200_TOTAL_GIB = 139.80  # torch's total for the lent H200 (../shared/GPU.md); only used to scale budgets
# The lent card the budgets are scaled to. CALIB_GPU=h100-80gb runs a matrix's cases on a lent H100 (compute
# capability 9.0 like the H200: the same kernels) at the same budgets in GiB; a case that needs more memory than the
# card has does not start there. Torch's totals: the H200's as above, the H100's from kit/data/gpus.yaml; nvidia-smi's
# memory.total (MiB) tells the two apart, and main() refuses to run a matrix scaled to the other card.
CARD_TOTAL_GIB = {"h200": H200_TOTAL_GIB, "h100-80gb": 79.19}
CARD_SMI_MIB = {"h200": 143771, "h100-80gb": 81559}
HOST_GPU = os.environ.get("CALIB_GPU", "h200")
if HOST_GPU not in CARD_TOTAL_GIB:
    raise SystemExit(f"CALIB_GPU={HOST_GPU}: one of {sorted(CARD_TOTAL_GIB)}")
HOST_TOTAL_GIB = CARD_TOTAL_GIB[HOST_GPU]

# A budget that emulates a smaller card: the same bytes vLLM would request there at that utilization.
def card_util(card_gib: float, util: float = 0.90) -> float:
    return round(util * card_gib / HOST_TOTAL_GIB, 4)


GPTQ_MODULES = [["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
                ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"]]

# name: model (catalog id, or "tiny"), engine flags (vLLM's names), graphs (compile + CUDA graphs; else
# --enforce-eager), cache ("fresh" or the name of the case whose VLLM_CACHE_ROOT it reuses), checks (API).
CASES: dict[str, dict] = {
    "tiny-chat": dict(model="tiny", flags=dict(dtype="bfloat16", max_model_len=2048, max_num_seqs=16,
                                               max_num_batched_tokens=2048, gpu_memory_utilization=0.05),
                      checks=True),
    "q8-bf16-eager": dict(model="Qwen/Qwen3-8B", flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=256,
                                                           max_num_batched_tokens=8192, gpu_memory_utilization=0.90)),
    "q8-bf16-graphs-cold": dict(model="Qwen/Qwen3-8B", graphs=True,
                                flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=256,
                                           max_num_batched_tokens=8192, gpu_memory_utilization=0.90)),
    "q8-bf16-graphs-warm": dict(model="Qwen/Qwen3-8B", graphs=True, cache="q8-bf16-graphs-cold",
                                flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=256,
                                           max_num_batched_tokens=8192, gpu_memory_utilization=0.90)),
    "moe-q30a3b-graphs": dict(model="Qwen/Qwen3-30B-A3B", graphs=True, timeout=330,
                              flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=64,
                                         max_num_batched_tokens=4096, gpu_memory_utilization=0.90)),
    "rtx4090-awq-preset": dict(preset="rtx4090-awq", model="Qwen/Qwen3-8B-AWQ", graphs=True, checks=True,
                               overrides=[f"engine.gpu_memory_utilization={card_util(23.64, 0.90)}",
                                          "engine.max_num_batched_tokens=2048"]),  # a 4090 gets 2048 by default
    "dsv2lite-mla": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat",
                         flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=64,
                                    max_num_batched_tokens=2048, gpu_memory_utilization=0.40)),
    "q8-fp8ckpt": dict(model="Qwen/Qwen3-8B-FP8", flags=dict(max_model_len=16384, max_num_seqs=256,
                                                            max_num_batched_tokens=4096, gpu_memory_utilization=0.30)),
    "q7-gptq-24g": dict(model="Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", gptq_modules=True,
                        flags=dict(dtype="float16", max_model_len=8192, max_num_seqs=32,
                                   max_num_batched_tokens=2048, gpu_memory_utilization=card_util(23.64))),
    "q7-kvfp8-48g": dict(model="Qwen/Qwen2.5-7B-Instruct",
                         flags=dict(dtype="bfloat16", kv_cache_dtype="fp8", max_model_len=32768, max_num_seqs=64,
                                    max_num_batched_tokens=4096, gpu_memory_utilization=card_util(47.38))),
    "q15-fp16-16g": dict(model="Qwen/Qwen2.5-1.5B-Instruct",
                         flags=dict(dtype="float16", max_model_len=8192, max_num_seqs=64,
                                    max_num_batched_tokens=2048, gpu_memory_utilization=card_util(15.6))),
    "q8-16g-oom": dict(model="Qwen/Qwen3-8B", expect_failure=True,
                       flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=16,
                                  max_num_batched_tokens=2048, gpu_memory_utilization=card_util(15.6))),
    "llama8b-24g": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                        flags=dict(dtype="bfloat16", max_model_len=4096, max_num_seqs=16,
                                   max_num_batched_tokens=2048, gpu_memory_utilization=card_util(23.64))),
    "q14-48g": dict(model="Qwen/Qwen2.5-14B-Instruct",
                    flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=64,
                               max_num_batched_tokens=2048, gpu_memory_utilization=card_util(47.38))),
    "q8-bf16-long": dict(model="Qwen/Qwen3-8B", flags=dict(dtype="bfloat16", max_model_len=40960, max_num_seqs=128,
                                                          max_num_batched_tokens=16384, gpu_memory_utilization=0.50)),
    "q05-bf16": dict(model="Qwen/Qwen2.5-0.5B-Instruct",
                     flags=dict(dtype="bfloat16", max_model_len=4096, max_num_seqs=256,
                                max_num_batched_tokens=2048, gpu_memory_utilization=0.20)),
}


# vLLM 0.33.0 (the presets' pin). Cards emulated at vLLM 0.33's default utilization, 0.92 of the card's CUDA total
# (kit/data/gpus.yaml: rtx4060ti-16gb 15.59, rtx4090 23.64, rtx-a6000 47.41, h100-80gb 79.19 GiB), with vLLM 0.33's
# API-server batch defaults for that card passed explicitly (vllm/engine/arg_utils.py get_batch_defaults: 70 GiB
# and more, not A100: max_num_seqs 1024, max_num_batched_tokens 8192; under 70 GiB: 256 and 2048).
# The order interleaves kinds; bench/plan_accuracy.py holds out every third case in this order (the 3rd, 6th, ...),
# a rule fixed before any of these engines ran.
def _card(gib: float) -> dict:
    small = dict(max_num_seqs=256, max_num_batched_tokens=2048)
    big = dict(max_num_seqs=1024, max_num_batched_tokens=8192)
    return dict(gpu_memory_utilization=card_util(gib, 0.92), **(big if gib >= 70 else small))


C16, C24, C48, C80 = 15.59, 23.64, 47.41, 79.19
CASES_033: dict[str, dict] = {
    "llama8b-24g": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                        flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "q8-48g-graphs": dict(model="Qwen/Qwen3-8B", graphs=True,
                          flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C48))),
    "q8awq-16g": dict(model="Qwen/Qwen3-8B-AWQ",
                      flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192, **_card(C16))),
    "q7gptq-24g": dict(model="Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", gptq_modules=True,
                       flags=dict(dtype="float16", max_model_len=8192, **_card(C24))),
    "moe-q30a3b-80g-graphs": dict(model="Qwen/Qwen3-30B-A3B", graphs=True, timeout=330,
                                  flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C80))),
    "q8fp8-24g": dict(model="Qwen/Qwen3-8B-FP8", flags=dict(max_model_len=8192, **_card(C24))),
    "dsv2lite-48g": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat", timeout=330,  # FlashInfer JITs MLA's rope
                         flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C48))),
    "q8-80g": dict(model="Qwen/Qwen3-8B", flags=dict(dtype="bfloat16", max_model_len=32768, **_card(C80))),
    "llama8b-kvfp8-48g": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                              flags=dict(dtype="bfloat16", kv_cache_dtype="fp8", max_model_len=65536, **_card(C48))),
    # Issue 22 item 3: the preset at its own budget (its 0.90 of a 24 GiB card), cold, then warm below.
    "rtx4090-awq-preset": dict(preset="rtx4090-awq", model="Qwen/Qwen3-8B-AWQ", graphs=True,
                               overrides=[f"engine.gpu_memory_utilization={card_util(C24, 0.90)}",
                                          "engine.max_num_batched_tokens=2048"]),  # a 4090's default
    "q8fp8-80g-graphs": dict(model="Qwen/Qwen3-8B-FP8", graphs=True, flags=dict(max_model_len=32768, **_card(C80))),
    "q15-16g": dict(model="Qwen/Qwen2.5-1.5B-Instruct", flags=dict(dtype="float16", max_model_len=8192, **_card(C16))),
    "moe-q30a3b-80g": dict(model="Qwen/Qwen3-30B-A3B", flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C80))),
    "q7-kvfp8-24g": dict(model="Qwen/Qwen2.5-7B-Instruct",
                         flags=dict(dtype="bfloat16", kv_cache_dtype="fp8", max_model_len=32768, **_card(C24))),
    "dsv2lite-80g-graphs": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat", graphs=True, timeout=330,
                                flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C80))),
    "q8-16g-oom": dict(model="Qwen/Qwen3-8B", expect_failure=True,
                       flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C16))),
    "q14-48g": dict(model="Qwen/Qwen2.5-14B-Instruct", flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C48))),
    "llama8b-80g-graphs": dict(model="meta-llama/Llama-3.1-8B-Instruct", graphs=True,
                               flags=dict(dtype="bfloat16", max_model_len=32768, **_card(C80))),
    # Added after the first 18 (so the held-out rule's thirds above are unchanged). Item 3's restarts and the
    # engines of the presets that cannot run whole on one H200, at one of their GPUs' budgets.
    "rtx4090-awq-preset-warm": dict(preset="rtx4090-awq", model="Qwen/Qwen3-8B-AWQ", graphs=True,
                                    cache="rtx4090-awq-preset",
                                    overrides=[f"engine.gpu_memory_utilization={card_util(C24, 0.90)}",
                                               "engine.max_num_batched_tokens=2048"]),
    # orin's engine on 0.33 (its own pin, 0.16, has no slim set): 0.6 of the Orin's 61.37 GiB, eager as preset.
    "orin-engine": dict(preset="orin", model="Qwen/Qwen2.5-1.5B-Instruct-AWQ",
                        overrides=["image.vllm_version=0.33.0", f"engine.gpu_memory_utilization={card_util(61.37, 0.6)}",
                                   "engine.max_num_batched_tokens=2048"]),
    "orin-engine-warm": dict(preset="orin", model="Qwen/Qwen2.5-1.5B-Instruct-AWQ", cache="orin-engine",
                             overrides=["image.vllm_version=0.33.0",
                                        f"engine.gpu_memory_utilization={card_util(61.37, 0.6)}",
                                        "engine.max_num_batched_tokens=2048"]),
    # rtx3090x2-fp16's engine on one of its cards (tensor parallel 1): 14B in fp16 cannot fit 0.90 of 23.57 GiB;
    # vLLM must refuse it as the kit does. Eager: the verdict does not depend on CUDA graphs.
    "rtx3090x2-engine-1gpu": dict(preset="rtx3090x2-fp16", model="Qwen/Qwen2.5-14B-Instruct", expect_failure=True,
                                  overrides=["engine.tensor_parallel_size=1", "hardware.count=1",
                                             "engine.enforce_eager=true", "engine.max_num_batched_tokens=2048",
                                             f"engine.gpu_memory_utilization={card_util(23.57, 0.90)}"]),
    # The cold-compile buffers as a function of the token budget (the fit so far rests on 2048 only). 16 seqs keep
    # the sampler phase small (0.03 GiB), so the peak is the compiled forward pass; the warm restart of the first
    # gives that forward pass without inductor's first-run buffers. The 24th case (Llama at 4096) is held out.
    "q8-8k-graphs-16seqs": dict(model="Qwen/Qwen3-8B", graphs=True,
                                flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=16,
                                           max_num_batched_tokens=8192,
                                           gpu_memory_utilization=card_util(C80, 0.92))),
    "llama8b-4k-graphs-16seqs": dict(model="meta-llama/Llama-3.1-8B-Instruct", graphs=True,
                                     flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=16,
                                                max_num_batched_tokens=4096,
                                                gpu_memory_utilization=card_util(C48, 0.92))),
    "q8-8k-graphs-16seqs-warm": dict(model="Qwen/Qwen3-8B", graphs=True, cache="q8-8k-graphs-16seqs",
                                     flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=16,
                                                max_num_batched_tokens=8192,
                                                gpu_memory_utilization=card_util(C80, 0.92))),
}
# Issue 33: model families the rules were never fitted on (Gemma-2, Phi-3.5, Llama-3.2, Mistral-Nemo, Mixtral) and
# quantised models at 14B, 32B and 70B, planned with the rules as committed before any of them ran. Consumer and
# workstation cards are emulated at their budgets; the AWQ/GPTQ cases disable Machete (VLLM_DISABLED_KERNELS, read by
# vllm/model_executor/kernels/linear/mixed_precision choose_mp_linear_kernel), meant to take the Marlin path a compute
# capability 8.x card takes; the H200 took Humming instead (its 9.0 preference), and calibration.yaml plans them as
# they ran (`disabled_kernels`). The 0.33.0-marlin matrix disables Humming too for Marlin itself. Every case is held out:
# bench/plan_accuracy.py reports these families with the fitted constants refit without them (leave-one-family-out).
C12, C32 = 11.64, 31.36
C40 = 39.39  # A100 40GB (kit/data/gpus.yaml a100-40gb)
NO_MACHETE = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}
CASES_033_FAMILIES: dict[str, dict] = {
    "q32awq-4090": dict(model="Qwen/Qwen2.5-32B-Instruct-AWQ", env=NO_MACHETE,
                        flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=4096, **_card(C24))),
    "gemma2-9b-24g": dict(model="google/gemma-2-9b-it", flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "phi35-16g": dict(model="microsoft/Phi-3.5-mini-instruct",
                      flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C16))),
    "llama70awq-48g": dict(model="hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", env=NO_MACHETE,
                           flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192, **_card(C48))),
    "q14gptq-16g": dict(model="Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", gptq_modules=True, env=NO_MACHETE,
                        flags=dict(dtype="float16", quantization="gptq_marlin", max_model_len=8192, **_card(C16))),
    "q14fp8-24g": dict(model="Qwen/Qwen3-14B-FP8", flags=dict(max_model_len=8192, **_card(C24))),
    "nemo12b-32g": dict(model="mistralai/Mistral-Nemo-Instruct-2407",
                        flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C32))),
    "llama32-3b-12g": dict(model="meta-llama/Llama-3.2-3B-Instruct",
                           flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C12))),
    "q14-48g-graphs": dict(model="Qwen/Qwen2.5-14B-Instruct", graphs=True,
                           flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C48))),
    "phi35-24g-graphs": dict(model="microsoft/Phi-3.5-mini-instruct", graphs=True,
                             flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "mixtral-h200": dict(model="mistralai/Mixtral-8x7B-Instruct-v0.1", timeout=300,
                         flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=1024,
                                    max_num_batched_tokens=8192, gpu_memory_utilization=0.92)),
}
# Issue 33 item 4: vLLM 0.34.0, whose default on CUDA is the extensible KV cache (vllm/config/cache.py
# enable_extensible_kv_cache, resolved_gpu_memory_utilization: 1.0 when unset): the cache is committed after warmup
# and CUDA-graph capture from the memory then free (vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes).
# One case leaves the utilization unset (the new default, the whole H200), one turns the feature off (the estimate
# path of 0.33), the rest are consumer and workstation budgets as the kit's presets set them (an explicit
# utilization), across families, quantisations and compiled graphs. Run with the slim set from scripts/floor/ made
# from a 0.34.0 lock; PyPI no longer serves flashinfer-python 0.7.3 (0.34.0's exact pin), so that set carries 0.7.4.
CASES_034: dict[str, dict] = {
    "q8-h200-default": dict(model="Qwen/Qwen3-8B",
                            flags=dict(dtype="bfloat16", max_model_len=8192, max_num_seqs=256,
                                       max_num_batched_tokens=8192)),
    "llama8b-24g": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                        flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "q8-48g-graphs": dict(model="Qwen/Qwen3-8B", graphs=True,
                          flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C48))),
    "q8awq-16g": dict(model="Qwen/Qwen3-8B-AWQ", env=NO_MACHETE,
                      flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192, **_card(C16))),
    "gemma2-9b-24g": dict(model="google/gemma-2-9b-it", flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "q8-24g-noext": dict(model="Qwen/Qwen3-8B",
                         flags=dict(dtype="bfloat16", max_model_len=8192, enable_extensible_kv_cache=False,
                                    **_card(C24))),
    "dsv2lite-48g": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat", timeout=330,
                         flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C48))),
    "q14fp8-24g": dict(model="Qwen/Qwen3-14B-FP8", flags=dict(max_model_len=8192, **_card(C24))),
    "phi35-24g-graphs": dict(model="microsoft/Phi-3.5-mini-instruct", graphs=True,
                             flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "moe-q30a3b-80g": dict(model="Qwen/Qwen3-30B-A3B", flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C80))),
    "q8awq-24g-graphs": dict(model="Qwen/Qwen3-8B-AWQ", graphs=True, env=NO_MACHETE,
                             flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192,
                                        gpu_memory_utilization=card_util(C24, 0.90), max_num_seqs=16,
                                        max_num_batched_tokens=2048)),
    "llama70awq-48g": dict(model="hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", env=NO_MACHETE,
                           flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192, **_card(C48))),
    # What warm-up leaves resident and how far torch's reservation grows past the peak, separated: in the first five
    # runs both rose with max_num_seqs x vocabulary (Gemma-2 256k > Qwen3 152k > Llama-3.1 128k, all at 256 seqs),
    # and the token budget moved with them. These vary one input each against llama8b-24g and gemma2-9b-24g.
    "gemma2-9b-24g-64seqs": dict(model="google/gemma-2-9b-it",
                                 flags=dict(dtype="bfloat16", max_model_len=8192, **{**_card(C24), "max_num_seqs": 64})),
    "llama8b-24g-64seqs": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                               flags=dict(dtype="bfloat16", max_model_len=8192, **{**_card(C24), "max_num_seqs": 64})),
    "llama8b-24g-8ktokens": dict(model="meta-llama/Llama-3.1-8B-Instruct",
                                 flags=dict(dtype="bfloat16", max_model_len=8192,
                                            **{**_card(C24), "max_num_batched_tokens": 8192})),
    # MLA at 0.34 (round three): with FlashInfer's rope compiled ahead of time (images/flashinfer_aot.py rope), as a
    # slim image of a DeepSeek model now ships it. An A100 40GB's budget (39.39 GiB, kit/data/gpus.yaml) leaves about
    # 5 GiB of cache beside the 29 GiB of weights; the 80 GB case compiles and captures graphs, as at 0.33.
    "dsv2lite-40g": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat", timeout=330,
                         flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C40))),
    "dsv2lite-80g-graphs": dict(model="deepseek-ai/DeepSeek-V2-Lite-Chat", graphs=True, timeout=330,
                                flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C80))),
}
# Issue 33, vLLM 0.34.0 held out by family: model types the 0.34 rules never saw (Mistral: Mistral-Nemo-12B and
# Mistral-7B; Qwen2.5 in fp16, GPTQ and AWQ, the last two on the Marlin path a compute capability 8.x card takes),
# then new models of families 0.34 has (Llama-3.2-3B, Phi-3.5 eager) and one at an 80 GiB card's batch defaults
# (8192 tokens, 1024 sequences). Planned before they run (bench/preregister.py --matrix 0.34.0-families); in this
# order, new families first, as the device time allows.
CASES_034_FAMILIES: dict[str, dict] = {
    "nemo12b-32g": dict(model="mistralai/Mistral-Nemo-Instruct-2407",
                        flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C32))),
    "q7-fp16-24g": dict(model="Qwen/Qwen2.5-7B-Instruct",
                        flags=dict(dtype="float16", max_model_len=8192, **_card(C24))),
    "q14gptq-16g": dict(model="Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", gptq_modules=True, env=NO_MACHETE,
                        flags=dict(dtype="float16", quantization="gptq_marlin", max_model_len=8192, **_card(C16))),
    "mistral7b-24g": dict(model="mistralai/Mistral-7B-Instruct-v0.3",
                          flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C24))),
    "q32awq-4090": dict(model="Qwen/Qwen2.5-32B-Instruct-AWQ", env=NO_MACHETE,
                        flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=4096, **_card(C24))),
    "llama32-3b-12g": dict(model="meta-llama/Llama-3.2-3B-Instruct",
                           flags=dict(dtype="bfloat16", max_model_len=16384, **_card(C12))),
    "phi35-16g": dict(model="microsoft/Phi-3.5-mini-instruct",
                      flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C16))),
    "q7-80g": dict(model="Qwen/Qwen2.5-7B-Instruct", flags=dict(dtype="bfloat16", max_model_len=32768, **_card(C80))),
    "q15-16g": dict(model="Qwen/Qwen2.5-1.5B-Instruct", flags=dict(dtype="float16", max_model_len=8192, **_card(C16))),
    "mistral7b-80g": dict(model="mistralai/Mistral-7B-Instruct-v0.3",
                          flags=dict(dtype="bfloat16", max_model_len=32768, **_card(C80))),
}
# Issue 33, a diagnostic, not accuracy cases: four 0.34.0 starts already measured, again with torch's expandable
# segments (PYTORCH_CUDA_ALLOC_CONF, which vllm/config/vllm.py allows without a KV connector). If what the planner
# misses at 0.34 is the caching allocator's placement of the sizing step's tensors (torch's reservation growing past
# the allocated peak, a prompt-logprobs chunk's segment kept past empty_cache), these runs should keep about the
# allocated peak and leave next to nothing resident.
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
CASES_034_ALLOC: dict[str, dict] = {
    f"{name}-expandable": {**case, "env": {**case.get("env", {}), **EXPANDABLE}}
    for name, case in (("llama32-3b-12g", CASES_034_FAMILIES["llama32-3b-12g"]),
                       ("q7-80g", CASES_034_FAMILIES["q7-80g"]),
                       ("gemma2-9b-24g", CASES_034["gemma2-9b-24g"]),
                       ("llama8b-24g-64seqs", CASES_034["llama8b-24g-64seqs"]))
}
# Issue 33: Marlin measured on the H200. On compute capability 9.0 vLLM 0.33 picks Machete, then Humming
# (humming/priority.py moves it ahead of Marlin on 9.0 only), so every earlier "Machete disabled" run ran Humming.
# Disabling both (choose_mp_linear_kernel skips a class VLLM_DISABLED_KERNELS names) leaves MarlinLinearKernel, the
# kernel an RTX 4090 (8.9) runs. What Marlin allocates by card: its locks, SMs x 4 int32 (marlin_utils.py
# get_marlin_workspace, 2,112 B on the H200's 132 SMs, 2,048 B on a 4090's 128), and in each GEMM an fp32 c_tmp of
# SMs x min(m, 64) x 256 (marlin.cu marlin_gemm: 8.25 MiB on the H200, 8 MiB on a 4090), freed with the GEMM and
# smaller than the MLP's activations beside it. These are planned for the H200 with those kernels disabled
# (bench/preregister.py). First the flagship preset's own serve arguments at its 24 GiB budget, compiled, then
# the Humming runs' cases again (direct comparisons), then new sizes, one with CUDA graphs.
NO_MACHETE_HUMMING = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel,HummingLinearKernel"}
CASES_033_MARLIN: dict[str, dict] = {
    "rtx4090-awq-preset-marlin": dict(preset="rtx4090-awq", model="Qwen/Qwen3-8B-AWQ", graphs=True, timeout=330,
                                      env=NO_MACHETE_HUMMING,
                                      overrides=[f"engine.gpu_memory_utilization={card_util(C24, 0.90)}",
                                                 "engine.max_num_batched_tokens=2048"]),  # a 4090's default
    "q32awq-4090-marlin": dict(model="Qwen/Qwen2.5-32B-Instruct-AWQ", env=NO_MACHETE_HUMMING,
                               flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=4096,
                                          **_card(C24))),
    "q14gptq-16g-marlin": dict(model="Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", gptq_modules=True, env=NO_MACHETE_HUMMING,
                               flags=dict(dtype="float16", quantization="gptq_marlin", max_model_len=8192,
                                          **_card(C16))),
    "llama70awq-48g-marlin": dict(model="hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", env=NO_MACHETE_HUMMING,
                                  flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192,
                                             **_card(C48))),
    "q7gptq-12g-graphs-marlin": dict(model="Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", gptq_modules=True, graphs=True,
                                     env=NO_MACHETE_HUMMING,
                                     flags=dict(dtype="float16", quantization="gptq_marlin", max_model_len=8192,
                                                **_card(C12))),
    "q3-32awq-32g-marlin": dict(model="Qwen/Qwen3-32B-AWQ", env=NO_MACHETE_HUMMING,
                                flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192,
                                           **_card(C32))),
    "q15awq-12g-marlin": dict(model="Qwen/Qwen2.5-1.5B-Instruct-AWQ", env=NO_MACHETE_HUMMING,
                              flags=dict(dtype="float16", quantization="awq_marlin", max_model_len=8192,
                                         **_card(C12))),
}
# Issue 33, a diagnostic, not accuracy cases: Llama-3.1-70B-AWQ on Humming logged 37.13 GiB of weights, 0.04 GiB over
# the plan, and on Marlin 37.08 (the plan: 37.086). If the excess is the caching allocator handing Humming's cached
# repack temporaries whole to later requests (get_free_block under max_split_size_mb:20, which gpu_worker.py sets
# around load_model), it goes with torch's expandable segments. The first case repeats the Humming run as it was.
CASES_033_HUMMING_ALLOC: dict[str, dict] = {
    "llama70awq-48g-humming": {**CASES_033_FAMILIES["llama70awq-48g"]},
    "llama70awq-48g-humming-expandable": {**CASES_033_FAMILIES["llama70awq-48g"],
                                          "env": {**NO_MACHETE, **EXPANDABLE}},
}
# Issue 33: what the two unexplained Marlin misses are made of (prepared 2026-12-04, planned before any ran).
# vLLM's graph estimate is the profiling capture plus (n_full - 2) x the second FULL graph's free-memory drop
# (cudagraph_utils.py profile_cudagraph_memory); that run's sample was 7.4 MiB, 0.266 MiB a layer, against 0.13-0.22
# for the dense models (bench/graph_split.py). Each case below varies one thing against it:
# - the exact case again: is 7.4 MiB noise of one capture?
# - Machete, the H200's default kernel (no VLLM_DISABLED_KERNELS): what of the sample is Marlin's (its per-GEMM c_tmp)?
# - the same model unquantised in fp16, at a 24 GiB card's budget (7B fp16 does not fit 12; 256 seqs and 2048 tokens
#   as at 12 GiB, so the same graph counts): the qwen2 shapes without GPTQ's nodes;
# - 128 sequences: fewer FULL graphs; the estimate should move by the change in n_full x the sample;
# - Qwen2.5-14B-GPTQ on Marlin again: is its 0.33 GiB of non-torch memory (AWQ on Marlin 0.25-0.28) noise?
# bench/graph_node_memory.py measures the driver's and the pool's part of a graph's cost by node kind (torch alone).
_Q7_MARLIN = CASES_033_MARLIN["q7gptq-12g-graphs-marlin"]
CASES_033_SPLIT: dict[str, dict] = {
    "q7gptq-12g-graphs-marlin-repeat": {**_Q7_MARLIN},
    "q7gptq-12g-graphs-machete": {k: v for k, v in _Q7_MARLIN.items() if k != "env"},
    "q7-24g-graphs": dict(model="Qwen/Qwen2.5-7B-Instruct", graphs=True,
                          flags=dict(dtype="float16", max_model_len=8192, **_card(C24))),
    "q7gptq-12g-graphs-marlin-128seqs": {**_Q7_MARLIN, "flags": {**_Q7_MARLIN["flags"], "max_num_seqs": 128}},
    "q14gptq-16g-marlin-repeat": {**CASES_033_MARLIN["q14gptq-16g-marlin"]},
}
# Issue 33 (2026-12-05): the graph rule refit after matrix 0.33.0-split (per_full_graph_gib past the two sampled full
# graphs, scaled by layers and the MLP's intermediate width), checked where no graph run had been: a 64-layer model
# 25,600 wide (the form extrapolates to 3.7 x its reference there; Qwen3-32B-AWQ on Marlin, as a 32 GiB card runs it,
# the eager twin of h200-033m-qwen3-32b-awq-32g-marlin), Mistral (no compiled run of the family) and Llama-3.2-3B at
# a 12 GiB budget. Planned before any of them ran (h200-vllm-0.33.0-check/preregistered-plans.json).
CASES_033_CHECK: dict[str, dict] = {
    "q3-32awq-32g-graphs-marlin": {**CASES_033_MARLIN["q3-32awq-32g-marlin"], "graphs": True, "timeout": 360},
    "mistral7b-24g-graphs": {**CASES_034_FAMILIES["mistral7b-24g"], "graphs": True},
    "llama32-3b-12g-graphs": {**CASES_034_FAMILIES["llama32-3b-12g"], "graphs": True},
}
# Issue 33 (2026-12-05, prepared, not yet run): the CUDA-graph charge of the architectures no compiled start has
# measured. vLLM 0.33's charge per layer is an architecture's (Qwen2.5 2x Qwen3 at the same capture sizes), and the
# planner takes Qwen3's rate for every architecture without its own factor, saying "approximate" where the spread
# matters. Gemma-2 (sliding-window layers, soft-capping; at 32 GiB, where one request fits) and Mistral at two sizes (7B, 32 layers; Nemo-12B, 40: the
# two sizes full_rate_by_model_type asks for), Llama-3.2-3B (28 layers, a second Llama size with graphs) and
# Mixtral-8x7B (a second fused-MoE family for moe_scale, which one Qwen3-30B-A3B run set). Mistral-7B and
# Llama-3.2-3B repeat the check matrix's two unrun cases, planned again with the rule as it now stands
# (h200-vllm-0.33.0-arch/preregistered-plans.json).
CASES_033_ARCH: dict[str, dict] = {
    # at 32 GiB: at 24 GiB the graphs leave less than one 8192-token request (planned 5,162 tokens, refused)
    "gemma2-9b-32g-graphs": dict(model="google/gemma-2-9b-it", graphs=True,
                                 flags=dict(dtype="bfloat16", max_model_len=8192, **_card(C32))),
    "mistral7b-24g-graphs": {**CASES_034_FAMILIES["mistral7b-24g"], "graphs": True},
    "nemo12b-32g-graphs": {**CASES_034_FAMILIES["nemo12b-32g"], "graphs": True},
    "llama32-3b-12g-graphs": {**CASES_034_FAMILIES["llama32-3b-12g"], "graphs": True},
    "mixtral-h200-graphs": {**CASES_033_FAMILIES["mixtral-h200"], "graphs": True, "timeout": 360},
}
MATRICES = {"0.26.0": CASES, "0.33.0": CASES_033, "0.33.0-families": CASES_033_FAMILIES, "0.34.0": CASES_034,
            "0.34.0-families": CASES_034_FAMILIES, "0.34.0-alloc": CASES_034_ALLOC, "0.33.0-marlin": CASES_033_MARLIN,
            "0.33.0-humming-alloc": CASES_033_HUMMING_ALLOC, "0.33.0-split": CASES_033_SPLIT,
            "0.33.0-check": CASES_033_CHECK, "0.33.0-arch": CASES_033_ARCH}


def sh(argv: list[str], timeout: float = 120) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return f"$ {' '.join(argv)}\n(exit {done.returncode})\n{done.stdout}{done.stderr}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"$ {' '.join(argv)}\nfailed: {exc}\n"


def flags_to_argv(flags: dict) -> list[str]:
    argv: list[str] = []
    for key in sorted(flags):
        name = key.replace("_", "-")
        if isinstance(flags[key], bool):  # vLLM's boolean options: --X / --no-X, no value
            argv.append(f"--{name}" if flags[key] else f"--no-{name}")
        else:
            argv += [f"--{name}", str(flags[key])]
    return argv


def model_dir_for(case: dict, work: Path) -> Path:
    if case["model"] == "tiny":
        target = work / "models" / "tiny-llama"
        if not (target / "config.json").is_file():
            from kit.config.tinymodel import make_tiny_model

            make_tiny_model(target)
        return target
    config = probe.catalog_config(case["model"])
    if case.get("gptq_modules"):
        config["quantization_config"]["modules_in_block_to_quantize"] = GPTQ_MODULES
    return probe.write_dummy_model_dir(config, work / "models" / case["model"].replace("/", "--"))


def command_for(name: str, case: dict, model_dir: Path, serve_cli: bool = False) -> probe.ProbeCommand:
    """``serve_cli``: start `vllm serve DIR` (vLLM's CLI module, what the image runs) instead of the API server
    module with --model, which 0.33 deprecates."""
    if "preset" in case:
        from kit.config.presetload import load_preset

        preset_name, _path, preset = load_preset(case["preset"], case.get("overrides", []))
        return probe.prepare(preset_name, preset, model_dir, mode="native")
    port = probe.free_port()
    tokenizer = probe.has_tokenizer(model_dir)
    args = ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port)]
    args += flags_to_argv(case["flags"])
    if not case.get("graphs"):
        args.append("--enforce-eager")
    if serve_cli:
        args = probe.dummy_serve_args([str(model_dir), *args], str(model_dir), tokenizer=tokenizer, positional=True)
        argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args]
    else:
        args = probe.dummy_serve_args(["--model", str(model_dir), *args], str(model_dir), tokenizer=tokenizer)
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args]
    return probe.ProbeCommand("native", argv, dict(probe.NATIVE_ENV), port, name, model_dir, tokenizer)


def gpu_mib(field: str = "memory.used") -> int | None:
    """nvidia-smi's ``field`` (memory.used, memory.total) in MiB, or None where it does not answer."""
    out = sh(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"], timeout=20)
    try:
        return int(out.strip().splitlines()[-1].split(",")[0])
    except (ValueError, IndexError):
        return None


def gpu_used_mib() -> int | None:
    return gpu_mib("memory.used")


def wait_gpu_idle(limit_s: float = 30) -> int | None:
    deadline = time.monotonic() + limit_s
    used = gpu_used_mib()
    while used is not None and used > 1024 and time.monotonic() < deadline:
        time.sleep(1)
        used = gpu_used_mib()
    return used


def pack(work: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "calib.tar.xz.tmp"
    with tarfile.open(tmp, "w:xz") as tar:
        for path in sorted(work.iterdir()):
            if path.name not in ("models", "cache"):
                tar.add(path, arcname=f"calib/{path.name}")
    tmp.replace(out / "calib.tar.xz")
    shutil.copy(work / "results.json", out / "results.json") if (work / "results.json").exists() else None


def vllm_version() -> str:
    from importlib.metadata import version

    return version("vllm")


def host_facts(work: Path, flagsnap: bool = True) -> None:
    if (work / "nvidia-smi.txt").exists():
        return
    (work / "nvidia-smi.txt").write_text(sh(["nvidia-smi"]))
    (work / "nvidia-smi-query.csv").write_text(sh(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]))
    (work / "nvidia-smi-query-full.csv").write_text(sh(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,driver_version,compute_cap,pci.bus_id",
         "--format=csv"]))
    (work / "python.txt").write_text(sh([sys.executable, "-c",
        "import torch, vllm, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda); "
        "print('vllm', vllm.__version__); print('total', torch.cuda.mem_get_info()[1])"], timeout=180))
    (work / "distributions.txt").write_text(sh([sys.executable, "-c",
        "import importlib.metadata as m; print('\\n'.join(sorted(f'{d.metadata[\"Name\"]}=={d.version}' "
        "for d in m.distributions())))"], timeout=60))
    if flagsnap:
        (work / "flagsnap.txt").write_text(sh([sys.executable, "-m", "kit.config.flagsnap",
                                              str(work / f"vllm-{vllm_version()}.json")], timeout=240))
    (work / "doctor.txt").write_text(sh([sys.executable, "-m", "kit.cli.main", "doctor", "preset=rtx4090-awq",
                                         "--json"], timeout=120))


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--out", type=Path, required=True)
    cli.add_argument("--work", type=Path, default=Path("/root/calib"))
    cli.add_argument("--budget", type=float, default=560, help="seconds this call may take in all")
    cli.add_argument("--cases", default="", help="comma-separated names (default: all, in order)")
    cli.add_argument("--facts", action="store_true", help="record nvidia-smi, flag snapshot and kit doctor first")
    cli.add_argument("--no-flagsnap", action="store_true", help="with --facts: skip the flag snapshot (one is kept)")
    cli.add_argument("--first-extra", type=float, default=0,
                     help="seconds more for the first case (FlashInfer JIT-compiles its sampler on a fresh machine)")
    cli.add_argument("--share-caches", action="store_true",
                     help="one Triton cache for all cases, one VLLM_CACHE_ROOT for the eager ones (faster starts)")
    cli.add_argument("--matrix", default="0.26.0", choices=sorted(MATRICES), help="which case list")
    args = cli.parse_args()
    started = time.monotonic()
    total_mib = gpu_mib("memory.total")
    if total_mib is not None and abs(total_mib - CARD_SMI_MIB[HOST_GPU]) > 2048:
        print(f"this GPU has {total_mib} MiB; the budgets are scaled to {HOST_GPU} ({CARD_SMI_MIB[HOST_GPU]} MiB): "
              f"set CALIB_GPU to the card this is", flush=True)
        return 2
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")
    results_path = work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    cases = MATRICES[args.matrix]
    names = [n for n in (args.cases.split(",") if args.cases else cases) if n]
    if args.facts:
        host_facts(work, flagsnap=not args.no_flagsnap)
        pack(work, args.out)
    for name in names:
        case = cases[name]
        if results.get(name, {}).get("complete"):
            continue
        left = args.budget - (time.monotonic() - started)
        need = 120 if case.get("graphs") else 60
        if left < need:
            print(f"[{name}] skipped: {left:.0f} s left, needs ~{need}", flush=True)
            continue
        timeout = min(case.get("timeout", 300 if case.get("graphs") else 170) + args.first_extra * (name == names[0]),
                      left - 25)
        try:
            run_case(name, case, work, timeout, results, serve_cli=args.matrix != "0.26.0",
                     share_caches=args.share_caches)
        except Exception as exc:  # noqa: BLE001 - one broken case must not cost the rest of the call
            print(f"[{name}] driver error: {type(exc).__name__}: {exc}", flush=True)
            results[name] = {"complete": False, "driver_error": f"{type(exc).__name__}: {exc}"}
            results_path.write_text(json.dumps(results, indent=2, default=str))
        pack(work, args.out)
    pack(work, args.out)
    done = sum(1 for r in results.values() if r.get("complete"))
    print(f"complete: {done}/{len(cases)}; left: {[n for n in cases if not results.get(n, {}).get('complete')]}")
    return 0


def run_case(name: str, case: dict, work: Path, timeout: float, results: dict, serve_cli: bool = False,
             share_caches: bool = False) -> None:
    results_path = work / "results.json"
    model_dir = model_dir_for(case, work)
    command = command_for(name, case, model_dir, serve_cli)
    cache = work / "cache" / case.get("cache", name)
    if share_caches and not case.get("graphs"):
        cache = work / "cache" / "eager-shared"  # no torch.compile in eager mode: only vLLM's model-info cache
    elif case.get("cache") is None and cache.exists():
        shutil.rmtree(cache)
    run_tmp = work / "cache" / f"{name}-tmp-{int(time.time())}"
    # As in a container with only the kit's compile-cache volume: inductor and Triton caches start empty.
    # share_caches: Triton's kernel cache is shared by all cases (it holds compiled kernels, not memory) and eager
    # cases share one VLLM_CACHE_ROOT, which saves each start the model-registry inspection subprocess; compiled
    # cases keep their own (cold) VLLM_CACHE_ROOT and inductor cache, so their first-start profile is unchanged.
    triton = work / "cache" / "triton-shared" if share_caches else run_tmp / "triton"
    env = {**command.env, **case.get("env", {}), "VLLM_CACHE_ROOT": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(run_tmp / "inductor"),
           "TRITON_CACHE_DIR": str(triton)}
    command = probe.ProbeCommand(command.mode, command.argv, env, command.port, command.served_name,
                                 command.model_dir, command.tokenizer, command.docker)
    print(f"[{name}] {command.shell_line()}", flush=True)
    result = probe.run(command, timeout=timeout, log_path=work / f"{name}.log",
                       progress=lambda m, n=name: print(f"[{n}] {m}", flush=True),
                       after_ready=probe.api_checks if case.get("checks") else None)
    used_after = wait_gpu_idle()
    complete = result.ready or (result.exit_code is not None and not result.timed_out)
    results[name] = {
        "complete": complete, "ready": result.ready, "seconds_to_ready": result.seconds_to_ready,
        "exit_code": result.exit_code, "timed_out": result.timed_out, "checks": result.checks,
        "argv": command.argv, "env": command.env, "case": {k: v for k, v in case.items()},
        "parsed": result.log.to_json(), "gpu_used_mib_after_stop": used_after,
    }
    results_path.write_text(json.dumps(results, indent=2, default=str))
    (work / f"{name}.sh").write_text(command.shell_line() + "\n")
    print(f"[{name}] ready={result.ready} t={result.seconds_to_ready} kv={result.log.kv_cache_tokens} "
          f"fatal={result.log.fatal}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
