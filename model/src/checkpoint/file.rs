//! One safetensors file, memory-mapped, with its header parsed and checked.
//!
//! The safetensors crate validates the header but its errors name neither the file nor, for a
//! truncated file, the tensor that is cut. When it refuses a file, [`diagnose`] re-reads the
//! header leniently to say which tensor entry is corrupt or which tensor's bytes are missing.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde::Deserialize;

use crate::error::{Error, Result};

/// Bytes of the little-endian header length that opens every safetensors file.
const LEN_PREFIX: usize = 8;

/// A safetensors file, mapped into memory.
pub(crate) struct SafetensorsFile {
    /// Where it was read from, for error messages.
    pub path: PathBuf,
    bytes: Mmap,
    data_start: usize,
    metadata: Metadata,
}

impl SafetensorsFile {
    /// Maps and checks `path`; every failure names the file.
    pub fn read(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(Error::io(path))?;
        // SAFETY: the mapping is read-only and lives as long as this value. A checkpoint is not
        // written while a model loads from it; if another process truncated it anyway, reading
        // the lost pages would fault, which is the risk every mmap-based loader (safetensors'
        // own, PyTorch's) takes for not copying a gigabyte first.
        let bytes = unsafe { Mmap::map(&file) }.map_err(Error::io(path))?;
        match SafeTensors::read_metadata(&bytes) {
            Ok((header_len, metadata)) => {
                Ok(SafetensorsFile { path: path.to_path_buf(), data_start: LEN_PREFIX + header_len, bytes, metadata })
            }
            Err(err) => Err(diagnose(path, &bytes, err)),
        }
    }

    /// The header entry of `name`, if the file holds it.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.metadata.info(name)
    }

    /// The raw bytes of a tensor whose entry came from [`Self::info`].
    pub fn data(&self, info: &TensorInfo) -> &[u8] {
        let (begin, end) = info.data_offsets;
        &self.bytes[self.data_start + begin..self.data_start + end]
    }
}

/// A header entry read without the crate's checks, to find the one at fault.
#[derive(Deserialize)]
struct LooseEntry {
    dtype: Dtype,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

impl LooseEntry {
    /// Bytes its dtype and shape need, `None` on overflow.
    fn needed_bytes(&self) -> Option<usize> {
        let elements = self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        Some(elements.checked_mul(self.dtype.bitsize())? / 8)
    }
}

/// Turns the safetensors crate's refusal of `bytes` into an error naming the file and, where
/// the header still parses, the tensor.
fn diagnose(path: &Path, bytes: &[u8], err: SafeTensorError) -> Error {
    let file = path.to_path_buf();
    let truncated = |detail: String| Error::Truncated { file: file.clone(), detail };
    let corrupt = |detail: String| Error::CorruptHeader { file: file.clone(), detail };
    let Some(prefix) = bytes.get(..LEN_PREFIX) else {
        return truncated(format!("{} bytes, fewer than the {LEN_PREFIX}-byte header length", bytes.len()));
    };
    let header_len = u64::from_le_bytes(prefix.try_into().expect("the prefix slice has 8 bytes"));
    let available = bytes.len() - LEN_PREFIX;
    if header_len > available as u64 {
        let detail = format!("header length says {header_len} bytes, only {available} follow");
        // A huge length is a corrupt prefix rather than a cut file.
        return if header_len > 100_000_000 { corrupt(detail) } else { truncated(detail) };
    }
    let header = &bytes[LEN_PREFIX..LEN_PREFIX + header_len as usize];
    let Ok(text) = std::str::from_utf8(header) else {
        return corrupt(format!("not UTF-8 ({err})"));
    };
    let entries: BTreeMap<String, serde_json::Value> = match serde_json::from_str(text) {
        Ok(entries) => entries,
        Err(json) => return corrupt(format!("not a JSON object: {json}")),
    };
    let data_len = available - header_len as usize;
    let mut ends = Vec::new();
    for (name, value) in entries.iter().filter(|(name, _)| name.as_str() != "__metadata__") {
        match LooseEntry::deserialize(value) {
            Ok(entry) => {
                let (begin, end) = entry.data_offsets;
                let needed = entry.needed_bytes();
                if Some(end.wrapping_sub(begin)) != needed || end < begin {
                    return corrupt(format!(
                        "tensor `{name}` ({:?} {:?}) needs {} bytes, its offsets [{begin}, {end}) disagree",
                        entry.dtype,
                        entry.shape,
                        needed.map_or("an overflowing number of".into(), |n| n.to_string()),
                    ));
                }
                ends.push((end, name));
            }
            Err(e) => return corrupt(format!("entry of tensor `{name}` is invalid: {e}")),
        }
    }
    ends.sort();
    if let Some((end, name)) = ends.iter().find(|(end, _)| *end > data_len) {
        return truncated(format!(
            "tensor `{name}` needs data bytes up to {end}, the data section has only {data_len}"
        ));
    }
    match err {
        SafeTensorError::InvalidOffset(name) => corrupt(format!("offsets of tensor `{name}` are invalid")),
        SafeTensorError::MetadataIncompleteBuffer => {
            let last = ends.last().map_or(0, |(end, _)| *end);
            corrupt(format!("the tensors cover {last} data bytes, the file holds {data_len}"))
        }
        other => corrupt(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(header: &str, data: &[u8]) -> Vec<u8> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        bytes
    }

    fn diagnosed(bytes: &[u8]) -> String {
        let err = SafeTensors::read_metadata(bytes).expect_err("the case is a bad file");
        diagnose(Path::new("/x/m.safetensors"), bytes, err).to_string()
    }

    const TWO: &str = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;

    #[test]
    fn cut_data_names_the_cut_tensor() {
        let msg = diagnosed(&file_of(TWO, &[0; 10]));
        assert!(msg.contains("/x/m.safetensors") && msg.contains("truncated") && msg.contains("`b`"), "{msg}");
        let msg = diagnosed(&file_of(TWO, &[0; 5]));
        assert!(msg.contains("`a`") && msg.contains("needs data bytes up to 8"), "{msg}");
    }

    #[test]
    fn cut_header_and_tiny_file_are_truncations() {
        let whole = file_of(TWO, &[0; 12]);
        assert!(diagnosed(&whole[..20]).contains("header length says"));
        assert!(diagnosed(&whole[..3]).contains("3 bytes"));
    }

    #[test]
    fn bad_entries_and_json_are_corrupt_headers() {
        let bad_entry = TWO.replace(r#""shape":[1]"#, r#""shape":"one""#);
        let msg = diagnosed(&file_of(&bad_entry, &[0; 12]));
        assert!(msg.contains("corrupt header") && msg.contains("`b`"), "{msg}");
        let msg = diagnosed(&file_of(&TWO.replace("\"a\":", "\"a\""), &[0; 12]));
        assert!(msg.contains("corrupt header") && msg.contains("JSON"), "{msg}");
        let msg = diagnosed(&file_of(&TWO.replace("[0,8]", "[0,6]").replace("[8,12]", "[6,12]"), &[0; 12]));
        assert!(msg.contains("tensor `a`") && msg.contains("needs 8 bytes"), "{msg}");
        let msg = diagnosed(&file_of(&TWO.replace("\"F32\",\"shape\":[2]", "\"Q7\",\"shape\":[2]"), &[0; 12]));
        assert!(msg.contains("`a`") && msg.contains("invalid"), "{msg}");
        let msg = diagnosed(&file_of(TWO, &[0; 16]));
        assert!(msg.contains("cover 12 data bytes") && msg.contains("16"), "{msg}");
    }
}
