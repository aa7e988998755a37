#!/usr/bin/env bash
# Compiles every kernel with NVRTC to sm_90a cubins (as the engine does) and prints the resource
# use ptxas gave each entry point: registers, stack frame (spills land there), local and shared
# memory, read back from the cubins by cuobjdump. No GPU needed; run scripts/local-nvrtc.sh once first.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=$PWD/.cuda-local/nvidia/cu13
export LD_LIBRARY_PATH=$cuda/lib ASYNCT_KERNEL_CACHE=$PWD/target/kernel-cubin
rm -rf "$ASYNCT_KERNEL_CACHE"
cargo test -q -p gpu --test kernels_compile >/dev/null
image=$(mktemp)
trap 'rm -f "$image"' EXIT
for cached in "$ASYNCT_KERNEL_CACHE"/*sm_90a*.cubin; do
  echo "== $(basename "$cached")"
  # A cache file is a 32-byte header (gpu/src/runtime/kernel_cache.rs), then the cubin.
  tail -c +33 "$cached" >"$image"
  "$cuda/bin/cuobjdump" -res-usage "$image" | grep -E "Function|REG" | sed 's/^ *//'
done
