#!/usr/bin/env bash
# Installs CUDA 13.0's NVRTC and ptxas, and cuobjdump (13.2 is PyPI's oldest; it reads 13.0's
# cubins), from PyPI into .cuda-local/ (ignored by git), so the kernels can be compiled and their
# register use read on a machine without a GPU.
# Afterwards:  export LD_LIBRARY_PATH=$PWD/.cuda-local/nvidia/cu13/lib
#              cargo test -p gpu --test kernels_compile
#              scripts/ptxas-report.sh            (registers, spills, shared memory per kernel)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --target .cuda-local "nvidia-cuda-nvrtc==13.0.88" "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-cuobjdump==13.4.*"
echo "export LD_LIBRARY_PATH=$PWD/.cuda-local/nvidia/cu13/lib"
