"""asynct: generate from AsyncT checkpoints and check HP1 against the exact reference.

``asynct.LLM`` loads a checkpoint onto the GPU (when there is one and its kernels take the
model's head dim) or the CPU and generates from batches of prompts; ``asynct.oracle`` holds the
exact CPU reference of HP1 attention, UClipNorm and the whole-model forward on NumPy arrays.

The PyTorch side needs torch and is imported only when named: ``asynct.network`` (the model in
plain torch), ``asynct.modeling`` (its ``transformers`` classes), ``asynct.train`` and
``asynct.eval``. The Rust extension is loaded on first use of a name it defines, so those
modules also run where only the Python files are (a GPU machine given a copy of the tree).
"""

import importlib
from typing import TYPE_CHECKING, Any

_EXTENSION_NAMES = ("LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "GuidedDecodingParams",
                    "__version__")

__all__ = ["LLM", "SamplingParams", "GuidedDecodingParams", "RequestOutput", "CompletionOutput", "Logprob", "oracle",
           "__version__"]

if TYPE_CHECKING:
    from . import oracle
    from ._asynct import (LLM, CompletionOutput, GuidedDecodingParams, Logprob, RequestOutput, SamplingParams,
                          __version__)


def __getattr__(name: str) -> Any:
    if name in _EXTENSION_NAMES:
        from . import _asynct

        return getattr(_asynct, name)
    if name == "oracle":
        return importlib.import_module(f"{__name__}.oracle")
    raise AttributeError(f"module 'asynct' has no attribute '{name}'")
