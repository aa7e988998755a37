//! The embedding gather, `out[t] = table[ids[t]]` (`embedding.cu`), and the host check of token ids.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{as_i32, check_aligned, check_len, elementwise_config, unsupported, Faults};
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
    func: CudaFunction,
}

impl Embedding {
    /// Loads `embedding.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&EMBEDDING, "embedding")? })
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
        if vocab == 0 || !table.len().is_multiple_of(vocab) || u32::try_from(vocab).is_err() {
            return Err(unsupported(ENTRY, format!("a table of {} elements is not {vocab} whole rows", table.len())));
        }
        let hidden = table.len() / vocab;
        if hidden == 0 || !hidden.is_multiple_of(8) {
            return Err(unsupported(ENTRY, format!("hidden must be a positive multiple of 8, got {hidden}")));
        }
        let tokens = ids.len();
        check_len(ENTRY, "out", out.len(), tokens * hidden)?;
        check_aligned(&self.stream, ENTRY, "table", table)?;
        check_aligned(&self.stream, ENTRY, "out", out)?;
        if tokens == 0 {
            return Ok(());
        }
        let (tokens_i, hidden_i) = (as_i32(ENTRY, "tokens", tokens)?, as_i32(ENTRY, "hidden", hidden)?);
        let vocab_u = vocab as u32;
        let cfg = elementwise_config((tokens * hidden / 8) as u64);
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(ids).arg(table).arg(out).arg(&tokens_i).arg(&hidden_i).arg(&vocab_u).arg(faults.word());
        // SAFETY: the arguments match `embedding` in embedding.cu; sizes and alignment checked
        // above, and the kernel never reads a row at or past `vocab`.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
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
