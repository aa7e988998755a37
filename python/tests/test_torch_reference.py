"""The PyTorch reference (asynct.network, asynct.modeling) against the oracle and the engine.

- Every position's logits of generated (random) checkpoints, and of the shipped trained one when it
  is in the tree: PyTorch float32 within 1e-5 relative L2 of the oracle's f64; PyTorch bf16 within
  1.5 times the oracle's own bf16-faithful distance from its f64.
- ``transformers``: ``from_pretrained`` of a generated checkpoint, ``save_pretrained``, then
  ``asynct generate`` gives ``model.generate``'s greedy tokens (float32, 64 tokens) and, through
  ``--dump-logits``, its logits at every position within 1e-5; the saved tensors are the loaded
  ones under SPEC section 1's names.
- torch's bf16 ``F.linear`` (the bf16 mode's GEMM) sums in float32 and rounds once.
- The KV cache: a prompt run in pieces gives the logits of one pass.
- Training: a few steps on a small text write a checkpoint ``asynct generate`` loads.
- The Python preset table is ``asynct init``'s (needs no torch).

Tests that need torch (or transformers, or tokenizers) are skipped where it is not installed,
with the reason naming the missing package (``pytest -rs`` lists them): CI has no torch and does
not download it.
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import REPO, run_cli

# The shipped trained model, or the folder ASYNCT_TRAINED_MODEL names (as verify's gpu_trained reads it).
SHIPPED = pathlib.Path(os.environ.get("ASYNCT_TRAINED_MODEL", REPO / "trained" / "asynct-mini-shakespeare"))


def current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].split("::")[-1]


def need(module: str):
    """``module``, or a skip whose reason names the test (so ``-rs`` lists each one) and the package."""
    return pytest.importorskip(module, reason=f"SKIPPED {current_test()}: {module} is not installed")


def init(asynct_bin, preset: str, out: pathlib.Path, seed: int) -> pathlib.Path:
    subprocess.run([str(asynct_bin), "init", "--preset", preset, "--out", str(out), "--seed", str(seed)], check=True,
                   capture_output=True)
    return out


def rel_l2_rows(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, asynct_bin):
    """Generated asynct-tiny and asynct-mini (seeds 1 and 2), and the shipped model when present."""
    root = tmp_path_factory.mktemp("torch-ref")
    out = {"asynct-tiny": init(asynct_bin, "asynct-tiny", root / "tiny", 1),
           "asynct-mini": init(asynct_bin, "asynct-mini", root / "mini", 2)}
    if (SHIPPED / "config.json").is_file():
        out["shipped"] = SHIPPED
    return out


def sequence(cfg, n: int, seed: int) -> list:
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, size=n).tolist()


def test_python_presets_are_the_ones_asynct_init_writes(asynct_bin, tmp_path):
    from asynct.presets import PRESETS

    for name, shape in PRESETS.items():
        cfg = json.loads((init(asynct_bin, name, tmp_path / name, 0) / "config.json").read_text())
        assert {k: cfg[k] for k in shape} == shape, name


@pytest.mark.parametrize("name", ["asynct-tiny", "asynct-mini", "shipped"])
def test_float32_logits_match_the_oracle_f64_at_every_position(checkpoints, name):
    torch = need("torch")
    from asynct import oracle
    from asynct.checkpoint_io import load_network

    if name not in checkpoints:
        pytest.skip(f"SKIPPED {current_test()}: no shipped model at {SHIPPED}")
    net = load_network(checkpoints[name], torch.float32)
    ids = sequence(net.cfg, 97, 5)
    ref = oracle.forward_logits(str(checkpoints[name]), ids, precision="f64")
    with torch.no_grad():
        got = net(torch.tensor([ids]))[0].double().numpy()
    err = rel_l2_rows(got, ref)
    print(f"{name}: float32 vs oracle f64, relative L2 per position: max {err.max():.3e}, mean {err.mean():.3e}")
    assert err.max() <= 1e-5, f"position {err.argmax()}: {err.max():.3e}"


@pytest.mark.parametrize("name", ["asynct-tiny", "asynct-mini", "shipped"])
def test_bf16_logits_are_as_close_to_f64_as_the_oracle_bf16_mode(checkpoints, name):
    torch = need("torch")
    from asynct import oracle
    from asynct.checkpoint_io import load_network

    if name not in checkpoints:
        pytest.skip(f"SKIPPED {current_test()}: no shipped model at {SHIPPED}")
    net = load_network(checkpoints[name], torch.bfloat16)
    ids = sequence(net.cfg, 97, 6)
    ref = oracle.forward_logits(str(checkpoints[name]), ids, precision="f64")
    oracle_bf16 = rel_l2_rows(oracle.forward_logits(str(checkpoints[name]), ids, precision="bf16"), ref)
    with torch.no_grad():
        got = rel_l2_rows(net(torch.tensor([ids]))[0].double().numpy(), ref)
    ratio = got / oracle_bf16
    print(f"{name}: bf16 vs f64 per position: torch max {got.max():.3e} mean {got.mean():.3e}; "
          f"oracle bf16 max {oracle_bf16.max():.3e} mean {oracle_bf16.mean():.3e}; worst ratio {ratio.max():.3f}")
    assert np.all(got <= 1.5 * oracle_bf16), f"position {ratio.argmax()}: {got[ratio.argmax()]:.3e} vs {oracle_bf16[ratio.argmax()]:.3e}"


def test_torch_bf16_linear_rounds_an_f32_sum_once():
    """The bf16 mode's GEMMs are torch's bf16 ``F.linear``, on SPEC section 4's premise that it
    multiplies bf16 operands, sums in float32 and rounds the output once. Then its output is the
    exact product correctly rounded except where the float32 sum falls within its own error of a
    bf16 rounding boundary (a few in 10^5), and there one bf16 unit off. A GEMM that rounds
    partial sums to bf16 (here: every 64 terms of the sum) misses far more often."""
    torch = need("torch")
    import torch.nn.functional as F

    def bits(t):
        return t.contiguous().view(torch.int16).to(torch.int32)

    g = torch.Generator().manual_seed(3)
    for rows, k, n in [(97, 256, 256), (97, 256, 640), (97, 640, 256), (97, 256, 4096), (1, 256, 4096)]:
        x = torch.randn(1, rows, k, generator=g).bfloat16()
        w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
        # Products of bf16 values are exact in float64 and these sums nearly so; rounding through
        # float32 to bf16 rounds twice, which errs only where float32 lands on a bf16 tie.
        want = F.linear(x.double(), w.double()).float().bfloat16()
        misses = bits(F.linear(x, w)) - bits(want)
        assert int(misses.abs().max()) <= 1, (rows, k, n)
        assert int((misses != 0).sum()) <= 1e-3 * want.numel(), (rows, k, n, int((misses != 0).sum()))
        blocked = torch.einsum("trbi,nbi->trnb", x.float().view(1, rows, k // 64, 64), w.float().view(n, k // 64, 64))
        blocked = blocked.bfloat16().float().sum(-1).bfloat16()
        assert int((bits(blocked) != bits(want)).sum()) > 1e-2 * want.numel(), "the check cannot tell a bf16 sum"


def test_the_kv_cache_gives_the_logits_of_one_pass(checkpoints):
    torch = need("torch")
    from asynct.checkpoint_io import load_network
    from asynct.network import KVCache

    net = load_network(checkpoints["asynct-mini"], torch.float64)
    ids = torch.tensor([sequence(net.cfg, 40, 7)])
    with torch.no_grad():
        whole = net(ids)
        cache = KVCache()
        pieces = [net(ids[:, a:b], cache) for a, b in [(0, 17), (17, 18), (18, 19), (19, 40)]]
    assert cache.get_seq_length() == 40
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["asynct-tiny", "asynct-mini", "shipped"])
def test_transformers_round_trip_generates_what_asynct_generate_does(checkpoints, asynct_bin, tmp_path, name):
    torch = need("torch")
    need("transformers")
    from transformers import AutoModelForCausalLM

    import asynct.modeling  # noqa: F401  (registers the Auto classes)
    from asynct.checkpoint_io import read_safetensors

    if name not in checkpoints:
        pytest.skip(f"SKIPPED {current_test()}: no shipped model at {SHIPPED}")
    src = checkpoints[name]
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    assert type(model).__name__ == "AsyncTForCausalLM"
    saved = tmp_path / "saved"
    model.save_pretrained(str(saved))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (src / f).is_file():
            (saved / f).write_bytes((src / f).read_bytes())

    stored = read_safetensors(src / "model.safetensors")
    written = read_safetensors(saved / "model.safetensors")
    assert sorted(written) == sorted(stored), "save_pretrained writes exactly the checkpoint's tensor names"
    for k, t in stored.items():
        assert torch.equal(written[k].float(), t.float()), k

    prompt = sequence(model.cfg, 12, 8)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=64, min_new_tokens=64, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    ours = out[0, len(prompt):].tolist()
    dump = tmp_path / "logits.safetensors"
    cli = run_cli(asynct_bin, "generate", "--model", str(saved), "--device", "cpu", "--ignore-eos",
                  "--max-tokens", "64", "--prompt-ids", ",".join(map(str, prompt)), "--dump-logits", str(dump))
    assert [int(t) for t in cli.strip().split(",")] == ours
    assert ours == model_network_greedy(model, prompt)
    # Greedy tokens of a random model can repeat one id; the logits of every position say more.
    engine = read_safetensors(dump)["logits"].double().numpy()
    with torch.no_grad():
        mine = model(out[:, :-1]).logits[0].double().numpy()
    err = rel_l2_rows(mine, engine)
    print(f"{name}: {len(set(ours))} distinct greedy tokens; engine f32 vs transformers f32 logits, max relative L2 {err.max():.3e}")
    assert engine.shape == mine.shape and err.max() <= 1e-5


def model_network_greedy(model, prompt):
    from asynct.modeling import network_of

    return network_of(model).greedy(prompt, 64, stop_at_eos=False)


def test_a_few_training_steps_write_a_checkpoint_asynct_generate_loads(asynct_bin, tmp_path):
    need("torch")
    need("tokenizers")
    from asynct import train

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "".join(f"Line {i} of a small play: the king speaks, and the queen answers him.\n" for i in range(400))
    (corpus / "train.txt").write_text(text + "\n<|endoftext|>\n")
    (corpus / "heldout.txt").write_text(text[:3000] + "\n<|endoftext|>\n")
    out = tmp_path / "model"
    assert train.main(["--corpus", str(corpus), "--out", str(out), "--preset", "asynct-tiny", "--train-tokenizer",
                       "--steps", "6", "--batch", "4", "--seq-len", "32", "--eval-every", "3", "--warmup", "2",
                       "--device", "cpu"]) == 0
    card = json.loads((out / "card.json").read_text())
    rows = (out / "loss.csv").read_text().splitlines()
    assert rows[0] == "step,elapsed_s,lr,train_loss,heldout_loss" and len(rows) >= 3
    assert card["steps"] == 6 and card["heldout_loss"] < float(rows[1].split(",")[3])
    run_cli(asynct_bin, "generate", "--model", str(out), "--device", "cpu", "--prompt", "Line 3", "--max-tokens", "8")


def test_python_eval_gives_the_figure_of_asynct_eval(checkpoints, asynct_bin, tmp_path):
    torch = need("torch")
    need("tokenizers")
    from asynct import eval as asynct_eval
    from asynct.checkpoint_io import load_network

    model = checkpoints["asynct-tiny"]
    text = tmp_path / "text.txt"
    text.write_text("".join(f"The river runs past mill {i}, and the children count the boats.\n" for i in range(40)))
    cli = run_cli(asynct_bin, "eval", "--model", str(model), "--text", str(text), "--max-len", "48", "--device", "cpu")
    fields = cli.split()
    engine_ppl, engine_acc, engine_n = float(fields[1]), float(fields[6]), int(fields[7].lstrip("("))
    s = asynct_eval.score(load_network(model, torch.float32), asynct_eval.encode_file(model, text), 48, torch.device("cpu"))
    print(f"perplexity: asynct eval {engine_ppl}, PyTorch {s.perplexity:.4f}; accuracy {engine_acc} vs {s.accuracy:.4f}")
    assert s.predictions == engine_n
    assert abs(s.perplexity / engine_ppl - 1) < 1e-4 and abs(s.accuracy - engine_acc) < 1e-4


def test_hp1_gate_counts_are_the_exact_zeros_of_the_spec_formula():
    torch = need("torch")
    from test_oracle import hp1_reference

    from asynct.network import NetworkConfig, hp1_attention

    rng = np.random.default_rng(11)
    t, hq, hkv, d = 37, 4, 2, 16
    q, k, v = rng.normal(size=(t, hq, d)) * 2.0, rng.normal(size=(t, hkv, d)) * 2.0, rng.normal(size=(t, hkv, d))
    sigma, gamma = rng.uniform(1.0, 2.0, hq), rng.uniform(0.25, 0.5, hq)
    want, weights = hp1_reference(q, k, v, [t], sigma, gamma)
    cfg = NetworkConfig(vocab_size=8, hidden_size=hq * d, intermediate_size=8, num_hidden_layers=1,
                        num_attention_heads=hq, num_key_value_heads=hkv, head_dim=d, max_position_embeddings=64,
                        rope_theta=1e4)
    as_torch = [torch.tensor(a).transpose(0, 1)[None] for a in (q, k, v)]  # [1, H, T, D]
    counts = []
    got = hp1_attention(*as_torch, torch.tensor(sigma), torch.tensor(gamma), cfg, counts)
    np.testing.assert_allclose(got[0].transpose(0, 1).numpy(), want, rtol=1e-10, atol=1e-12)
    causal = np.tril(np.ones((t, t), dtype=bool))
    zeros = sum(int((weights[:, h][causal] == 0).sum()) for h in range(hq))
    assert counts == [(zeros, hq * int(causal.sum()))]
    assert 0 < zeros < hq * causal.sum()
