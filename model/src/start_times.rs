//! The wall time of each phase of a start (`asynct serve`'s breakdown): each phase is reported
//! the moment it ends, so a slow or hung start shows how far it got, and [`StartTimes::summary`]
//! puts them on one line at the end.
//!
//! The loader ([`crate::executor_loader`], the GPU backend) records its own phases; the server
//! adds the ones around it (the config and tokenizer, the engine, the bind). A phase that runs
//! on a helper thread beside others is recorded with [`StartTimes::record_beside`]: its time is
//! shown, and only the time the start then waited for it counts in the serial sum.

use std::fmt;
use std::time::{Duration, Instant};

/// A phase of a start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StartPhase {
    /// `config.json`, `tokenizer.json` and the chat template.
    ConfigTokenizer,
    /// The CUDA driver, context and stream.
    DeviceOpen,
    /// Every kernel's module: cubins from the kernel cache (or compiled) and loaded.
    KernelLoad,
    /// The checkpoint's tensors mapped, checked and converted to the device's element type.
    CheckpointRead,
    /// The fused weights (qkv, gate/up) laid out in the kernels' row orders, on the host.
    WeightLayout,
    /// The weights copied to the device.
    WeightUpload,
    /// The cuBLASLt handle and its workspace.
    Cublaslt,
    /// The RoPE table, step buffers, sampler buffers and the KV cache.
    BuffersKvCache,
    /// The whole-step CUDA graphs of the decode buckets.
    DecodeGraphs,
    /// The engine built over the executor and its thread started.
    Engine,
    /// The listening socket bound.
    Bind,
}

impl StartPhase {
    /// The phase's name in the log.
    pub fn name(self) -> &'static str {
        match self {
            StartPhase::ConfigTokenizer => "config/tokenizer",
            StartPhase::DeviceOpen => "device open",
            StartPhase::KernelLoad => "kernel load",
            StartPhase::CheckpointRead => "checkpoint read/convert",
            StartPhase::WeightLayout => "weight layout",
            StartPhase::WeightUpload => "weight upload",
            StartPhase::Cublaslt => "cuBLASLt",
            StartPhase::BuffersKvCache => "buffers and KV cache",
            StartPhase::DecodeGraphs => "decode-graph capture",
            StartPhase::Engine => "engine",
            StartPhase::Bind => "bind",
        }
    }
}

impl fmt::Display for StartPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One recorded phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhaseTime {
    /// Which phase.
    pub phase: StartPhase,
    /// Its wall time.
    pub took: Duration,
    /// For a phase that ran on a helper thread beside the others, how long the start then
    /// waited for it to finish (the only part of it in the serial sum); `None` for a phase the
    /// start ran itself.
    pub waited: Option<Duration>,
}

impl PhaseTime {
    /// The part of it the start waited for.
    pub fn serial(&self) -> Duration {
        self.waited.unwrap_or(self.took)
    }
}

impl fmt::Display for PhaseTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:.3} s", self.phase, self.took.as_secs_f64())?;
        match self.waited {
            Some(waited) => write!(f, " (beside; waited {:.3} s)", waited.as_secs_f64()),
            None => Ok(()),
        }
    }
}

/// The phases recorded so far, each passed to a reporter as it ends.
pub struct StartTimes {
    phases: Vec<PhaseTime>,
    report: Box<dyn FnMut(&PhaseTime)>,
}

impl StartTimes {
    /// Records phases and passes each to `report` as it ends.
    pub fn new(report: impl FnMut(&PhaseTime) + 'static) -> Self {
        Self { phases: Vec::new(), report: Box::new(report) }
    }

    /// Records phases and reports none (callers that print no breakdown).
    pub fn silent() -> Self {
        Self::new(|_| {})
    }

    /// Records that `phase` took `took`, on the path the start waited for.
    pub fn record(&mut self, phase: StartPhase, took: Duration) {
        self.push(PhaseTime { phase, took, waited: None });
    }

    /// Records that `phase` took `took` on a helper thread, beside the waited-for path, and
    /// that the start then `waited` for it.
    pub fn record_beside(&mut self, phase: StartPhase, took: Duration, waited: Duration) {
        self.push(PhaseTime { phase, took, waited: Some(waited) });
    }

    /// Runs `f` as `phase`.
    pub fn time<T>(&mut self, phase: StartPhase, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.record(phase, start.elapsed());
        out
    }

    /// The phases in the order they ended.
    pub fn phases(&self) -> &[PhaseTime] {
        &self.phases
    }

    /// The sum of what the start waited for.
    pub fn serial_total(&self) -> Duration {
        self.phases.iter().map(PhaseTime::serial).sum()
    }

    /// One line: the serial total, then every phase in order.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self.phases.iter().map(ToString::to_string).collect();
        format!("start: {:.3} s in all: {}", self.serial_total().as_secs_f64(), parts.join(", "))
    }

    fn push(&mut self, time: PhaseTime) {
        (self.report)(&time);
        self.phases.push(time);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    #[test]
    fn phases_are_reported_as_they_end_and_beside_ones_count_their_wait() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let sink = seen.clone();
        let mut times = StartTimes::new(move |p| sink.borrow_mut().push(p.to_string()));
        times.record(StartPhase::ConfigTokenizer, Duration::from_millis(250));
        times.record_beside(StartPhase::Cublaslt, Duration::from_millis(400), Duration::from_millis(100));
        let value = times.time(StartPhase::Bind, || 7);
        assert_eq!(value, 7);
        assert_eq!(seen.borrow()[..2], ["config/tokenizer 0.250 s", "cuBLASLt 0.400 s (beside; waited 0.100 s)"]);
        assert!(seen.borrow()[2].starts_with("bind 0.0"), "{:?}", seen.borrow());
        let bind = times.phases()[2].took;
        assert_eq!(times.serial_total(), Duration::from_millis(350) + bind);
        let summary = times.summary();
        let phases = ": config/tokenizer 0.250 s, cuBLASLt 0.400 s (beside; waited 0.100 s), bind";
        assert!(summary.starts_with("start: 0.3") && summary.contains(phases), "{summary}");
    }
}
