//! `asynct.oracle.uclip_norm`: the oracle's UClipNorm (SPEC section 3),
//! `y = weight * clamp(alpha * x, -1, 1) + bias` per channel over the last axis of `x`.

use ndarray::{Array1, ArrayD, IxDyn};
use numpy::{Element, IntoPyArray, PyUntypedArrayMethods};
use oracle::model::weights::UClipNormWeights;
use oracle::norm::uclipnorm;
use oracle::Scalar;
use pyo3::prelude::*;

use crate::args::{float_dtype, floats, typed, Dtype};
use crate::errors::value_error;

/// UClipNorm of `x` (float32 or float64, any leading shape, channels last); the parameters are
/// cast to `x`'s dtype and the result has `x`'s shape and dtype.
#[pyfunction]
#[pyo3(signature = (x, alpha, weight, bias=None))]
pub fn uclip_norm<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    bias: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    match float_dtype(x, "x")? {
        Dtype::F32 => run::<f32>(py, x, alpha, weight, bias),
        Dtype::F64 => run::<f64>(py, x, alpha, weight, bias),
    }
}

fn run<'py, T: Scalar + Element>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    bias: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let x = typed::<T>(x, "x", "x")?;
    let shape = x.shape().to_vec();
    let Some(&channels) = shape.last() else {
        return Err(value_error("x", "expected at least one dimension (channels last), got a 0-d array"));
    };
    let param = |obj: &Bound<'py, PyAny>, arg: &str, scalar_ok: bool| -> PyResult<Array1<T>> {
        let v = floats(obj, arg)?;
        if v.len() != channels && !(scalar_ok && v.len() == 1) {
            let expected = if scalar_ok { format!("1 or {channels}") } else { channels.to_string() };
            return Err(value_error(
                arg,
                format!("expected {expected} values for {channels} channels, got {}", v.len()),
            ));
        }
        Ok(v.into_iter().map(T::of).collect())
    };
    let w = UClipNormWeights {
        alpha: param(alpha, "alpha", true)?,
        weight: param(weight, "weight", true)?,
        bias: bias.map(|b| param(b, "bias", false)).transpose()?,
    };
    let rows = shape[..shape.len() - 1].iter().product::<usize>();
    let flat = x
        .as_array()
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((rows, channels))
        .expect("a standard-layout array reshapes to rows x channels");
    let y = py.detach(move || uclipnorm(flat.view(), &w));
    let y: ArrayD<T> = y.into_shape_with_order(IxDyn(&shape)).expect("the input's element count");
    Ok(y.into_pyarray(py).into_any())
}
