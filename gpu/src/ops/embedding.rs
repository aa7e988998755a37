//! The embedding gather, `out[t] = table[ids[t]]`, alone or with the first layer's input norm of
//! the rows it gathers (`embedding.cu`), and the host check of token ids.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{as_i32, check_aligned, check_len, elementwise_config, unsupported, Faults, UClipNormParams};
use crate::error::{Error, Result};
use crate::kernels::EMBEDDING;
use crate::runtime::{launch_error, Gpu, Launch};

/// Refuses the first id at or past `vocab`, naming it and its position: the engine calls this on
/// the host ids before copying them to the device (the kernel's fault word is the backstop).
pub fn check_token_ids(ids: &[u32], vocab: usize) -> Result<()> {
    match ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        None => Ok(()),
        Some((at, id)) => Err(Error::Unsupported {
            entry: "embedding".to_string(),
            reason: format!("token id {id} at position {at} is outside the vocabulary of {vocab}"),
        }),
    }
}

/// `embedding.cu`, loaded.
pub struct Embedding {
    stream: Arc<CudaStream>,
    gather: CudaFunction,
    normed: CudaFunction,
}

/// A gather's launch arguments after its checks: tokens, hidden and vocab as the kernel takes
/// them; `None` for no tokens (nothing to launch).
type GatherArgs = Option<(i32, i32, u32)>;

impl Embedding {
    /// Loads `embedding.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            stream: gpu.stream().clone(),
            gather: gpu.function(&EMBEDDING, "embedding")?,
            normed: gpu.function(&EMBEDDING, "embedding_norm")?,
        })
    }

    /// `out[t] = table[ids[t]]`: `table` `[vocab, hidden]`, `ids` `[tokens]`, `out`
    /// `[tokens, hidden]`, `hidden` a multiple of 8. An id at or past `vocab` gives a NaN row and
    /// a [`super::FaultKind::TokenId`] fault. Launch only.
    pub fn run(
        &self,
        table: &CudaView<'_, bf16>,
        vocab: usize,
        ids: &CudaView<'_, u32>,
        out: &mut CudaViewMut<'_, bf16>,
        faults: &mut Faults,
    ) -> Result<()> {
        const ENTRY: &str = "embedding";
        let Some((tokens, hidden, vocab)) = self.check(ENTRY, table, vocab, ids.len(), out)? else { return Ok(()) };
        let cfg = elementwise_config(tokens as u64 * hidden as u64 / 8);
        let mut b = Launch::new(&self.stream, &self.gather);
        b.arg(ids).arg(table).arg(out).arg(&tokens).arg(&hidden).arg(&vocab).arg(faults.word());
        // SAFETY: the arguments match `embedding` in embedding.cu; sizes and alignment checked
        // by `check`, and the kernel never reads a row at or past `vocab`.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }

    /// [`Embedding::run`] that also writes `h = bf16(norm(out))` (`[tokens, hidden]`, `norm` over
    /// `hidden` channels): the bits of the gather then the plain norm, in one launch that does not
    /// read the rows back. Launch only.
    #[allow(clippy::too_many_arguments)]
    pub fn run_normed(
        &self,
        table: &CudaView<'_, bf16>,
        vocab: usize,
        ids: &CudaView<'_, u32>,
        norm: &UClipNormParams,
        out: &mut CudaViewMut<'_, bf16>,
        h: &mut CudaViewMut<'_, bf16>,
        faults: &mut Faults,
    ) -> Result<()> {
        const ENTRY: &str = "embedding_norm";
        let Some((tokens, hidden, vocab)) = self.check(ENTRY, table, vocab, ids.len(), out)? else { return Ok(()) };
        if norm.channels() != hidden as usize {
            return Err(unsupported(ENTRY, format!("a norm of {} channels for rows of {hidden}", norm.channels())));
        }
        check_len(ENTRY, "h", h.len(), out.len())?;
        check_aligned(&self.stream, ENTRY, "h", h)?;
        let cfg = elementwise_config(tokens as u64 * hidden as u64 / 8);
        let mut b = Launch::new(&self.stream, &self.normed);
        b.arg(ids).arg(table);
        norm.push(&mut b);
        b.arg(out).arg(h).arg(&tokens).arg(&hidden).arg(&vocab).arg(faults.word());
        // SAFETY: the arguments match `embedding_norm` in embedding.cu; sizes and alignment
        // checked here and by `check`, and the kernel never reads a row at or past `vocab`.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }

    /// Checks a gather of `tokens` rows of `table` (`vocab` rows of a positive multiple of 8
    /// channels) into `out`, and returns its launch arguments.
    fn check(
        &self,
        entry: &str,
        table: &CudaView<'_, bf16>,
        vocab: usize,
        tokens: usize,
        out: &CudaViewMut<'_, bf16>,
    ) -> Result<GatherArgs> {
        if vocab == 0 || !table.len().is_multiple_of(vocab) || u32::try_from(vocab).is_err() {
            return Err(unsupported(entry, format!("a table of {} elements is not {vocab} whole rows", table.len())));
        }
        let hidden = table.len() / vocab;
        if hidden == 0 || !hidden.is_multiple_of(8) {
            return Err(unsupported(entry, format!("hidden must be a positive multiple of 8, got {hidden}")));
        }
        check_len(entry, "out", out.len(), tokens * hidden)?;
        check_aligned(&self.stream, entry, "table", table)?;
        check_aligned(&self.stream, entry, "out", out)?;
        if tokens == 0 {
            return Ok(None);
        }
        Ok(Some((as_i32(entry, "tokens", tokens)?, as_i32(entry, "hidden", hidden)?, vocab as u32)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_past_the_vocabulary_are_named_with_their_position() {
        assert!(check_token_ids(&[0, 511, 7], 512).is_ok());
        let e = check_token_ids(&[0, 3, 512, 900], 512).unwrap_err().to_string();
        assert!(e.contains("token id 512 at position 2") && e.contains("vocabulary of 512"), "{e}");
    }
}
