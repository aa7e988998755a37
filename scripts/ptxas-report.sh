#!/usr/bin/env bash
# Compiles every kernel with NVRTC (as the engine does) and prints ptxas's resource report for
# sm_90a: registers, spills, stack frame and shared memory per entry point. No GPU needed; run
# scripts/local-nvrtc.sh once first.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=$PWD/.cuda-local/nvidia/cu13
export LD_LIBRARY_PATH=$cuda/lib ASYNCT_KERNEL_CACHE=$PWD/target/kernel-ptx
rm -rf "$ASYNCT_KERNEL_CACHE"
cargo test -q -p gpu --test kernels_compile >/dev/null
for ptx in "$ASYNCT_KERNEL_CACHE"/*sm_90a*.ptx; do
  echo "== $(basename "$ptx")"
  "$cuda/bin/ptxas" -arch=sm_90a -v "$ptx" -o /dev/null 2>&1 | grep -E "Compiling|registers|spill|stack" | sed 's/ptxas info    : //'
done
