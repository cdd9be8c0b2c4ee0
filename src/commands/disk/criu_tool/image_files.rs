//! What CRIU's images say of the regular files the job had open, read so
//! that an undump can refuse, before CRIU starts, a restore CRIU would fail
//! on: CRIU restores an open file only at the size it had at the dump
//! ("File ... has bad size"), and a job's log grows after its dump (the job
//! went on with `--leave-running`, or an earlier undump of the same images
//! ran and wrote to it). Pure: the bytes come from the caller.
//!
//! The images and their messages are read through `criu_messages`.
//! `files.img` holds a `file_entry`
//! per file (`type` = 1 for a regular file, `id`, `reg` = a
//! `reg_file_entry` with `name` = 6 and `size` = 8); `remap-fpath.img`
//! names the files CRIU restores from a copy of its own (a deleted or
//! linked-away file: `orig_id` = 1), which are not opened by path.

use std::collections::HashSet;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

pub use crate::commands::disk::criu_tool::messages::Creds;
use crate::commands::disk::criu_tool::messages::{
    decoded, entries, fd_type, first_entry, BadImage, CoreEntry, FileEntry, GhostFileEntry,
    RemapFilePathEntry, CORE_MAGIC, FILES_MAGIC, GHOST_FILE_MAGIC, REMAP_FPATH_MAGIC,
};

/// A regular file the job had open (or mapped), as the dump saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedFile {
    pub id: u32,
    /// Its path, as CRIU opens it again.
    pub path: PathBuf,
    /// Its size at the dump, when CRIU recorded one.
    pub size: Option<u64>,
    /// Its mode (type and permissions) at the dump, when CRIU recorded it.
    pub mode: Option<u32>,
    /// The flags CRIU opens it again with (`O_RDONLY`, `O_WRONLY|O_APPEND`,
    /// ...), when recorded.
    pub flags: Option<u32>,
}

/// A file that is not as the dump saw it: what it was, what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Differs<T> {
    pub path: PathBuf,
    pub at_dump: T,
    pub now: T,
}

/// A TCP socket the job listened on, as the dump saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listened {
    pub addr: std::net::IpAddr,
    pub port: u16,
    /// `SO_REUSEPORT`: it may share its port with another such socket.
    pub reuseport: bool,
}

/// A TCP connection of the job's, as the dump saw it: CRIU restores it
/// with its two ends (`--tcp-established`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    pub local: (std::net::IpAddr, u16),
    pub remote: (std::net::IpAddr, u16),
}

/// A Unix socket of the job's bound to a path, as the dump saw it: CRIU
/// binds it there again, and cannot where its directory is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixBound {
    pub path: std::path::PathBuf,
    /// Whose its file was (`file_perms`): root's where the image says
    /// nothing.
    pub owner: (u32, u32),
}

/// An inet socket of the job's bound to an address, as the dump saw it:
/// CRIU binds it there again, whatever its protocol or state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InetBound {
    pub local: (std::net::IpAddr, u16),
    /// Its peer, where it had one of either family.
    pub remote: Option<(std::net::IpAddr, u16)>,
    /// `IPPROTO_TCP` 6, `IPPROTO_UDP` 17, ...
    pub proto: u32,
    /// The kernel's state (TCP's: 10 LISTEN, 1 ESTABLISHED, ...).
    pub state: u32,
    /// `SO_REUSEPORT`: it may share its port with another such socket.
    pub reuseport: bool,
}

/// The sockets of a `files.img` that CRIU binds again, read in one pass:
/// inet sockets bound to an address, Unix sockets bound to a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpedSockets {
    pub inet: Vec<InetBound>,
    pub unix: Vec<UnixBound>,
}

/// IPPROTO_TCP.
const TCP: u32 = 6;
/// The kernel's TCP_ESTABLISHED.
const TCP_ESTABLISHED: u32 = 1;
/// The kernel's TCP_LISTEN.
const TCP_LISTEN: u32 = 10;

impl DumpedSockets {
    /// The TCP sockets the job listened on (pure).
    pub fn listened(&self) -> Vec<Listened> {
        self.inet
            .iter()
            .filter(|s| s.proto == TCP && s.state == TCP_LISTEN)
            .map(|s| Listened {
                addr: s.local.0,
                port: s.local.1,
                reuseport: s.reuseport,
            })
            .collect()
    }

    /// The job's established TCP connections (pure).
    pub fn connected(&self) -> Vec<Connected> {
        self.inet
            .iter()
            .filter(|s| s.proto == TCP && s.state == TCP_ESTABLISHED)
            .filter_map(|s| {
                Some(Connected {
                    local: s.local,
                    remote: s.remote?,
                })
            })
            .collect()
    }
}

/// The sockets of a `files.img` CRIU binds again (pure). An inet socket
/// counts when its address is of either family (a connected UDP socket
/// is bound to the address it left by); a Unix socket when it has a path:
/// an abstract name (NUL first) has none, and a relative one is joined to
/// the directory CRIU recorded it was bound in.
pub fn sockets(files_img: &[u8]) -> Result<DumpedSockets, BadImage> {
    use crate::commands::disk::dump_checks::connections::address;
    let mut found = DumpedSockets::default();
    for message in entries(files_img, FILES_MAGIC)? {
        let entry: FileEntry = decoded(message)?;
        match (entry.kind, entry.isk, entry.usk) {
            (fd_type::INETSK, Some(isk), _) => {
                let Some(addr) = address(&isk.src_addr) else {
                    continue;
                };
                let port = |p: u32| u16::try_from(p).unwrap_or(0);
                found.inet.push(InetBound {
                    local: (addr, port(isk.src_port)),
                    remote: address(&isk.dst_addr).map(|peer| (peer, port(isk.dst_port))),
                    proto: isk.proto,
                    state: isk.state,
                    reuseport: isk.opts.and_then(|o| o.so_reuseport).unwrap_or(false),
                });
            }
            (fd_type::UNIXSK, _, Some(usk)) => found.unix.extend(unix_path(usk)),
            _ => {}
        }
    }
    Ok(found)
}

/// Where a Unix socket is bound, and whose its file was; `None` for one
/// with no path.
fn unix_path(usk: super::messages::UnixSkEntry) -> Option<UnixBound> {
    use std::os::unix::ffi::OsStrExt;
    let name = usk.name.split(|b| *b == 0).next().unwrap_or_default();
    if usk.name.first().is_none_or(|b| *b == 0) || name.is_empty() {
        return None;
    }
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes(name));
    let path = match &usk.name_dir {
        _ if name.is_absolute() => name.to_path_buf(),
        Some(dir) => std::path::Path::new(std::ffi::OsStr::from_bytes(dir)).join(name),
        None => return None,
    };
    let owner = usk.file_perms.map_or((0, 0), |p| (p.uid, p.gid));
    Some(UnixBound { path, owner })
}

/// What CRIU restores a thread with, as root, from its `core-TID.img`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Thread {
    /// `None` where the image records none (a CRIU older than 3.x kept
    /// them apart).
    pub creds: Option<Creds>,
    pub sched_policy: Option<u32>,
    pub sched_nice: Option<i32>,
    /// The process's (its main thread's image says it).
    pub oom_score_adj: Option<i32>,
    /// The hard limits of `RLIMIT_NICE` and `RLIMIT_RTPRIO` CRIU sets, as
    /// root: a user whose limits allow it may then raise their priority
    /// or take a real-time policy themselves.
    pub nice_limit: Option<u64>,
    pub rtprio_limit: Option<u64>,
}

/// `RLIMIT_NICE` and `RLIMIT_RTPRIO`: indexes of a core's limits.
const RLIMIT_NICE: usize = 13;
const RLIMIT_RTPRIO: usize = 14;

/// The thread a `core-TID.img` restores (pure).
pub fn thread_of(core_img: &[u8]) -> Result<Thread, BadImage> {
    let found = entries(core_img, CORE_MAGIC)?;
    let Some(first) = found.first() else {
        return Err(BadImage("the core image holds no entry".into()));
    };
    let core: CoreEntry = decoded(first)?;
    let thread = core.thread_core.unwrap_or_default();
    let task = core.tc.unwrap_or_default();
    let limits = task.rlimits.map(|r| r.rlimits).unwrap_or_default();
    let hard = |resource: usize| limits.get(resource).map(|l| l.max);
    Ok(Thread {
        creds: thread.creds,
        sched_policy: thread.sched_policy,
        sched_nice: thread.sched_nice,
        oom_score_adj: task.oom_score_adj,
        nice_limit: hard(RLIMIT_NICE),
        rtprio_limit: hard(RLIMIT_RTPRIO),
    })
}

/// The owner (uid, gid) and mode a `ghost-file-N.img` makes its file with
/// (pure: its first entry; the file's bytes follow it).
pub fn ghost_owner_and_mode(ghost_img: &[u8]) -> Result<(u32, u32, u32), BadImage> {
    let first = first_entry(ghost_img, GHOST_FILE_MAGIC)?;
    let ghost: GhostFileEntry = decoded(first)?;
    Ok((ghost.uid, ghost.gid, ghost.mode))
}

/// The regular files of a `files.img` (pure).
pub fn dumped_files(files_img: &[u8]) -> Result<Vec<DumpedFile>, BadImage> {
    let mut found = Vec::new();
    for message in entries(files_img, FILES_MAGIC)? {
        let entry: FileEntry = decoded(message)?;
        if let (fd_type::REG, Some(reg)) = (entry.kind, entry.reg) {
            found.push(DumpedFile {
                id: entry.id,
                path: std::ffi::OsString::from_vec(reg.name).into(),
                size: reg.size,
                mode: reg.mode,
                flags: reg.flags,
            });
        }
    }
    Ok(found)
}

/// The ids of the files a `remap-fpath.img` restores from CRIU's own copy
/// (pure).
pub fn remapped(remap_img: &[u8]) -> Result<HashSet<u32>, BadImage> {
    entries(remap_img, REMAP_FPATH_MAGIC)?
        .into_iter()
        .map(|message| decoded::<RemapFilePathEntry>(message).map(|e| e.orig_id))
        .collect()
}

/// The files CRIU would open by path (those it restores from its own copy
/// left out) where `now` says something else than `at_dump` says the dump
/// saw; None on either side is nothing to judge. Each path once (pure).
fn differing<T: PartialEq>(
    files: &[DumpedFile],
    remapped: &HashSet<u32>,
    at_dump: &dyn Fn(&DumpedFile) -> Option<T>,
    now: &dyn Fn(&Path) -> Option<T>,
) -> Vec<Differs<T>> {
    let mut seen = HashSet::new();
    files
        .iter()
        .filter(|f| !remapped.contains(&f.id))
        .filter_map(|f| {
            let (was, is) = (at_dump(f)?, now(&f.path)?);
            (was != is && seen.insert(f.path.clone())).then(|| Differs {
                path: f.path.clone(),
                at_dump: was,
                now: is,
            })
        })
        .collect()
}

/// The files whose size is not the dump's: `size_now` says a path's size
/// now, None when there is nothing there to judge (gone, or not a path of
/// this mount namespace: CRIU says so itself) (pure).
pub fn resized(
    files: &[DumpedFile],
    remapped: &HashSet<u32>,
    size_now: &dyn Fn(&Path) -> Option<u64>,
) -> Vec<Differs<u64>> {
    differing(files, remapped, &|f| f.size, size_now)
}

/// The files whose mode (file type and permissions) is not the dump's
/// (pure).
pub fn remoded(
    files: &[DumpedFile],
    remapped: &HashSet<u32>,
    mode_now: &dyn Fn(&Path) -> Option<u32>,
) -> Vec<Differs<u32>> {
    differing(files, remapped, &|f| f.mode, mode_now)
}

/// The files whose path leads elsewhere now: `resolve` says where a path
/// leads with every link followed. A dumped path has no link in it (CRIU
/// records the path the kernel gives an open file), so one that resolves
/// to another path was changed since, and CRIU, as root, would open where
/// it leads for the job (pure).
pub fn relinked(
    files: &[DumpedFile],
    remapped: &HashSet<u32>,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Vec<Differs<PathBuf>> {
    differing(files, remapped, &|f| Some(f.path.clone()), resolve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::disk::criu_tool::messages::encoding::{bytes, image, number};

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
    fn regular_files_are_read_with_their_sizes_flags_and_others_skipped() {
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
                    size: Some(1234),
                    mode: None,
                    flags: Some(0o2),
                },
                DumpedFile {
                    id: 4,
                    path: "/usr/lib/libc.so.6".into(),
                    size: None,
                    mode: None,
                    flags: Some(0o2),
                },
                DumpedFile {
                    id: 300,
                    path: "/big".into(),
                    size: Some(1 << 40),
                    mode: None,
                    flags: Some(0o2),
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
                mode: None,
                flags: None,
            },
            DumpedFile {
                id: 2,
                path: "/log".into(),
                size: Some(100),
                mode: None,
                flags: None,
            },
            DumpedFile {
                id: 3,
                path: "/same".into(),
                size: Some(7),
                mode: None,
                flags: None,
            },
            DumpedFile {
                id: 4,
                path: "/deleted-then-made-again".into(),
                size: Some(5),
                mode: None,
                flags: None,
            },
            DumpedFile {
                id: 5,
                path: "/gone".into(),
                size: Some(5),
                mode: None,
                flags: None,
            },
            DumpedFile {
                id: 6,
                path: "/unsized".into(),
                size: None,
                mode: None,
                flags: None,
            },
        ];
        let now = |path: &Path| match path.to_str().expect("UTF-8") {
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
            [Differs {
                path: "/log".into(),
                at_dump: 100,
                now: 160
            }]
        );
    }

    #[test]
    fn a_mode_is_read_and_a_file_whose_mode_moved_is_found() {
        let reg = [
            number(1, 7),
            number(2, 0o2),
            number(3, 0),
            bytes(5, &number(1, 0)),
            bytes(6, b"/home/u/job.log"),
            number(10, 0o100644),
        ]
        .concat();
        let entry = [number(1, 1), number(2, 7), bytes(3, &reg)].concat();
        let files = dumped_files(&image(FILES_MAGIC, &[entry])).expect("read");
        assert_eq!(files[0].mode, Some(0o100644));
        let now = |_: &Path| Some(0o100600);
        assert_eq!(
            remoded(&files, &HashSet::new(), &now),
            [Differs {
                path: "/home/u/job.log".into(),
                at_dump: 0o100644,
                now: 0o100600
            }]
        );
        assert_eq!(remoded(&files, &HashSet::from([7]), &now), []);
        assert_eq!(remoded(&files, &HashSet::new(), &|_| Some(0o100644)), []);
    }

    #[test]
    fn a_path_that_leads_elsewhere_now_is_found_once_and_a_remapped_one_is_not() {
        let file = |id, path: &str| DumpedFile {
            id,
            path: path.into(),
            size: None,
            mode: None,
            flags: None,
        };
        let files = [
            file(1, "/home/u/job.log"),
            file(2, "/home/u/job.log"),
            file(3, "/usr/lib/libc.so.6"),
            file(4, "/home/u/deleted"),
            file(5, "/gone"),
        ];
        let resolve = |path: &Path| match path.to_str().expect("UTF-8") {
            "/home/u/job.log" => Some(PathBuf::from("/etc/shadow")),
            "/usr/lib/libc.so.6" => Some(PathBuf::from("/usr/lib/libc.so.6")),
            "/home/u/deleted" => Some(PathBuf::from("/elsewhere")),
            _ => None,
        };
        assert_eq!(
            relinked(&files, &HashSet::from([4]), &resolve),
            [Differs {
                path: "/home/u/job.log".into(),
                at_dump: "/home/u/job.log".into(),
                now: "/etc/shadow".into()
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
        // A path need not be UTF-8.
        let not_utf8 = [number(1, 1), number(2, 1), bytes(3, &bytes(6, b"/l\xffg"))].concat();
        let files = dumped_files(&image(FILES_MAGIC, &[not_utf8])).expect("read");
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(files[0].path.as_os_str().as_bytes(), b"/l\xffg");
    }
}

#[cfg(test)]
mod socket_views {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn socket(port: u16, remote: Option<u16>, proto: u32, state: u32) -> InetBound {
        InetBound {
            local: (HOST, port),
            remote: remote.map(|p| (HOST, p)),
            proto,
            state,
            reuseport: port == 2,
        }
    }

    #[test]
    fn listeners_and_connections_are_the_tcp_sockets_in_those_states() {
        let sockets = DumpedSockets {
            inet: vec![
                socket(1, None, TCP, TCP_LISTEN),
                socket(2, None, TCP, TCP_LISTEN),
                socket(3, Some(1), TCP, TCP_ESTABLISHED),
                socket(4, None, TCP, TCP_ESTABLISHED),
                socket(5, Some(9), 17, TCP_ESTABLISHED),
                socket(6, Some(1), TCP, 6),
            ],
            unix: Vec::new(),
        };
        let listened: Vec<(u16, bool)> = sockets
            .listened()
            .iter()
            .map(|l| (l.port, l.reuseport))
            .collect();
        assert_eq!(listened, [(1, false), (2, true)]);
        assert_eq!(
            sockets.connected(),
            [Connected {
                local: (HOST, 3),
                remote: (HOST, 1)
            }],
            "a connection without a peer, a UDP socket, a closing one: none"
        );
    }
}
