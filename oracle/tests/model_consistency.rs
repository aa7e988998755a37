//! The forward pass over the paged cache is one function of the token sequence: how a prompt is
//! cut into steps, which other sequences share a step, and which physical blocks hold it must not
//! change its logits.

mod model_common;

use model_common::{prompt, rel_l2, step, tiny, Part};
use ndarray::{s, Array2, Axis};
use oracle::model::forward::Model;
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::LogitRows;
use oracle::Scalar;

fn model<T: Scalar>(seed: u64) -> Model<T> {
    Model::new(tiny(), random_weights(&tiny(), seed).cast(), Rounding::Exact).unwrap()
}

/// The largest relative L2 error of a row of `a` against the same row of `b`.
fn worst_row<T: Scalar>(a: &Array2<T>, b: &Array2<T>) -> f64 {
    a.axis_iter(Axis(0))
        .zip(b.axis_iter(Axis(0)))
        .map(|(x, y)| rel_l2(&x.insert_axis(Axis(0)).to_owned(), &y.insert_axis(Axis(0)).to_owned()))
        .fold(0.0, f64::max)
}

/// Runs `tokens` of one sequence in the blocks `blocks` as steps of the given lengths and stacks
/// the logits of every row.
fn run_in_chunks<T: Scalar>(
    m: &Model<T>,
    cache: &mut KvCache<T>,
    blocks: &[i32],
    tokens: &[u32],
    chunks: &[usize],
) -> Array2<T> {
    let mut rows = vec![];
    let mut done = 0;
    for &c in chunks {
        let part = Part { blocks, cached: done, tokens: &tokens[done..done + c] };
        rows.push(step(m, cache, &[part], LogitRows::All).unwrap().0);
        done += c;
    }
    assert_eq!(done, tokens.len());
    ndarray::concatenate(Axis(0), &rows.iter().map(|r| r.view()).collect::<Vec<_>>()).unwrap()
}

#[test]
fn prefill_chunked_prefill_and_decode_give_the_same_logits() {
    let m = model::<f64>(11);
    let tokens = prompt(1, 45, 512);
    let blocks = [0, 1, 2];
    let whole = run_in_chunks(&m, &mut KvCache::new(&m.dims, 3, 16), &blocks, &tokens, &[45]);
    let chunked = run_in_chunks(&m, &mut KvCache::new(&m.dims, 3, 16), &blocks, &tokens, &[13, 1, 20, 11]);
    let decoded = run_in_chunks(&m, &mut KvCache::new(&m.dims, 3, 16), &blocks, &tokens, &[1; 45]);
    assert!(worst_row(&chunked, &whole) < 1e-12, "chunked: {}", worst_row(&chunked, &whole));
    assert!(worst_row(&decoded, &whole) < 1e-12, "decoded: {}", worst_row(&decoded, &whole));
    // The prompt's tokens matter: a different prompt gives different logits.
    let other = run_in_chunks(&m, &mut KvCache::new(&m.dims, 3, 16), &blocks, &prompt(2, 45, 512), &[45]);
    assert!(rel_l2(&other, &whole) > 1e-2);
}

/// The listed rows' logits are those rows of every row's, bit for bit, in the listed order.
#[test]
fn listed_logits_rows_are_those_rows_of_all() {
    let m = model::<f64>(12);
    let prompts: Vec<Vec<u32>> = [7, 12].iter().enumerate().map(|(i, &n)| prompt(50 + i as u64, n, 512)).collect();
    let blocks: Vec<Vec<i32>> = vec![vec![0], vec![1]];
    let run = |rows| step(&m, &mut KvCache::new(&m.dims, 2, 16), &parts(&blocks, &prompts, &[0, 0]), rows).unwrap().0;
    let all = run(LogitRows::All);
    let listed = [0, 6, 7, 13, 18];
    assert_eq!(run(LogitRows::Listed(&listed)), all.select(ndarray::Axis(0), &listed));
    assert_eq!(run(LogitRows::Listed(&[])).nrows(), 0);
}

fn parts<'a>(blocks: &'a [Vec<i32>], toks: &'a [Vec<u32>], cached: &[usize]) -> Vec<Part<'a>> {
    (0..toks.len()).map(|i| Part { blocks: &blocks[i], cached: cached[i], tokens: &toks[i] }).collect()
}

/// Four sequences of mixed lengths, prefilled in one step and then continued in a step that mixes
/// decodes and a prefill chunk, against each sequence run alone in a fresh cache.
fn batch_matches_alone<T: Scalar>(tol: f64) {
    let m = model::<T>(12);
    let prompts: Vec<Vec<u32>> =
        [1, 7, 23, 40].iter().enumerate().map(|(i, &n)| prompt(20 + i as u64, n, 512)).collect();
    let more: Vec<Vec<u32>> = [1, 1, 5, 1].iter().enumerate().map(|(i, &n)| prompt(30 + i as u64, n, 512)).collect();
    // Sequence i owns blocks 3i..3i+3 of a shared 12-block cache, in a scrambled order.
    let blocks: Vec<Vec<i32>> = (0..4).map(|i| vec![3 * i + 2, 3 * i, 3 * i + 1]).collect();
    let mut cache = KvCache::new(&m.dims, 12, 16);
    let first = step(&m, &mut cache, &parts(&blocks, &prompts, &[0; 4]), LogitRows::All).unwrap().0;
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let second = step(&m, &mut cache, &parts(&blocks, &more, &lens), LogitRows::LastPerSeq).unwrap().0;
    let mut row = 0;
    for i in 0..4 {
        let mut alone = KvCache::new(&m.dims, 3, 16);
        let own = [0, 1, 2];
        let a =
            step(&m, &mut alone, &[Part { blocks: &own, cached: 0, tokens: &prompts[i] }], LogitRows::All).unwrap().0;
        let got = first.slice(s![row..row + lens[i], ..]).to_owned();
        assert!(worst_row(&got, &a) < tol, "seq {i} prefill: {}", worst_row(&got, &a));
        row += lens[i];
        let b =
            step(&m, &mut alone, &[Part { blocks: &own, cached: lens[i], tokens: &more[i] }], LogitRows::LastPerSeq)
                .unwrap()
                .0;
        let got = second.slice(s![i..i + 1, ..]).to_owned();
        assert!(rel_l2(&got, &b) < tol, "seq {i} second step: {}", rel_l2(&got, &b));
    }
}

#[test]
fn a_batch_of_mixed_prompts_gives_each_its_logits_alone_f64() {
    batch_matches_alone::<f64>(1e-12);
}

#[test]
fn a_batch_of_mixed_prompts_gives_each_its_logits_alone_f32() {
    batch_matches_alone::<f32>(1e-5);
}

#[test]
fn physical_blocks_and_stale_cache_contents_change_nothing() {
    let m = model::<f64>(13);
    let tokens = prompt(3, 50, 512);
    let run = |blocks: &[i32], cache: &mut KvCache<f64>| {
        let a = run_in_chunks(&m, cache, blocks, &tokens[..40], &[25, 15]);
        let b = run_in_chunks(&m, cache, blocks, &tokens[40..], &[1; 10]);
        (a, b)
    };
    let mut clean = KvCache::new(&m.dims, 8, 16);
    let straight = run(&[0, 1, 2, 3], &mut clean);
    // Blocks in another order, in a cache whose every slot holds garbage first.
    let mut dirty = KvCache::new(&m.dims, 8, 16);
    for (i, a) in dirty.key.iter_mut().chain(dirty.value.iter_mut()).enumerate() {
        a.indexed_iter_mut().for_each(|(ix, v)| *v = ((ix.0 * 31 + ix.1 * 7 + ix.3 + i) % 17) as f64 - 8.0);
    }
    let shuffled = run(&[6, 2, 7, 0], &mut dirty);
    // Every operation runs in the same order whatever the physical blocks: bitwise equal.
    assert_eq!(straight, shuffled);
}
