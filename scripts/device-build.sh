#!/usr/bin/env bash
# Builds, here, the release binaries the device machine runs (it has no Rust toolchain) and copies
# them, stripped, into device-bin/ (ignored by git; name it in the device tool's `carry`).
# Then run there:  scripts/device-run.sh [tests] [sanitize] [fuzz] [bench]  (or, packed, see the end)
# BIN_DIR: the folder to fill instead of device-bin (scripts/device-build-refs.sh builds several);
# TEST_BINS: the GPU test binaries to copy (e.g. "gpu_attention gpu_engine"), default all;
# PACK=0: no device-pack.tgz (the caller packs).
set -euo pipefail
cd "$(dirname "$0")/.."
# OLD_BIN and OLD_BENCH (below) may point into device-bin itself: keep them before it is emptied.
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT
[ -n "${OLD_BIN:-}" ] && cp "$OLD_BIN" "$keep/asynct-old"
[ -n "${OLD_BENCH:-}" ] && cp "$OLD_BENCH" "$keep/asynct-bench-old"
bin=${BIN_DIR:-device-bin}
rm -rf "$bin" && mkdir -p "$bin"
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p verify --bins -p server
cp "$target/release/asynct-verify" "$target/release/asynct-bench" "$target/release/asynct" "$bin"/
# The GPU test binaries are cargo test targets; ask cargo where it put them.
cargo test --release -p verify --no-run --message-format=json 2>/dev/null \
  | BIN="$bin" TEST_BINS="${TEST_BINS:-}" python3 -c '
import json, os, sys, shutil
wanted = os.environ["TEST_BINS"].split()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"].startswith("gpu_"):
        if wanted and m["target"]["name"] not in wanted:
            continue
        shutil.copy(m["executable"], os.path.join(os.environ["BIN"], m["target"]["name"]))
        print("test binary:", m["target"]["name"])
'
# OLD_BIN=path: an `asynct` built from an earlier commit, carried as device-bin/asynct-old for
# before/after runs in one call (device-run.sh's chunks variant "old", PREFILL_BINS); OLD_BENCH
# likewise an `asynct-bench`, carried as device-bin/asynct-bench-old (the attention grid before
# and after). Build them in a worktree of that commit with CARGO_TARGET_DIR of their own.
cp "$keep"/* "$bin"/ 2>/dev/null || true
strip "$bin"/*
# ../shared beside the main checkout, found from a worktree too (device-build-refs.sh builds in
# worktrees under /tmp, where ../shared is not it).
shared=$(cd "$(git rev-parse --git-common-dir)/../.." && pwd)/shared
# The prefill anchor (issue 18) for device-run.sh's chunks stage, beside the binaries.
[ -f "$shared"/anchors/torch_prefill_anchor.py ] && cp "$shared"/anchors/torch_prefill_anchor.py "$bin"/
git rev-parse HEAD > "$bin"/COMMIT
git status --porcelain | grep -q . && echo "dirty" >> "$bin"/COMMIT || true
du -sh "$bin"; ls "$bin"
[ "${PACK:-1}" = 0 ] && exit 0
# The large presets' tokenizer, for `asynct init --preset asynct-small|asynct-0.5b` on the device.
# Only where this script packs: a caller that packs (device-build-refs.sh) brings its own copy.
scripts/device-tokenizer.sh
# device-bin and .qwen3 with the tracked tree pass the device tool's 64 MiB carry limit, so they
# also travel packed (about a third of the size): carry ["device-pack.tgz"] and run
#   tar xzf device-pack.tgz && scripts/device-run.sh STAGES
tar czf device-pack.tgz "$bin" $( [ -d .qwen3 ] && echo .qwen3 )
du -sh device-pack.tgz
