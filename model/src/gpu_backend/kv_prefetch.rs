//! Whether a step's decode attention asks L2 for the next layer's keys and values
//! (`gpu::attention::Operands::next_layer`): each layer's attention then finds its K and V rows
//! in L2, put there while the layer before ran, rather than in HBM, so a small batch's
//! attention, a chain of dependent memory round trips, waits less on each.
//!
//! It pays only while the rows fit in L2 beside the weights the GEMMs between two attentions
//! stream (asynct-0.5b: 25 MB a layer; the H200's L2 is 50 MB); past that the prefetched rows are
//! evicted before they are read and cost HBM bandwidth twice. The rule takes the most bytes one
//! layer's attention of the step can read (every decode row at the block table's full width)
//! against a bound, [`KvPrefetch::max_bytes`]. A hint only: no value depends on it, so the bound
//! may change with the batch without changing any bits.

use gpu::attention::Geometry;

use crate::error::{Error, Result};

/// The bound on one layer's K and V bytes below which a step prefetches the next layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPrefetch {
    /// Bytes; 0 never prefetches.
    pub max_bytes: usize,
}

impl KvPrefetch {
    /// The environment variable [`KvPrefetch::from_env`] reads: the bound in MiB.
    pub const VAR: &'static str = "ASYNCT_KV_PREFETCH_MIB";

    /// The bound when [`KvPrefetch::VAR`] is unset.
    pub const DEFAULT: KvPrefetch = KvPrefetch { max_bytes: 0 };

    /// The bound [`KvPrefetch::VAR`] names, or the default where it is unset.
    pub fn from_env() -> Result<Self> {
        std::env::var(Self::VAR).map_or(Ok(Self::DEFAULT), |v| Self::parse(&v))
    }

    /// The bound of `mib`, a whole number of MiB.
    pub fn parse(mib: &str) -> Result<Self> {
        mib.trim()
            .parse::<usize>()
            .ok()
            .and_then(|m| m.checked_mul(1 << 20))
            .map(|max_bytes| Self { max_bytes })
            .ok_or_else(|| Error::Executor(format!("{}: `{mib}` is not a whole number of MiB", Self::VAR)))
    }

    /// Whether the decode attention of `g` (bf16 K and V, every row at the table's full width)
    /// reads at most the bound from one layer's cache.
    pub fn fits(&self, g: &Geometry) -> bool {
        let token = 2 * g.num_kv_heads * g.head_dim * std::mem::size_of::<u16>();
        let bytes = g.rows.checked_mul(g.max_blocks_per_seq * g.block_size).and_then(|t| t.checked_mul(token));
        self.max_bytes > 0 && bytes.is_some_and(|b| b <= self.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(rows: usize, blocks: usize) -> Geometry {
        Geometry { rows, num_heads: 8, num_kv_heads: 4, head_dim: 128, block_size: 16, max_blocks_per_seq: blocks }
    }

    #[test]
    fn a_step_prefetches_while_one_layer_of_its_keys_fits_the_bound() {
        // asynct-0.5b at 1K tokens: 2 KiB of K and V a token, 2 MiB a row.
        let eight = KvPrefetch { max_bytes: 8 << 20 };
        assert!(eight.fits(&geometry(1, 64)) && eight.fits(&geometry(4, 64)));
        assert!(!eight.fits(&geometry(5, 64)) && !eight.fits(&geometry(1, 257)));
        assert!(!KvPrefetch { max_bytes: 0 }.fits(&geometry(1, 1)));
        assert!(!eight.fits(&geometry(usize::MAX, 64)), "an overflow is past any bound");
    }

    #[test]
    fn the_bound_comes_in_whole_mib() {
        let parse = KvPrefetch::parse;
        assert_eq!(parse(" 16 ").unwrap(), KvPrefetch { max_bytes: 16 << 20 });
        assert_eq!(parse("0").unwrap(), KvPrefetch { max_bytes: 0 });
        for bad in ["-1", "1.5", "lots", "99999999999999999999"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(KvPrefetch::VAR) && e.contains(bad), "{bad}: {e}");
        }
    }
}
