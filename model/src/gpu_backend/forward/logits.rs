//! The last step's logits rows on their way to the host: only the rows asked for cross, one copy
//! per run of consecutive rows, into pageable memory (waited for) or page-locked memory (queued,
//! read once the stream has run the copies).

use half::bf16;
use ndarray::Array2;
use oracle::model::step::ascending_below;

use super::GpuModel;
use crate::error::{Error, Result};
use crate::gpu_backend::step_buffers::row_runs;

/// `rows` rows of `vocab` bf16 logits widened to f32, `[rows, vocab]`.
pub fn widen_rows(bits: &[bf16], rows: usize, vocab: usize) -> Array2<f32> {
    let widened = bits[..rows * vocab].iter().map(|x| x.to_f32()).collect();
    Array2::from_shape_vec((rows, vocab), widened).expect("rows * vocab elements")
}

impl GpuModel {
    /// Rows `rows` (ascending) of the last step's logits, widened to f32, in that order (waits for
    /// the device). Only these rows cross to the host: one copy per run of consecutive rows.
    pub fn download_logit_rows(&self, rows: &[usize]) -> Result<Array2<f32>> {
        let mut bits = vec![bf16::ZERO; rows.len() * self.dims.vocab_size];
        self.enqueue_logit_rows(rows, &mut bits)?;
        // A copy into pageable memory returns once done; the wait states it for every driver.
        self.gpu.stream().synchronize().map_err(gpu::Error::from)?;
        Ok(widen_rows(&bits, rows.len(), self.dims.vocab_size))
    }

    /// Enqueues the copy of rows `rows` (ascending) of the last step's logits into `dst`, in that
    /// order, one copy per run of consecutive rows; `dst` holds them once the stream has run the
    /// copies (page-locked memory is written asynchronously).
    pub fn enqueue_logit_rows(&self, rows: &[usize], dst: &mut [bf16]) -> Result<()> {
        let vocab = self.dims.vocab_size;
        let held = self.bufs.logits.len() / vocab;
        if !ascending_below(rows, held) {
            return Err(Error::Executor(format!("logits rows {rows:?} are not ascending below {held}")));
        }
        if dst.len() < rows.len() * vocab {
            return Err(Error::Executor(format!("{} logits rows into room for {}", rows.len(), dst.len() / vocab)));
        }
        let stream = self.gpu.stream();
        let mut at = 0;
        for (first, len) in row_runs(rows) {
            let src = self.bufs.logits.slice(first * vocab..(first + len) * vocab);
            stream.memcpy_dtoh(&src, &mut dst[at * vocab..(at + len) * vocab]).map_err(gpu::Error::from)?;
            at += len;
        }
        Ok(())
    }
}
