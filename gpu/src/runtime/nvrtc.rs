//! One kernel source compiled by NVRTC straight to a cubin for one real architecture, so the
//! driver loads machine code and JIT-compiles nothing.
//!
//! cudarc's safe wrapper returns PTX only; the raw API it exposes gives the cubin
//! (`nvrtcGetCUBIN`), which NVRTC produces whenever `--gpu-architecture` names a real
//! architecture (`sm_90a`, not `compute_90a`).

use std::ffi::{c_char, CString};

use cudarc::nvrtc::{result, sys};

use super::cubin;
use super::kernel_cache::Kernel;
use crate::error::{Error, Result};

/// Compiles `kernel` for `arch` with `options` (the architecture is added here) and returns the
/// cubin, checked to be a whole CUDA ELF.
pub fn compile_cubin(kernel: &Kernel, arch: &str, options: &[String]) -> Result<Vec<u8>> {
    let fail =
        |log: String| Error::Compile { kernel: kernel.name, arch: arch.to_string(), options: options.to_vec(), log };
    let source = CString::new(kernel.source).map_err(|_| fail("the source holds a NUL byte".into()))?;
    let name = CString::new(kernel.name).map_err(|_| fail("the file name holds a NUL byte".into()))?;
    let mut all = vec![format!("--gpu-architecture={arch}")];
    all.extend_from_slice(options);
    let program = Program(result::create_program(&source, Some(name.as_c_str())).map_err(|e| fail(format!("{e:?}")))?);
    // SAFETY: the program was created above and is destroyed only by `Program`'s drop; `source`
    // and `name`, which it may point into, outlive it.
    if let Err(e) = unsafe { result::compile_program(program.0, &all) } {
        let log = program.log().unwrap_or_else(|| format!("{e:?}, and no log"));
        return Err(fail(log));
    }
    let image = program.cubin().map_err(|e| fail(format!("reading the cubin: {e:?}")))?;
    cubin::check(&image).map_err(|e| fail(format!("NVRTC gave no usable cubin: {e}")))?;
    Ok(image)
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Program {
    fn log(&self) -> Option<String> {
        // SAFETY: `self.0` is a live program.
        let raw = unsafe { result::get_program_log(self.0) }.ok()?;
        let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn cubin(&self) -> std::result::Result<Vec<u8>, result::NvrtcError> {
        let mut size = 0usize;
        // SAFETY: `self.0` is a live, compiled program; the buffer is sized as NVRTC says.
        unsafe {
            sys::nvrtcGetCUBINSize(self.0, &mut size).result()?;
            let mut image = vec![0u8; size];
            sys::nvrtcGetCUBIN(self.0, image.as_mut_ptr() as *mut c_char).result()?;
            Ok(image)
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `create_program` and is destroyed only here. A failure to
        // free it leaks a program; there is nothing better to do in a drop.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}
