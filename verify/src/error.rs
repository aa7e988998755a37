//! The verify crate's one error type: what stops a case from being built, a path from running,
//! or a saved case from being read. A path that runs but disagrees with the reference is not an
//! error but a [`crate::Failure`].

use std::path::PathBuf;

/// Everything that keeps a check from producing a verdict.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The oracle refused its inputs.
    #[error("oracle: {0}")]
    Oracle(#[from] oracle::Error),
    /// A case breaks one of its own rules.
    #[error("case field `{field}` is invalid: {reason}")]
    Case {
        /// Which field.
        field: &'static str,
        /// Why, with the values involved.
        reason: String,
    },
    /// A GPU call failed (a launch, a copy, a plan or a kernel refusing its inputs).
    #[error(transparent)]
    Gpu(#[from] gpu::Error),
    /// A path produced an output of the wrong shape or could not run.
    #[error("path `{path}`: {reason}")]
    Path {
        /// The path's name.
        path: String,
        /// What went wrong, with the values involved.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A saved case is not valid JSON of the expected form.
    #[error("{}: not a saved case: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A file in a regressions folder that is neither a saved case nor its README.
    #[error("{}: only *.json cases and README.md belong in a regressions folder", path.display())]
    NotACase {
        /// The file.
        path: PathBuf,
    },
    /// The proptest strategy could not draw a case.
    #[error("drawing a case: {0}")]
    Draw(String),
    /// The fuzzer's worker threads could not be started.
    #[error("starting the fuzzer's worker threads: {0}")]
    Workers(String),
}

/// The verify crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn case_err<T>(field: &'static str, reason: impl Into<String>) -> Result<T> {
    Err(Error::Case { field, reason: reason.into() })
}
