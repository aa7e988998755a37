#!/usr/bin/env bash
# The Python bindings' tests (run by .ci/run after `cargo test --workspace`): builds the extension
# into a virtual environment under target/ with the pinned tools of requirements-test.txt, then
# runs pytest on python/tests. The extension is built in the dev profile into the workspace's
# target/ (or $CARGO_TARGET_DIR where set, which then also holds the venv), so it reuses the
# dependencies `cargo test` compiled; the tests' `asynct` binary is the same debug build. Needs
# python3 >= 3.9 with venv, and PyPI the first time. Arguments go to pytest;
# -rs names every skipped test and why (the PyTorch reference tests skip where torch is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="$target/python-venv"
if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r python/requirements-test.txt
VIRTUAL_ENV="$venv" "$venv/bin/maturin" develop --quiet --locked --manifest-path python/Cargo.toml
cargo build --quiet --locked --bin asynct
ASYNCT_BIN="$target/debug/asynct" "$venv/bin/python" -m pytest python/tests -q -rs "$@"
