#!/bin/sh
# Makes the CUDA toolkit wheels under site-packages/nvidia/cuXX (nvidia-cuda-nvcc, -nvvm, -crt, -cccl, -runtime)
# usable as FlashInfer's CUDA_HOME. Its JIT links every kernel module with
#   -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda      (flashinfer/jit/cpp_ext.py)
# and the wheels have lib/ only, libcudart.so.13 only, and no stub for the driver library. Run by the slim image's
# builder and by the GPU proof (scripts/floor/device_venv.sh), so both have the same layout.
#   sh cuda_jit_layout.sh SITE-PACKAGES/nvidia/cu13
set -eu
home=$1
[ -x "$home/bin/nvcc" ] || { echo "cuda_jit_layout.sh: no nvcc in $home/bin" >&2; exit 1; }
[ -e "$home/lib64" ] || ln -s lib "$home/lib64"
for lib in "$home"/lib/libcudart.so.[0-9]*; do
    [ -e "$lib" ] || { echo "cuda_jit_layout.sh: no libcudart.so.N in $home/lib" >&2; exit 1; }
    ln -sfn "$(basename "$lib")" "$home/lib/libcudart.so"
    break
done
# -lcuda: the driver's libcuda.so.1 is not in the image; the NVIDIA Container Toolkit mounts it at run time, into
# the distribution's library directory, which the linker searches. This linker script names it there.
mkdir -p "$home/lib/stubs"
printf '/* the driver library, mounted at run time */\nINPUT(libcuda.so.1)\n' > "$home/lib/stubs/libcuda.so"
