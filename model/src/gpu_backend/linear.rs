//! The model's linear layers on the GPU, `y = x W^T` over a step's rows, with one rule that keeps
//! every row's bits independent of the step it is in: a step's leading decode rows go through
//! the skinny kernel (at any batch, in slabs of 64 past 64 rows), its prefill-chunk rows through
//! cuBLASLt pinned at one reference `M` (the step capacity), and the rows that get logits through
//! the skinny kernel. Each of those computes a row the same way at every `M` and beside any
//! rows (`gpu::gemm` says why; `gpu_gemm` checks it on the H200), so a decoding request's tokens
//! do not depend on its neighbours, nor a prefilling one's first token on the chunks beside it.
//!
//! [`Linears`] loads each (lane, shape) once; a CUDA graph recorded from them needs them loaded
//! for as long as it lives, so nothing is ever unloaded.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaView, CudaViewMut};
use gpu::gemm::{Gemm, GemmPlan, GemmShape};
use gpu::Gpu;
use half::bf16;

use crate::error::Result;

/// Which rows a GEMM launch covers, and so which kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Decode rows and logit rows: the skinny kernel.
    Rows,
    /// Prefill-chunk rows: cuBLASLt pinned at the step capacity.
    Chunks,
}

/// A step's rows as the linear layers split them: `decodes` leading decode rows, then `chunks`
/// rows of prefill chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSplit {
    /// Leading decode rows.
    pub decodes: usize,
    /// Prefill-chunk rows after them.
    pub chunks: usize,
}

impl RowSplit {
    /// Every row.
    pub fn total(&self) -> usize {
        self.decodes + self.chunks
    }

    /// The launches a layer of `n` outputs and `k` inputs makes over these rows.
    fn launches(&self, n: usize, k: usize) -> impl Iterator<Item = (Lane, GemmShape, usize)> {
        let decodes = (self.decodes > 0).then_some((Lane::Rows, GemmShape { m: self.decodes, n, k }, 0));
        let chunks = (self.chunks > 0).then_some((Lane::Chunks, GemmShape { m: self.chunks, n, k }, self.decodes));
        decodes.into_iter().chain(chunks)
    }
}

/// The loaded GEMMs of every (lane, shape) a step has asked for.
pub struct Linears {
    gpu: Arc<Gpu>,
    sms: usize,
    pin_at: usize,
    loaded: HashMap<(Lane, GemmShape), Gemm>,
}

impl Linears {
    /// No GEMM loaded yet; chunk rows will run cuBLASLt's algorithm for `pin_at` rows.
    pub fn new(gpu: &Arc<Gpu>, pin_at: usize) -> Result<Self> {
        Ok(Self { gpu: gpu.clone(), sms: gpu.multiprocessors()?, pin_at, loaded: HashMap::new() })
    }

    /// Loads what a layer of `n` x `k` over `rows` launches (once per lane and shape).
    pub fn prepare(&mut self, rows: RowSplit, n: usize, k: usize) -> Result<()> {
        for (lane, shape, _) in rows.launches(n, k) {
            if !self.loaded.contains_key(&(lane, shape)) {
                let plan = match lane {
                    Lane::Rows => GemmPlan::skinny(shape, self.sms)?,
                    Lane::Chunks => GemmPlan::cublaslt_pinned(shape, self.pin_at.max(shape.m))?,
                };
                self.loaded.insert((lane, shape), Gemm::new(&self.gpu, plan)?);
            }
        }
        Ok(())
    }

    /// `y = x w^T` over `rows` (`x` `[rows, k]`, `y` `[rows, n]`, both exactly that long), each
    /// part by its lane's GEMM, which [`Linears::prepare`] loaded. Launch only.
    pub fn run(
        &self,
        rows: RowSplit,
        x: CudaView<'_, bf16>,
        w: CudaView<'_, bf16>,
        mut y: CudaViewMut<'_, bf16>,
        n: usize,
        k: usize,
    ) -> Result<()> {
        for (lane, shape, first) in rows.launches(n, k) {
            let gemm = self.loaded.get(&(lane, shape)).expect("Linears::prepare loaded every launch of the step");
            let (a, b) = (first, first + shape.m);
            gemm.run(&x.slice(a * k..b * k), &w, &mut y.slice_mut(a * n..b * n))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rows_and_chunk_rows_launch_apart_in_step_order() {
        let all: Vec<_> = RowSplit { decodes: 3, chunks: 100 }.launches(2048, 1024).collect();
        assert_eq!(
            all,
            vec![
                (Lane::Rows, GemmShape { m: 3, n: 2048, k: 1024 }, 0),
                (Lane::Chunks, GemmShape { m: 100, n: 2048, k: 1024 }, 3),
            ]
        );
        let decodes: Vec<_> = RowSplit { decodes: 256, chunks: 0 }.launches(8, 8).map(|l| l.0).collect();
        assert_eq!(decodes, vec![Lane::Rows]);
        let chunks: Vec<_> = RowSplit { decodes: 0, chunks: 7 }.launches(8, 8).map(|l| (l.0, l.2)).collect();
        assert_eq!(chunks, vec![(Lane::Chunks, 0)]);
    }
}
