//! Kernel sources, compiled by NVRTC at run time and cached on disk.
//!
//! A kernel is a `.cu` file embedded in the binary. It is compiled for the device's architecture
//! (`sm_90a` on Hopper, so wgmma is available) the first time it is needed, and the PTX is kept
//! under the cache folder keyed by a hash of the source, the options, the architecture and the
//! NVRTC version, so a changed kernel is never served stale and an unchanged one compiles once
//! per machine. The cache folder is `$ASYNCT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/asynct/kernels`,
//! else `~/.cache/asynct/kernels`, else the system temp folder.

use std::path::PathBuf;

use cudarc::nvrtc::{CompileError, CompileOptions};

use crate::error::{Error, Result};

/// One `.cu` file of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// File name, for messages and cache keys.
    pub name: &'static str,
    /// The CUDA C++ source.
    pub source: &'static str,
}

/// Whether an NVRTC library can be loaded here (it can on a machine with only the CUDA
/// toolkit's NVRTC installed, no driver: enough to compile every kernel and check it).
pub fn nvrtc_available() -> bool {
    // SAFETY: it only tries to dlopen libnvrtc and reports whether that worked.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The options every kernel is compiled with. Fast-math is off: the gate and the norms must
/// match the oracle's IEEE arithmetic, and `--fmad=false` is not set because FMA contraction
/// changes results only by rounding, within the SPEC's bounds.
fn options() -> Vec<String> {
    vec!["--std=c++17".into(), "-default-device".into()]
}

/// Compiles `kernel` for `arch` (e.g. `sm_90a`), through the disk cache, and returns its PTX.
pub fn compile(kernel: &Kernel, arch: &'static str) -> Result<String> {
    if !nvrtc_available() {
        return Err(Error::NoNvrtc);
    }
    let opts = options();
    let key = cache_key(kernel, arch, &opts, &nvrtc_version());
    let path = cache_dir().join(format!("{}-{arch}-{key:016x}.ptx", kernel.name.trim_end_matches(".cu")));
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        return Ok(ptx);
    }
    let compile_opts = CompileOptions {
        arch: Some(arch),
        options: opts.clone(),
        include_paths: include_paths(),
        name: Some(kernel.name.to_string()),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(kernel.source, compile_opts)
        .map_err(|e| compile_error(kernel, arch, &opts, e))?
        .to_src();
    store(&path, &ptx)?;
    Ok(ptx)
}

fn compile_error(kernel: &Kernel, arch: &str, options: &[String], e: CompileError) -> Error {
    let log = match e {
        CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
        other => format!("{other:?}"),
    };
    Error::Compile { kernel: kernel.name, arch: arch.to_string(), options: options.to_vec(), log }
}

/// Writes through a temporary file and a rename, so a reader never sees half a PTX file even
/// when several processes compile at once.
fn store(path: &std::path::Path, ptx: &str) -> Result<()> {
    let cache_err = |source| Error::Cache { path: path.display().to_string(), source };
    let dir = path.parent().expect("cache files live in a folder");
    std::fs::create_dir_all(dir).map_err(cache_err)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, ptx).map_err(cache_err)?;
    std::fs::rename(&tmp, path).map_err(cache_err)
}

/// CUDA's headers (cuda_bf16.h) are built into NVRTC; `$CUDA_HOME/include` is added when set, for
/// toolkits whose NVRTC expects them on disk.
fn include_paths() -> Vec<String> {
    std::env::var("CUDA_HOME").map(|h| vec![format!("{h}/include")]).unwrap_or_default()
}

fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ASYNCT_KERNEL_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("asynct").join("kernels")
}

/// FNV-1a over everything that changes the PTX.
fn cache_key(kernel: &Kernel, arch: &str, options: &[String], nvrtc_version: &str) -> u64 {
    let parts = [kernel.name, kernel.source, arch, &options.join(" "), nvrtc_version];
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints; it is only called once NVRTC is known to load.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    format!("{major}.{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Kernel = Kernel { name: "k.cu", source: "extern \"C\" __global__ void k() {}" };

    #[test]
    fn the_cache_key_changes_with_source_arch_options_and_nvrtc() {
        let key = |k: &Kernel, arch, opts: &[String], v| cache_key(k, arch, opts, v);
        let base = key(&K, "sm_90a", &options(), "13.0");
        let other = Kernel { source: "extern \"C\" __global__ void k() { }", ..K };
        assert_ne!(base, key(&other, "sm_90a", &options(), "13.0"));
        assert_ne!(base, key(&K, "sm_80", &options(), "13.0"));
        assert_ne!(base, key(&K, "sm_90a", &["-G".to_string()], "13.0"));
        assert_ne!(base, key(&K, "sm_90a", &options(), "13.1"));
        assert_eq!(base, key(&K, "sm_90a", &options(), "13.0"));
    }
}
