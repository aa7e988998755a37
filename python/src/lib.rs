//! The Python face of `asynct`: the engine as `asynct.LLM` and the exact oracle as
//! `asynct.oracle`, built by maturin into the extension module `asynct._asynct` (stable ABI,
//! CPython >= 3.9).
//!
//! ```python
//! import asynct
//! llm = asynct.LLM("models/asynct-tiny", device="cpu")
//! out = llm.generate(["Hello", "The river"], asynct.SamplingParams(temperature=0, max_tokens=16))
//! print(out[0].text, out[0].token_ids, out[0].finish_reason)
//! ```
//!
//! - [`llm::Llm`] (`asynct.LLM`) loads a checkpoint through the executor loader of `asynct
//!   generate` and `asynct serve` and runs [`batch::Batch`]es of prompts on `model`'s engine with
//!   the GIL released, stoppable by Ctrl-C and by `LLM.abort()`; [`sampling::SamplingParams`]
//!   (with [`guided::GuidedDecodingParams`]), [`prompts`], [`chat`] and [`outputs`] are its
//!   arguments and results, in vLLM's shape.
//! - `hp1::hp1_attention`, `norm::uclip_norm` and `forward::forward_logits`
//!   (`asynct.oracle`) run the oracle on NumPy arrays, with PyTorch's `[tokens, heads, D]`
//!   layout mapped onto the oracle's paged inputs.
//!
//! Boundaries: this crate only converts and checks; the numerics are `oracle`'s, the engine and
//! checkpoints `model`'s, the device choice `server`'s loader. Nothing in the workspace depends
//! on it. Every argument is checked before it reaches them, and every error comes back as a
//! Python exception naming the argument ([`errors`]): `ValueError`, `TypeError`, `OSError`, or
//! `RuntimeError` for a failure while running, never a panic by design.
//!
//! The Python package around the module (`asynct/__init__.py`, `asynct/oracle.py`, the stubs in
//! `asynct/_asynct.pyi`) and its tests (`tests/`, pytest) sit beside this crate.

// The modules are private (the extension's API is Python's), so these docs link them for
// `cargo doc --document-private-items`, the way to read this crate.
#![allow(rustdoc::private_intra_doc_links)]
#![deny(missing_docs)]

mod args;
mod batch;
mod chat;
mod errors;
mod forward;
mod guided;
mod hp1;
mod llm;
mod norm;
mod outputs;
mod prompts;
mod sampling;

use pyo3::prelude::*;

/// The extension module `asynct._asynct`; `asynct/__init__.py` and `asynct/oracle.py` re-export it.
#[pymodule]
fn _asynct(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<llm::Llm>()?;
    m.add_class::<sampling::SamplingParams>()?;
    m.add_class::<outputs::RequestOutput>()?;
    m.add_class::<outputs::CompletionOutput>()?;
    m.add_class::<outputs::Logprob>()?;
    m.add_class::<guided::GuidedDecodingParams>()?;
    m.add_function(wrap_pyfunction!(hp1::hp1_attention, m)?)?;
    m.add_function(wrap_pyfunction!(norm::uclip_norm, m)?)?;
    m.add_function(wrap_pyfunction!(forward::forward_logits, m)?)?;
    Ok(())
}
