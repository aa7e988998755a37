#!/usr/bin/env bash
# Installs CUDA 13.0's NVRTC, nvcc and ptxas, and cuobjdump (13.2 is PyPI's oldest; it reads
# 13.0's cubins), from PyPI into .cuda-local/ (ignored by git), so the kernels and the probes can
# be compiled and their register use read on a machine without a GPU. nvcc's parts are pinned
# one by one: left to pip, cicc, crt and the runtime's headers came from a newer release than
# ptxas, which then refused cicc's PTX (session 63).
# Afterwards:  export LD_LIBRARY_PATH=$PWD/.cuda-local/nvidia/cu13/lib
#              cargo test -p gpu --test kernels_compile
#              scripts/ptxas-report.sh            (registers, spills, shared memory per kernel)
#              .cuda-local/nvidia/cu13/bin/nvcc -O3 -gencode=arch=compute_90a,code=sm_90a \
#                -I.cuda-local/nvidia/cu13/include -c -o /tmp/p.o scripts/probes/NAME.cu
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --target .cuda-local "nvidia-cuda-nvrtc==13.0.88" "nvidia-cuda-nvcc==13.0.88" \
  "nvidia-nvvm==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" \
  "nvidia-cuda-cuobjdump==13.4.*"
echo "export LD_LIBRARY_PATH=$PWD/.cuda-local/nvidia/cu13/lib"
