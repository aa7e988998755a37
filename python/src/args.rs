//! Reading Python arguments: NumPy arrays of float32 or float64, float and integer parameters
//! that may come as Python numbers, lists, NumPy or PyTorch values, and plain scalars.
//!
//! Every refusal is a `TypeError` (wrong kind or dtype) or `ValueError` (wrong shape or value)
//! whose message starts with the argument's name. Scalars are read here rather than by pyo3's
//! argument conversion because pyo3 names the argument only in an exception note, which Python
//! before 3.11 does not show.

use model::cpu_backend::Precision;
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;

use crate::errors::{type_error, value_error};

/// The float types the oracle computes in, as NumPy names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `numpy.float32`.
    F32,
    /// `numpy.float64`.
    F64,
}

/// `obj` as a `T` (`what` says what was expected), or `default` when it is missing or `None`.
pub fn scalar<'py, T: FromPyObjectOwned<'py>>(
    obj: Option<&Bound<'py, PyAny>>,
    default: T,
    arg: &str,
    what: &str,
) -> PyResult<T> {
    match obj.filter(|o| !o.is_none()) {
        None => Ok(default),
        Some(o) => o.extract::<T>().map_err(|e| {
            // An integer too large for the Rust type is the right kind with a wrong value.
            if Into::<PyErr>::into(e).is_instance_of::<PyOverflowError>(o.py()) {
                value_error(arg, format!("{o} is out of range for {what}"))
            } else {
                type_error(arg, format!("expected {what}, got {}", describe(o)))
            }
        }),
    }
}

/// The `precision` argument's value as the CPU backend's precision: "f32", "f64" or "bf16".
pub fn parse_precision(name: &str) -> PyResult<Precision> {
    name.parse().map_err(|_| value_error("precision", format!("expected \"f32\", \"f64\" or \"bf16\", got {name:?}")))
}

/// The dtype of the array `obj`, refusing anything but a float32 or float64 `numpy.ndarray`.
pub fn float_dtype(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Dtype> {
    let Ok(arr) = obj.cast::<PyUntypedArray>() else {
        let got = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        return Err(type_error(
            arg,
            format!(
                "expected a numpy.ndarray of float32 or float64, got {got} (a torch.Tensor converts with \
                 .detach().cpu().numpy())"
            ),
        ));
    };
    if obj.cast::<PyArrayDyn<f32>>().is_ok() {
        Ok(Dtype::F32)
    } else if obj.cast::<PyArrayDyn<f64>>().is_ok() {
        Ok(Dtype::F64)
    } else {
        Err(type_error(arg, format!("expected dtype float32 or float64, got {}", arr.dtype())))
    }
}

/// `obj` as a read-only array of `T`; `like` names the argument whose dtype it must share.
pub fn typed<'py, T: Element>(obj: &Bound<'py, PyAny>, arg: &str, like: &str) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let arr = obj.cast::<PyArrayDyn<T>>().map_err(|_| {
        let got = obj.cast::<PyUntypedArray>().map(|a| a.dtype().to_string());
        match got {
            Ok(dtype) => type_error(arg, format!("expected the dtype of {like}, got {dtype}")),
            Err(_) => type_error(arg, "expected a numpy.ndarray".to_string()),
        }
    })?;
    arr.try_readonly().map_err(|e| value_error(arg, format!("cannot be read: {e}")))
}

/// Checks that `arr` has `ndim` dimensions, naming what they are (`"[tokens, heads, D]"`).
pub fn check_ndim(shape: &[usize], ndim: usize, arg: &str, layout: &str) -> PyResult<()> {
    if shape.len() != ndim {
        return Err(value_error(arg, format!("expected {ndim} dimensions {layout}, got shape {shape:?}")));
    }
    Ok(())
}

/// A float, or a 1-D sequence of floats (list, tuple, NumPy array, 1-D tensor), as f64 values; a
/// single float comes back as one value.
pub fn floats(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<f64>> {
    if let Ok(x) = obj.extract::<f64>() {
        return Ok(vec![x]);
    }
    obj.extract::<Vec<f64>>()
        .map_err(|_| type_error(arg, format!("expected a float or a 1-D sequence of floats, got {}", describe(obj))))
}

/// A 1-D sequence of integers (list, tuple, NumPy array) as i64 values.
pub fn ints(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i64>> {
    if obj.extract::<i64>().is_ok() || obj.extract::<String>().is_ok() {
        return Err(type_error(arg, format!("expected a 1-D sequence of integers, got {}", describe(obj))));
    }
    obj.extract::<Vec<i64>>()
        .map_err(|_| type_error(arg, format!("expected a 1-D sequence of integers, got {}", describe(obj))))
}

/// A short description of a Python value for messages: its type, and its shape when it has one.
pub fn describe(obj: &Bound<'_, PyAny>) -> String {
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    match obj.cast::<PyUntypedArray>() {
        Ok(a) => format!("{ty} of shape {:?} and dtype {}", a.shape(), a.dtype()),
        Err(_) => ty,
    }
}

/// Per-head values of length `heads` from a float or a sequence of 1 or `heads` floats.
pub fn per_head(obj: &Bound<'_, PyAny>, arg: &str, heads: usize) -> PyResult<Vec<f64>> {
    let v = floats(obj, arg)?;
    match v.len() {
        1 => Ok(vec![v[0]; heads]),
        n if n == heads => Ok(v),
        n => Err(value_error(arg, format!("expected a float or {heads} values (one per query head), got {n}"))),
    }
}
