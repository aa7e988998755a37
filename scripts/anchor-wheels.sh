#!/usr/bin/env bash
# Downloads, here where pip reaches PyPI, the wheels the attention anchor (scripts/attention_anchor.py)
# needs on the device machine, whose image has PyTorch but not FlashInfer, and which reaches no
# registry: FlashInfer, tvm-ffi (its kernels' FFI, imported by `import flashinfer`) and cuDNN's
# frontend (imported behind a guard, carried so FlashInfer finds its declared dependency). Every
# other package `import flashinfer` and its decode JIT need is already in the image; nvidia-cutlass-dsl,
# also declared, is imported only by FlashInfer's CuTe-DSL kernels, which the anchor does not use.
#
# Into .whl/ (kept out of git), for CPython 3.12 on manylinux x86-64. Versions are pinned: two
# versions of one package in .whl would stop the device's install. Idempotent: pip keeps a wheel
# already downloaded. Then the device tool's call names ".whl" in carry and
# scripts/device-run.sh's bench stage installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl \
  flashinfer-python==0.5.3 apache-tvm-ffi==0.1.15.post2 nvidia-cudnn-frontend==1.32.0
ls -l .whl
du -sh .whl
