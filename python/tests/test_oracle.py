"""asynct.oracle against plain NumPy transcriptions of SPEC sections 1 to 3 written here, with no
call into the bindings for the expected values."""

import json
import math
import struct

import numpy as np
import pytest

from asynct import oracle


# ---- SPEC section 2: HP1, written from the formula -------------------------------------------

def hp1_reference(q, k, v, lengths, sigma, gamma, fir_k=3, relu_pre=True, clip=(0.0, 1.0), scale=None):
    """Output [T, Hq, D] and weights [T, Hq, max(lengths)], in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    tokens, heads, d = q.shape
    group = heads // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (heads,))
    gamma = np.broadcast_to(np.asarray(gamma, dtype=np.float64), (heads,))
    out = np.zeros((tokens, heads, d))
    weights = np.zeros((tokens, heads, max(lengths, default=0)))
    start = 0
    for n in lengths:
        seq = slice(start, start + n)
        for h in range(heads):
            g = h // group
            s = scale * q[seq, h] @ k[seq, g].T  # s[i, t]: query i, key t
            r = np.maximum(s, 0.0) if relu_pre else s
            m = np.zeros_like(r)
            for back in range(fir_k):  # m_t = (r_t + ... + r_{t-F+1}) / F, zero before key 0
                m[:, back:] += r[:, : n - back] if back < n else 0.0
            m /= fir_k
            p = gamma[h] * np.clip(s - sigma[h] * m, clip[0], clip[1])
            p = np.tril(p)  # causal: query i sees keys t <= i
            out[seq, h] = p @ v[seq, g]
            weights[seq, h, :n] = p
        start += n
    return out, weights


def random_qkv(rng, tokens, heads, kv_heads, d, dtype):
    q = rng.normal(size=(tokens, heads, d)) * 2.0
    k = rng.normal(size=(tokens, kv_heads, d)) * 2.0
    v = rng.normal(size=(tokens, kv_heads, d))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


CASES = [
    # lengths, Hq, Hkv, D, fir_k, relu_pre, clip, per-head sigma/gamma
    ([7], 2, 2, 8, 3, True, (0.0, 1.0), False),
    ([1, 17, 33, 2], 4, 2, 8, 3, True, (0.0, 1.0), True),
    ([20, 5], 4, 1, 16, 1, False, (-0.5, 2.0), True),
    ([40], 3, 3, 4, 5, False, (0.0, 0.25), False),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_hp1_matches_the_spec_formula(dtype, case):
    lengths, heads, kv_heads, d, fir_k, relu_pre, clip, per_head = CASES[case]
    rng = np.random.default_rng(case)
    q, k, v = random_qkv(rng, sum(lengths), heads, kv_heads, d, dtype)
    sigma = rng.uniform(0.5, 1.5, heads) if per_head else 0.9
    gamma = rng.uniform(0.5, 2.0, heads) if per_head else 1.3
    out, w = oracle.hp1_attention(q, k, v, lengths, sigma, gamma, fir_k, relu_pre, clip, return_weights=True)
    ref, ref_w = hp1_reference(q, k, v, lengths, sigma, gamma, fir_k, relu_pre, clip)
    assert out.dtype == dtype and out.shape == q.shape and w.shape == ref_w.shape
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(out, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=tol * max(1.0, np.abs(ref_w).max()))


def test_hp1_positions_scale_and_layouts_agree():
    rng = np.random.default_rng(9)
    lengths = [5, 12, 1]
    q, k, v = random_qkv(rng, sum(lengths), 4, 2, 8, np.float64)
    positions = np.concatenate([np.arange(n) for n in lengths])
    by_lengths = oracle.hp1_attention(q, k, v, lengths, 1.0, 1.0)
    by_positions = oracle.hp1_attention(q, k, v, None, 1.0, 1.0, positions=positions)
    np.testing.assert_array_equal(by_lengths, by_positions)
    # Non-contiguous views are read as the arrays they show.
    q_t = np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)
    np.testing.assert_array_equal(oracle.hp1_attention(q_t, k, v, lengths, 1.0, 1.0), by_lengths)
    ref, _ = hp1_reference(q, k, v, lengths, 1.0, 1.0, scale=0.3)
    np.testing.assert_allclose(oracle.hp1_attention(q, k, v, lengths, 1.0, 1.0, scale=0.3), ref, atol=1e-12)
    # No lengths: one sequence of every token.
    one, _ = hp1_reference(q, k, v, [len(q)], 1.0, 1.0)
    np.testing.assert_allclose(oracle.hp1_attention(q, k, v, None, 1.0, 1.0), one, atol=1e-12)


def test_hp1_output_changes_with_the_layout():
    # A check that the reference comparison can fail: cutting one sequence in two changes the output.
    rng = np.random.default_rng(4)
    q, k, v = random_qkv(rng, 10, 2, 2, 4, np.float64)
    joined = oracle.hp1_attention(q, k, v, [10], 1.0, 1.0)
    cut = oracle.hp1_attention(q, k, v, [4, 6], 1.0, 1.0)
    assert np.abs(joined[4:] - cut[4:]).max() > 1e-3


# ---- SPEC section 3: UClipNorm ------------------------------------------------------------------

def uclip_reference(x, alpha, weight, bias=None):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(weight, np.float64) * np.clip(np.asarray(alpha, np.float64) * x, -1.0, 1.0)
    return y + (0.0 if bias is None else np.asarray(bias, np.float64))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_uclip_norm_matches_the_spec(dtype):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(2, 3, 5)) * 3).astype(dtype)
    c = x.shape[-1]
    for alpha, weight, bias in [
        (0.7, 1.5, None),
        (rng.uniform(0.1, 2, c), [2.0], rng.normal(size=c)),
        ([0.5], rng.uniform(0.5, 1.5, c), None),
    ]:
        y = oracle.uclip_norm(x, alpha, weight, bias)
        assert y.dtype == dtype and y.shape == x.shape
        ref = uclip_reference(x, alpha, weight, bias)
        np.testing.assert_allclose(y, ref, rtol=1e-6 if dtype == np.float32 else 1e-15, atol=1e-6)
    # Fortran order, a 1-D row, and NaN passing through the clamp.
    xf = np.asfortranarray(x)
    np.testing.assert_array_equal(oracle.uclip_norm(xf, 0.7, 1.5), oracle.uclip_norm(x, 0.7, 1.5))
    row = np.array([0.25, 4.0, -4.0, np.nan], dtype=dtype)
    got = oracle.uclip_norm(row, 2.0, [1.0, 2.0, 3.0, 1.0], [0.5, 0.0, -0.5, 0.0])
    np.testing.assert_array_equal(got[:3], np.array([1.0, 2.0, -3.5], dtype=dtype))
    assert np.isnan(got[3])


# ---- SPEC section 1: the model, read from the checkpoint with NumPy alone -------------------------

def read_safetensors(path):
    """Every tensor of a safetensors file as float64 (bf16 widened by its bit pattern)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = body[begin:end]
        if meta["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype={"F32": "<f4", "F16": "<f2", "F64": "<f8"}[meta["dtype"]])
        out[name] = arr.astype(np.float64).reshape(meta["shape"])
    return out


def model_reference(model_dir, ids):
    cfg = json.load(open(model_dir / "config.json"))
    w = read_safetensors(model_dir / "model.safetensors")
    d, hq, hkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hp1 = cfg["hp1"]

    def norm(x, prefix):
        return uclip_reference(x, w[prefix + ".alpha"], w[prefix + ".weight"], w.get(prefix + ".bias"))

    def rope(x, pos):  # rotate-half over the whole head: y[j] = x[j] cos a - x[j+D/2] sin a, ...
        j = np.arange(d // 2)
        a = pos[:, None] * cfg["rope_theta"] ** (-2.0 * j / d)
        cos, sin = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
        lo, hi = x[..., : d // 2], x[..., d // 2 :]
        return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1)

    ids = np.asarray(ids)
    pos = np.arange(len(ids), dtype=np.float64)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = norm(x, p + "input_layernorm")
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(len(ids), hq, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(len(ids), hkv, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(len(ids), hkv, d)
        q = rope(norm(q, p + "self_attn.q_norm"), pos)
        k = rope(norm(k, p + "self_attn.k_norm"), pos)
        a, _ = hp1_reference(q, k, v, [len(ids)], w[p + "self_attn.hp1_sigma"], w[p + "self_attn.hp1_gamma"],
                             hp1["fir_k"], hp1["relu_pre"], (hp1["clip_min"], hp1["clip_max"]), hp1["scale"])
        x = x + norm(a.reshape(len(ids), hq * d) @ w[p + "self_attn.o_proj.weight"].T, p + "post_attention_layernorm")
        h = norm(x, p + "pre_feedforward_layernorm")
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        m = (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        x = x + norm(m, p + "post_feedforward_layernorm")
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return norm(x, "model.norm") @ head.T


def test_forward_logits_matches_the_spec_model(tiny_model):
    ids = [84, 104, 101, 32, 114, 300, 7, 509, 256, 42, 1, 0, 200, 33, 17, 18, 19, 20]
    ref = model_reference(tiny_model, ids)
    got = oracle.forward_logits(tiny_model, ids)
    assert got.dtype == np.float64 and got.shape == (len(ids), 512)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    f32 = oracle.forward_logits(str(tiny_model), np.array(ids), precision="f32")
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    bf16 = oracle.forward_logits(tiny_model, ids, precision="bf16")
    assert np.linalg.norm(bf16 - ref) / np.linalg.norm(ref) < 5e-2
    assert np.abs(bf16 - ref).max() > 0, "bf16 mode rounds"
