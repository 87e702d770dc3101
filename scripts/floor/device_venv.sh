#!/usr/bin/env bash
# Source at the start of every `run` call on the lent GPU machine that carries a part made by prepare_venv.sh:
#   source scripts/floor/device_venv.sh
# It moves the part that came with this call to /root/stage33. Once every part the manifest names is there
# (checked by sha256), it makes a virtual environment /root/v33 of the machine's Python 3.12, unpacks the slim
# set into it, copies in the machine's CUDA 13 library wheels, prunes the whole environment with the image's rules
# (compute capability 9.0), and lays out FlashInfer's JIT toolchain as the slim image does (images/cuda_jit_layout.sh).
# Files outside the checkout survive only while the machine stays warm (30 s after a call).
stage=/root/stage33 venv=/root/v33
mkdir -p "$stage"
for d in .gpv-*; do [ -d "$d" ] && mv -f "$d"/* "$stage"/ 2>/dev/null; done
if [ ! -f "$venv/.ok" ] && [ -f "$stage/manifest" ]; then
  missing=$(cd "$stage" && awk '{print $2}' manifest | while read -r f; do [ -f "$f" ] || echo "$f"; done)
  if [ -z "$missing" ] && (cd "$stage" && sha256sum -c --quiet manifest); then
    machine_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    python3 -m venv --without-pip "$venv"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    case "$(awk 'NR==1{print $2}' "$stage/manifest")" in
      *.gz.*) unpack="gzip -dc" ;;
      *) unpack="xz -dc -T0" ;;
    esac
    (cd "$stage" && cat $(awk '{print $2}' manifest)) | $unpack | tar -C "$site" -xf -
    mkdir -p "$site/nvidia"
    python3 scripts/floor/copy_dists.py "$machine_site" "$site" nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc \
      nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse \
      nvidia-cusparselt-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx
    python3 scripts/floor/prune_site.py scripts/floor/prune-rules.json "$site" --arch 9.0 --report "$venv/pruned.json" | tail -1
    sh images/cuda_jit_layout.sh "$site/nvidia/cu13" && ln -sfn "$site/nvidia/cu13" "$venv/cuda"
    for f in "$site"/bin/*; do  # console scripts pip wrote here, pointed at this environment's Python
      [ -f "$f" ] && head -c 2 "$f" | grep -q '#!' && sed -i "1s|^#!.*|#!$venv/bin/python3|" "$f"
      cp -a "$f" "$venv/bin/"
    done
    touch "$venv/.ok" && rm -f "$stage"/site.tar.*
  else
    echo "gpu venv: parts missing: $(echo $missing)"
  fi
fi
echo "gpu venv: $([ -f "$venv/.ok" ] && echo ready || echo not ready)"
export PATH=$venv/bin:$PATH VIRTUAL_ENV=$venv CUDA_HOME=$venv/cuda
# Required by this workplace's GPU hosts (never use NVLink multicast):
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# DeepGEMM JIT-compiles FP8 kernels for minutes at start-up.
export VLLM_USE_DEEP_GEMM=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
