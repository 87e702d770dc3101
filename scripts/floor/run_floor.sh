#!/usr/bin/env bash
# The floor run on the lent GPU machine (after `source .gpukit/device-setup.sh`), from the checkout's root:
#   bash scripts/floor/run_floor.sh OUT
# Three config-only model directories from the kit's catalog (dense, AWQ, FP8), each with the tiny model's
# tokenizer (so text and chat requests go through the tokenizer and chat template), served one after another.
set -euo pipefail
out=$1
models=/root/floor/models
mkdir -p "$models" "$out"
python3 -m kit.config.tinymodel /root/floor/tiny >/dev/null
for id in Qwen/Qwen3-8B Qwen/Qwen3-8B-AWQ Qwen/Qwen3-8B-FP8; do
  dir=$models/${id//\//--}
  mkdir -p "$dir"
  python3 - "$id" "$dir" <<'PY'
import json, sys
from pathlib import Path
config = json.loads(Path("kit/data/models", sys.argv[1].replace("/", "--") + ".json").read_text())
Path(sys.argv[2], "config.json").write_text(json.dumps({k: v for k, v in config.items() if not k.startswith("_")}))
PY
  for f in /root/floor/tiny/*; do
    case $(basename "$f") in config.json|generation_config.json|*.safetensors) ;; *) cp "$f" "$dir/" ;; esac
  done
done
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch, triton, vllm; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "vllm", vllm.__version__)'
  findmnt -no TARGET,FSTYPE,OPTIONS -T /root/site || true
  findmnt -no TARGET,FSTYPE,OPTIONS -T "$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')" || true
  env | grep -E '^(VLLM|NCCL|TORCH|NVSHMEM|HF)_' | sort
} > "$out/provenance.txt" 2>&1
# Optional names after OUT pick some of the three (dense awq fp8); default: all.
specs=("dense=$models/Qwen--Qwen3-8B" "awq=$models/Qwen--Qwen3-8B-AWQ:--quantization awq_marlin --dtype float16"
       "fp8=$models/Qwen--Qwen3-8B-FP8")
picked=()
for spec in "${specs[@]}"; do
  if [ $# -le 1 ] || printf '%s\n' "${@:2}" | grep -qx "${spec%%=*}"; then picked+=("$spec"); fi
done
python3 "$(dirname "$0")/record_floor.py" "$out" "${picked[@]}" || rc=$?
tar -C /root/floor -cJf "$out/logs.tar.xz" $(cd /root/floor && ls *.log)
exit ${rc:-0}
