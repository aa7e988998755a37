"""LLM.generate against the `asynct generate` CLI, token for token, and its outputs' contract."""

import json
import re

import numpy as np
import pytest

import asynct
from conftest import run_cli

PROMPTS = ["Hello, world", "The river runs past the old mill", "x"]


def cli_ids(asynct_bin, model, prompt_ids, *flags):
    out = run_cli(
        asynct_bin, "generate", "--model", str(model), "--device", "cpu",
        "--prompt-ids", ",".join(map(str, prompt_ids)), *flags,
    )
    return [int(t) for t in out.strip().split(",")]


def test_readme_command_matches_the_cli_text(asynct_bin, tiny_model, llm):
    # The README's first command: --prompt "Hello, world" --max-tokens 32, greedy.
    cli = run_cli(asynct_bin, "generate", "--model", str(tiny_model), "--device", "cpu",
                  "--prompt", "Hello, world", "--max-tokens", "32")
    [out] = llm.generate("Hello, world", asynct.SamplingParams(temperature=0, max_tokens=32))
    assert cli == out.text + "\n"
    assert out.prompt == "Hello, world"
    assert out.prompt_token_ids == llm.encode("Hello, world")


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tokens_match_the_cli(asynct_bin, tiny_model, llm, prompt):
    ids = llm.encode(prompt)
    cli = cli_ids(asynct_bin, tiny_model, ids, "--max-tokens", "40", "--ignore-eos")
    [out] = llm.generate([ids], asynct.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    assert out.token_ids == cli
    assert len(cli) == 40 and out.finish_reason == "length"


def test_seeded_sampling_matches_the_cli(asynct_bin, tiny_model, llm):
    ids = llm.encode(PROMPTS[1])
    # The tiny model's random weights are peaked: a high temperature makes the draw matter.
    flags = ["--temperature", "3.0", "--top-k", "40", "--top-p", "0.95", "--seed", "7"]
    cli = cli_ids(asynct_bin, tiny_model, ids, "--max-tokens", "24", "--ignore-eos", *flags)
    params = dict(temperature=3.0, top_k=40, top_p=0.95, max_tokens=24, ignore_eos=True)
    [out] = llm.generate(ids, asynct.SamplingParams(seed=7, **params))
    assert out.token_ids == cli
    [other] = llm.generate(ids, asynct.SamplingParams(seed=8, **params))
    assert other.token_ids != cli, "another seed draws other tokens"
    [greedy] = llm.generate(ids, asynct.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    assert greedy.token_ids != cli, "the sampled run is not the greedy one"
    unseeded = [llm.generate(ids, asynct.SamplingParams(**params))[0].token_ids for _ in range(2)]
    assert unseeded[0] != unseeded[1], "seed=None draws a fresh seed per request"


def test_a_batch_gives_each_prompt_what_it_gets_alone(llm):
    params = [asynct.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
              asynct.SamplingParams(temperature=1.0, seed=3, max_tokens=20, ignore_eos=True),
              asynct.SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)]
    batch = llm.generate(PROMPTS, params)
    assert [o.prompt for o in batch] == PROMPTS
    for prompt, p, out in zip(PROMPTS, params, batch):
        [alone] = llm.generate(prompt, p)
        assert out.token_ids == alone.token_ids and out.text == alone.text
        assert len(out.token_ids) == p.max_tokens


def test_prompt_forms_are_equivalent(llm):
    p = asynct.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    ids = llm.encode("The river")
    forms = ["The river", [ids], ids, np.array(ids, dtype=np.int64), [{"prompt": "The river"}],
             [{"prompt_token_ids": ids}], ("The river",)]
    outs = [llm.generate(f, p) for f in forms]
    for o in outs:
        assert len(o) == 1 and o[0].token_ids == outs[0][0].token_ids
    assert outs[1][0].prompt is None and outs[1][0].prompt_token_ids == ids
    assert llm.generate([], p) == []


def test_outputs_have_vllms_shape(llm):
    [out] = llm.generate("Hello", asynct.SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    [c] = out.outputs
    assert out.outputs[0] is c
    assert (c.index, c.text, c.token_ids, c.finish_reason) == (0, out.text, out.token_ids, "length")
    assert c.stop_reason is None and c.logprobs is None and out.logprobs is None and c.cumulative_logprob is None
    assert out.finished and isinstance(out.request_id, str)
    assert llm.decode(out.token_ids) == out.text


def test_stop_strings_cut_the_text_and_are_reported(llm):
    p = asynct.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    [full] = llm.generate("The river", p)
    stop = full.text[5:8]
    assert len(stop) == 3, full.text
    [cut] = llm.generate("The river", asynct.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                                            stop=[stop]))
    assert cut.finish_reason == "stop" and cut.outputs[0].stop_reason == stop
    assert cut.text == full.text[: full.text.index(stop)]


def test_eos_ends_the_output_unless_ignored(llm):
    # At temperature 5 the tiny model draws its eos (510) as the 60th token with seed 1.
    hot = dict(seed=1, temperature=5.0, max_tokens=300)
    [out] = llm.generate("The", asynct.SamplingParams(**hot))
    assert out.finish_reason == "stop" and out.outputs[0].stop_reason == 510
    assert out.token_ids[-1] == 510 and 510 not in out.token_ids[:-1]
    assert "<|endoftext|>" not in out.text
    [through] = llm.generate("The", asynct.SamplingParams(ignore_eos=True, **hot))
    assert through.finish_reason == "length" and len(through.token_ids) == 300
    assert through.token_ids[: len(out.token_ids)] == out.token_ids


def log_softmax(rows):
    """Each row's log-softmax, in the rows' dtype."""
    top = rows.max(1, keepdims=True)
    return rows - top - np.log(np.exp(rows - top).sum(1, keepdims=True))


def test_logprobs_are_the_log_softmax_of_the_sampling_rows(tiny_model, llm):
    ids = llm.encode("The river runs")
    p = asynct.SamplingParams(temperature=0.8, seed=11, max_tokens=8, ignore_eos=True, logprobs=3)
    [out] = llm.generate(ids, p)
    logits = asynct.oracle.forward_logits(tiny_model, ids + out.token_ids[:-1], precision="f32").astype(np.float64)
    rows = logits[len(ids) - 1:]
    ref = log_softmax(rows)
    assert len(out.logprobs) == 8
    for i, (token, lp) in enumerate(zip(out.token_ids, out.logprobs)):
        order = np.argsort(-ref[i], kind="stable")
        assert set(lp) == set(order[:3].tolist()) | {token}
        for t, v in lp.items():
            # vLLM's Logprob: the value, the place in the row from 1, the token's text.
            assert isinstance(v, asynct.Logprob)
            assert v.logprob == pytest.approx(ref[i, t], abs=1e-5)
            assert v.rank == order.tolist().index(t) + 1
            assert v.decoded_token == llm.decode([t]) or llm.decode([t]) == "", "special tokens kept"
    cumulative = sum(lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs))
    assert out.outputs[0].cumulative_logprob == pytest.approx(cumulative)
    # The same request without logprobs draws the same tokens.
    [plain] = llm.generate(ids, asynct.SamplingParams(temperature=0.8, seed=11, max_tokens=8, ignore_eos=True))
    assert plain.token_ids == out.token_ids and plain.logprobs is None and plain.prompt_logprobs is None


def test_prompt_logprobs_are_the_log_softmax_of_the_rows_before_each_prompt_token(tiny_model, llm):
    # Longer than a 512-token chunk, so the prompt is scored over two steps.
    ids = [(t * 29 + 7) % 490 + 3 for t in range(600)]
    p = asynct.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=2)
    [out] = llm.generate(ids, p)
    rows = asynct.oracle.forward_logits(tiny_model, ids, precision="f32").astype(np.float64)
    ref = log_softmax(rows)
    assert len(out.prompt_logprobs) == len(ids) and out.prompt_logprobs[0] is None
    for i in range(1, len(ids)):
        lp = out.prompt_logprobs[i]
        top2 = np.argsort(-ref[i - 1], kind="stable")[:2]
        assert set(lp) == set(top2.tolist()) | {ids[i]}, i
        for t, v in lp.items():
            assert v.logprob == pytest.approx(ref[i - 1, t], abs=1e-5)
        assert lp[top2[0]].rank == 1 and lp[top2[1]].rank == 2
        assert lp[ids[i]].rank == np.argsort(-ref[i - 1], kind="stable").tolist().index(ids[i]) + 1
    assert out.logprobs is None
    # Asking changes no token.
    [plain] = llm.generate(ids, asynct.SamplingParams(temperature=0, max_tokens=1))
    assert plain.token_ids == out.token_ids and plain.prompt_logprobs is None


def test_forward_logits_matches_the_clis_dumped_logits(asynct_bin, tiny_model, llm, tmp_path):
    ids = llm.encode("The river runs past")
    dump = tmp_path / "logits.safetensors"
    run_cli(asynct_bin, "generate", "--model", str(tiny_model), "--device", "cpu", "--prompt-ids",
            ",".join(map(str, ids)), "--max-tokens", "1", "--dump-logits", str(dump))
    from test_oracle import read_safetensors
    dumped = read_safetensors(dump)["logits"]
    ours = asynct.oracle.forward_logits(tiny_model, ids, precision="f32")
    assert ours.dtype == np.float32 and dumped.shape == ours.shape == (len(ids), 512)
    np.testing.assert_allclose(ours, dumped, rtol=0, atol=1e-5 * np.abs(dumped).max())


def test_prefix_caching_changes_no_token_or_logprob(tiny_model, llm):
    # Prompts sharing 1030 tokens: with 512-token chunks the second reuses 1024 of them.
    shared = [(t * 37 + 5) % 490 + 3 for t in range(1030)]
    prompts = [shared + [(t * 11 + i) % 490 + 3 for t in range(40)] for i in range(2)]
    p = asynct.SamplingParams(temperature=0.8, seed=5, max_tokens=6, ignore_eos=True)
    off = asynct.LLM(str(tiny_model), device="cpu", enable_prefix_caching=False)
    want = [o.token_ids for o in off.generate(prompts, p)]
    # One prompt per generate, so the second finds the first's blocks cached.
    assert [llm.generate([q], p)[0].token_ids for q in prompts] == want
    # Logprobs too: the first prompt's blocks are cached again, and the second's logprobs from
    # the reused blocks are the uncached ones' bits.
    lp = asynct.SamplingParams(temperature=0.8, seed=5, max_tokens=6, ignore_eos=True, logprobs=2)
    assert [llm.generate([q], lp)[0].logprobs for q in prompts] == [o.logprobs for o in off.generate(prompts, lp)]


def test_the_servers_sampling_parameters_are_honoured(llm):
    x = ord("x")  # the tiny tokenizer's byte b is token b
    [biased] = llm.generate("The", asynct.SamplingParams(seed=2, max_tokens=5, ignore_eos=True, logit_bias={x: 100}))
    assert biased.token_ids == [x] * 5
    # min_tokens holds off eos, however likely; then eos ends the output.
    eager_eos = asynct.SamplingParams(temperature=0, max_tokens=20, logit_bias={510: 100}, min_tokens=4)
    [held] = llm.generate("The", eager_eos)
    assert held.token_ids[-1] == 510 and len(held.token_ids) == 5 and held.finish_reason == "stop"
    # A stop token ends it (even with ignore_eos), reported as the stop reason; its text is kept
    # only with include_stop_str_in_output.
    for include, text in [(False, ""), (True, "x")]:
        p = asynct.SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, logit_bias={x: 100},
                                  stop_token_ids=[x], include_stop_str_in_output=include)
        [out] = llm.generate("The", p)
        assert (out.text, out.finish_reason, out.outputs[0].stop_reason) == (text, "stop", x)
    # min_p 1 keeps only the likeliest token: any temperature is greedy.
    greedy = asynct.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    [g] = llm.generate("The river", greedy)
    [m] = llm.generate("The river", asynct.SamplingParams(temperature=1.5, seed=5, min_p=1.0, max_tokens=12,
                                                          ignore_eos=True))
    assert m.token_ids == g.token_ids
    # The penalties change greedy output and repeat themselves.
    penalised = asynct.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, repetition_penalty=2.0,
                                      frequency_penalty=1.0, presence_penalty=1.0)
    [a] = llm.generate("The river", penalised)
    [b] = llm.generate("The river", penalised)
    assert a.token_ids == b.token_ids


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(min_p=1.5), ValueError, "min_p: must be in [0, 1]"),
    (dict(logit_bias={3: 101}), ValueError, "logit_bias"),
    (dict(logit_bias=[1]), TypeError, "logit_bias: expected a dict"),
    (dict(min_tokens=17), ValueError, "min_tokens: must be in [0, max_tokens = 16]"),
    (dict(repetition_penalty=0), ValueError, "repetition_penalty"),
    (dict(frequency_penalty=3), ValueError, "frequency_penalty"),
    (dict(presence_penalty=-2.5), ValueError, "presence_penalty"),
    (dict(stop_token_ids=["a"]), TypeError, "stop_token_ids: expected a list of token ids"),
])
def test_the_new_sampling_parameters_refuse_by_name(kwargs, exc, needle):
    with pytest.raises(exc) as e:
        asynct.SamplingParams(**kwargs)
    assert needle in str(e.value)


def test_token_ids_past_the_vocabulary_are_refused_at_generate(llm):
    for kwargs, name in [(dict(logit_bias={600: 1.0}), "logit_bias"), (dict(stop_token_ids=[600]), "stop_token_ids")]:
        with pytest.raises(ValueError) as e:
            llm.generate("The", asynct.SamplingParams(**kwargs))
        assert str(e.value).startswith(name), e.value


def test_the_step_budget_changes_no_token(tiny_model):
    # Prompts of three chunks each: at the least budget (one chunk beside the decode rows) they
    # prefill one chunk a step, at a large one all at once; chunk boundaries, so tokens, agree.
    prompts = [[(7 * i + 3 * j) % 500 + 1 for j in range(1100 + 50 * i)] for i in range(3)]
    params = asynct.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    outs = []
    for budget in (512 + 4, 1 << 16):
        llm = asynct.LLM(str(tiny_model), device="cpu", max_num_seqs=4, max_num_batched_tokens=budget)
        outs.append([o.token_ids for o in llm.generate(prompts, params)])
    assert outs[0] == outs[1]
    assert all(len(t) == 6 for t in outs[0])


def test_n_completions_per_prompt_are_the_seeds_seed_plus_j(llm):
    hot = dict(temperature=1.0, max_tokens=6, ignore_eos=True, logprobs=1)
    outs = llm.generate(["The river", "A"], asynct.SamplingParams(seed=40, n=3, prompt_logprobs=0, **hot))
    assert len(outs) == 2
    for prompt, out in zip(["The river", "A"], outs):
        assert [c.index for c in out.outputs] == [0, 1, 2] and out.finished
        assert (out.text, out.token_ids) == (out.outputs[0].text, out.outputs[0].token_ids)
        assert len(out.prompt_logprobs) == len(out.prompt_token_ids) and out.prompt_logprobs[0] is None
        for j, c in enumerate(out.outputs):
            [alone] = llm.generate(prompt, asynct.SamplingParams(seed=40 + j, **hot))
            assert (c.token_ids, c.logprobs) == (alone.token_ids, alone.logprobs), j
    assert len({tuple(c.token_ids) for c in outs[0].outputs}) > 1, "three seeds, three draws"


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm):
    ids = [(t * 13 + 5) % 490 + 3 for t in range(3000)]
    p = dict(temperature=0, max_tokens=4, ignore_eos=True)
    [cut] = llm.generate(ids, asynct.SamplingParams(truncate_prompt_tokens=100, **p))
    [alone] = llm.generate(ids[-100:], asynct.SamplingParams(**p))
    assert cut.prompt_token_ids == ids[-100:] and cut.token_ids == alone.token_ids
    # A text prompt keeps its text; a prompt already short enough is left whole.
    [text] = llm.generate("The river runs", asynct.SamplingParams(truncate_prompt_tokens=2, **p))
    assert text.prompt == "The river runs" and len(text.prompt_token_ids) == 2
    [whole] = llm.generate(ids[:50], asynct.SamplingParams(truncate_prompt_tokens=100, **p))
    assert whole.prompt_token_ids == ids[:50]
    # -1 keeps max_model_len tokens, which leaves no room to generate: refused by name.
    with pytest.raises(ValueError, match=r"prompts\[0\]: has 2048 tokens, leaving no room"):
        llm.generate(ids, asynct.SamplingParams(truncate_prompt_tokens=-1, **p))


CHATML_HI = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_renders_the_template_then_generates(llm):
    p = asynct.SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    # The tiny checkpoint has no tokenizer_config.json: ChatML, as the server renders it.
    [out] = llm.chat([{"role": "user", "content": "Hi"}], p)
    [plain] = llm.generate(CHATML_HI, p)
    assert out.prompt == CHATML_HI and out.token_ids == plain.token_ids
    # Several conversations, content as text parts, developer as system.
    convs = [
        [{"role": "developer", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}, {"role": "user", "content": "Yo"}],
    ]
    first, second = llm.chat(convs, p)
    assert first.prompt == "<|im_start|>system\nbe brief<|im_end|>\n" + CHATML_HI
    assert second.prompt.endswith("<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nYo<|im_end|>\n"
                                  "<|im_start|>assistant\n")


def test_llm_seed_repeats_a_scripts_unseeded_draws(tiny_model):
    hot = asynct.SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, n=2)
    prompts = ["The river", "A"]

    def script(**kwargs):
        llm = asynct.LLM(str(tiny_model), device="cpu", **kwargs)
        return [[c.token_ids for c in out.outputs] for _ in range(2) for out in llm.generate(prompts, hot)]

    first = script(seed=7)
    assert script(seed=7) == first, "the same seed, the same run"
    assert script(seed=8) != first
    # Each request still draws its own: within a run no two choices share a seed.
    assert len({tuple(t) for run in first for t in run}) > 1
    # A request's own seed wins over the LLM's.
    seeded = asynct.SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=3)
    a = asynct.LLM(str(tiny_model), device="cpu", seed=1).generate(prompts, seeded)
    b = asynct.LLM(str(tiny_model), device="cpu", seed=2).generate(prompts, seeded)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]


def test_guided_decoding_holds_the_output_to_a_choice_or_a_json_object(llm):
    words = ["the river", "the", "a moon"]
    choice = asynct.GuidedDecodingParams(choice=words)
    outs = llm.generate(["The river", "A", "the", "Hello world", "a"],
                        asynct.SamplingParams(temperature=1.5, seed=3, n=4, max_tokens=16, guided_decoding=choice))
    choices = [c for out in outs for c in out.outputs]
    texts = [c.text for c in choices]
    assert all(c.text in words and c.finish_reason == "stop" for c in choices), texts
    assert len(set(texts)) > 1, texts
    json_object = asynct.GuidedDecodingParams(json_object=True)
    [out] = llm.generate("The river",
                         asynct.SamplingParams(temperature=1.0, seed=0, n=8, max_tokens=48, guided_decoding=json_object))
    assert all(c.text.startswith("{") for c in out.outputs), [c.text for c in out.outputs]
    finished = [c.text for c in out.outputs if c.finish_reason == "stop"]
    assert finished and all(isinstance(json.loads(t), dict) for t in finished)
    pattern = asynct.GuidedDecodingParams(regex="[0-9]{3}-[a-z]{1,3}")
    [out] = llm.generate("The river",
                         asynct.SamplingParams(temperature=1.0, seed=0, n=4, max_tokens=24, guided_decoding=pattern))
    # A bounded pattern: every output a whole match, ended by eos once nothing else may follow.
    assert all(re.fullmatch("[0-9]{3}-[a-z]{1,3}", c.text) and c.finish_reason == "stop" for c in out.outputs), [
        c.text for c in out.outputs]


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(), ValueError, "choice: give exactly one of choice, regex and json_object=True"),
    (dict(choice=["a"], json_object=True), ValueError, "exactly one"),
    (dict(choice=["a"], regex="a"), ValueError, "exactly one"),
    (dict(regex="(a"), ValueError, "regex: cannot be compiled"),
    (dict(regex=3), TypeError, "regex: expected a string or None"),
    (dict(choice=[]), ValueError, "choice: must list 1 to 256 strings, got 0"),
    (dict(choice=["a", "a"]), ValueError, "listed twice"),
    (dict(choice="ab"), TypeError, "choice: expected a list of strings or None"),
    (dict(json_object="yes"), TypeError, "json_object: expected a bool or None"),
])
def test_guided_decoding_params_refuse_by_name(kwargs, exc, needle):
    with pytest.raises(exc) as e:
        asynct.GuidedDecodingParams(**kwargs)
    assert needle in str(e.value)


def test_guided_decoding_refuses_min_tokens():
    with pytest.raises(ValueError, match="guided_decoding: cannot be combined with min_tokens"):
        asynct.SamplingParams(min_tokens=1, guided_decoding=asynct.GuidedDecodingParams(json_object=True))
    with pytest.raises(TypeError, match="guided_decoding: expected a GuidedDecodingParams or None"):
        asynct.SamplingParams(guided_decoding={"choice": ["a"]})
