//! The elementwise ops against the oracle: embedding gather, alone and with the first layer's
//! input norm, SiLU-multiply (on the interleaved gate/up layout) and the fused Peri-LN residual
//! step.

use std::sync::Arc;

use gpu::gemm::layout;
use gpu::ops::{check_token_ids, Embedding, Faults, PeriLn, SiluMul};
use gpu::Gpu;
use half::bf16;
use ndarray::ArrayView2;
use oracle::model::weights::UClipNormWeights;
use oracle::norm::uclipnorm;
use oracle::scalar::round_bf16;
use verify::rng::Counter;

use super::compare::{
    bf16_ulp, compare_bf16, compare_l2, draw_norm, g, random_bf16, same_bits, slack, widen, Check, ALL_NORM_SHAPES,
    POISON,
};

/// `bf16(norm(x))` in f64 over rows of `hidden`: the oracle's norm and its round point.
fn norm_rounded(x: &[f64], hidden: usize, w: &UClipNormWeights<f64>) -> Vec<f64> {
    let view = ArrayView2::from_shape((x.len() / hidden, hidden), x).expect("whole rows");
    uclipnorm(view, w).iter().map(|&v| round_bf16(v)).collect()
}

pub fn embedding_gathers_rows_bit_for_bit(gpu: &Arc<Gpu>) -> Check {
    let op = g(Embedding::new(gpu))?;
    let mut faults = g(Faults::new(gpu))?;
    for (case, &(vocab, hidden, tokens)) in
        [(512usize, 64usize, 1usize), (512, 1024, 7), (151_936, 64, 300), (512, 64, 300)].iter().enumerate()
    {
        let seed = 100 + case as u64;
        let table = random_bf16(&Counter::new(seed, 1), vocab * hidden, 2.0);
        let picks = Counter::new(seed, 2);
        let mut ids: Vec<u32> = (0..tokens).map(|t| picks.below(vocab as u64, &[t as u64]) as u32).collect();
        ids[0] = vocab as u32 - 1;
        g(check_token_ids(&ids, vocab))?;
        let table_d = g(gpu.upload(&table))?;
        let ids_d = g(gpu.upload(&ids))?;
        let mut out = g(gpu.upload(&vec![POISON; tokens * hidden]))?;
        g(op.run(&table_d.as_view(), vocab, &ids_d.as_view(), &mut out.as_view_mut(), &mut faults))?;
        let got = g(gpu.download(&out))?;
        let want: Vec<bf16> =
            ids.iter().flat_map(|&id| table[id as usize * hidden..][..hidden].iter().copied()).collect();
        same_bits(&format!("embedding vocab {vocab} hidden {hidden} tokens {tokens}"), &got, &want)?;
        g(faults.check())?;
    }

    // An id past the vocabulary: the host refuses it by name; the kernel, handed it anyway,
    // fills that row with NaN, gathers the others, and reports the id.
    let (vocab, hidden) = (512usize, 64usize);
    let table = random_bf16(&Counter::new(7, 1), vocab * hidden, 2.0);
    let ids = [3u32, 511, vocab as u32 + 5, 0];
    let refused = check_token_ids(&ids, vocab).map_err(|e| e.to_string());
    if !refused.as_ref().is_err_and(|e| e.contains("token id 517 at position 2")) {
        return Err(format!("check_token_ids should refuse id 517 at position 2, said {refused:?}"));
    }
    let table_d = g(gpu.upload(&table))?;
    let ids_d = g(gpu.upload(&ids))?;
    let mut out = g(gpu.upload(&vec![POISON; ids.len() * hidden]))?;
    g(op.run(&table_d.as_view(), vocab, &ids_d.as_view(), &mut out.as_view_mut(), &mut faults))?;
    let got = g(gpu.download(&out))?;
    if !got[2 * hidden..3 * hidden].iter().all(|v| v.is_nan()) {
        return Err("the row of the out-of-range id is not all NaN".into());
    }
    for t in [0usize, 1, 3] {
        let id = ids[t] as usize;
        same_bits("embedding around a bad id", &got[t * hidden..][..hidden], &table[id * hidden..][..hidden])?;
    }
    match faults.check() {
        Err(e) if e.to_string().contains("1 token id(s)") && e.to_string().contains("517") => Ok(()),
        other => Err(format!("the fault word should report token id 517, got {other:?}")),
    }
}

/// The gate/up GEMM's output in the device layout: each token's row of `[gate; up]` (`2 I`)
/// reordered as the interleaved gate/up weight orders its rows (`gpu::gemm::layout`).
fn interleaved(gate_up: &[bf16], inter: usize) -> Vec<bf16> {
    gate_up
        .chunks(2 * inter)
        .flat_map(|row| layout::permute_rows(row, 1, |r| layout::gate_up_source(r, inter)))
        .collect()
}

pub fn silu_mul_matches_the_oracle(gpu: &Arc<Gpu>) -> Check {
    let op = g(SiluMul::new(gpu))?;
    for (case, &(tokens, inter)) in [(1usize, 64usize), (7, 1024), (300, 192), (300, 1536)].iter().enumerate() {
        // Each row the gate projection, then the up projection; uploaded interleaved.
        let mut gate_up = random_bf16(&Counter::new(200 + case as u64, 1), tokens * 2 * inter, 6.0);
        // Gates far into both tails, where exp(-g) is huge or tiny (still finite in f32).
        for (k, v) in [30.0, -30.0, -80.0, 80.0, 0.0].into_iter().enumerate() {
            gate_up[k * 3] = bf16::from_f64(v);
        }
        let want: Vec<f64> = (0..tokens * inter)
            .map(|e| {
                let (t, c) = (e / inter, e % inter);
                let gv = gate_up[t * 2 * inter + c].to_f64();
                let uv = gate_up[t * 2 * inter + inter + c].to_f64();
                round_bf16(gv / (1.0 + (-gv).exp()) * uv)
            })
            .collect();
        let gate_up_d = g(gpu.upload(&interleaved(&gate_up, inter)))?;
        let mut out = g(gpu.upload(&vec![POISON; tokens * inter]))?;
        g(op.run(&gate_up_d.as_view(), inter, &mut out.as_view_mut()))?;
        let got = g(gpu.download(&out))?;
        compare_bf16(&format!("silu_mul tokens {tokens} I {inter}"), &got, &want, None, 0.0)?;
    }
    Ok(())
}

pub fn peri_ln_residual_rounds_like_the_oracle(gpu: &Arc<Gpu>) -> Check {
    let op = g(PeriLn::new(gpu))?;
    for (case, &(tokens, hidden)) in [(1usize, 64usize), (7, 1024), (300, 64), (300, 1024)].iter().enumerate() {
        for (i, &shape) in ALL_NORM_SHAPES.iter().enumerate() {
            let seed = 300 + 16 * case as u64 + i as u64;
            let after = draw_norm(gpu, seed, shape, hidden)?;
            let before = draw_norm(gpu, seed + 1000, ALL_NORM_SHAPES[(i + 3) % 8], hidden)?;
            let n = tokens * hidden;
            let a = random_bf16(&Counter::new(seed, 10), n, 3.0);
            let x = random_bf16(&Counter::new(seed, 11), n, 2.0);
            let label =
                format!("tokens {tokens} hidden {hidden} shapes {shape:?} / {:?}", ALL_NORM_SHAPES[(i + 3) % 8]);

            // The oracle's chain: PostAttnNorm, AttnResidual, PreFfnNorm, each rounded.
            let normed = norm_rounded(&widen(&a), hidden, &after.oracle);
            let x_want: Vec<f64> = widen(&x).iter().zip(&normed).map(|(x, n)| round_bf16(x + n)).collect();
            let h_chain = norm_rounded(&x_want, hidden, &before.oracle);

            let (a_d, x_d) = (g(gpu.upload(&a))?, g(gpu.upload(&x))?);
            let mut x_out = g(gpu.upload(&vec![POISON; n]))?;
            let mut h_out = g(gpu.upload(&vec![POISON; n]))?;
            g(op.residual(
                &a_d.as_view(),
                &x_d.as_view(),
                &after.device,
                &before.device,
                &mut x_out.as_view_mut(),
                &mut h_out.as_view_mut(),
            ))?;
            let (x_got, h_got) = (g(gpu.download(&x_out))?, g(gpu.download(&h_out))?);

            // x_out may also carry one ulp of the normed term, should that term's f32 value have
            // rounded to the other bf16 neighbour; h_out is held against the norm of x_out itself.
            let normed_ulp: Vec<f64> = normed.iter().map(|&v| bf16_ulp(v)).collect();
            compare_bf16(&format!("x_out {label}"), &x_got, &x_want, Some(&normed_ulp), slack(&normed))?;
            let h_want = norm_rounded(&widen(&x_got), hidden, &before.oracle);
            compare_bf16(&format!("h_out {label}"), &h_got, &h_want, None, slack(&h_want))?;
            compare_l2(&format!("h_out against the whole oracle chain, {label}"), &h_got, &h_chain)?;
            same_bits(&format!("a untouched {label}"), &g(gpu.download(&a_d))?, &a)?;
            same_bits(&format!("x untouched {label}"), &g(gpu.download(&x_d))?, &x)?;
        }
    }
    Ok(())
}

/// The gather with layer 0's input norm (`Embedding::run_normed`, the step's first op): x the
/// gathered rows bit for bit, h the oracle's norm of them at its round point, for every shape of
/// the norm's parameters; a row of an id past the vocabulary is NaN in both and reported.
pub fn embedding_norm_matches_the_oracle_in_every_shape(gpu: &Arc<Gpu>) -> Check {
    let op = g(Embedding::new(gpu))?;
    let mut faults = g(Faults::new(gpu))?;
    for (case, &(vocab, tokens, hidden)) in
        [(512usize, 1usize, 1024usize), (64, 7, 64), (512, 300, 1024)].iter().enumerate()
    {
        for (i, &shape) in ALL_NORM_SHAPES.iter().enumerate() {
            let seed = 500 + 16 * case as u64 + i as u64;
            let norm = draw_norm(gpu, seed, shape, hidden)?;
            let table = random_bf16(&Counter::new(seed, 10), vocab * hidden, 3.0);
            let picks = Counter::new(seed, 11);
            let mut ids: Vec<u32> = (0..tokens).map(|t| picks.below(vocab as u64, &[t as u64]) as u32).collect();
            // The last token's id is past the vocabulary where there are several.
            let bad = (tokens > 1).then(|| tokens - 1);
            if let Some(t) = bad {
                ids[t] = vocab as u32 + 3;
            }
            let gathered: Vec<bf16> = (0..tokens)
                .flat_map(|t| {
                    if bad == Some(t) {
                        vec![bf16::NAN; hidden]
                    } else {
                        table[ids[t] as usize * hidden..][..hidden].to_vec()
                    }
                })
                .collect();
            let good = bad.unwrap_or(tokens) * hidden;
            let want = norm_rounded(&widen(&gathered[..good]), hidden, &norm.oracle);
            let (table_d, ids_d) = (g(gpu.upload(&table))?, g(gpu.upload(&ids))?);
            let mut x = g(gpu.upload(&vec![POISON; tokens * hidden]))?;
            let mut h = g(gpu.upload(&vec![POISON; tokens * hidden]))?;
            let (ids_v, table_v) = (ids_d.as_view(), table_d.as_view());
            let (mut x_v, mut h_v) = (x.as_view_mut(), h.as_view_mut());
            g(op.run_normed(&table_v, vocab, &ids_v, &norm.device, &mut x_v, &mut h_v, &mut faults))?;
            let (got_x, got_h) = (g(gpu.download(&x))?, g(gpu.download(&h))?);
            let label = format!("embedding_norm vocab {vocab} tokens {tokens} hidden {hidden} {shape:?}");
            same_bits(&format!("x of {label}"), &got_x[..good], &gathered[..good])?;
            compare_bf16(&format!("h of {label}"), &got_h[..good], &want, None, slack(&want))?;
            if !got_x[good..].iter().chain(&got_h[good..]).all(|v| v.is_nan()) {
                return Err(format!("{label}: the out-of-range id's row is not NaN in x and h"));
            }
            match (bad, faults.check()) {
                (None, Ok(())) => {}
                (Some(_), Err(e)) if e.to_string().contains(&format!("{}", vocab + 3)) => {}
                (_, other) => return Err(format!("{label}: the fault word said {other:?}")),
            }
        }
    }
    Ok(())
}

/// The elementwise passes' hardware bf16 rounding (`cvt.rn`, the integer form for NaN) gives the
/// integer definition's bits on every f32 bit pattern, and the check catches a difference planted
/// in it.
pub fn bf16_rounding_matches_its_definition_on_every_f32(gpu: &Arc<Gpu>) -> Check {
    let real = g(gpu::rounding_check::bf16_rounding(gpu, None))?;
    if real.mismatches != 0 {
        let first = real.first.unwrap_or_default();
        return Err(format!(
            "{} f32 patterns round differently from the integer definition; the lowest {first:#010x} ({:e}), whose bf16 is {:#06x}",
            real.mismatches,
            f32::from_bits(first),
            half::bf16::from_f32(f32::from_bits(first)).to_bits()
        ));
    }
    for planted in [0x3F80_8000u32, 0x0000_0001, 0xFF7F_FFFF] {
        let found = g(gpu::rounding_check::bf16_rounding(gpu, Some(planted)))?;
        if found.mismatches == 0 || found.first != Some(planted) {
            return Err(format!("a difference planted at {planted:#010x} was reported as {found:?}"));
        }
    }
    Ok(())
}
