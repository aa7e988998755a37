#!/usr/bin/env bash
# Builds the device binaries of several commits for one device call: each NAME=REF (a branch, tag
# or commit) in a git worktree of its own, through that commit's scripts/device-build.sh, into
# device-bin-NAME here; then packs them all with .qwen3 into PACK_FILE (default device-pack.tgz). A call then unpacks
# once and runs each build's stages beside the others on one warm machine, e.g.
#   tar xzf device-pack.tgz && BIN_DIR=device-bin-main OUT=$OUT/main scripts/device-run.sh tests
#     && BIN_DIR=device-bin-wide OUT=$OUT/wide scripts/device-run.sh tests
# (a multi-minute start per call is the price of building them one call at a time). Every REF
# needs a device-build.sh that knows BIN_DIR (main from the session-32 scripts on). A build with
# every test binary packs to about 10 MB; NAME=REF:BIN,BIN copies only those GPU test binaries
# (device-build.sh's TEST_BINS), which keeps several builds under the device tool's 64 MiB carry
# limit and the sanitize stage (every test binary of the folder) short. The limit counts the
# tracked tree too (about 16 MB), so a pack of three or four builds is the most one call takes;
# the script says when the two together pass it.
# NAME=- reuses device-bin-NAME from an earlier run as it is. REF+PATCH[+PATCH...] builds REF with
# those patch files (paths from the repository's root, e.g. verify/pending's) applied by git am
# in its worktree, so a waiting patch needs no branch of its own.
# Usage: scripts/device-build-refs.sh main=main:gpu_engine wide=exp-two-level-wide [...]
#        scripts/device-build-refs.sh base=main:gpu_ops wg17=main+verify/pending/wg-from-17.patch
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# One target folder for every worktree, so that only the workspace's own crates are rebuilt.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'for w in "$work"/*; do git -C "$root" worktree remove --force "$w" 2>/dev/null || true; done; rm -rf "$work"' EXIT
dirs=()
for spec in "$@"; do
  name=${spec%%=*} ref=${spec#*=} bins=
  [[ $ref == *:* ]] && bins=${ref#*:} ref=${ref%%:*}
  if [[ -z $name || $name == "$spec" || ! $name =~ ^[A-Za-z0-9_-]+$ ]]; then
    echo "expected NAME=REF with NAME of letters, digits, - and _, got '$spec'" >&2
    exit 2
  fi
  if [[ $ref == - ]]; then
    # NAME=- packs device-bin-NAME as an earlier call of this script left it (its COMMIT file
    # says what it is), so a pack can pair a new build with an old one without rebuilding it.
    [ -f "device-bin-$name/COMMIT" ] || { echo "device-bin-$name holds no earlier build" >&2; exit 2; }
    echo "== $name: device-bin-$name as built, $(head -c 7 "device-bin-$name/COMMIT")"
  else
    patches=()
    [[ $ref == *+* ]] && IFS=+ read -ra patches <<<"${ref#*+}" && ref=${ref%%+*}
    git worktree add --detach "$work/$name" "$ref" >/dev/null
    for p in "${patches[@]}"; do
      git -C "$work/$name" am -q "$root/$p" || { echo "$p does not apply to $ref" >&2; exit 2; }
    done
    echo "== $name: $(git -C "$work/$name" log --oneline -1)"
    BIN_DIR="$root/device-bin-$name" PACK=0 TEST_BINS="${bins//,/ }" bash "$work/$name/scripts/device-build.sh"
  fi
  dirs+=("device-bin-$name")
done
scripts/device-tokenizer.sh
pack=${PACK_FILE:-device-pack.tgz}
tar czf "$pack" "${dirs[@]}" $( [ -d .qwen3 ] && echo .qwen3 )
tracked=$(git ls-files -z | xargs -0 stat -c %s | awk '{n += $1} END {print n}')
total=$(( tracked + $(stat -c %s "$pack") ))
echo "$pack: $(du -h "$pack" | cut -f1); with the tracked tree $(( total >> 20 )) MiB of the 64 MiB a call carries"
(( total < 64 << 20 )) || echo "too large for one call: pack fewer builds (PACK_FILE names each pack)" >&2
