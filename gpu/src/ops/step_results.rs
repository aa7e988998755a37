//! A step's results brought to the host by one launch (`step_results.cu`) instead of copies: its
//! drawn tokens and its fault word, written by the kernel straight into page-locked host memory
//! mapped into the device's address space ([`MappedHost`]), the word cleared behind its read. A
//! copy or a memset on the stream costs about 5 us of device time however few its bytes; a
//! step's results were three of them (RESULTS run 224).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr};

use super::Faults;
use crate::error::{Error, Result};
use crate::kernels::STEP_RESULTS;
use crate::runtime::{launch_error, Gpu, Launch, MappedHost};

const ENTRY: &str = "step_results";

/// `step_results.cu`, loaded.
pub struct StepResults {
    stream: Arc<CudaStream>,
    func: CudaFunction,
}

impl StepResults {
    /// Loads `step_results.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&STEP_RESULTS, ENTRY)? })
    }

    /// Queues the copy of `tokens` into `tokens_host` and of `faults`' word into `fault_host`,
    /// clearing the word behind its read. Launch only: read both after an event recorded behind
    /// this has completed.
    pub fn enqueue(
        &self,
        tokens: &CudaView<'_, u32>,
        tokens_host: &mut MappedHost<u32>,
        faults: &mut Faults,
        fault_host: &mut MappedHost<u32>,
    ) -> Result<()> {
        let word: &mut CudaSlice<u32> = faults.word();
        if tokens.len() > tokens_host.len() || word.len() > fault_host.len() {
            return Err(Error::Unsupported {
                entry: ENTRY.into(),
                reason: format!(
                    "{} tokens and {} fault words into {} and {}",
                    tokens.len(),
                    word.len(),
                    tokens_host.len(),
                    fault_host.len()
                ),
            });
        }
        let (rows, words) = (tokens.len() as u32, word.len() as u32);
        let word_ptr = word.device_ptr(&self.stream).0;
        let cfg = cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(tokens).arg(&rows).arg(&word_ptr).arg(&words).arg(&tokens_host.device).arg(&fault_host.device);
        // SAFETY: the arguments match `step_results` in step_results.cu; both host areas hold at
        // least the values written (checked above) and are mapped at their device addresses.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}
