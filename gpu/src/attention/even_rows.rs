//! Even rows: when a step of decode rows takes the paired decode kernel instead of the
//! dispatcher's plan, decided per step from its rows' lengths. Pure host code, tested on the CPU.
//!
//! The paired decode kernel (one CTA a row and pair of query heads, walking the row's chunks)
//! writes no partials, takes no counter and launches no CTA for a chunk past its row, where
//! split-K launches one for every chunk of the table's width; but its launch lasts as long as its
//! longest row's chain of chunks, where split-K's follows the batch's total work. Measured on an
//! H100 (`verify/RESULTS.md`, runs 250-251 and 257; paired, sparse, graph-timed us, decode /
//! split-K): 128 rows of one length 72.2 / 76.2 at 1K and 266.2 / 283.1 at 4K; lengths spread
//! evenly up to the context 51.6 / 41.6 and 185.0 / 147.6; one long row among short ones 42.2 /
//! 13.9. On full waves both kernels are held by memory: split-K's time follows the rows' total
//! chunks and the decode kernel's its longest row's, at about 0.94 of split-K's time a chunk (the
//! uniform points). So the decode kernel pays where the rows' mean chunk count is at least
//! [`EVEN_ROWS_MIN_BALANCE_PERCENT`] of their longest (a margin over 94), on a grid of paired
//! CTAs that fills one or two waves (4 CTAs an SM) to at least [`EVEN_ROWS_MIN_FILL_PERCENT`]:
//! 256 rows of one length took 140.2 / 146.4 us at 1K and 523.8 / 556.1 at 4K (run 263), 0.96
//! and 0.94 of split-K as at one wave, and spread lengths lost there too (83.9 / 77.1, 314.4 /
//! 287.3). Below a wave its chains are longer than the total work's time (B32: 41.7 against
//! 23.4 us); a grid part of a wave past a whole one would hold the decode kernel's chains for
//! that wave too, and past two waves it is unmeasured.
//!
//! No choice changes results: decode and split-K give the same bits (the kernel header), so the
//! choice may follow the step's lengths without a request's output depending on its batch.

use super::plan::{AttentionPath, Form, Geometry, Plan, Pv, CHUNK};
use crate::error::Result;
use crate::Gpu;

/// Paired decode CTAs an SM hold at once (the entry's registers: 4 x 128 threads).
pub const PAIRED_DECODE_CTAS_PER_SM: usize = 4;
/// The most waves of paired CTAs on which the decode kernel is taken for even rows.
pub const EVEN_ROWS_MAX_WAVES: usize = 2;
/// The least share of its waves' CTA slots, in percent, a grid of paired CTAs fills for even rows.
pub const EVEN_ROWS_MIN_FILL_PERCENT: usize = 96;
/// Rows are even when their mean chunk count is at least this percentage of their longest.
pub const EVEN_ROWS_MIN_BALANCE_PERCENT: usize = 96;

/// The facts the rule needs of a model and a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvenRows {
    /// Query heads `Hq`.
    pub num_heads: usize,
    /// Key/value heads `Hkv`, dividing `Hq`.
    pub num_kv_heads: usize,
    /// The device's SMs.
    pub sms: usize,
}

impl EvenRows {
    /// The rule for a model of `num_heads` query heads over `num_kv_heads` on `gpu`.
    pub fn on(gpu: &Gpu, num_heads: usize, num_kv_heads: usize) -> Result<Self> {
        Ok(Self { num_heads, num_kv_heads, sms: gpu.multiprocessors()? })
    }

    /// Whether `rows` decode rows give the paired decode kernel a grid of at most
    /// [`EVEN_ROWS_MAX_WAVES`] waves that fills at least [`EVEN_ROWS_MIN_FILL_PERCENT`] of their
    /// CTA slots: where a bucket of that many rows keeps a second plan.
    pub fn grid_fits(&self, rows: usize) -> bool {
        let per_kv = self.num_heads / self.num_kv_heads.max(1);
        let ctas = rows.saturating_mul(self.num_heads / 2);
        let wave = PAIRED_DECODE_CTAS_PER_SM.saturating_mul(self.sms);
        let waves = ctas.div_ceil(wave.max(1));
        per_kv > 0
            && per_kv.is_multiple_of(2)
            && wave > 0
            && (1..=EVEN_ROWS_MAX_WAVES).contains(&waves)
            && ctas.saturating_mul(100) >= EVEN_ROWS_MIN_FILL_PERCENT * waves * wave
    }

    /// Whether decode rows of `seq_lens` keys each (one row a sequence), padded to a bucket of
    /// `rows` with rows of one key (as a graph's padding rows are), take the paired decode
    /// kernel: the bucket's grid fits ([`EvenRows::grid_fits`]) and its rows' chunks, the
    /// padding's one each, are even (module docs). A padding row costs the decode kernel a CTA
    /// that ends at once and split-K none of its total work, so it counts as a short row.
    pub fn pays(&self, seq_lens: &[i32], rows: usize) -> bool {
        if seq_lens.is_empty() || seq_lens.len() > rows || !self.grid_fits(rows) {
            return false;
        }
        // The padding rows' chunks (one each) start the total.
        let (longest, total) = seq_lens.iter().fold((0, rows - seq_lens.len()), |(longest, total), &len| {
            let chunks = (len.max(1) as usize).div_ceil(CHUNK);
            (longest.max(chunks), total + chunks)
        });
        total.saturating_mul(100) >= EVEN_ROWS_MIN_BALANCE_PERCENT * longest * rows
    }
}

/// The attention of a step of decode rows only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecodeAttention {
    /// The dispatcher's plan ([`Plan::auto`]), for rows of any lengths.
    Dispatched,
    /// The paired decode kernel, for rows that [`EvenRows::pays`] holds even.
    Even,
}

impl Plan {
    /// The plan of a step of decode rows with `attention`: [`Plan::auto`], or the decode kernel
    /// with two heads a CTA and sparse PV (refused where the heads do not pair).
    pub fn decode_rows(geometry: Geometry, attention: DecodeAttention) -> Result<Self> {
        match attention {
            DecodeAttention::Dispatched => Self::auto(geometry),
            DecodeAttention::Even => Self::with_form(geometry, AttentionPath::Decode(Pv::Sparse), Form::PAIRED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::plan::tests::geometry;

    // asynct-0.5b (8 query heads over 4 kv heads) on an H100 or H200.
    const MODEL: EvenRows = EvenRows { num_heads: 8, num_kv_heads: 4, sms: 132 };

    #[test]
    fn only_a_bucket_whose_paired_grid_fills_one_or_two_waves_keeps_the_even_plan() {
        let fits: Vec<usize> = (1..=1024).filter(|&r| MODEL.grid_fits(r)).collect();
        assert_eq!(fits, (127..=132).chain(254..=264).collect::<Vec<_>>());
        assert!(!EvenRows { num_heads: 6, num_kv_heads: 2, ..MODEL }.grid_fits(200), "3 heads a kv head never pair");
        assert!(!EvenRows { sms: 100, ..MODEL }.grid_fits(128), "1.3 waves on 100 SMs");
    }

    #[test]
    fn rows_of_one_length_or_within_a_chunk_are_even_and_spread_or_skewed_rows_are_not() {
        let rows = |f: &dyn Fn(usize) -> i32| (0..128).map(f).collect::<Vec<i32>>();
        assert!(MODEL.pays(&rows(&|_| 1024), 128));
        assert!(MODEL.pays(&rows(&|_| 4096), 128));
        // The decode bench's lengths (999 to 1,048 tokens): 8 or 9 chunks, most of them 9.
        assert!(MODEL.pays(&rows(&|i| 999 + (i * 50 / 128) as i32), 128));
        // The attention bench's spread and one-long profiles.
        assert!(!MODEL.pays(&rows(&|i| (1024 * (i + 1)).div_ceil(128) as i32), 128));
        assert!(!MODEL.pays(&rows(&|i| if i == 0 { 4096 } else { 64 }), 128));
        // A quarter of the rows one chunk short of the others (a mean of 8.75 of 9 chunks, 97%)
        // are even; half of them (8.5 of 9, 94%: about where the kernels meet) are not.
        assert!(MODEL.pays(&rows(&|i| if i % 4 == 0 { 1008 } else { 1134 }), 128));
        assert!(!MODEL.pays(&rows(&|i| if i % 2 == 0 { 1008 } else { 1134 }), 128));
        // Too few rows to fill a wave, whatever their lengths.
        assert!(!MODEL.pays(&[1024; 126], 126));
        assert!(MODEL.pays(&[1024; 256], 256), "two full waves");
        assert!(!MODEL.pays(&[], 128));
        // Padded to a bucket: 124 rows of 9 chunks and 4 padding rows of one are a mean of 8.75
        // chunks, 97% of 9; 120 rows and 8 of padding 8.44, 94%; more rows than the bucket never.
        assert!(MODEL.pays(&[1024; 124], 128));
        assert!(!MODEL.pays(&[1024; 120], 128));
        assert!(!MODEL.pays(&[1024; 129], 128));
        assert!(MODEL.pays(&[1024; 248], 256) && !MODEL.pays(&[1024; 240], 256));
    }

    #[test]
    fn the_even_plan_is_the_paired_decode_kernel_and_the_dispatched_plan_the_dispatchers() {
        let g = geometry(128, 4096);
        let even = Plan::decode_rows(g, DecodeAttention::Even).unwrap();
        assert_eq!((even.path, even.form), (AttentionPath::Decode(Pv::Sparse), Form::PAIRED));
        assert_eq!(even.attention.grid as usize, 128 * 4);
        assert_eq!((even.workspace_len, even.counter_len), (0, 0));
        assert_eq!(Plan::decode_rows(g, DecodeAttention::Dispatched).unwrap(), Plan::auto(g).unwrap());
        let odd = Geometry { num_heads: 6, num_kv_heads: 2, ..g };
        assert!(Plan::decode_rows(odd, DecodeAttention::Even).is_err());
    }
}
