//! Argmax and the sampler against `oracle::decode::sampler`: the same token for every row, and
//! the same number of survivors of top-k/top-p, over batches that mix temperatures, top-k and
//! top-p per row, on random logits (distinct values) and on bf16-rounded ones (many exact ties).
//! Rows of bf16 values also go through the entries that read bf16 (the engine's: the LM head's
//! output as it is), which must draw what the f32 entries draw from the same values.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use gpu::ops::{Faults, Logit, Sampler, SamplingRow};
use gpu::Gpu;
use half::bf16;
use oracle::decode::{sample, survivors, SamplingParams};
use rayon::prelude::*;
use verify::rng::Counter;

use super::compare::{g, Check};

const ROWS: usize = 64;

/// `(temperature, top_k, top_p, min_p)` per row, cycled: greedy, pure temperature, top-k 1 and
/// 50, top-p 0.5 and 0.9 with and without top-k, a top-k past the shared-memory sort (3000) with
/// top-p (0.9999 puts the cut inside the tie group at the top-k boundary), and min-p alone, with
/// top-k and top-p, and at temperature 0 (where it changes nothing).
const CONFIGS: [(f32, usize, f32, f32); 17] = [
    (0.0, 0, 1.0, 0.0),
    (1.0, 0, 1.0, 0.0),
    (0.7, 50, 1.0, 0.0),
    (1.0, 1, 1.0, 0.0),
    (1.3, 0, 0.9, 0.0),
    (0.8, 0, 0.5, 0.0),
    (1.0, 50, 0.9, 0.0),
    (0.6, 50, 0.5, 0.0),
    (1.0, 3000, 0.9, 0.0),
    (2.0, 3000, 1.0, 0.0),
    (0.9, 0, 0.99, 0.0),
    (0.0, 50, 0.5, 0.0),
    (1.0, 3000, 0.9999, 0.0),
    (1.0, 0, 1.0, 0.05),
    (1.5, 0, 1.0, 0.3),
    (0.7, 50, 0.9, 0.1),
    (0.0, 0, 1.0, 0.2),
];

/// `rows` rows of `vocab` logits: each row a sum of two uniforms times a scale of 1, 3 or 8
/// (flat to peaked), rounded to bf16 when `tied` (as the lm_head output is: many exact ties).
fn draw_logits(seed: u64, rows: usize, vocab: usize, tied: bool) -> Vec<f32> {
    let c = Counter::new(seed, 30);
    (0..rows * vocab)
        .map(|i| {
            let scale = [1.0, 3.0, 8.0][(i / vocab) % 3];
            let x = scale * (c.uniform(&[i as u64, 0]) + c.uniform(&[i as u64, 1]));
            if tied {
                bf16::from_f64(x).to_f32()
            } else {
                x as f32
            }
        })
        .collect()
}

/// One launch of the sampler into freshly poisoned token and survivor buffers, one per row of
/// `params`: (tokens, survivor counts). The fault word is the caller's to check.
fn draw_once<T: Logit>(
    gpu: &Gpu,
    sampler: &Sampler,
    logits: &CudaSlice<T>,
    vocab: usize,
    params: &CudaSlice<SamplingRow>,
    faults: &mut Faults,
) -> Result<(Vec<u32>, Vec<u32>), String> {
    let rows = params.len();
    let mut tokens = g(gpu.upload(&vec![u32::MAX; rows]))?;
    let mut kept = g(gpu.upload(&vec![u32::MAX; rows]))?;
    g(sampler.sample(
        &logits.as_view(),
        vocab,
        &params.as_view(),
        &mut tokens.as_view_mut(),
        &mut kept.as_view_mut(),
        faults,
    ))?;
    Ok((g(gpu.download(&tokens))?, g(gpu.download(&kept))?))
}

/// Draws with the GPU and the oracle and compares every row's token and survivor count; with
/// `from_bf16` (rows whose every value is a bf16 one) the bf16 entry must draw the same again.
#[allow(clippy::too_many_arguments)]
fn sample_and_compare(
    gpu: &Arc<Gpu>,
    sampler: &Sampler,
    logits: &[f32],
    vocab: usize,
    params: &[SamplingParams],
    steps: &[u64],
    label: &str,
    from_bf16: bool,
) -> Check {
    let rows = params.len();
    let device_rows: Vec<SamplingRow> = params
        .iter()
        .zip(steps)
        .map(|(p, &step)| SamplingRow::new(p.temperature, p.top_k, p.top_p, p.min_p, p.seed, step))
        .collect::<gpu::Result<_>>()
        .map_err(|e| e.to_string())?;
    let mut faults = g(Faults::new(gpu))?;
    let (logits_d, params_d) = (g(gpu.upload(logits))?, g(gpu.upload(&device_rows))?);
    let mut draw = || -> Result<(Vec<u32>, Vec<u32>), String> {
        let drawn = draw_once(gpu, sampler, &logits_d, vocab, &params_d, &mut faults)?;
        g(faults.check())?;
        Ok(drawn)
    };
    let (got, got_kept) = draw()?;

    let want: Vec<(u32, usize)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let row = &logits[r * vocab..][..vocab];
            let token = sample(row, &params[r], steps[r]).expect("valid rows");
            (token, survivors(row, &params[r]).expect("valid rows").len())
        })
        .collect();
    for r in 0..rows {
        let (token, count) = want[r];
        if got[r] != token || got_kept[r] as usize != count {
            let p = &params[r];
            return Err(format!(
                "{label} row {r} (T {}, top_k {}, top_p {}, min_p {}, seed {}, step {}): GPU token {} with {} survivors, oracle {token} with {count}",
                p.temperature, p.top_k, p.top_p, p.min_p, p.seed, steps[r], got[r], got_kept[r]
            ));
        }
    }

    // The same inputs give the same tokens again.
    if draw()?.0 != got {
        return Err(format!("{label}: a second run drew different tokens"));
    }
    if from_bf16 {
        let narrow = as_bf16(logits).ok_or_else(|| format!("{label}: the rows are not bf16 values"))?;
        let drawn = draw_once(gpu, sampler, &g(gpu.upload(&narrow))?, vocab, &params_d, &mut faults)?;
        g(faults.check())?;
        if let Some(r) = (0..rows).find(|&r| (drawn.0[r], drawn.1[r]) != (got[r], got_kept[r])) {
            return Err(format!(
                "{label} row {r}: from bf16 token {} with {} survivors, from f32 {} with {}",
                drawn.0[r], drawn.1[r], got[r], got_kept[r]
            ));
        }
    }
    Ok(())
}

/// The same values as bf16, when every one of them is a bf16 value.
fn as_bf16(logits: &[f32]) -> Option<Vec<bf16>> {
    let narrow: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
    narrow.iter().zip(logits).all(|(n, x)| n.to_f32().to_bits() == x.to_bits()).then_some(narrow)
}

pub fn sampler_draws_the_oracles_tokens(gpu: &Arc<Gpu>) -> Check {
    let sampler = g(Sampler::new(gpu))?;
    // 37: rows off 16-byte alignment and, split over a row's CTAs on Hopper, slices left empty.
    for vocab in [37usize, 512, 151_936] {
        for tied in [false, true] {
            for round in 0..3u64 {
                let seed = 900 + round + if tied { 10 } else { 0 } + vocab as u64;
                let logits = draw_logits(seed, ROWS, vocab, tied);
                let seeds = Counter::new(seed, 31);
                let params: Vec<SamplingParams> = (0..ROWS)
                    .map(|r| {
                        let (temperature, top_k, top_p, min_p) = CONFIGS[(r + round as usize) % CONFIGS.len()];
                        SamplingParams { temperature, top_k, top_p, min_p, seed: seeds.bits(&[r as u64]) }
                    })
                    .collect();
                let steps: Vec<u64> = (0..ROWS as u64).map(|r| round * 1_000_003 + r * (1 << 33)).collect();
                let label = format!("vocab {vocab} tied {tied} round {round}");
                sample_and_compare(gpu, &sampler, &logits, vocab, &params, &steps, &label, tied)?;
                // A batch small enough for 8 CTAs a row (64 rows take 2): 16 rows, the
                // configurations from the round's own offset, so that the rounds hold each of them.
                let few = 16;
                let label = format!("{label}, {few} rows");
                sample_and_compare(
                    gpu,
                    &sampler,
                    &logits[..few * vocab],
                    vocab,
                    &params[..few],
                    &steps[..few],
                    &label,
                    tied,
                )?;
            }
        }
    }

    // Signed zeros are one value (the lower id first): -0 at id 3 and +0 at id 7, then swapped,
    // above a row of negative logits, under top-k 1, a tiny top-p, and top-k 2.
    let vocab = 512;
    let mut logits: Vec<f32> = draw_logits(5, 4, vocab, false).iter().map(|x| -1.0 - x.abs()).collect();
    for (r, (neg, pos)) in [(0usize, (3usize, 7usize)), (1, (3, 7)), (2, (7, 3)), (3, (7, 3))] {
        logits[r * vocab + neg] = -0.0;
        logits[r * vocab + pos] = 0.0;
    }
    let params: Vec<SamplingParams> = [(1.0, 1, 1.0), (1.0, 0, 0.001), (1.0, 1, 1.0), (0.7, 2, 1.0)]
        .iter()
        .map(|&(temperature, top_k, top_p)| SamplingParams { temperature, top_k, top_p, min_p: 0.0, seed: 11 })
        .collect();
    sample_and_compare(gpu, &sampler, &logits, vocab, &params, &[0, 1, 2, 3], "signed zeros", false)
}

pub fn argmax_takes_the_lowest_id_of_the_largest_logit(gpu: &Arc<Gpu>) -> Check {
    let sampler = g(Sampler::new(gpu))?;
    let mut faults = g(Faults::new(gpu))?;
    // 151,936 takes the vector loads and a scalar tail; 1,001 (rows off 16-byte alignment) and
    // 512 (shorter than one vector round) the scalar loop alone; 20 leaves slices empty where a
    // row is split over 8 CTAs. The planted ties lie in different slices of a split row.
    for vocab in [20usize, 512, 1001, 151_936] {
        let mut logits = draw_logits(40 + vocab as u64, ROWS, vocab, true);
        // Planted ties of the row maximum, and a signed-zero tie (-0 == +0, the lower id wins).
        for r in [1usize, 5, 9] {
            let row = &mut logits[r * vocab..][..vocab];
            let top = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) + 1.0;
            row[vocab - 1] = top;
            row[vocab / 3] = top;
            row[vocab / 2] = top;
        }
        for (r, (neg, pos)) in [(2usize, (3usize, 7usize)), (3, (7, 3))] {
            let row = &mut logits[r * vocab..][..vocab];
            row.iter_mut().for_each(|x| *x = -1.0 - x.abs());
            row[neg] = -0.0;
            row[pos] = 0.0;
        }
        // Every value a bf16 one, so the bf16 entry reads the same rows: rounding keeps each
        // planted tie a tie and each planted maximum (the row's largest + 1, below 32, where
        // bf16's spacing is 1/8) above the rest.
        logits.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32());
        let want: Vec<u32> = (0..ROWS)
            .map(|r| sample(&logits[r * vocab..][..vocab], &SamplingParams::greedy(), 0).expect("valid rows"))
            .collect();
        let logits_d = g(gpu.upload(&logits))?;
        let mut tokens = g(gpu.upload(&vec![u32::MAX; ROWS]))?;
        g(sampler.argmax(&logits_d.as_view(), vocab, &mut tokens.as_view_mut(), &mut faults))?;
        let got = g(gpu.download(&tokens))?;
        if let Some(r) = (0..ROWS).find(|&r| got[r] != want[r]) {
            return Err(format!("vocab {vocab} row {r}: GPU argmax {}, oracle {}", got[r], want[r]));
        }
        // The planted rows alone: a batch of 4 takes 8 CTAs a row, 64 rows take 2.
        let mut four = g(gpu.upload(&[u32::MAX; 4]))?;
        g(sampler.argmax(&logits_d.slice(..4 * vocab), vocab, &mut four.as_view_mut(), &mut faults))?;
        let got = g(gpu.download(&four))?;
        if got[..] != want[..4] {
            return Err(format!("vocab {vocab}, 4 rows: GPU argmax {got:?}, oracle {:?}", &want[..4]));
        }
        let narrow = g(gpu.upload(&as_bf16(&logits).ok_or("the tied rows are bf16 values")?))?;
        let mut tokens = g(gpu.upload(&vec![u32::MAX; ROWS]))?;
        g(sampler.argmax(&narrow.as_view(), vocab, &mut tokens.as_view_mut(), &mut faults))?;
        let got = g(gpu.download(&tokens))?;
        if let Some(r) = (0..ROWS).find(|&r| got[r] != want[r]) {
            return Err(format!("vocab {vocab} row {r}: GPU argmax of the bf16 row {}, oracle {}", got[r], want[r]));
        }
        g(faults.check())?;
    }
    Ok(())
}

pub fn bad_logit_rows_are_reported_not_sampled(gpu: &Arc<Gpu>) -> Check {
    let sampler = g(Sampler::new(gpu))?;
    let mut faults = g(Faults::new(gpu))?;
    let vocab = 512;
    let mut logits = draw_logits(77, 4, vocab, false);
    logits[2 * vocab + 100] = f32::NAN;
    let params = vec![SamplingRow::new(1.0, 0, 0.9, 0.0, 1, 0).map_err(|e| e.to_string())?; 4];
    let (logits_d, params_d) = (g(gpu.upload(&logits))?, g(gpu.upload(&params))?);
    let (got, got_kept) = draw_once(gpu, &sampler, &logits_d, vocab, &params_d, &mut faults)?;
    if got_kept[2] != 0
        || got.iter().any(|&t| t as usize >= vocab)
        || got_kept.iter().enumerate().any(|(r, &k)| r != 2 && k == 0)
    {
        return Err(format!(
            "the NaN row should give survivors 0 and every row a token: tokens {got:?}, survivors {got_kept:?}"
        ));
    }
    match faults.check() {
        Err(e) if e.to_string().contains("1 logit row(s)") && e.to_string().contains("row 2") => {}
        other => return Err(format!("the fault word should report row 2, got {other:?}")),
    }
    // The bf16 entries see the same NaN (bf16 keeps it).
    let narrow: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
    let (got, got_kept) = draw_once(gpu, &sampler, &g(gpu.upload(&narrow))?, vocab, &params_d, &mut faults)?;
    if got_kept[2] != 0 || got.iter().any(|&t| t as usize >= vocab) {
        return Err(format!("from bf16: the NaN row should give survivors 0: tokens {got:?}, survivors {got_kept:?}"));
    }
    match faults.check() {
        Err(e) if e.to_string().contains("1 logit row(s)") && e.to_string().contains("row 2") => Ok(()),
        other => Err(format!("from bf16: the fault word should report row 2, got {other:?}")),
    }
}
