//! Output files of the CLI (`--out_json_file`, compare's `--json` and
//! `--svg`), opened before a run so an unwritable path fails first.

/// An output file opened for writing before a run (created if it did not
/// exist; an existing file keeps its contents until [`OutputFile::write`]),
/// so a path the run could not write (`/proc/x`, a read-only file system, a
/// directory that does not exist) is refused before anything runs. A file
/// this created and never wrote is removed when it is dropped.
pub struct OutputFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    /// This created the file and has not written it yet.
    remove_on_drop: bool,
}

impl OutputFile {
    /// Opens (or creates) `path` for writing.
    ///
    /// Errors: [`rdma_direct::Error::Invalid`] naming the path when it is a
    /// directory, its directory does not exist, or the open fails (EROFS,
    /// EACCES, a file system that takes no new files such as /proc).
    pub fn open(path: &std::path::Path) -> rdma_direct::Result<OutputFile> {
        let bad = |why: String| {
            rdma_direct::Error::Invalid(format!("cannot write {}: {why}", path.display()))
        };
        if path.is_dir() {
            return Err(bad("it is a directory".into()));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        if !dir.is_dir() {
            return Err(bad("its directory does not exist".into()));
        }
        let new = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path);
        let (file, created) = match new {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| bad(format!("cannot open it for writing: {e}")))?;
                (f, false)
            }
            Err(e) => return Err(bad(format!("cannot create it: {e}"))),
        };
        Ok(OutputFile {
            file,
            path: path.to_path_buf(),
            remove_on_drop: created,
        })
    }

    /// Replaces the file's contents with `text` (a regular file is
    /// truncated first; a FIFO or a terminal is written as it is).
    ///
    /// Errors: [`rdma_direct::Error::Invalid`] naming the path when the
    /// write fails (e.g. ENOSPC).
    pub fn write(mut self, text: &str) -> rdma_direct::Result<()> {
        use std::io::Write;
        let path = self.path.clone();
        let bad = |e: std::io::Error| {
            rdma_direct::Error::Invalid(format!("write {}: {e}", path.display()))
        };
        self.remove_on_drop = false;
        if self.file.metadata().map_err(bad)?.is_file() {
            self.file.set_len(0).map_err(bad)?;
        }
        self.file.write_all(text.as_bytes()).map_err(bad)?;
        self.file.flush().map_err(bad)
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Refuses, before a run, an output file that cannot be written (see
/// [`OutputFile::open`], whose errors it returns); leaves no file behind.
pub fn check_output_path(path: &std::path::Path) -> rdma_direct::Result<()> {
    OutputFile::open(path).map(drop)
}
