#!/usr/bin/env bash
# Copies the large presets' tokenizer (../shared/tokenizers/qwen3 beside the main checkout, found
# from a worktree too) into .qwen3/ of the checkout this script is in, for a device pack (carried
# packed; ASYNCT_QWEN3_TOKENIZER_DIR=$PWD/.qwen3 there), and keeps .qwen3/ out of git's view like
# device-bin: the device tool carries every untracked file git does not ignore, so an unignored
# .qwen3/ would travel a second time beside the pack (a session-62 call was refused for size).
# Does nothing where there is no such tokenizer. Called by device-build.sh and
# device-build-refs.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=$(cd "$(git rev-parse --git-common-dir)/../.." && pwd)/shared
[ -d "$shared"/tokenizers/qwen3 ] || exit 0
mkdir -p .qwen3 && cp "$shared"/tokenizers/qwen3/* .qwen3/
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.qwen3/' "$exclude" 2>/dev/null || echo '/.qwen3/' >> "$exclude"
