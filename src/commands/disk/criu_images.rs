//! What CRIU's images say of the regular files the job had open, read so
//! that an undump can refuse, before CRIU starts, a restore CRIU would fail
//! on: CRIU restores an open file only at the size it had at the dump
//! ("File ... has bad size"), and a job's log grows after its dump (the job
//! went on with `--leave-running`, or an earlier undump of the same images
//! ran and wrote to it). Pure: the bytes come from the caller.
//!
//! The images are protobuf messages in CRIU's framing (CRIU's
//! `images/*.proto`): two magic numbers, then each entry as its length (a
//! little-endian u32) and the message. `files.img` holds a `file_entry`
//! per file (`type` = 1 for a regular file, `id`, `reg` = a
//! `reg_file_entry` with `name` = 6 and `size` = 8); `remap-fpath.img`
//! names the files CRIU restores from a copy of its own (a deleted or
//! linked-away file: `orig_id` = 1), which are not opened by path.

use std::collections::HashSet;

/// Every CRIU image begins with this, then its own magic.
const IMG_COMMON_MAGIC: u32 = 0x5456_4319;
/// `files.img`.
pub const FILES_MAGIC: u32 = 0x5630_3138;
/// `remap-fpath.img`.
pub const REMAP_FPATH_MAGIC: u32 = 0x5913_3954;

/// A regular file the job had open (or mapped), as the dump saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedFile {
    pub id: u32,
    /// Its path, as CRIU opens it again.
    pub path: String,
    /// Its size at the dump, when CRIU recorded one.
    pub size: Option<u64>,
}

/// A file whose size is not the dump's any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub path: String,
    pub at_dump: u64,
    pub now: u64,
}

/// Why an image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadImage(String);

/// The messages of an image whose magic is `magic` (pure).
pub fn entries(image: &[u8], magic: u32) -> Result<Vec<&[u8]>, BadImage> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0) != Some(IMG_COMMON_MAGIC) || word(4) != Some(magic) {
        return Err(BadImage(
            "not the CRIU image expected (its magic differs)".into(),
        ));
    }
    let mut found = Vec::new();
    let mut at = 8;
    while at < image.len() {
        let length = word(at).ok_or_else(|| BadImage("an entry's length is cut short".into()))?;
        let start = at + 4;
        let message = image
            .get(start..start + length as usize)
            .ok_or_else(|| BadImage("an entry runs past the end".into()))?;
        found.push(message);
        at = start + length as usize;
    }
    Ok(found)
}

/// One protobuf field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'a> {
    Number(u64),
    Bytes(&'a [u8]),
}

/// A message's fields, in order: (number, value); an error where the
/// encoding breaks off (pure).
fn fields(mut message: &[u8]) -> Result<Vec<(u64, Value<'_>)>, BadImage> {
    let broken = || BadImage("a message's encoding breaks off".into());
    let mut found = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message).ok_or_else(broken)?;
        let value = match key & 7 {
            0 => Value::Number(varint(&mut message).ok_or_else(broken)?),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                let (bytes, rest) = message.split_at_checked(width).ok_or_else(broken)?;
                message = rest;
                let mut wide = [0u8; 8];
                wide[..width].copy_from_slice(bytes);
                Value::Number(u64::from_le_bytes(wide))
            }
            2 => {
                let length = varint(&mut message).ok_or_else(broken)?;
                let length = usize::try_from(length).map_err(|_| broken())?;
                let (bytes, rest) = message.split_at_checked(length).ok_or_else(broken)?;
                message = rest;
                Value::Bytes(bytes)
            }
            _ => {
                return Err(BadImage(
                    "a field of a wire type CRIU does not write".into(),
                ))
            }
        };
        found.push((key >> 3, value));
    }
    Ok(found)
}

/// A base-128 varint from the front of `bytes`, which it consumes.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

/// The regular files of a `files.img` (pure).
pub fn dumped_files(files_img: &[u8]) -> Result<Vec<DumpedFile>, BadImage> {
    let mut found = Vec::new();
    for entry in entries(files_img, FILES_MAGIC)? {
        let entry = fields(entry)?;
        let number = |n| {
            entry.iter().find_map(|(k, v)| match v {
                Value::Number(x) if *k == n => Some(*x),
                _ => None,
            })
        };
        let reg = entry.iter().find_map(|(k, v)| match v {
            Value::Bytes(b) if *k == 3 => Some(*b),
            _ => None,
        });
        let (Some(1), Some(id), Some(reg)) = (number(1), number(2), reg) else {
            continue;
        };
        let reg = fields(reg)?;
        let path = reg.iter().find_map(|(k, v)| match v {
            Value::Bytes(b) if *k == 6 => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        });
        let size = reg.iter().find_map(|(k, v)| match v {
            Value::Number(x) if *k == 8 => Some(*x),
            _ => None,
        });
        if let Some(path) = path {
            found.push(DumpedFile {
                id: id as u32,
                path,
                size,
            });
        }
    }
    Ok(found)
}

/// The ids of the files a `remap-fpath.img` restores from CRIU's own copy
/// (pure).
pub fn remapped(remap_img: &[u8]) -> Result<HashSet<u32>, BadImage> {
    let mut ids = HashSet::new();
    for entry in entries(remap_img, REMAP_FPATH_MAGIC)? {
        if let Some(id) = fields(entry)?.iter().find_map(|(k, v)| match v {
            Value::Number(x) if *k == 1 => Some(*x as u32),
            _ => None,
        }) {
            ids.insert(id);
        }
    }
    Ok(ids)
}

/// The files CRIU would open by path and find at another size than the
/// dump's: `size_now` says a path's size now, None when there is nothing
/// there to judge (gone, or not a path of this mount namespace: CRIU
/// says so itself). Each path once (pure).
pub fn resized(
    files: &[DumpedFile],
    remapped: &HashSet<u32>,
    size_now: &dyn Fn(&str) -> Option<u64>,
) -> Vec<Resized> {
    let mut seen = HashSet::new();
    files
        .iter()
        .filter(|f| !remapped.contains(&f.id))
        .filter_map(|f| {
            let at_dump = f.size?;
            let now = size_now(&f.path)?;
            (now != at_dump && seen.insert(f.path.clone())).then(|| Resized {
                path: f.path.clone(),
                at_dump,
                now,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint_bytes(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn number(field: u64, value: u64) -> Vec<u8> {
        let mut out = varint_bytes(field << 3);
        out.extend(varint_bytes(value));
        out
    }

    fn bytes(field: u64, value: &[u8]) -> Vec<u8> {
        let mut out = varint_bytes((field << 3) | 2);
        out.extend(varint_bytes(value.len() as u64));
        out.extend_from_slice(value);
        out
    }

    fn image(magic: u32, messages: &[Vec<u8>]) -> Vec<u8> {
        let mut out = IMG_COMMON_MAGIC.to_le_bytes().to_vec();
        out.extend(magic.to_le_bytes());
        for m in messages {
            out.extend((m.len() as u32).to_le_bytes());
            out.extend(m);
        }
        out
    }

    /// A `file_entry` of a regular file, as CRIU writes one (with the
    /// required `fown` and a fixed32-free layout).
    fn reg_entry(id: u64, path: &str, size: Option<u64>) -> Vec<u8> {
        let mut reg = [
            number(1, id),
            number(2, 0o2),
            number(3, 0),
            bytes(5, &number(1, 0)),
        ]
        .concat();
        reg.extend(bytes(6, path.as_bytes()));
        if let Some(size) = size {
            reg.extend(number(8, size));
        }
        [number(1, 1), number(2, id), bytes(3, &reg)].concat()
    }

    #[test]
    fn regular_files_are_read_with_their_sizes_and_others_skipped() {
        let pipe = [number(1, 2), number(2, 9), bytes(18, &number(1, 9))].concat();
        let img = image(
            FILES_MAGIC,
            &[
                reg_entry(3, "/var/log/job.log", Some(1234)),
                pipe,
                reg_entry(4, "/usr/lib/libc.so.6", None),
                reg_entry(300, "/big", Some(1 << 40)),
            ],
        );
        let files = dumped_files(&img).expect("read");
        assert_eq!(
            files,
            [
                DumpedFile {
                    id: 3,
                    path: "/var/log/job.log".into(),
                    size: Some(1234)
                },
                DumpedFile {
                    id: 4,
                    path: "/usr/lib/libc.so.6".into(),
                    size: None
                },
                DumpedFile {
                    id: 300,
                    path: "/big".into(),
                    size: Some(1 << 40)
                },
            ]
        );
    }

    #[test]
    fn a_file_whose_size_moved_is_found_once_and_remapped_gone_and_unsized_ones_are_not() {
        let files = [
            DumpedFile {
                id: 1,
                path: "/log".into(),
                size: Some(100),
            },
            DumpedFile {
                id: 2,
                path: "/log".into(),
                size: Some(100),
            },
            DumpedFile {
                id: 3,
                path: "/same".into(),
                size: Some(7),
            },
            DumpedFile {
                id: 4,
                path: "/deleted-then-made-again".into(),
                size: Some(5),
            },
            DumpedFile {
                id: 5,
                path: "/gone".into(),
                size: Some(5),
            },
            DumpedFile {
                id: 6,
                path: "/unsized".into(),
                size: None,
            },
        ];
        let now = |path: &str| match path {
            "/log" => Some(160),
            "/same" => Some(7),
            "/deleted-then-made-again" => Some(99),
            "/unsized" => Some(1),
            _ => None,
        };
        let remap = image(REMAP_FPATH_MAGIC, &[[number(1, 4), number(2, 40)].concat()]);
        let remapped = remapped(&remap).expect("read");
        assert_eq!(remapped, HashSet::from([4]));
        assert_eq!(
            resized(&files, &remapped, &now),
            [Resized {
                path: "/log".into(),
                at_dump: 100,
                now: 160
            }]
        );
    }

    #[test]
    fn a_broken_or_foreign_image_is_an_error_not_a_guess() {
        assert!(entries(b"", FILES_MAGIC).is_err());
        let img = image(FILES_MAGIC, &[reg_entry(1, "/a", Some(1))]);
        assert!(
            entries(&img, REMAP_FPATH_MAGIC).is_err(),
            "another image's magic"
        );
        assert!(dumped_files(&img[..img.len() - 3]).is_err(), "cut short");
        let mut bad = image(FILES_MAGIC, &[vec![0x0b]]); // wire type 3
        assert!(dumped_files(&bad).is_err());
        bad = image(FILES_MAGIC, &[vec![0x08, 0xff]]); // a varint that breaks off
        assert!(dumped_files(&bad).is_err());
    }
}
