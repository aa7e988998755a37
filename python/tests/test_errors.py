"""Bad arguments raise the named exception with the argument's name in the message: never a panic."""

import numpy as np
import pytest

import asynct
from asynct import oracle

F32 = np.float32


def qkv(tokens=6, heads=4, kv_heads=2, d=8, dtype=np.float64):
    return (np.zeros((tokens, heads, d), dtype), np.zeros((tokens, kv_heads, d), dtype),
            np.zeros((tokens, kv_heads, d), dtype))


def hp1(**overrides):
    q, k, v = qkv()
    args = dict(q=q, k=k, v=v, lengths=[6], sigma=1.0, gamma=1.0)
    args.update(overrides)
    return oracle.hp1_attention(**args)


@pytest.mark.parametrize("overrides, exc, needle", [
    (dict(q=[[[0.0]]]), TypeError, "q: expected a numpy.ndarray"),
    (dict(q=np.zeros((6, 4, 8), np.int64)), TypeError, "q: expected dtype float32 or float64, got int64"),
    (dict(q=np.zeros((6, 4, 8), np.float16)), TypeError, "float16"),
    (dict(k=np.zeros((6, 2, 8), F32)), TypeError, "k: expected the dtype of q, got float32"),
    (dict(v="values"), TypeError, "v: expected a numpy.ndarray"),
    (dict(q=np.zeros((6, 32))), ValueError, "q: expected 3 dimensions"),
    (dict(q=np.zeros((6, 4, 0))), ValueError, "q: needs at least one head and D >= 1"),
    (dict(k=np.zeros((5, 2, 8))), ValueError, "k: expected shape [6, kv_heads, 8]"),
    (dict(k=np.zeros((6, 3, 8)), v=np.zeros((6, 3, 8))), ValueError, "k: 3 kv heads do not divide q's 4 heads"),
    (dict(v=np.zeros((6, 2, 4))), ValueError, "v: expected shape [6, 2, 8]"),
    (dict(lengths=[2, 3]), ValueError, "lengths: sum to 5, but q has 6 tokens"),
    (dict(lengths=[7, -1]), ValueError, "lengths: entry 1 is -1"),
    (dict(lengths=[1.5, 4.5]), TypeError, "lengths: expected a 1-D sequence of integers"),
    (dict(lengths=6), TypeError, "lengths: expected a 1-D sequence of integers"),
    (dict(lengths=None, positions=[0, 1, 2, 4, 0, 1]), ValueError, "positions: entry 3 is 4 after 2"),
    (dict(lengths=None, positions=[1, 2, 3, 4, 5, 6]), ValueError, "positions: entry 0 is 1 after none"),
    (dict(lengths=None, positions=[0, 1]), ValueError, "positions: has 2 entries, q has 6 tokens"),
    (dict(positions=[0, 1, 2, 3, 4, 5]), ValueError, "positions: give lengths or positions, not both"),
    (dict(sigma=[1.0, 2.0]), ValueError, "sigma: expected a float or 4 values"),
    (dict(gamma="x"), TypeError, "gamma: expected a float or a 1-D sequence of floats"),
    (dict(gamma=np.ones((4, 1))), TypeError, "gamma: expected a float or a 1-D sequence"),
    (dict(fir_k=0), ValueError, "fir_k: must be at least 1, got 0"),
    (dict(fir_k=2.5), TypeError, "fir_k: expected an integer, got float"),
    (dict(relu_pre="yes"), TypeError, "relu_pre: expected a bool, got str"),
    (dict(return_weights=1), TypeError, "return_weights: expected a bool, got int"),
    (dict(scale="big"), TypeError, "scale: expected a float or None, got str"),
    (dict(clip=(1.0, 0.0)), ValueError, "clip: expected finite (min, max) with min < max"),
    (dict(clip=(0.0, float("inf"))), ValueError, "clip"),
    (dict(clip=(0.0,)), TypeError, "clip: expected a (min, max) pair of floats, got tuple"),
    (dict(scale=float("nan")), ValueError, "scale: must be finite"),
])
def test_hp1_attention_refuses_by_name(overrides, exc, needle):
    with pytest.raises(exc) as e:
        hp1(**overrides)
    assert needle in str(e.value)


def test_hp1_attention_refuses_a_torch_like_object_with_a_hint():
    class Tensor:
        pass
    with pytest.raises(TypeError, match=r"q: .*got Tensor .*\.numpy\(\)"):
        hp1(q=Tensor())


@pytest.mark.parametrize("args, exc, needle", [
    ((np.zeros(3, np.int32), 1.0, 1.0), TypeError, "x: expected dtype float32 or float64"),
    ((np.float64(1.0), 1.0, 1.0), TypeError, "x: expected a numpy.ndarray"),
    ((np.array(1.0), 1.0, 1.0), ValueError, "x: expected at least one dimension"),
    ((np.zeros((2, 3)), [1.0, 2.0], 1.0), ValueError, "alpha: expected 1 or 3 values for 3 channels, got 2"),
    ((np.zeros((2, 3)), 1.0, np.ones(4)), ValueError, "weight: expected 1 or 3 values"),
    ((np.zeros((2, 3)), 1.0, 1.0, [1.0]), ValueError, "bias: expected 3 values for 3 channels, got 1"),
    ((np.zeros((2, 3)), "a", 1.0), TypeError, "alpha: expected a float"),
])
def test_uclip_norm_refuses_by_name(args, exc, needle):
    with pytest.raises(exc) as e:
        oracle.uclip_norm(*args)
    assert needle in str(e.value)


def test_forward_logits_refuses_by_name(tiny_model, tmp_path):
    cases = [
        ((tiny_model, []), ValueError, "token_ids: expected at least one token"),
        ((tiny_model, [1, 512]), ValueError, "token_ids: entry 1 is 512, outside the vocabulary of 512"),
        ((tiny_model, [-1]), ValueError, "token_ids: entry 0 is -1"),
        ((tiny_model, "hello"), TypeError, "token_ids: expected a 1-D sequence of integers"),
        ((tiny_model, [1] * 2049), ValueError, "max_position_embeddings 2048"),
        ((tiny_model, [1], "f16"), ValueError, "precision: expected \"f32\", \"f64\" or \"bf16\", got \"f16\""),
        ((tmp_path / "nowhere", [1]), FileNotFoundError, "config.json"),
    ]
    for args, exc, needle in cases:
        with pytest.raises(exc) as e:
            oracle.forward_logits(*args)
        assert needle in str(e.value), args


def test_forward_logits_names_a_broken_checkpoint(tiny_model, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((tiny_model / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="model.safetensors"):
        oracle.forward_logits(broken, [1, 2])


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(temperature=-1.0), ValueError, "temperature: must be finite and >= 0, got -1"),
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(top_p=0.0), ValueError, "top_p: must be in (0, 1], got 0"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_k=-2), ValueError, "top_k: must be >= 0, or -1"),
    (dict(max_tokens=0), ValueError, "max_tokens: must be >= 1, got 0"),
    (dict(max_tokens=2**70), ValueError, f"max_tokens: {2**70} is out of range for an integer"),
    (dict(stop=[""]), ValueError, "stop: stop strings must be non-empty"),
    (dict(stop=5), TypeError, "stop: expected a string or a list of strings"),
    (dict(seed=-1), ValueError, "seed: must be in [0, 2^64)"),
    (dict(seed=2**64), ValueError, "seed"),
    (dict(logprobs=-1), ValueError, "logprobs: must be >= 0"),
    (dict(prompt_logprobs=-1), ValueError, "prompt_logprobs: must be >= 0"),
    (dict(n=0), ValueError, "n: must be in [1, 1024], got 0"),
    (dict(n=2**40), ValueError, "n: must be in [1, 1024]"),
    (dict(n=2.0), TypeError, "n: expected an integer, got float"),
    (dict(truncate_prompt_tokens=0), ValueError, "truncate_prompt_tokens: must be >= 1, or -1"),
    (dict(truncate_prompt_tokens=-2), ValueError, "truncate_prompt_tokens"),
    (dict(prompt_logprobs=1.5), TypeError, "prompt_logprobs: expected an integer or None, got float"),
    (dict(temperature="hot"), TypeError, "temperature: expected a float, got str"),
    (dict(max_tokens=16.0), TypeError, "max_tokens: expected an integer, got float"),
    (dict(ignore_eos="no"), TypeError, "ignore_eos: expected a bool"),
    (dict(nonsense=1), TypeError, "nonsense"),
])
def test_sampling_params_refuse_by_name(kwargs, exc, needle):
    with pytest.raises(exc) as e:
        asynct.SamplingParams(**kwargs)
    assert needle in str(e.value)


def test_sampling_params_defaults_and_repr():
    p = asynct.SamplingParams()
    assert (p.temperature, p.top_p, p.top_k, p.seed, p.max_tokens, p.stop, p.ignore_eos, p.logprobs) == (
        1.0, 1.0, 0, None, 16, [], False, None)
    assert asynct.SamplingParams(top_k=-1, stop="x").top_k == 0
    assert asynct.SamplingParams(stop="x").stop == ["x"]
    assert "max_tokens=16" in repr(p)


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(device="tpu"), ValueError, "device: expected \"auto\", \"cpu\" or \"cuda\", got \"tpu\""),
    (dict(precision="f16"), ValueError, "precision"),
    (dict(device=0), TypeError, "device: expected a string, got int"),
    (dict(max_num_seqs="many"), TypeError, "max_num_seqs: expected an integer"),
    (dict(max_num_seqs=0), ValueError, "max_num_seqs: must be >= 1"),
    (dict(max_model_len=1), ValueError, "max_model_len: must be in [2, 2048]"),
    (dict(max_model_len=4096), ValueError, "max_model_len"),
    (dict(gpu_memory_utilization=1.5), ValueError, "gpu_memory_utilization: must be in (0, 1]"),
    (dict(cpu_kv_cache_gib=0.0), ValueError, "cpu_kv_cache_gib: must be > 0"),
    (dict(cpu_kv_cache_gib=1e-6), ValueError, "cpu_kv_cache_gib: 0.000001 GiB holds"),
    (dict(enable_prefix_caching="yes"), TypeError, "enable_prefix_caching: expected a bool"),
    (dict(enable_pipelining=1), TypeError, "enable_pipelining: expected a bool"),
    (dict(max_num_batched_tokens="many"), TypeError, "max_num_batched_tokens: expected an integer or None"),
    (dict(max_num_batched_tokens=0), ValueError, "max_num_batched_tokens: must be at least 576, got 0"),
    (dict(max_num_batched_tokens=-3), ValueError, "max_num_batched_tokens: must be at least 576, got -3"),
    (dict(max_num_seqs=8, max_num_batched_tokens=519), ValueError,
     "max_num_batched_tokens: must be at least 520, got 519"),
    (dict(decode_kernel="fast"), ValueError, "decode_kernel: expected \"auto\", \"graph\" or \"mega\", got \"fast\""),
    (dict(decode_kernel=1), TypeError, "decode_kernel: expected a string, got int"),
    (dict(seed=-1), ValueError, "seed: must be in [0, 2^64), got -1"),
    (dict(seed="x"), TypeError, "seed: expected an integer or None"),
    (dict(tensor_parallel_size=2), ValueError, "tensor_parallel_size: asynct runs a model on one device"),
    (dict(trust_remote_code="yes"), TypeError, "trust_remote_code: expected a bool"),
])
def test_llm_options_refuse_by_name(tiny_model, kwargs, exc, needle):
    with pytest.raises(exc) as e:
        asynct.LLM(tiny_model, **kwargs)
    assert needle in str(e.value)


def test_llm_refuses_a_missing_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        asynct.LLM(tmp_path / "nowhere")


def test_generate_refuses_bad_prompts_by_name_and_queues_nothing(llm):
    p = asynct.SamplingParams(temperature=0, max_tokens=2)
    cases = [
        (["ok", ""], ValueError, "prompts[1]: is empty"),
        ([[1, 2], [3, 600]], ValueError, "prompts[1]: token 1 is id 600, outside the vocabulary of 512"),
        ([[1, -2]], ValueError, "prompts[0]: token 1 is id -2"),
        ([[1] * 2048], ValueError, "prompts[0]: has 2048 tokens, leaving no room"),
        (["ok", 3.5], TypeError, "prompts[1]: expected a string or a list of token ids"),
        ([{"prompt": 1}], TypeError, "prompts[0]: a dict prompt holds"),
        (42, TypeError, "prompts: expected a string, a list of token ids"),
    ]
    for prompts, exc, needle in cases:
        with pytest.raises(exc) as e:
            llm.generate(prompts, p)
        assert needle in str(e.value), prompts
    with pytest.raises(ValueError, match=r"sampling_params: has 2 entries for 3 prompts"):
        llm.generate(["a", "b", "c"], [p, p])
    with pytest.raises(TypeError, match="sampling_params: expected SamplingParams"):
        llm.generate(["a"], {"temperature": 0})
    # Nothing was left queued: the next generate runs as usual.
    [out] = llm.generate("ok", p)
    assert len(out.token_ids) == 2 or out.finish_reason == "stop"


def test_a_small_cpu_cache_still_serves_the_batch(tiny_model, llm):
    # 4 blocks of 16 tokens: room for one sequence of max_model_len 64, not for three of 30 at once.
    small = asynct.LLM(tiny_model, device="cpu", max_model_len=64, cpu_kv_cache_gib=4 * 2 * 2 * 16 * 2 * 16 * 4 / 2**30)
    p = asynct.SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    prompts = ["The river runs", "Hello there you", "Nobody has ever"]
    assert [o.token_ids for o in small.generate(prompts, p)] == [o.token_ids for o in llm.generate(prompts, p)]
    with pytest.raises(ValueError, match=r"prompts\[0\]: has 64 tokens"):
        small.generate([[1] * 64], p)


def test_llm_refuses_a_cache_past_memory_with_memory_error(tiny_model, tmp_path):
    # Once an abort that killed the interpreter: a cache of one 2^40-token sequence is checked first.
    import json
    import shutil
    huge = tmp_path / "huge"
    shutil.copytree(tiny_model, huge)
    config = json.loads((huge / "config.json").read_text())
    config["max_position_embeddings"] = 1 << 40
    (huge / "config.json").write_text(json.dumps(config))
    with pytest.raises(MemoryError, match=r"the CPU KV cache \(68719476736 blocks of 16 tokens\) needs 512.0 TiB"):
        asynct.LLM(huge, device="cpu")
    small = asynct.LLM(huge, device="cpu", max_model_len=64)
    assert small.max_model_len == 64


@pytest.mark.parametrize("messages, exc, needle", [
    ([], ValueError, "messages: is empty"),
    ("Hi", TypeError, "messages: expected a list of message dicts"),
    ([{"role": "robot", "content": "x"}], ValueError, "messages[0].role: must be one of system, developer, user"),
    ([{"content": "x"}], ValueError, "messages[0]: has no \"role\""),
    ([{"role": "user"}], ValueError, "messages[0]: has no \"content\""),
    ([{"role": "user", "content": None}], ValueError, "messages[0].content: is None"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], ValueError, "messages[0].content[0]: must be a dict"),
    ([[{"role": "user", "content": "x"}], []], ValueError, "messages[1]: is empty"),
    ([[{"role": "user", "content": "x"}], "y"], TypeError, "messages[1]: expected a list of message dicts"),
    ([{"role": "user", "content": 5}], TypeError, "messages[0].content: expected a string or a list of text parts"),
])
def test_chat_refuses_bad_messages_by_path(llm, messages, exc, needle):
    with pytest.raises(exc) as e:
        llm.chat(messages)
    assert needle in str(e.value)


def test_use_tqdm_is_taken_as_vllm_callers_pass_it_and_must_be_a_bool(llm):
    p = asynct.SamplingParams(temperature=0, max_tokens=3)
    assert llm.generate("The", p, use_tqdm=False)[0].token_ids == llm.generate("The", p)[0].token_ids
    assert llm.chat([{"role": "user", "content": "Hi"}], p, use_tqdm=True)[0].finished
    with pytest.raises(TypeError, match="use_tqdm: expected a bool"):
        llm.generate("The", p, use_tqdm="yes")
