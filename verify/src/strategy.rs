//! proptest strategies that draw [`Case`]s: the shapes and gate settings the kernels must survive.
//!
//! Lengths favour the places where decompositions break: 1, 2 and 3 tokens, one either side of
//! a block boundary and of a split boundary (the splits in [`SPLITS`]), and anywhere up to a few
//! thousand. Each sequence is a decode, a prefill or a chunked prefill, 1 to 4 of them per
//! batch; GQA ratios 1 to 8; `D` in {16, 64, 128, 256}; odd block sizes; spare blocks and a
//! shuffled block table; `relu_pre` on and off; `clip_min` 0 and above; `sigma` and `gamma`
//! including 0 (every number a short binary fraction, so it is exact in bf16); and a query mean
//! and spread wide enough that the gate's zero fraction runs from under 10% to over 95%.
//!
//! A [`Budget`] bounds each case's work ([`Case::work`]), so a few hundred cases stay fast:
//! heads and `D` are drawn first, the longest sequence is cut to what the budget allows, and
//! a batch over budget has its query counts halved (a prefill becomes a chunked prefill).

use proptest::prelude::*;
use proptest::sample::select;

use crate::case::{Case, SeqShape};
use crate::path::SPLITS;

/// Limits on the cases a strategy draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most multiply-adds in one QK pass ([`Case::work`]).
    pub max_work: u64,
    /// Longest sequence.
    pub max_len: usize,
    /// Most sequences per batch.
    pub max_seqs: usize,
}

/// Ordinary property-test cases: at most 2^20 multiply-adds, sequences up to 3000 tokens.
pub const SMALL: Budget = Budget { max_work: 1 << 20, max_len: 3000, max_seqs: 4 };

/// Long-context cases: up to 16K tokens at the benchmark head shapes.
pub const LARGE: Budget = Budget { max_work: 24 << 20, max_len: 16384, max_seqs: 2 };

/// Cases within [`SMALL`], any head shape.
pub fn small_case() -> BoxedStrategy<Case> {
    small_with(vec![16, 64, 128, 256], vec![1, 3, 5, 16, 16, 32])
}

/// Cases within [`SMALL`] of the shapes the GPU kernels take: `D` in {64, 128, 256} and
/// power-of-two blocks, so a GPU fuzz run spends no draw on a case no kernel runs.
pub fn kernel_case() -> BoxedStrategy<Case> {
    small_with(vec![64, 128, 256], vec![1, 2, 16, 16, 32])
}

fn small_with(head_dims: Vec<usize>, block_sizes: Vec<usize>) -> BoxedStrategy<Case> {
    let heads = (1usize..=3, 1usize..=8, select(head_dims), select(block_sizes));
    build(SMALL, heads.boxed(), false)
}

/// Long-context cases within [`LARGE`]: benchmark-like head shapes, block size 16, and
/// sequence lengths drawn from the top half of the range.
pub fn large_case() -> BoxedStrategy<Case> {
    let heads =
        select(vec![(4usize, 2usize, 128usize), (2, 4, 128), (1, 2, 64)]).prop_map(|(hkv, g, d)| (hkv, g, d, 16));
    build(LARGE, heads.boxed(), true)
}

/// What the fuzz command draws: mostly small cases, one in sixteen long.
pub fn fuzz_case() -> BoxedStrategy<Case> {
    prop_oneof![15 => small_case(), 1 => large_case()].boxed()
}

/// What the fuzz command draws with `--gpu`: [`fuzz_case`] with the small cases in kernel shapes.
pub fn kernel_fuzz_case() -> BoxedStrategy<Case> {
    prop_oneof![15 => kernel_case(), 1 => large_case()].boxed()
}

/// `(kv heads, group, D, block size)` first, then everything else within the budget left.
fn build(budget: Budget, heads: BoxedStrategy<(usize, usize, usize, usize)>, long: bool) -> BoxedStrategy<Case> {
    heads
        .prop_flat_map(move |(hkv, group, d, bs)| {
            let hq = hkv * group;
            let row_keys = (budget.max_work / (hq * d) as u64).max(1);
            let max_len = budget.max_len.min(row_keys as usize).max(1);
            let lengths = if long { (max_len / 2..=max_len).boxed() } else { seq_len(max_len, bs) };
            (
                Just((hq, hkv, d, bs, row_keys)),
                prop::collection::vec(seq_shape(lengths), 1..=budget.max_seqs),
                gate(hq),
                (any::<u64>(), any::<u64>(), 0usize..=3),
                ((-24i32..=24).prop_map(|n| f64::from(n) / 16.0), select(vec![0.125, 0.5, 1.0, 2.0, 4.0])),
            )
        })
        .prop_map(
            |((hq, hkv, d, bs, row_keys), seqs, gate, (data_seed, table_seed, spare_blocks), (q_mean, input_scale))| {
                let (fir_k, relu_pre, clip_min, clip_max, sigma, gamma) = gate;
                Case {
                    seqs: fit(seqs, row_keys),
                    num_heads: hq,
                    num_kv_heads: hkv,
                    head_dim: d,
                    block_size: bs,
                    spare_blocks,
                    fir_k,
                    relu_pre,
                    clip_min,
                    clip_max,
                    sigma,
                    gamma,
                    data_seed,
                    q_mean,
                    input_scale,
                    table_seed,
                }
            },
        )
        .boxed()
}

/// A sequence length: the small ones, around block and split boundaries, or anywhere.
fn seq_len(max_len: usize, block_size: usize) -> BoxedStrategy<usize> {
    prop_oneof![
        2 => 1usize..=3,
        2 => (1usize..=4, 0usize..=2).prop_map(move |(k, d)| (k * block_size + d).saturating_sub(1)),
        2 => (select(SPLITS.to_vec()), 1usize..=2, 0usize..=2).prop_map(|(s, k, d)| (s * k + d).saturating_sub(1)),
        3 => 1usize..=max_len,
    ]
    .prop_map(move |l| l.clamp(1, max_len))
    .boxed()
}

/// A decode, a prefill or a chunked prefill of a drawn length.
fn seq_shape(lengths: BoxedStrategy<usize>) -> impl Strategy<Value = SeqShape> {
    (lengths, 0u8..3, 0u32..=1000).prop_map(|(len, kind, frac)| {
        let query_len = match kind {
            0 => 1,
            1 => len,
            _ => 1 + ((len - 1) as u64 * u64::from(frac) / 1000) as usize,
        };
        SeqShape { prefix_len: len - query_len, query_len }
    })
}

type GateDraw = (usize, bool, f64, f64, Vec<f64>, Vec<f64>);

/// `(fir_k, relu_pre, clip_min, clip_max, sigma, gamma)` for `hq` heads.
fn gate(hq: usize) -> impl Strategy<Value = GateDraw> {
    // Heads share a case-wide bound on sigma, so a case can have every head's FIR weight small
    // (few zeros) or large; n/64 of a bound in {0.5, 1, 3} stays exact in bf16.
    let sigma = (select(vec![0.0, 0.5, 1.0, 3.0]), prop::collection::vec(0u32..=64, hq))
        .prop_map(|(max, n)| n.into_iter().map(|n| max * f64::from(n) / 64.0).collect::<Vec<_>>());
    let gamma = prop_oneof![1 => Just(0.0), 3 => Just(1.0), 8 => (1u32..=128).prop_map(|n| f64::from(n) / 32.0)];
    (
        1usize..=5,
        any::<bool>(),
        prop_oneof![3 => Just(0.0), 1 => select(vec![0.125, 0.5])],
        select(vec![0.25, 1.0, 4.0, 64.0]),
        sigma,
        prop::collection::vec(gamma, hq),
    )
        .prop_map(|(fir_k, relu, lo, width, sigma, gamma)| (fir_k, relu, lo, lo + width, sigma, gamma))
}

/// Cuts a batch to `row_keys` causal (query, key) pairs: a sequence longer than what is left
/// becomes a decode of what is left, and one whose rows cost too much has its query count halved
/// until it fits (the rest become its prefix).
fn fit(mut seqs: Vec<SeqShape>, row_keys: u64) -> Vec<SeqShape> {
    let mut left = row_keys;
    for s in &mut seqs {
        if s.seq_len() as u64 > left {
            *s = SeqShape { prefix_len: left.max(1) as usize - 1, query_len: 1 };
        }
        while s.row_keys() > left && s.query_len > 1 {
            let q = s.query_len / 2;
            s.prefix_len += s.query_len - q;
            s.query_len = q;
        }
        left = left.saturating_sub(s.row_keys());
    }
    seqs
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngSeed, TestRunner};

    use super::*;

    fn draw(strategy: &BoxedStrategy<Case>, n: usize, seed: u64) -> Vec<Case> {
        let mut runner = TestRunner::new(Config { rng_seed: RngSeed::Fixed(seed), ..Config::default() });
        (0..n).map(|_| strategy.new_tree(&mut runner).expect("strategy never rejects").current()).collect()
    }

    #[test]
    fn fit_keeps_lengths_where_it_can_and_respects_the_budget() {
        let fitted =
            fit(vec![SeqShape { prefix_len: 0, query_len: 100 }, SeqShape { prefix_len: 9, query_len: 1 }], 2000);
        // 100 rows cost 5050 > 2000; 50 rows over a prefix of 50 cost 3775; 25 over 75 cost 2200;
        // 12 over 88 cost 1134. The decode of 10 then fits in the 866 left.
        assert_eq!(fitted, vec![SeqShape { prefix_len: 88, query_len: 12 }, SeqShape { prefix_len: 9, query_len: 1 }]);
        let fitted = fit(vec![SeqShape { prefix_len: 0, query_len: 50 }], 20);
        assert_eq!(fitted, vec![SeqShape { prefix_len: 19, query_len: 1 }]);
    }

    #[test]
    fn small_cases_are_valid_bounded_and_varied() {
        let cases = draw(&small_case(), 300, 1);
        let budget_slack = 4 * 256 * 24; // up to 4 one-token sequences past an exhausted budget
        for c in &cases {
            c.validate().unwrap();
            assert!(c.work() <= SMALL.max_work + budget_slack, "work {} in {c:?}", c.work());
        }
        let any = |f: &dyn Fn(&Case) -> bool| cases.iter().any(f);
        assert!(any(&|c| c.seqs.iter().any(|s| s.seq_len() == 1)));
        assert!(any(&|c| c.seqs.iter().any(|s| s.seq_len() > 1000)));
        assert!(any(&|c| c.seqs.iter().any(|s| s.seq_len() == 257 || s.seq_len() == 255)));
        assert!(any(&|c| c.seqs.iter().any(|s| s.query_len == 1) && c.seqs.iter().any(|s| s.query_len > 1)));
        assert!(any(&|c| c.seqs.iter().any(|s| s.prefix_len > 0 && s.query_len > 1)));
        assert!(any(&|c| c.num_heads / c.num_kv_heads == 8) && any(&|c| c.num_heads == c.num_kv_heads));
        for d in [16, 64, 128, 256] {
            assert!(any(&|c| c.head_dim == d), "D = {d} never drawn");
        }
        assert!(any(&|c| c.relu_pre) && any(&|c| !c.relu_pre));
        assert!(any(&|c| c.clip_min == 0.0) && any(&|c| c.clip_min > 0.0));
        assert!(any(&|c| c.sigma.contains(&0.0)) && any(&|c| c.gamma.contains(&0.0)));
        assert!(any(&|c| c.spare_blocks > 0));
    }

    #[test]
    fn kernel_cases_have_kernel_shapes() {
        let cases = draw(&kernel_case(), 200, 3);
        assert!(cases.iter().all(|c| [64, 128, 256].contains(&c.head_dim) && c.block_size.is_power_of_two()));
        for d in [64, 128, 256] {
            assert!(cases.iter().any(|c| c.head_dim == d), "D = {d} never drawn");
        }
    }

    #[test]
    fn large_cases_are_long() {
        for c in draw(&large_case(), 4, 2) {
            c.validate().unwrap();
            assert!(c.seqs.iter().map(SeqShape::seq_len).max().unwrap_or(0) >= 2048, "{c:?}");
            assert!(c.work() <= LARGE.max_work + 2 * 1024);
        }
    }
}
