//! `asynct.oracle.hp1_attention`: the oracle's exact HP1 (SPEC section 2) on the tensors a
//! PyTorch user holds, `[tokens, heads, D]` packed sequences with per-sequence lengths.
//!
//! The oracle takes what a GPU kernel takes: a paged KV cache, a block table, sequence lengths
//! and query offsets. This module maps the packed layout onto it and changes nothing else: each
//! sequence's keys and values are copied into blocks of its own, every token of a sequence is a
//! query (the self-attention of training, `query_len == seq_len`), and the output comes from
//! [`hp1_direct`], the definition every other path is held against. The gate weights, on
//! request, come from the oracle's own [`Gate`](oracle::hp1::Gate) over the same scores.

use ndarray::parallel::prelude::*;
use ndarray::{s, Array2, Array3, Array4, ArrayView3, Axis, Ix3};
use numpy::{Element, IntoPyArray, PyUntypedArrayMethods};
use oracle::hp1::direct::hp1_direct;
use oracle::hp1::{AttnMetadata, Hp1Inputs, Hp1Params};
use oracle::Scalar;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::args::{check_ndim, float_dtype, ints, per_head, scalar, typed, Dtype};
use crate::errors::{from_oracle, value_error};

/// Tokens per block of the paged cache the packed keys are copied into. Any size gives the same
/// output (the oracle reads key `t` wherever its block sits); 16 is the engine's.
const BLOCK: usize = 16;

/// HP1 attention of packed sequences: `q` `[tokens, Hq, D]`, `k` and `v` `[tokens, Hkv, D]`
/// (float32 or float64, all one dtype); the result has `q`'s shape and dtype.
#[pyfunction]
#[pyo3(
    signature = (
        q, k, v, lengths, sigma, gamma, fir_k=None, relu_pre=None, clip=None,
        *, positions=None, scale=None, return_weights=None
    ),
    text_signature = "(q, k, v, lengths, sigma, gamma, fir_k=3, relu_pre=True, clip=(0.0, 1.0), *, \
                      positions=None, scale=None, return_weights=False)"
)]
#[allow(clippy::too_many_arguments)]
pub fn hp1_attention<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    lengths: Option<&Bound<'py, PyAny>>,
    sigma: &Bound<'py, PyAny>,
    gamma: &Bound<'py, PyAny>,
    fir_k: Option<&Bound<'py, PyAny>>,
    relu_pre: Option<&Bound<'py, PyAny>>,
    clip: Option<&Bound<'py, PyAny>>,
    positions: Option<&Bound<'py, PyAny>>,
    scale: Option<&Bound<'py, PyAny>>,
    return_weights: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let args = Args {
        q,
        k,
        v,
        lengths,
        positions,
        sigma,
        gamma,
        fir_k: scalar(fir_k, 3, "fir_k", "an integer")?,
        relu_pre: scalar(relu_pre, true, "relu_pre", "a bool")?,
        clip: scalar(clip, (0.0, 1.0), "clip", "a (min, max) pair of floats")?,
        scale: scalar(scale, None, "scale", "a float or None")?,
        return_weights: scalar(return_weights, false, "return_weights", "a bool")?,
    };
    match float_dtype(q, "q")? {
        Dtype::F32 => run::<f32>(py, &args),
        Dtype::F64 => run::<f64>(py, &args),
    }
}

/// The Python arguments, before validation.
struct Args<'a, 'py> {
    q: &'a Bound<'py, PyAny>,
    k: &'a Bound<'py, PyAny>,
    v: &'a Bound<'py, PyAny>,
    lengths: Option<&'a Bound<'py, PyAny>>,
    positions: Option<&'a Bound<'py, PyAny>>,
    sigma: &'a Bound<'py, PyAny>,
    gamma: &'a Bound<'py, PyAny>,
    fir_k: i64,
    relu_pre: bool,
    clip: (f64, f64),
    scale: Option<f64>,
    return_weights: bool,
}

fn run<'py, T: Scalar + Element>(py: Python<'py>, a: &Args<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
    let q = typed::<T>(a.q, "q", "q")?;
    let k = typed::<T>(a.k, "k", "q")?;
    let v = typed::<T>(a.v, "v", "q")?;
    check_ndim(q.shape(), 3, "q", "[tokens, heads, D]")?;
    check_ndim(k.shape(), 3, "k", "[tokens, kv_heads, D]")?;
    check_ndim(v.shape(), 3, "v", "[tokens, kv_heads, D]")?;
    let (tokens, heads, d) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let kv_heads = k.shape()[1];
    if heads == 0 || d == 0 {
        return Err(value_error("q", format!("needs at least one head and D >= 1, got shape {:?}", q.shape())));
    }
    if k.shape()[0] != tokens || k.shape()[2] != d {
        return Err(value_error("k", format!("expected shape [{tokens}, kv_heads, {d}] (as q), got {:?}", k.shape())));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(value_error("k", format!("{kv_heads} kv heads do not divide q's {heads} heads")));
    }
    if v.shape() != k.shape() {
        return Err(value_error("v", format!("expected shape {:?} (as k), got {:?}", k.shape(), v.shape())));
    }
    let lengths = sequence_lengths(a.lengths, a.positions, tokens)?;
    let cast = |x: Vec<f64>| x.into_iter().map(T::of).collect::<Vec<T>>();
    let sigma = cast(per_head(a.sigma, "sigma", heads)?);
    let gamma = cast(per_head(a.gamma, "gamma", heads)?);
    let params = params(a, d)?.cast::<T>();
    let as3 = |x: &numpy::PyReadonlyArrayDyn<'py, T>| -> Array3<T> {
        x.as_array().to_owned().into_dimensionality::<Ix3>().expect("three dimensions were checked")
    };
    let (q, k, v) = (as3(&q), as3(&k), as3(&v));
    let want_weights = a.return_weights;
    let (out, weights) = py
        .detach(move || -> oracle::Result<_> {
            let cache = Paged::new(k.view(), v.view(), &lengths);
            let inputs = Hp1Inputs {
                q: q.view(),
                key_cache: cache.key.view(),
                value_cache: cache.value.view(),
                meta: &cache.meta,
                sigma: &sigma,
                gamma: &gamma,
                params,
            };
            let out = hp1_direct(&inputs)?;
            let longest = lengths.iter().copied().max().unwrap_or(0);
            Ok((out, want_weights.then(|| gate_weights(&inputs, longest))))
        })
        .map_err(from_oracle)?;
    let out = out.into_pyarray(py).into_any();
    match weights {
        None => Ok(out),
        Some(w) => Ok(PyTuple::new(py, [out, w.into_pyarray(py).into_any()])?.into_any()),
    }
}

/// The shared gate parameters, each checked here so that a refusal names the Python argument.
fn params(a: &Args<'_, '_>, head_dim: usize) -> PyResult<Hp1Params<f64>> {
    if a.fir_k < 1 {
        return Err(value_error("fir_k", format!("must be at least 1, got {}", a.fir_k)));
    }
    let (lo, hi) = a.clip;
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Err(value_error("clip", format!("expected finite (min, max) with min < max, got ({lo}, {hi})")));
    }
    let scale = a.scale.unwrap_or(1.0 / (head_dim as f64).sqrt());
    if !scale.is_finite() {
        return Err(value_error("scale", format!("must be finite, got {scale}")));
    }
    Ok(Hp1Params { scale, fir_k: a.fir_k as usize, relu_pre: a.relu_pre, clip_min: lo, clip_max: hi })
}

/// Each sequence's length, from `lengths`, from `positions` (a sequence starts at each 0 and
/// counts up by one), or, with neither, one sequence of every token.
fn sequence_lengths(
    lengths: Option<&Bound<'_, PyAny>>,
    positions: Option<&Bound<'_, PyAny>>,
    tokens: usize,
) -> PyResult<Vec<usize>> {
    if tokens > i32::MAX as usize {
        return Err(value_error("q", format!("has {tokens} tokens, more than the 2^31 - 1 the metadata holds")));
    }
    match (lengths, positions) {
        (Some(_), Some(_)) => Err(value_error("positions", "give lengths or positions, not both")),
        (None, None) => Ok(vec![tokens]),
        (Some(l), None) => {
            let l = ints(l, "lengths")?;
            if let Some((i, n)) = l.iter().enumerate().find(|(_, &n)| n < 0) {
                return Err(value_error("lengths", format!("entry {i} is {n}, expected >= 0")));
            }
            let total: i64 = l.iter().sum();
            if total != tokens as i64 {
                return Err(value_error("lengths", format!("sum to {total}, but q has {tokens} tokens")));
            }
            Ok(l.into_iter().map(|n| n as usize).collect())
        }
        (None, Some(p)) => {
            let p = ints(p, "positions")?;
            if p.len() != tokens {
                return Err(value_error("positions", format!("has {} entries, q has {tokens} tokens", p.len())));
            }
            let mut lengths: Vec<usize> = Vec::new();
            for (i, &pos) in p.iter().enumerate() {
                if pos == 0 {
                    lengths.push(1);
                    continue;
                }
                match lengths.last_mut() {
                    Some(len) if pos == p[i - 1] + 1 => *len += 1,
                    _ => {
                        let prev = if i == 0 { "none".to_string() } else { p[i - 1].to_string() };
                        return Err(value_error(
                            "positions",
                            format!(
                                "entry {i} is {pos} after {prev}: each sequence counts 0, 1, 2, ... and a new one \
                                 starts at 0"
                            ),
                        ));
                    }
                }
            }
            Ok(lengths)
        }
    }
}

/// Packed keys and values copied into a paged cache, each sequence in blocks of its own.
struct Paged<T> {
    key: Array4<T>,
    value: Array4<T>,
    meta: AttnMetadata,
}

impl<T: Scalar> Paged<T> {
    fn new(k: ArrayView3<'_, T>, v: ArrayView3<'_, T>, lengths: &[usize]) -> Self {
        let (_, kv_heads, d) = k.dim();
        let blocks: Vec<usize> = lengths.iter().map(|l| l.div_ceil(BLOCK)).collect();
        let num_blocks: usize = blocks.iter().sum();
        let mut key = Array4::zeros((num_blocks, BLOCK, kv_heads, d));
        let mut value = Array4::zeros((num_blocks, BLOCK, kv_heads, d));
        let mut block_table = Array2::<i32>::zeros((lengths.len(), blocks.iter().copied().max().unwrap_or(0).max(1)));
        let mut query_start_loc = vec![0i32];
        let (mut first_block, mut first_token) = (0, 0);
        for (seq, &len) in lengths.iter().enumerate() {
            for b in 0..blocks[seq] {
                block_table[[seq, b]] = (first_block + b) as i32;
            }
            for t in 0..len {
                let (b, o) = (first_block + t / BLOCK, t % BLOCK);
                key.slice_mut(s![b, o, .., ..]).assign(&k.slice(s![first_token + t, .., ..]));
                value.slice_mut(s![b, o, .., ..]).assign(&v.slice(s![first_token + t, .., ..]));
            }
            first_block += blocks[seq];
            first_token += len;
            query_start_loc.push(first_token as i32);
        }
        let seq_lens = lengths.iter().map(|&l| l as i32).collect();
        Self { key, value, meta: AttnMetadata { block_table, seq_lens, query_start_loc } }
    }
}

/// `[tokens, Hq, longest]` gate weights `p_t` of each query row over the keys of its own
/// sequence (key `t` at column `t`), zero past the row's position.
fn gate_weights<T: Scalar>(inp: &Hp1Inputs<'_, T>, longest: usize) -> Array3<T> {
    let (tokens, heads, _) = inp.q.dim();
    let mut w = Array3::<T>::zeros((tokens, heads, longest));
    let rows = inp.meta.rows();
    w.axis_iter_mut(Axis(0)).into_par_iter().zip(rows.par_iter()).for_each(|(mut wr, &row)| {
        for h in 0..heads {
            let s = inp.scores(row, h, 0..row.pos + 1);
            let mut p = vec![T::zero(); s.len()];
            inp.gate(h).apply(&[], &s, &mut p);
            for (t, pt) in p.into_iter().enumerate() {
                wr[[h, t]] = pt;
            }
        }
    });
    w
}
