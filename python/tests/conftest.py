"""Shared fixtures: the `asynct` binary, the README's small generated model, one LLM on it.

The binary is the workspace's debug build (`cargo build --bin asynct`, which `cargo test` has
already made), or the file named by ASYNCT_BIN. The model is written by `asynct init`, exactly as
the README's first command writes models/asynct-tiny.
"""

import os
import pathlib
import subprocess

import pytest

import asynct

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def asynct_bin() -> pathlib.Path:
    if "ASYNCT_BIN" in os.environ:
        return pathlib.Path(os.environ["ASYNCT_BIN"])
    subprocess.run(["cargo", "build", "--quiet", "--bin", "asynct"], cwd=REPO, check=True)
    return REPO / "target" / "debug" / "asynct"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, asynct_bin) -> pathlib.Path:
    out = tmp_path_factory.mktemp("models") / "asynct-tiny"
    subprocess.run([str(asynct_bin), "init", "--preset", "asynct-tiny", "--out", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def llm(tiny_model) -> asynct.LLM:
    return asynct.LLM(str(tiny_model), device="cpu")


def run_cli(asynct_bin, *args: str) -> str:
    """`asynct ARGS...`'s stdout; fails the test on a non-zero exit."""
    done = subprocess.run([str(asynct_bin), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout
