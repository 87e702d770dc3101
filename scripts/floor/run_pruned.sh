#!/usr/bin/env bash
# The proof run on the lent GPU machine (after `source .gpukit/device-setup.sh`): remove from the GPU
# environment exactly what slim images leave out (kit/image/prune.py with the rules of kit/data/prune.yaml, for
# compute capability 9.0), then serve the floor run's three models again and record what they read.
#   bash scripts/floor/run_pruned.sh OUT [dense] [awq] [fp8]   (prune_site.py and prune-rules.json beside this script)
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
venv_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 "$here/prune_site.py" "$here/prune-rules.json" /root/site "$venv_site" --arch 9.0 --report "$out/pruned.json"
python3 -c 'import importlib.util as u; print({m: u.find_spec(m) is not None for m in ("torchvision", "torchaudio", "cv2", "PyNvVideoCodec", "torchcodec")})'
ls "$venv_site"/nvidia/cudnn/lib/
bash "$here/run_floor.sh" "$@"
