//! Fake decode: a prefill step run as a decode step with one "sequence" per query row
//! (SPEC section 2, third consequence; SPEC section 6, "fake decode").
//!
//! Query row `j` of a sequence with `prefix_len` cached tokens attends to keys
//! `0..=prefix_len + j`, which is exactly what a decode of a sequence of length
//! `prefix_len + j + 1` over the same blocks reads. [`expand`] builds that decode metadata once
//! (the GPU builds it once per step and shares it across layers); `q` is not touched, because
//! the expanded rows keep `q`'s row order: expanded sequence `r` is query row `r`.

use ndarray::{Array2, Array3};

use super::direct::hp1_direct;
use super::{AttnMetadata, Hp1Inputs};
use crate::error::{invalid, Result};
use crate::scalar::Scalar;

/// Decode metadata with one sequence per query row of `meta`, in `q` row order: row `r` of
/// sequence `s` at local position `j` gets `seq_len = prefix_len(s) + j + 1` and a copy of
/// `s`'s block-table row; `query_start_loc` is `0..=num_tokens`.
///
/// Refuses metadata whose `query_start_loc` is not `num_seqs + 1` non-decreasing counts from 0,
/// or whose `seq_len` is below its query count (the checks that the expansion itself needs;
/// [`AttnMetadata::validate`] checks the rest against the cache).
pub fn expand(meta: &AttnMetadata) -> Result<AttnMetadata> {
    let n = meta.num_seqs();
    let qsl = &meta.query_start_loc;
    if qsl.len() != n + 1 || qsl[0] != 0 || qsl.windows(2).any(|w| w[1] < w[0]) {
        return invalid("query_start_loc", format!("must be {} non-decreasing counts from 0, got {qsl:?}", n + 1));
    }
    if meta.block_table.nrows() != n {
        return invalid("block_table", format!("has {} rows for {n} sequences", meta.block_table.nrows()));
    }
    if let Some(s) = (0..n).find(|&s| meta.seq_lens[s] < qsl[s + 1] - qsl[s]) {
        return invalid(
            "seq_lens",
            format!("sequence {s}: seq_len {} is below its query_len {}", meta.seq_lens[s], qsl[s + 1] - qsl[s]),
        );
    }
    let rows = meta.rows();
    let block_table =
        Array2::from_shape_fn((rows.len(), meta.block_table.ncols()), |(r, b)| meta.block_table[[rows[r].seq, b]]);
    let seq_lens = rows.iter().map(|row| row.pos as i32 + 1).collect();
    Ok(AttnMetadata::decode(block_table, seq_lens))
}

/// `[num_tokens, Hq, D]` HP1 output computed as the direct decode over [`expand`]ed metadata.
pub fn hp1_fake_decode<T: Scalar>(inp: &Hp1Inputs<'_, T>) -> Result<Array3<T>> {
    inp.validate()?;
    let meta = expand(inp.meta)?;
    hp1_direct(&Hp1Inputs {
        q: inp.q.reborrow(),
        key_cache: inp.key_cache.reborrow(),
        value_cache: inp.value_cache.reborrow(),
        meta: &meta,
        sigma: inp.sigma,
        gamma: inp.gamma,
        params: inp.params,
    })
}

#[cfg(test)]
mod tests {
    use ndarray::{array, Array3, Array4};

    use super::*;
    use crate::hp1::Hp1Params;

    #[test]
    fn expand_turns_each_prefill_row_into_a_decode_row() {
        // Sequence 0: a decode at length 5. Sequence 1: a chunked prefill, 2 cached + 3 new.
        let meta = AttnMetadata {
            block_table: array![[4, 1, 0], [2, 3, 9]],
            seq_lens: vec![5, 5],
            query_start_loc: vec![0, 1, 4],
        };
        let got = expand(&meta).unwrap();
        assert_eq!(got.seq_lens, vec![5, 3, 4, 5]);
        assert_eq!(got.query_start_loc, vec![0, 1, 2, 3, 4]);
        assert_eq!(got.block_table, array![[4, 1, 0], [2, 3, 9], [2, 3, 9], [2, 3, 9]]);
        assert_eq!(expand(&got).unwrap(), got, "a decode batch is its own expansion");
    }

    #[test]
    fn expand_refuses_broken_offsets_instead_of_panicking() {
        let bad = AttnMetadata { block_table: array![[0]], seq_lens: vec![1], query_start_loc: vec![0, 2] };
        assert!(expand(&bad).unwrap_err().to_string().contains("query_len 2"));
        let bad = AttnMetadata { block_table: array![[0]], seq_lens: vec![1], query_start_loc: vec![0] };
        assert!(expand(&bad).unwrap_err().to_string().contains("query_start_loc"));
    }

    #[test]
    fn fake_decode_equals_direct_on_a_mixed_batch() {
        // Two sequences over 4 blocks of 2 slots, D = 2, 2 query heads on 1 kv head.
        let meta =
            AttnMetadata { block_table: array![[3, 0], [1, 2]], seq_lens: vec![4, 3], query_start_loc: vec![0, 3, 4] };
        let k = Array4::from_shape_fn((4, 2, 1, 2), |(b, o, _, d)| ((b * 5 + o * 3 + d) % 7) as f64 - 2.5);
        let v = Array4::from_shape_fn((4, 2, 1, 2), |(b, o, _, d)| ((b * 3 + o + d * 2) % 5) as f64 * 0.5);
        let q = Array3::from_shape_fn((4, 2, 2), |(r, h, d)| ((r + 2 * h + d) % 3) as f64 - 0.5);
        let inp = Hp1Inputs {
            q: q.view(),
            key_cache: k.view(),
            value_cache: v.view(),
            meta: &meta,
            sigma: &[0.5, 1.5],
            gamma: &[1.0, 0.25],
            params: Hp1Params { scale: 0.5, fir_k: 3, relu_pre: false, clip_min: 0.0, clip_max: 2.0 },
        };
        let direct = hp1_direct(&inp).unwrap();
        assert!(direct.iter().any(|&x| x != 0.0), "the case must not be trivially zero");
        assert_eq!(hp1_fake_decode(&inp).unwrap(), direct);
    }
}
