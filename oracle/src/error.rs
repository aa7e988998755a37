//! The oracle's one error type.

/// Everything the oracle refuses, with the name of the offending input and the values involved.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// An input array has the wrong shape.
    #[error("`{name}` has shape {got:?}, expected {expected}")]
    Shape {
        /// Which input.
        name: &'static str,
        /// What was passed.
        got: Vec<usize>,
        /// What was expected, in words or numbers.
        expected: String,
    },
    /// A parameter or metadata value breaks a rule.
    #[error("`{name}` is invalid: {reason}")]
    Invalid {
        /// Which parameter.
        name: &'static str,
        /// Why, with the values involved.
        reason: String,
    },
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

/// The oracle's result type.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid<T>(name: &'static str, reason: impl Into<String>) -> Result<T> {
    Err(Error::Invalid { name, reason: reason.into() })
}
