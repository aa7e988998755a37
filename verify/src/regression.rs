//! Saved failing cases: one JSON file per case under `verify/regressions/`, replayed on the
//! oracle paths by `cargo test -p verify`, on the GPU paths by the `gpu_attention` binary, and
//! on either by `asynct-verify replay [--gpu]`.
//!
//! A file holds the [`Case`] (a few hundred bytes: shapes, parameters and seeds, no data) plus,
//! for the reader, the path that failed and how. Replay runs every registered path on the case,
//! not only the one that failed, so a fix that breaks a neighbour shows up too.

use std::fs;
use std::path::{Path as FsPath, PathBuf};

use serde::{Deserialize, Serialize};

use crate::case::Case;
use crate::check::{check_all, CheckReport, Failure};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::rng::fingerprint;

/// One saved case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    /// The path that failed when the case was saved, if the failure belonged to one.
    #[serde(default)]
    pub path: Option<String>,
    /// The failure message when the case was saved.
    #[serde(default)]
    pub failure: String,
    /// The case itself.
    pub case: Case,
}

impl Regression {
    /// Reads one saved case.
    pub fn load(file: &FsPath) -> Result<Self> {
        let text = fs::read_to_string(file).map_err(|source| Error::Io { path: file.to_path_buf(), source })?;
        serde_json::from_str(&text).map_err(|source| Error::Json { path: file.to_path_buf(), source })
    }

    /// Writes this case into `dir` (created if missing) as `<path>-<fingerprint>.json` and
    /// returns the file name; the same case always gets the same name.
    pub fn save(&self, dir: &FsPath) -> Result<PathBuf> {
        fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
        let case_json = serde_json::to_string(&self.case).expect("a Case always serialises");
        let stem: String = self
            .path
            .as_deref()
            .unwrap_or("case")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let file = dir.join(format!("{stem}-{:016x}.json", fingerprint(case_json.as_bytes())));
        let text = serde_json::to_string_pretty(self).expect("a Regression always serialises");
        fs::write(&file, text + "\n").map_err(|source| Error::Io { path: file.clone(), source })?;
        Ok(file)
    }

    /// Checks every path in `paths` that supports this case.
    pub fn replay(&self, paths: &[Box<dyn Path>]) -> Vec<std::result::Result<CheckReport, Failure>> {
        check_all(paths, &self.case)
    }
}

/// Where the saved cases are: `$ASYNCT_REGRESSIONS` if set, else `verify/regressions` under the
/// working directory if it is there (the device machine runs from a copy of the repository,
/// where the build machine's paths do not exist), else this crate's own folder.
pub fn regressions_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ASYNCT_REGRESSIONS") {
        return PathBuf::from(dir);
    }
    let here = PathBuf::from("verify/regressions");
    if here.is_dir() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

/// Every saved case in `dir`, sorted by file name. Only `*.json` files and a `README.md` may
/// live there: any other file, and any JSON that is not a saved case, is an error.
pub fn load_dir(dir: &FsPath) -> Result<Vec<(PathBuf, Regression)>> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    let mut files: Vec<PathBuf> =
        fs::read_dir(dir).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>().map_err(io)?;
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "README.md") {
            continue;
        }
        if file.extension().is_none_or(|e| e != "json") {
            return Err(Error::NotACase { path: file });
        }
        let case = Regression::load(&file)?;
        cases.push((file, case));
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::tests::small;
    use crate::path::all_paths;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("verify-regression-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_saved_case_loads_back_equal_and_replays() {
        let dir = scratch("roundtrip");
        let reg = Regression { path: Some("oracle/split k".into()), failure: "made up".into(), case: small() };
        let file = reg.save(&dir).unwrap();
        assert!(file.file_name().unwrap().to_str().unwrap().starts_with("oracle_split_k-"));
        assert_eq!(reg.save(&dir).unwrap(), file, "the name depends on the case only");
        let loaded = load_dir(&dir).unwrap();
        assert_eq!(loaded, vec![(file, reg.clone())]);
        assert!(reg.replay(&all_paths()).iter().all(|r| r.is_ok()));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unreadable_files_are_errors_naming_the_file() {
        let dir = scratch("bad");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("README.md"), "ignored\n").unwrap();
        assert_eq!(load_dir(&dir).unwrap().len(), 0);
        fs::write(dir.join("broken.json"), "{\"case\": 3}").unwrap();
        let err = load_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("broken.json"), "{err}");
        fs::remove_file(dir.join("broken.json")).unwrap();
        fs::write(dir.join("notes.txt"), "x").unwrap();
        assert!(load_dir(&dir).unwrap_err().to_string().contains("notes.txt"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
