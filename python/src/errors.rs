//! The one mapping from the workspace's errors to Python exceptions, and the helpers that build
//! exceptions naming the argument at fault.
//!
//! A value the caller can fix (a shape, a dtype, a parameter, a prompt, a bad checkpoint) is a
//! `ValueError` or `TypeError`; a file that cannot be read is an `OSError` (`FileNotFoundError`
//! when it is missing); what the engine or the device fails at while running is a `RuntimeError`.

use pyo3::exceptions::{PyFileNotFoundError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::PyErr;

/// A `ValueError` whose message starts with the argument's name.
pub fn value_error(arg: &str, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{arg}: {msg}"))
}

/// A `TypeError` whose message starts with the argument's name.
pub fn type_error(arg: &str, msg: impl std::fmt::Display) -> PyErr {
    PyTypeError::new_err(format!("{arg}: {msg}"))
}

/// A `RuntimeError` with the message as given.
pub fn runtime_error(msg: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(msg.to_string())
}

/// The oracle's refusals are all about the values it was handed.
pub fn from_oracle(e: oracle::Error) -> PyErr {
    match e {
        oracle::Error::Shape { .. } | oracle::Error::Invalid { .. } => PyValueError::new_err(e.to_string()),
        oracle::Error::Tokenizer(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// An oracle refusal of a parameter as a `ValueError` naming it, for a Python argument of the
/// same name: `` `top_p` is invalid: ... `` becomes `top_p: ...`.
pub fn oracle_arg_error(e: oracle::Error) -> PyErr {
    match e {
        oracle::Error::Invalid { name, reason } => value_error(name, reason),
        other => from_oracle(other),
    }
}

/// `model`'s errors: files, checkpoints and requests are the caller's to fix; the scheduler, the
/// executor and the GPU failing mid-run are not.
pub fn from_model(e: model::Error) -> PyErr {
    use model::Error as E;
    match e {
        E::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        E::Io { .. } => PyOSError::new_err(e.to_string()),
        E::Oracle(inner) => from_oracle(inner),
        E::Json { .. }
        | E::Config { .. }
        | E::NoCheckpoint { .. }
        | E::MissingTensor { .. }
        | E::Shape { .. }
        | E::Dtype { .. }
        | E::NonFinite { .. }
        | E::Truncated { .. }
        | E::CorruptHeader { .. }
        | E::MissingShard { .. }
        | E::UnknownPreset { .. }
        | E::Request(_) => PyValueError::new_err(e.to_string()),
        E::Memory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}
