//! The checkpoint records a command reads or writes, in their directory
//! opened once and checked (`files::SafeDir`) before any driver call: a
//! directory cudackpt will not trust stops the command with nothing moved,
//! rather than letting a record be written through a planted link or read
//! from a planted file.

use std::path::PathBuf;

use crate::files::{SafeDir, UnsafeDir};
use crate::gpu::record;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;

/// This command's record directory, when it has one to use.
pub struct Records {
    pub path: PathBuf,
    /// `None`: the command needs no records, or the directory is missing
    /// (nothing to read) or could not be made (records are then not
    /// written, and the report says so).
    pub dir: Option<SafeDir>,
    /// Why the directory could not be made, for that remark.
    pub unavailable: Option<String>,
}

/// Opens the record directory of a command that restores (to read) or
/// checkpoints (to write), or stops it when the directory is unsafe.
pub fn open(request: &Request<'_>) -> Result<Records, Stop> {
    let path = record::dir(request.record_dir);
    let mut records = Records {
        path,
        dir: None,
        unavailable: None,
    };
    let opened = if request.operation.checkpoints() {
        SafeDir::create(&records.path).map(Some)
    } else if request.operation.restores() {
        SafeDir::open_existing(&records.path)
    } else {
        return Ok(records);
    };
    match opened {
        Ok(dir) => records.dir = dir,
        // Not there and cannot be made (no right to /run): records are a
        // help, not a must; the report says what could not be written.
        Err(UnsafeDir::Io { source, .. }) => records.unavailable = Some(source.to_string()),
        Err(unsafe_dir) => {
            return Err(Stop::not_run(Fault::new(
                FaultKind::UnsafePath,
                format!(
                    "refused before any change: the checkpoint record directory is not safe to use: {unsafe_dir}"
                ),
                unsafe_dir.hint(),
            )))
        }
    }
    Ok(records)
}
