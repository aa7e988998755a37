//! The `model` crate's one error type.
//!
//! Every checkpoint error names the file it came from and, where one is involved, the tensor,
//! and prints what was expected next to what was found, so a bad checkpoint can be fixed from
//! the message alone.

use std::path::PathBuf;

/// Everything loading, validating, writing or generating a model can refuse.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A JSON file (config, shard index) does not parse into what it must hold.
    #[error("{}: {reason}", .file.display())]
    Json {
        /// The JSON file.
        file: PathBuf,
        /// The parser's message (it names the field and the line).
        reason: String,
    },
    /// A config value breaks a rule of SPEC section 1.
    #[error("config: `{field}` {reason}")]
    Config {
        /// The offending field, dotted for nested ones (`hp1.clip_min`).
        field: &'static str,
        /// The rule and the value given.
        reason: String,
    },
    /// A folder holds neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{}: no model.safetensors or model.safetensors.index.json", .dir.display())]
    NoCheckpoint {
        /// The folder searched.
        dir: PathBuf,
    },
    /// A tensor the model needs is not in the checkpoint.
    #[error("{}: tensor `{tensor}` is missing", .file.display())]
    MissingTensor {
        /// The file (or shard index) that should hold it.
        file: PathBuf,
        /// The tensor's checkpoint name.
        tensor: String,
    },
    /// A tensor has the wrong shape.
    #[error("{}: tensor `{tensor}` has shape {got:?}, expected {expected}", .file.display())]
    Shape {
        /// The file holding it (or being written).
        file: PathBuf,
        /// The tensor's checkpoint name.
        tensor: String,
        /// The shape found.
        got: Vec<usize>,
        /// The shape required, in numbers or words.
        expected: String,
    },
    /// A tensor is stored in a type the loader does not convert.
    #[error("{}: tensor `{tensor}` is stored as {got}, expected BF16, F16 or F32", .file.display())]
    Dtype {
        /// The file holding it.
        file: PathBuf,
        /// The tensor's checkpoint name.
        tensor: String,
        /// The stored type, as safetensors spells it.
        got: String,
    },
    /// A tensor holds a NaN or an infinity, which would poison every activation after it.
    #[error("{}: tensor `{tensor}` holds {value} at flat index {index}, expected finite values", .file.display())]
    NonFinite {
        /// The file holding it.
        file: PathBuf,
        /// The tensor's checkpoint name.
        tensor: String,
        /// The first offending element, in row-major order.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// A safetensors file ends before the data its header promises.
    #[error("{}: truncated: {detail}", .file.display())]
    Truncated {
        /// The file.
        file: PathBuf,
        /// Which tensor (or the header) is cut, with the byte counts.
        detail: String,
    },
    /// A safetensors header does not parse or contradicts itself.
    #[error("{}: corrupt header: {detail}", .file.display())]
    CorruptHeader {
        /// The file.
        file: PathBuf,
        /// What is wrong, naming the tensor entry where one is at fault.
        detail: String,
    },
    /// A shard index names a shard file that does not exist.
    #[error("{}: shard `{shard}` (holding tensor `{tensor}`) is missing", .index.display())]
    MissingShard {
        /// The index file.
        index: PathBuf,
        /// The shard file name it gives.
        shard: String,
        /// The first tensor the index maps to that shard.
        tensor: String,
    },
    /// The safetensors serializer refused the tensors being written.
    #[error("{}: cannot serialize: {reason}", .file.display())]
    Serialize {
        /// The file being written.
        file: PathBuf,
        /// The serializer's message.
        reason: String,
    },
    /// A preset name that is not one of the shipped presets.
    #[error("unknown preset `{got}`, expected one of {expected}")]
    UnknownPreset {
        /// The name given.
        got: String,
        /// The known names.
        expected: String,
    },
    /// The Qwen3 tokenizer, needed by the large presets, was found nowhere.
    #[error(
        "the Qwen3 tokenizer (tokenizer.json) was not found; looked in: {}; set ASYNCT_QWEN3_TOKENIZER_DIR \
         to the folder holding tokenizer.json",
        .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    TokenizerNotFound {
        /// Every folder searched, in order.
        searched: Vec<PathBuf>,
    },
    /// The tokenizers library failed to build or save a tokenizer.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The KV-cache block pool has too few free blocks for an allocation.
    #[error("out of KV-cache blocks: requested {requested}, {free} free of {total}")]
    OutOfBlocks {
        /// Blocks asked for.
        requested: usize,
        /// Blocks free at the time.
        free: usize,
        /// Blocks in the pool.
        total: usize,
    },
    /// A block handed back to the pool was never handed out, or is out of range, or repeated.
    #[error("cannot free KV-cache block {block}: not in use (pool of {total})")]
    BadBlockFree {
        /// The offending block id.
        block: u32,
        /// Blocks in the pool.
        total: usize,
    },
    /// A call the engine cannot serve as made (a request id already scheduled, a step past the
    /// GPU buffers, logits recording switched mid-batch): the caller's fault, not a request
    /// field's; a field at fault is [`Error::Invalid`].
    #[error("invalid request: {0}")]
    Request(String),
    /// A request's parameter breaks a rule the engine checks (an empty or too long `prompt` or one
    /// with an id outside the vocabulary, `min_tokens` above `max_tokens`, a `stop_token_ids` id
    /// outside the vocabulary).
    #[error("`{param}` is invalid: {reason}")]
    Invalid {
        /// The parameter, by its OpenAI name.
        param: &'static str,
        /// The rule and the value given.
        reason: String,
    },
    /// An engine option that cannot be used as given (`--device`, `--gpu-memory-utilization`);
    /// the message names the option.
    #[error("{0}")]
    Options(String),
    /// The scheduler's bookkeeping was handed something inconsistent.
    #[error("scheduler: {0}")]
    Scheduler(String),
    /// An executor was handed a step it cannot run as given, or returned one the engine cannot
    /// use (sampling rows or tokens that do not match the plan's sampling sequences).
    #[error("executor: {0}")]
    Executor(String),
    /// A request id the engine does not hold: never added, already finished, or aborted.
    #[error("request {id} is not running or waiting")]
    UnknownRequest {
        /// The id given.
        id: u64,
    },
    /// A buffer sized by a flag or a config field would not fit: its size overflows, or passes the
    /// memory it may take. Checked before allocating, so nothing aborts.
    #[error("{what} needs {need}, more than {limit}; {hint}")]
    Memory {
        /// The buffer and what sizes it (`the CPU KV cache (N blocks of 16 tokens)`).
        what: String,
        /// Its size in words (`512.0 GiB`, or `more than 2^64 bytes`).
        need: String,
        /// The budget in words (`--kv-cache-memory 4 GiB`, `this machine's 62.5 GiB of memory`).
        limit: String,
        /// Which option to change.
        hint: String,
    },
    /// The oracle refused a value (for example the HP1 parameters a config resolves to).
    #[error(transparent)]
    Oracle(#[from] oracle::Error),
    /// The GPU backend: a launch refused, a device fault, memory.
    #[error("GPU: {0}")]
    Gpu(#[from] gpu::Error),
}

/// The `model` crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] for `path`, for use in `map_err`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_message_names_file_tensor_expected_and_got() {
        let e = Error::Shape {
            file: PathBuf::from("/m/model.safetensors"),
            tensor: "model.norm.alpha".into(),
            got: vec![3, 4],
            expected: "[1] or [64]".into(),
        };
        let msg = e.to_string();
        for part in ["/m/model.safetensors", "model.norm.alpha", "[3, 4]", "[1] or [64]"] {
            assert!(msg.contains(part), "{msg} lacks {part}");
        }
    }

    #[test]
    fn tokenizer_not_found_lists_every_folder_and_the_variable() {
        let e = Error::TokenizerNotFound { searched: vec![PathBuf::from("/a"), PathBuf::from("/b/c")] };
        let msg = e.to_string();
        assert!(msg.contains("/a, /b/c") && msg.contains("ASYNCT_QWEN3_TOKENIZER_DIR"), "{msg}");
    }
}
