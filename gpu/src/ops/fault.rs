//! The device fault word: how a kernel reports input it could not use without stopping the step.
//!
//! Token ids, positions, slots and logits are device buffers, so the host cannot check them
//! before a launch without a synchronisation (and a CUDA graph replays without the host at all).
//! The kernels that read them mask what is out of range (a NaN row for a bad token id, a clamped
//! RoPE position, a skipped cache write, a sampled row marked with 0 survivors) and record it
//! here: per [`FaultKind`], a count and one offending value (layout in `ops_common.cuh`). The
//! engine reads it once per step with [`Faults::check_after`], in the same wait as the sampled
//! tokens, or, for a step whose results are read after the next is queued, from the copy
//! [`super::StepResults`] leaves in mapped host memory.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

use crate::error::{Error, Result};
use crate::runtime::Gpu;

/// What a kernel found wrong; the discriminant is the kind's index in the fault word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FaultKind {
    /// A token id at or past the vocabulary (embedding); its row was filled with NaN.
    TokenId = 0,
    /// A position outside the RoPE table (q/k norm + RoPE); it was clamped into the table.
    Position = 1,
    /// A slot at or past the KV cache's end; the write was skipped.
    Slot = 2,
    /// A logit row with NaN or `+inf`, or no finite logit (sampling); the row gave its argmax.
    Logits = 3,
}

impl FaultKind {
    /// Every kind, in fault-word order.
    pub const ALL: [FaultKind; 4] = [FaultKind::TokenId, FaultKind::Position, FaultKind::Slot, FaultKind::Logits];

    /// Words in the fault buffer: a count and a value per kind.
    pub const WORDS: usize = 2 * Self::ALL.len();

    /// The kind's name in `ops_common.cuh`.
    pub fn macro_name(self) -> &'static str {
        match self {
            FaultKind::TokenId => "FAULT_TOKEN_ID",
            FaultKind::Position => "FAULT_POSITION",
            FaultKind::Slot => "FAULT_SLOT",
            FaultKind::Logits => "FAULT_LOGITS",
        }
    }

    fn describe(self, count: u32, value: u32) -> String {
        match self {
            FaultKind::TokenId => format!("{count} token id(s) past the vocabulary (one was {value})"),
            FaultKind::Position => {
                format!("{count} position(s) outside the RoPE table (one was {})", value as i32)
            }
            FaultKind::Slot => format!("{count} slot(s) past the KV cache (low 32 bits of one: {value})"),
            FaultKind::Logits => {
                format!("{count} logit row(s) with NaN, +inf or nothing finite (one was row {value})")
            }
        }
    }
}

/// Reads a downloaded fault word: `None` when clean, else one sentence per kind that fired.
pub fn describe(word: &[u32]) -> Option<String> {
    let found: Vec<String> = FaultKind::ALL
        .iter()
        .filter_map(|&kind| {
            let at = 2 * kind as usize;
            let count = *word.get(at)?;
            (count > 0).then(|| kind.describe(count, word.get(at + 1).copied().unwrap_or(0)))
        })
        .collect();
    (!found.is_empty()).then(|| found.join("; "))
}

/// The fault word on the device, zero while nothing has gone wrong.
pub struct Faults {
    stream: Arc<CudaStream>,
    word: CudaSlice<u32>,
    /// The word's copy on the host, page-locked so that the copy is enqueued, not waited for.
    host: PinnedHostSlice<u32>,
}

impl Faults {
    /// A clean fault word.
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            stream: gpu.stream().clone(),
            word: gpu.zeros::<u32>(FaultKind::WORDS)?,
            host: gpu.pinned::<u32>(FaultKind::WORDS)?,
        })
    }

    /// The buffer the kernels record into.
    pub(crate) fn word(&mut self) -> &mut CudaSlice<u32> {
        &mut self.word
    }

    /// Waits for the stream, reads the word, clears it, and fails with
    /// [`Error::DeviceFault`] naming every kind that fired since the last check.
    pub fn check(&mut self) -> Result<()> {
        self.check_after(|_| Ok(()))
    }

    /// [`Faults::check`] with `enqueue`'s copies (the step's other results, into page-locked
    /// memory) behind the word's on the stream: one wait for all of them. The word is cleared
    /// behind the wait, so the clearing runs while the host works between steps, not between the
    /// step's last kernel and its results; every later launch is queued after it.
    pub fn check_after(&mut self, enqueue: impl FnOnce(&Arc<CudaStream>) -> Result<()>) -> Result<()> {
        self.stream.memcpy_dtoh(&self.word, &mut self.host)?;
        enqueue(&self.stream)?;
        self.stream.synchronize()?;
        self.stream.memset_zeros(&mut self.word)?;
        match describe(self.host.as_slice()?) {
            None => Ok(()),
            Some(what) => Err(Error::DeviceFault(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_match_the_kernel_header() {
        let header = include_str!("../../kernels/ops_common.cuh");
        for kind in FaultKind::ALL {
            let line = format!("#define {} {}", kind.macro_name(), kind as u32);
            assert!(header.contains(&line), "ops_common.cuh lacks `{line}`");
        }
        assert!(header.contains(&format!("#define FAULT_KINDS {}", FaultKind::ALL.len())));
    }

    #[test]
    fn a_clean_word_says_nothing_and_a_dirty_one_names_kind_count_and_value() {
        assert_eq!(describe(&[0; FaultKind::WORDS]), None);
        let mut word = [0u32; FaultKind::WORDS];
        word[2 * FaultKind::TokenId as usize] = 3;
        word[2 * FaultKind::TokenId as usize + 1] = 160_000;
        word[2 * FaultKind::Position as usize] = 1;
        word[2 * FaultKind::Position as usize + 1] = -5i32 as u32;
        let text = describe(&word).unwrap();
        assert!(text.contains("3 token id(s)") && text.contains("160000"), "{text}");
        assert!(text.contains("1 position(s)") && text.contains("-5"), "{text}");
        assert!(!text.contains("slot") && !text.contains("logit"), "{text}");
    }
}
