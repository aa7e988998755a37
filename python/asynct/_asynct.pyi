"""Type stubs of the extension module ``asynct._asynct`` (the Rust crate ``python/``).

``asynct`` re-exports the classes; ``asynct.oracle`` the three functions.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Floats = Union[float, Sequence[float], npt.NDArray[np.floating]]
_FloatArray = Union[npt.NDArray[np.float32], npt.NDArray[np.float64]]
_TokenIds = Union[Sequence[int], npt.NDArray[np.integer]]
_Prompt = Union[str, _TokenIds, Mapping[str, Union[str, _TokenIds]]]

class SamplingParams:
    """How one prompt is sampled and when it stops (vLLM's names and defaults).

    Sampling is SPEC section 5's Gumbel-max draw keyed by (seed, step, token id): the same seed
    gives the same output whatever the batch, on the CPU and the GPU alike.

    Args:
        temperature: softmax temperature, finite and >= 0; 0 is greedy.
        top_p: keep the smallest most-probable set reaching this probability, in (0, 1].
        top_k: keep the k likeliest tokens; 0 or -1 keeps all.
        seed: the sampling seed in [0, 2**64); None draws a fresh one per request.
        max_tokens: tokens to generate at most, >= 1.
        stop: a string or strings that end the output (which stops just before the first found).
        ignore_eos: keep generating through end-of-sequence tokens.
        logprobs: with n >= 0, return each generated token's log-probability and those of the n
            likeliest tokens (see ``CompletionOutput.logprobs``).
        min_p: drop tokens less likely than min_p times the likeliest (after temperature), in
            [0, 1]; 0 keeps all.
        logit_bias: token id to a bias in [-100, 100], added to its logit first.
        min_tokens: tokens generated before an end-of-sequence or stop token may be, at most
            max_tokens.
        repetition_penalty: > 0, 1 is off: positive logits of tokens in the prompt or the output
            are divided by it, negative ones multiplied.
        frequency_penalty: in [-2, 2]: subtracted from a generated token's logit per occurrence.
        presence_penalty: in [-2, 2]: subtracted from a generated token's logit once.
        stop_token_ids: token ids that end the output as eos does, even with ignore_eos.
        include_stop_str_in_output: keep the stop string (or the stop token's text) in the output.
        prompt_logprobs: with n >= 0, return each prompt token's log-probability and those of the
            n likeliest tokens at its position (see ``RequestOutput.prompt_logprobs``).
        n: completions per prompt, in [1, 1024] (``RequestOutput.outputs``); with a seed,
            completion j is seeded seed + j, as the server seeds its choices.
        truncate_prompt_tokens: keep each prompt's last k tokens (k >= 1, or -1 for
            max_model_len of them); ``RequestOutput.prompt_token_ids`` are those kept, its
            ``prompt`` the text as given.
        guided_decoding: hold the output to a format (``GuidedDecodingParams``), as ``serve``'s
            ``guided_choice`` and ``response_format`` do; not with min_tokens.

    Raises:
        ValueError: a value out of range, naming the parameter.
        TypeError: a value of the wrong kind, naming the parameter.
    """

    temperature: float
    top_p: float
    top_k: int
    seed: Optional[int]
    max_tokens: int
    stop: List[str]
    ignore_eos: bool
    logprobs: Optional[int]
    min_p: float
    logit_bias: Dict[int, float]
    min_tokens: int
    repetition_penalty: float
    frequency_penalty: float
    presence_penalty: float
    stop_token_ids: List[int]
    include_stop_str_in_output: bool
    prompt_logprobs: Optional[int]
    n: int
    truncate_prompt_tokens: Optional[int]
    guided_decoding: Optional["GuidedDecodingParams"]

    def __init__(
        self,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: Optional[int] = None,
        max_tokens: int = 16,
        stop: Union[str, Sequence[str], None] = None,
        ignore_eos: bool = False,
        logprobs: Optional[int] = None,
        min_p: float = 0.0,
        logit_bias: Optional[Dict[int, float]] = None,
        min_tokens: int = 0,
        repetition_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        stop_token_ids: Optional[Sequence[int]] = None,
        include_stop_str_in_output: bool = False,
        prompt_logprobs: Optional[int] = None,
        n: int = 1,
        truncate_prompt_tokens: Optional[int] = None,
        guided_decoding: Optional["GuidedDecodingParams"] = None,
    ) -> None: ...

class GuidedDecodingParams:
    """vLLM's: the format a guided output is held to, by masking before each draw every token
    whose bytes could not continue it. Exactly one of:

    Args:
        choice: the output is exactly one of these strings (1 to 256, distinct, non-empty).
        regex: the output is a whole match of this regular expression (Rust ``regex`` syntax,
            which Python's ``re`` shares for the common forms; at most 4096 bytes, its automaton
            within 2 MiB: prefer ASCII classes such as ``[A-Za-z0-9_]`` to Unicode ``\w``).
        json_object: True: the output is one JSON object, with nothing before or after it and at
            most one whitespace byte in a row.

    The end-of-sequence ids are allowed only once the output is whole; max_tokens can still cut
    it short. Needs a tokenizer with a byte-level decoder.

    Raises:
        ValueError: not exactly one given (named ``choice``), a bad choice list, or a regex that
            does not compile within the bounds (named ``regex``).
        TypeError: a value of the wrong kind, naming the argument.
    """

    choice: Optional[List[str]]
    regex: Optional[str]
    json_object: Optional[bool]

    def __init__(
        self,
        *,
        choice: Optional[Sequence[str]] = None,
        regex: Optional[str] = None,
        json_object: Optional[bool] = None,
    ) -> None: ...

class Logprob:
    """vLLM's ``Logprob``: one token of a position's logprobs."""

    logprob: float
    """The float64 log-softmax of the raw float32 logits row at the token (``-inf`` where its
    logit is)."""
    rank: int
    """Its place in the row, from 1 (larger logit first, ties to the lower id): the k-th likeliest
    has rank k."""
    decoded_token: str
    """Its id decoded alone, special tokens kept."""

class CompletionOutput:
    """One generated sequence of a prompt."""

    index: int
    """Its index among the prompt's completions, 0 to ``SamplingParams.n`` - 1."""
    text: str
    """The generated text, the stop string excluded."""
    token_ids: List[int]
    """The generated token ids, an eos id included."""
    finish_reason: str
    """"stop" (eos or a stop string), "length" (max_tokens or the model's length), or "abort"
    (``LLM.abort()`` stopped it first)."""
    stop_reason: Union[str, int, None]
    """The stop string that ended it, the eos token id that did, or None."""
    logprobs: Optional[List[Dict[int, Logprob]]]
    """With ``SamplingParams(logprobs=n)``: per generated token, a dict from token id to its
    ``Logprob`` holding that token and the n likeliest. Each is the log-softmax, in float64, of
    the raw float32 logits row the token was sampled from (before temperature, top-k and top-p);
    an aborted output keeps those of the tokens it generated. None otherwise."""
    cumulative_logprob: Optional[float]
    """The sum of the generated tokens' log-probabilities, when logprobs were asked for."""

class RequestOutput:
    """The result for one prompt; ``text``, ``token_ids``, ``finish_reason`` and ``logprobs``
    are those of ``outputs[0]``."""

    request_id: str
    prompt: Optional[str]
    """The prompt text, or None for a token-id prompt."""
    prompt_token_ids: List[int]
    finished: bool
    """Whether the request ended by itself (False when aborted)."""
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]
    """With ``SamplingParams(prompt_logprobs=n)``: per prompt token, None for the first, then a
    dict from token id to its ``Logprob`` holding that token and the n likeliest at its
    position, each the float64 log-softmax of the raw logits row before it. None otherwise (and
    for a request aborted before its prompt was scored)."""
    outputs: List[CompletionOutput]
    """The completions: ``SamplingParams.n`` of them, in index order."""
    text: str
    token_ids: List[int]
    finish_reason: str
    logprobs: Optional[List[Dict[int, Logprob]]]

class LLM:
    """A checkpoint loaded for generation, in the spirit of vLLM's offline ``LLM``.

    The executor is built by the same loader as ``asynct generate`` and ``asynct serve``: with
    ``device="auto"`` the GPU when one opens and its kernels take the model's head dim (64, 128
    or 256), else the CPU. Prompts of one ``generate`` run as one continuously batched set on
    the engine.

    Args:
        model: a folder holding config.json, model.safetensors (or a sharded index) and
            tokenizer.json, as ``asynct init`` writes.
        device: "auto", "cpu" or "cuda".
        precision: the CPU backend's arithmetic: "f32", "f64" (the exact reference) or "bf16"
            (bf16-faithful). The GPU runs bf16.
        max_num_seqs: sequences in one engine step, at most.
        max_model_len: prompt plus output, at most; the model's max_position_embeddings by default.
        gpu_memory_utilization: the fraction of GPU memory weights, buffers and KV cache may take.
        enforce_eager: on the GPU, no whole-step CUDA graphs.
        cpu_kv_cache_gib: the CPU KV cache's memory in GiB (``asynct serve --kv-cache-memory``):
            room for max_num_seqs sequences of max_model_len, at most this much; by default at
            most 4 GiB, grown to one sequence of max_model_len if need be.
        enable_prefix_caching: keep blocks of prompt tokens computed in whole 512-token chunks
            and reuse them for later prompts that start with the same tokens (``asynct serve
            --no-prefix-caching`` turns it off there); no token or logit changes.
        max_num_batched_tokens: query tokens in one engine step, at most (vLLM's name; ``asynct
            serve --max-num-batched-tokens``): whole 512-token prefill chunks beside a decode row
            of each running sequence, so at least 512 + max_num_seqs. By default 16384 +
            max_num_seqs on the GPU, 2048 + max_num_seqs on the CPU. Prefill chunks are never
            cut, so a request's tokens do not depend on its neighbours at any budget.
        decode_kernel: on the GPU, how a decode step launches its layers (``asynct serve
            --decode-kernel``): "graph" (five kernels a layer in the step's CUDA graph), "mega"
            (every layer in one persistent megakernel, for batches of up to 32 rows) or "auto"
            (the one measured faster at the step's batch). No token or logit changes.
        enable_pipelining: plan and queue each engine step before waiting for the step in flight
            (``asynct serve --no-pipelining`` turns it off there), so that a device need not wait
            for the host; no token or logit changes.
        seed: vLLM's global seed. A request whose ``SamplingParams.seed`` is None takes the next
            seed of a sequence this fixes, so a script run again draws the same tokens; None (the
            default) gives each such request a fresh seed.
        tensor_parallel_size: vLLM's; asynct runs a model on one device, so only 1.
        trust_remote_code: vLLM's; asynct runs no checkpoint code (safetensors and a JSON
            config), so either value loads the same model.

    Raises:
        ValueError: a bad option (named) or a bad checkpoint.
        FileNotFoundError: no config.json or tokenizer.json in ``model``.
        RuntimeError: the device could not load the model (``device="cuda"`` without a GPU).
        MemoryError: the KV cache or another buffer sized by an option or a config field would
            not fit the machine's memory (checked before anything is allocated).
    """

    device: str
    """Where and how the model runs, e.g. "cpu f32"."""
    max_model_len: int

    def __init__(
        self,
        model: Union[str, "os.PathLike[str]"],
        device: str = "auto",
        *,
        precision: str = "f32",
        max_num_seqs: int = 64,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        cpu_kv_cache_gib: Optional[float] = None,
        enable_prefix_caching: bool = True,
        max_num_batched_tokens: Optional[int] = None,
        decode_kernel: str = "auto",
        enable_pipelining: bool = True,
        seed: Optional[int] = None,
        tensor_parallel_size: int = 1,
        trust_remote_code: bool = False,
    ) -> None: ...
    def generate(
        self,
        prompts: Union[_Prompt, Sequence[_Prompt]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        use_tqdm: bool = True,
    ) -> List[RequestOutput]:
        """Generates a completion for each prompt; returns one ``RequestOutput`` per prompt, in order.

        ``prompts`` is a string, a list of token ids, or a list of strings, token-id lists and
        vLLM's ``{"prompt": ...}`` / ``{"prompt_token_ids": ...}`` dicts. Text is tokenised as
        ``asynct generate --prompt`` does. ``sampling_params`` is one ``SamplingParams`` for all
        (``SamplingParams()`` when None) or one per prompt. ``use_tqdm`` is taken so that vLLM's
        calls run unchanged; no progress bar is drawn either way.

        The GIL is released while the engine runs. Ctrl-C (or any signal whose handler raises)
        stops the batch within a step or two and raises ``KeyboardInterrupt``; ``abort()`` from
        another thread makes this return at once, unfinished outputs with finish_reason "abort".
        Either way the engine is left idle for the next call.

        Raises:
            ValueError: a bad prompt (named as ``prompts[i]``) or ``sampling_params`` length.
            TypeError: a prompt or ``sampling_params`` of the wrong kind.
            RuntimeError: another thread's generate is running on this LLM, or the engine failed.
            KeyboardInterrupt: Ctrl-C while the engine ran.
        """
    def chat(
        self,
        messages: Union[Sequence[Dict[str, Any]], Sequence[Sequence[Dict[str, Any]]]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        use_tqdm: bool = True,
    ) -> List[RequestOutput]:
        """Generates the assistant's reply to each conversation, as ``generate`` does.

        ``messages`` is one conversation (a list of ``{"role": ..., "content": ...}`` dicts) or a
        list of them. Roles are system, developer (read as system), user, assistant and tool;
        content is a string, a list of ``{"type": "text", "text": ...}`` parts (joined with
        newlines), or None for an assistant turn. Each conversation is rendered with the
        checkpoint's chat template (``tokenizer_config.json``'s ``chat_template``, ChatML where
        there is none) as ``asynct serve``'s ``/v1/chat/completions`` renders it, ending where the
        assistant's reply begins; ``RequestOutput.prompt`` is the rendered text.

        Raises:
            ValueError: a bad message, named by its path (``messages[i].role``), or a template
                that fails on a conversation (``messages[i]``); as ``generate`` otherwise.
            TypeError: a message or content of the wrong kind; as ``generate`` otherwise.
        """
    def abort(self) -> bool:
        """Stops the generate running in another thread (it returns what it has); returns
        whether one was running."""
    def encode(self, text: str) -> List[int]:
        """The checkpoint tokenizer's ids for ``text`` (no special tokens added, as generate does)."""
    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of ``token_ids``, special tokens left out."""

def hp1_attention(
    q: _FloatArray,
    k: _FloatArray,
    v: _FloatArray,
    lengths: Optional[_TokenIds],
    sigma: _Floats,
    gamma: _Floats,
    fir_k: int = 3,
    relu_pre: bool = True,
    clip: Tuple[float, float] = (0.0, 1.0),
    *,
    positions: Optional[_TokenIds] = None,
    scale: Optional[float] = None,
    return_weights: bool = False,
) -> Union[_FloatArray, Tuple[_FloatArray, _FloatArray]]:
    """Exact HP1 attention (SPEC section 2) of packed causal sequences.

    For query token i of a sequence, head h and its kv head g = h // (Hq // Hkv), over that
    sequence's keys t <= i::

        s_t = scale * q_i,h . k_t,g
        r_t = max(s_t, 0) if relu_pre else s_t        (0 for t < 0)
        m_t = (r_t + ... + r_{t-fir_k+1}) / fir_k
        p_t = gamma_h * clip(s_t - sigma_h * m_t, clip[0], clip[1])
        out_i,h = sum_t p_t v_t,g

    Args:
        q: ``[tokens, Hq, D]``, float32 or float64, the sequences packed one after another.
        k, v: ``[tokens, Hkv, D]`` of q's dtype; Hkv divides Hq.
        lengths: each sequence's token count, summing to ``tokens``; None with ``positions``
            None is one sequence of every token.
        sigma, gamma: per query head, a float or ``Hq`` values (cast to q's dtype).
        fir_k: FIR taps along the keys, >= 1.
        relu_pre: rectify the scores before the FIR.
        clip: (min, max), finite, min < max.
        positions: instead of lengths, each token's position in its sequence (0, 1, 2, ..., a
            new sequence starting at each 0).
        scale: multiplies q . k; 1/sqrt(D) by default.
        return_weights: also return the gate weights.

    Returns:
        The output ``[tokens, Hq, D]`` in q's dtype, computed in that dtype by the oracle over a
        paged cache holding k and v; with ``return_weights``, also ``p`` as ``[tokens, Hq, L]``
        (L the longest sequence), ``p[i, h, t]`` the weight of key t of i's own sequence, zero
        past i's position.

    Raises:
        TypeError: an array that is not a float32/float64 ``numpy.ndarray``, or of another dtype
            than q, naming the argument.
        ValueError: shapes, lengths, positions or parameters that do not fit, naming the argument.
    """

def uclip_norm(x: _FloatArray, alpha: _Floats, weight: _Floats, bias: Optional[_Floats] = None) -> _FloatArray:
    """UClipNorm (SPEC section 3): ``weight * clip(alpha * x, -1, 1) + bias`` per channel, no reduction.

    Args:
        x: float32 or float64, any leading shape, channels last (C).
        alpha, weight: a float, or 1 or C values.
        bias: C values, or None for zero.

    Returns:
        An array of x's shape and dtype (the parameters are cast to it). NaN stays NaN.

    Raises:
        TypeError: x not a float32/float64 ``numpy.ndarray``, or a parameter not floats.
        ValueError: a parameter of the wrong length, naming it.
    """

def forward_logits(
    model_dir: Union[str, "os.PathLike[str]"], token_ids: _TokenIds, precision: str = "f64"
) -> _FloatArray:
    """Every position's logits of a checkpoint over one sequence (SPEC section 1).

    Args:
        model_dir: a checkpoint folder, as ``LLM`` takes.
        token_ids: the sequence, from position 0; at most max_position_embeddings ids.
        precision: "f64" (the exact reference), "f32" (the CPU backend), or "bf16"
            (f64 rounded to bf16 where the GPU model rounds).

    Returns:
        ``[len(token_ids), vocab]`` logits, float64 for "f64" and "bf16", float32 for "f32";
        row i predicts the token after position i.

    Raises:
        ValueError: an empty sequence, an id outside the vocabulary, a bad precision or checkpoint.
        FileNotFoundError: no config.json in ``model_dir``.
    """
