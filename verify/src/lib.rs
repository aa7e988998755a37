//! The case model shared by every HP1 correctness check: seeded [`Case`]s, the [`Path`]s held
//! against the f64 oracle, the comparison of SPEC section 4, proptest strategies, fuzzing and the
//! replay of saved failures.
//!
//! A brief overview:
//! - [`Case`] describes one HP1 attention call by shapes, gate parameters and seeds;
//!   [`Case::materialise`] turns it into [`CaseData`] (bf16-exact inputs, a shuffled paged cache,
//!   the batch metadata) the same way on every machine, so a saved case replays exactly.
//! - [`Path`] is one implementation under test with its own tolerance; [`all_paths`] lists them
//!   (now the oracle decompositions in f64 and f32, later the GPU kernels).
//! - [`check()`] and [`check_all`] run paths on a case into NaN-poisoned buffers and compare every
//!   element with the direct f64 oracle, each row within a bound scaled to that row's sum
//!   ([`bound`]), reporting the errors and the gate's zero fraction.
//! - [`small_case`], [`large_case`] and [`fuzz_case`] are proptest strategies; [`fuzz()`] drives
//!   them on a clock for `asynct-verify fuzz`, shrinking and saving a failure as a [`Regression`].
//! - [`greedy_agreement`] judges two backends' greedy continuations of a whole model up to
//!   rounding noise (a flip only at a near-tie of the CPU's logits), for `gpu_trained`.
//!
//! ```
//! use verify::{all_paths, check_all, Case, SeqShape};
//!
//! // A decode of 40 tokens next to a chunked prefill of 5 new tokens after 12 cached ones.
//! let case = Case {
//!     seqs: vec![SeqShape { prefix_len: 39, query_len: 1 }, SeqShape { prefix_len: 12, query_len: 5 }],
//!     num_heads: 4, num_kv_heads: 2, head_dim: 16, block_size: 16, spare_blocks: 1,
//!     fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0,
//!     sigma: vec![0.5; 4], gamma: vec![1.0; 4],
//!     data_seed: 1, q_mean: 0.0, input_scale: 1.0, table_seed: 2,
//! };
//! for result in check_all(&all_paths(), &case) {
//!     let report = result.unwrap();
//!     assert!(report.bound_use <= 1.0);
//! }
//! ```
//!
//! Neighbours: this crate uses `oracle` (the reference and its decompositions) and `gpu` (the
//! kernels it holds against the oracle, through [`gpu_harness`] binaries that say when they skip). The
//! engine (`model`, `server`) must not depend on it: it is test machinery.

#![deny(missing_docs)]

pub mod bench;
pub mod bound;
pub mod case;
pub mod check;
pub mod error;
pub mod fuzz;
pub mod gemm_default;
pub mod gpu_cases;
pub mod gpu_harness;
pub mod gpu_paths;
pub mod greedy_agreement;
pub mod path;
pub mod regression;
pub mod rng;
pub mod settled_keys;
pub mod strategy;

pub use bound::{Bound, RowScales};
pub use case::{Case, CaseData, SeqShape, Tensor, Tensors};
pub use check::{check, check_all, check_data, compare, zero_fraction, CheckReport, Failure, Reference};
pub use error::{Error, Result};
pub use fuzz::{fuzz, FuzzConfig, FuzzOutcome, PathCount};
pub use path::{all_paths, Decomposition, OraclePath, Path, Precision};
pub use regression::{load_dir, Regression};
pub use strategy::{fuzz_case, kernel_case, kernel_fuzz_case, large_case, small_case, Budget};
