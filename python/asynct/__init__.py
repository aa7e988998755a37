"""asynct: generate from AsyncT checkpoints and check HP1 against the exact reference.

``asynct.LLM`` loads a checkpoint onto the GPU (when there is one and its kernels take the
model's head dim) or the CPU and generates from batches of prompts; ``asynct.oracle`` holds the
exact CPU reference of HP1 attention, UClipNorm and the whole-model forward on NumPy arrays.
"""

from . import oracle
from ._asynct import LLM, CompletionOutput, RequestOutput, SamplingParams, __version__

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "oracle", "__version__"]
