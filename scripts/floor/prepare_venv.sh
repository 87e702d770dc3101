#!/usr/bin/env bash
# Packs a whole slim vLLM environment for the lent GPU machine: the rtx4090-awq image's locked wheels, as
# CPython 3.12 builds (the machine's Python), cut by kit/image/prune.py with the image's rules at compute
# capability 9.0 (the H200) and every image.leave_out feature left out, then xz parts small enough for the device
# tool's 64 MiB a call (the checkout travels too). The CUDA libraries torch's cuda-toolkit pin brings (cuBLAS, cuDNN, NCCL, ...) are not
# packed: the machine has the same CUDA 13 wheels under torch 2.11, and device_venv.sh copies them in (and prunes
# them with the same rules).
#   bash scripts/floor/prepare_venv.sh LOCK WORKDIR [DEST]   (LOCK: a wheelhouse's requirements.lock.txt)
# It writes WORKDIR/site (the environment), WORKDIR/parts/site.tar.xz.NN and .gpv-NN/ folders in DEST (default: this
# checkout; one part each, ignored by git's info/exclude), and scripts/floor/prune-rules.json + prune_site.py
# (untracked; they travel with every call). Each part then travels in its own `run` call: carry [".gpv-NN"].
# DEST matters in a git worktree: the device tool sends the checkout its session started in, not the worktree.
# Wheels already in the lock's folder (the wheelhouse `kit wheelhouse` filled) are taken from there, not downloaded.
# PACK: gz (default) or xz. XZ_LEVEL: xz preset for the parts (default 6). Seen with 2: 19 parts (1.15 GB) in about 16 min on two busy cores,
# where 6 had made 18 parts and ran about four times slower.
# KIT_PYTHON: a Python that imports the kit's dependencies (default: the checkout's .venv; a worktree has none).
set -euo pipefail
lock=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(cd "${3:-$root}" && pwd)
kit_python=${KIT_PYTHON:-$root/.venv/bin/python}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's kit, also with another checkout's Python
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_25 manylinux_2_24 manylinux_2_18 \
         manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
  plat+=(--platform "${p}_x86_64")
done
features=$("$kit_python" -c 'from kit.core.datafiles import load_yaml; print(" ".join(load_yaml("prune.yaml")["features"]))')
left_out=$("$kit_python" -c '
import sys
from kit.core.datafiles import load_yaml
print("|".join(n for f in load_yaml("prune.yaml")["features"].values() for n in f["distributions"]))')
# The machine's own CUDA 13 library wheels (torch 2.11.0+cu130's), copied in there instead of carried.
# NCCL is carried: torch 2.14 needs ncclCommResume, which the machine's 2.28.9 lacks.
machine_cuda='nvidia-cublas|nvidia-cuda-cupti|nvidia-cuda-nvrtc|nvidia-cuda-runtime|nvidia-cudnn-cu13|nvidia-cufft|nvidia-cufile|nvidia-curand|nvidia-cusolver|nvidia-cusparse|nvidia-cusparselt-cu13|nvidia-nvjitlink|nvidia-nvshmem-cu13|nvidia-nvtx'
mkdir -p "$work/wheels"
grep -v '^#' "$lock" | sed 's/ .*//' | grep -vE "^(${left_out}|${machine_cuda})==" > "$work/reqs.txt"
python3 -m pip download -q --no-deps "${plat[@]}" --find-links "$(dirname "$lock")" -d "$work/wheels" -r "$work/reqs.txt"
rm -rf "$work/site"
python3 -m pip install -q --no-deps --no-compile --ignore-requires-python "${plat[@]}" --target "$work/site" "$work"/wheels/*.whl
"$kit_python" -c "
import json, sys
from kit.core.datafiles import prune_rules
json.dump(prune_rules('13.0', sys.argv[1].split()), open(sys.argv[2], 'w'))" "$features" "$root/scripts/floor/prune-rules.json"
cp "$root/kit/image/prune.py" "$root/scripts/floor/prune_site.py"
python3 "$root/scripts/floor/prune_site.py" "$root/scripts/floor/prune-rules.json" "$work/site" --arch 9.0 \
  --report "$work/pruned-here.json" | tail -1
rm -rf "$work/parts" && mkdir -p "$work/parts"
# PACK=gz (the default): gzip -1 packs the set in about 2 minutes on two cores, into more parts than xz; a part call
# costs about 4 s of device time, far less than xz's 15-40 minutes of packing here (../shared/GPU.md, 2026-12-03).
case "${PACK:-gz}" in
  gz) ext=gz; tar -C "$work/site" -cf - . | gzip -1 > "$work/parts/site.tar.gz" ;;
  xz) ext=xz; tar -C "$work/site" -cf - . | xz -T0 "-${XZ_LEVEL:-6}" > "$work/parts/site.tar.xz" ;;
  *) echo "PACK must be gz or xz" >&2; exit 2 ;;
esac
(cd "$work/parts" && split -b 56M -d "site.tar.$ext" "site.tar.$ext." && rm "site.tar.$ext" \
  && sha256sum site.tar.$ext.* > manifest)
rm -rf "$dest"/.gpv-*
for part in "$work"/parts/site.tar.$ext.*; do
  n=${part##*.}
  mkdir -p "$dest/.gpv-$n" && cp "$part" "$work/parts/manifest" "$dest/.gpv-$n/"
done
# info/exclude lives in git's common dir: in a worktree, .git is a file, not a folder.
exclude=$(git -C "$dest" rev-parse --path-format=absolute --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpv-\*/' "$exclude" 2>/dev/null || echo '/.gpv-*/' >> "$exclude"
ls -d "$dest"/.gpv-* | wc -l
