//! The files the job had open, against what the dump saw, before an
//! undump lets CRIU restore them (CRIU's images say which, through
//! [`criu_images`]): CRIU opens each again by path, as root, and fails on
//! one whose size or mode moved after forking the tree, or opens for the
//! job whatever a link put in one's place leads to. [`read`] reads what
//! the images say of the job's files once, for this check, the
//! credentials of another user's images and the ports the job listened
//! on.

use std::collections::HashSet;
use std::path::Path;

use crate::commands::disk::criu_tool::image_files::{self as criu_images, Differs};
use crate::commands::disk::report::DiskFailure;
use crate::commands::disk::undump_checks::source::HeldImages;

/// CRIU's images of the files the job had open are read at most this far.
const FILES_IMAGE_CAP: u64 = 256 << 20;

/// What CRIU's images say of the job's files, read once for every check
/// an undump makes of them (these files, the credentials of another
/// user's images, the ports the job listened on).
pub struct JobFiles {
    /// `files.img`'s regular files: `Ok(None)` where the images hold no
    /// such image, `Err` why it could not be read.
    pub files: Result<Option<Vec<criu_images::DumpedFile>>, String>,
    /// The ids of those CRIU restores from its own copy
    /// (`remap-fpath.img`), not opened by path.
    pub remapped: HashSet<u32>,
    /// The TCP sockets it listened on (none where `files` is not `Ok`).
    pub listened: Vec<criu_images::Listened>,
    /// Its established TCP connections (none where `files` is not `Ok`).
    pub connected: Vec<criu_images::Connected>,
    /// Its Unix sockets bound to a path (none where `files` is not `Ok`).
    pub unix_bound: Vec<criu_images::UnixBound>,
    /// Its inet sockets bound to an address, of any protocol (none where
    /// `files` is not `Ok`).
    pub inet_bound: Vec<criu_images::InetBound>,
}

/// Reads `files.img` and `remap-fpath.img` from the images held, once.
pub fn read(images: &HeldImages) -> JobFiles {
    let read = |name: &str| images.read(name, FILES_IMAGE_CAP);
    let (files, sockets) = match read("files.img") {
        Ok(Some(img)) => match criu_images::dumped_files(&img) {
            Ok(files) => (
                Ok(Some(files)),
                criu_images::sockets(&img).unwrap_or_default(),
            ),
            Err(why) => (Err(why.to_string()), Default::default()),
        },
        Ok(None) => (Ok(None), Default::default()),
        Err(why) => (Err(why.to_string()), Default::default()),
    };
    let remapped = match read("remap-fpath.img") {
        Ok(Some(img)) => criu_images::remapped(&img).unwrap_or_default(),
        Ok(None) | Err(_) => HashSet::new(), // no file restored from a copy
    };
    JobFiles {
        files,
        remapped,
        listened: sockets.listened(),
        connected: sockets.connected(),
        unix_bound: sockets.unix,
        inet_bound: sockets.inet,
    }
}

/// The regular files the job had open; None (with a remark) when the
/// images cannot tell.
fn open_files<'a>(
    job: &'a JobFiles,
    remarks: &mut Vec<String>,
) -> Option<&'a [criu_images::DumpedFile]> {
    let why = match &job.files {
        Ok(Some(files)) => return Some(files),
        Ok(None) => "no such image",
        Err(why) => why.as_str(),
    };
    remarks.push(format!("the job's open files were not checked against the dump's (files.img: {why}): CRIU says if one changed, and follows a link put in one's place"));
    None
}

/// Refuses the undump when a file the job had open is not as it was: its
/// path leads elsewhere through a link now (CRIU, as root, would open the
/// link's target for the job: `--force` goes on), or its size or mode is
/// not the dump's (CRIU would fail on it after forking the tree).
///
/// A file the job wrote to that grew since (its log, its launcher's
/// output) is not refused where `cut_allowed` (images only root could
/// have written): it is returned, to be cut back to its size at the dump
/// once every check has passed ([`super::grown_files`]).
pub fn refuse_changed(
    job: &JobFiles,
    force: bool,
    cut_allowed: bool,
    remarks: &mut Vec<String>,
) -> Result<Vec<Differs<u64>>, DiskFailure> {
    let Some(files) = open_files(job, remarks) else {
        return Ok(Vec::new());
    };
    let remapped = &job.remapped;
    let relinked = criu_images::relinked(files, remapped, &|path| std::fs::canonicalize(path).ok());
    if !relinked.is_empty() {
        let each: Vec<String> = relinked
            .iter()
            .map(|r| format!("{} leads to {} now", shown(&r.path), shown(&r.now)))
            .collect();
        let why = format!(
            "{}: a link was put in the place of a file the job had open, and CRIU, as root, would open where it leads for the job",
            each.join("; ")
        );
        DiskFailure::unless_forced(
            "files_changed",
            &why,
            "put the job's file back where the link is, or remove the link; --force restores anyway, giving the job what the link leads to",
            force,
            remarks,
        )?;
    }
    refuse_files_not_as_dumped(files, remapped, cut_allowed)
}

/// `O_ACCMODE`, `O_WRONLY`, `O_RDWR`.
const ACCESS_MODE: u32 = 0o3;
const WRITE_ONLY: u32 = 0o1;
const READ_WRITE: u32 = 0o2;

/// Whether a resized file grew and the job had it open for writing: what
/// it wrote since, cut back safely with what was written kept (pure).
pub fn grew_by_writing(files: &[criu_images::DumpedFile], resized: &Differs<u64>) -> bool {
    resized.now > resized.at_dump
        && files.iter().any(|f| {
            f.path == resized.path
                && f.flags
                    .is_some_and(|flags| matches!(flags & ACCESS_MODE, WRITE_ONLY | READ_WRITE))
        })
}

/// A path for a message, its control characters escaped.
fn shown(path: &Path) -> String {
    crate::targets::name::printable(&path.to_string_lossy()).into_owned()
}

/// Refuses the undump when a file the job had open has another size or
/// mode than at the dump: CRIU checks both ("has bad size", "has bad
/// mode") and fails after forking the tree.
fn refuse_files_not_as_dumped(
    files: &[criu_images::DumpedFile],
    remapped: &HashSet<u32>,
    cut_allowed: bool,
) -> Result<Vec<Differs<u64>>, DiskFailure> {
    let now = |path: &Path| std::fs::metadata(path).ok();
    let (grown, resized): (Vec<_>, Vec<_>) = criu_images::resized(files, remapped, &|path| {
        now(path).filter(|m| m.is_file()).map(|m| m.len())
    })
    .into_iter()
    .partition(|r| cut_allowed && grew_by_writing(files, r));
    let remoded = criu_images::remoded(files, remapped, &|path| {
        now(path).map(|m| std::os::unix::fs::MetadataExt::mode(&m))
    });
    if resized.is_empty() && remoded.is_empty() {
        return Ok(grown);
    }
    let each: Vec<String> = resized
        .iter()
        .map(|r| {
            format!(
                "{} was {} bytes at the dump and is {} now",
                shown(&r.path),
                r.at_dump,
                r.now
            )
        })
        .chain(remoded.iter().map(|r| {
            format!(
                "{} had mode {:o} at the dump and has {:o} now",
                shown(&r.path),
                r.at_dump,
                r.now
            )
        }))
        .collect();
    let fix = match resized.first() {
        Some(first) => format!(
            "a log the job (or an earlier undump of these images) wrote to since: keep a copy and cut it back (`truncate -s {} {}`), or let the job write its output where a restore finds it as it was (a new file per run, or a pipe)",
            first.at_dump,
            shown(&first.path)
        ),
        None => "give each file its mode at the dump again (chmod)".to_string(),
    };
    Err(DiskFailure::refused(
        "files_changed",
        format!(
            "refused before any change: {}; CRIU restores a file the job had open only as it was at the dump",
            each.join("; ")
        ),
        fix,
    ))
}
