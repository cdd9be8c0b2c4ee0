//! Every descriptor CRIU's images say the job held, by kind, with the
//! fields that decide whether the images' owner could have opened it
//! themselves (`descriptor_bound` judges them): `files.img` holds the
//! files, `tty-info.img` what each terminal is, and `pstree.img`,
//! `ids-PID.img` and `fdinfo-N.img` which process held each file as which
//! descriptor, so a refusal names them. Pure: the bytes come from the
//! caller.

use std::collections::HashMap;

use crate::commands::disk::criu_tool::messages::{
    decoded, entries, fd_type, BadImage, FdinfoEntry, FileEntry, FownEntry, PstreeEntry,
    TaskKobjIdsEntry, TtyInfoEntry, FDINFO_MAGIC, FILES_MAGIC, IDS_MAGIC, PSTREE_MAGIC,
    TTY_INFO_MAGIC,
};

/// One file the job held, as CRIU restores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Its id in `files.img` (what `fdinfo-N.img` names).
    pub id: u32,
    pub kind: Kind,
    /// Whom its signals go to, and as whom (`F_SETOWN`), when it has an
    /// owner.
    pub owner: Option<FownEntry>,
}

/// What a descriptor is, with what decides who may open one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Opened by path (`credentials` checks the path as the user).
    Regular,
    Pipe,
    /// A FIFO: its path is a regular entry of its own.
    Fifo,
    Eventfd,
    Eventpoll,
    Signalfd,
    Memfd,
    Pidfd,
    Inet {
        sock_type: u32,
        proto: u32,
        port: u32,
        mark: Option<u32>,
        priority: Option<u32>,
    },
    Unix {
        /// Its address: a path (relative to `name_dir` where that is
        /// given), an abstract name (a NUL first), or none.
        name: Vec<u8>,
        name_dir: Option<Vec<u8>>,
        /// Whom CRIU makes its file as, when it says.
        file_uid: Option<u32>,
    },
    Netlink {
        protocol: u32,
        /// Bound to, or sending to, a multicast group.
        multicast: bool,
    },
    Timer {
        clock: u32,
    },
    /// A terminal, with its `TtyType` where `tty-info.img` says it.
    Terminal {
        tty_type: Option<i32>,
    },
    Packet,
    Inotify,
    Fanotify,
    Namespace,
    Tun,
    External,
    BpfMap,
    /// A kind this reader does not know (CRIU's number).
    Unknown(i32),
}

impl Kind {
    /// The kind in words, for a message (pure).
    pub fn in_words(&self) -> String {
        let words = match self {
            Kind::Regular => "a file",
            Kind::Pipe => "a pipe",
            Kind::Fifo => "a FIFO",
            Kind::Eventfd => "an eventfd",
            Kind::Eventpoll => "an epoll instance",
            Kind::Signalfd => "a signalfd",
            Kind::Memfd => "a memfd",
            Kind::Pidfd => "a pidfd",
            Kind::Inet { sock_type: 3, .. } => "a raw socket",
            Kind::Inet { .. } => "an internet socket",
            Kind::Unix { .. } => "a Unix socket",
            Kind::Netlink { .. } => "a netlink socket",
            Kind::Timer { .. } => "a timerfd",
            Kind::Terminal { .. } => "a terminal",
            Kind::Packet => "a packet socket",
            Kind::Inotify => "an inotify instance",
            Kind::Fanotify => "a fanotify instance",
            Kind::Namespace => "a namespace's file",
            Kind::Tun => "a tun/tap device",
            Kind::External => "an external file",
            Kind::BpfMap => "a BPF map",
            Kind::Unknown(n) => return format!("a descriptor of CRIU's kind {n}"),
        };
        words.to_string()
    }
}

/// Every descriptor of a `files.img`, each terminal's kind looked up in
/// `tty_types` (pure).
pub fn descriptors(
    files_img: &[u8],
    tty_types: &HashMap<u32, i32>,
) -> Result<Vec<Descriptor>, BadImage> {
    entries(files_img, FILES_MAGIC)?
        .into_iter()
        .map(|message| decoded::<FileEntry>(message).map(|e| descriptor(e, tty_types)))
        .collect()
}

/// One `file_entry` as a [`Descriptor`] (pure).
fn descriptor(entry: FileEntry, tty_types: &HashMap<u32, i32>) -> Descriptor {
    use fd_type::*;
    let (kind, owner) = match entry.kind {
        REG => (Kind::Regular, entry.reg.and_then(|r| r.fown)),
        PIPE => (Kind::Pipe, entry.pipe.and_then(|p| p.fown)),
        FIFO => (Kind::Fifo, None),
        EVENTFD => (Kind::Eventfd, entry.efd.and_then(|e| e.fown)),
        EVENTPOLL => (Kind::Eventpoll, entry.epfd.and_then(|e| e.fown)),
        SIGNALFD => (Kind::Signalfd, entry.sgfd.and_then(|e| e.fown)),
        MEMFD => (Kind::Memfd, entry.memfd.and_then(|e| e.fown)),
        PIDFD => (Kind::Pidfd, entry.pidfd.and_then(|e| e.fown)),
        INETSK => {
            let isk = entry.isk.unwrap_or_default();
            let opts = isk.opts.unwrap_or_default();
            let kind = Kind::Inet {
                sock_type: isk.sock_type,
                proto: isk.proto,
                port: isk.src_port,
                mark: opts.so_mark,
                priority: opts.so_priority,
            };
            (kind, isk.fown)
        }
        UNIXSK => {
            let usk = entry.usk.unwrap_or_default();
            let kind = Kind::Unix {
                name: usk.name,
                name_dir: usk.name_dir,
                file_uid: usk.file_perms.map(|p| p.uid),
            };
            (kind, usk.fown)
        }
        NETLINKSK => {
            let nlsk = entry.nlsk.unwrap_or_default();
            let multicast = nlsk.groups.iter().any(|g| *g != 0) || nlsk.dst_group != 0;
            let kind = Kind::Netlink {
                protocol: nlsk.protocol,
                multicast,
            };
            (kind, nlsk.fown)
        }
        TIMERFD => {
            let tfd = entry.tfd.unwrap_or_default();
            (Kind::Timer { clock: tfd.clockid }, tfd.fown)
        }
        TTY => {
            let tty = entry.tty.unwrap_or_default();
            let tty_type = tty_types.get(&tty.tty_info_id).copied();
            (Kind::Terminal { tty_type }, tty.fown)
        }
        PACKETSK => (Kind::Packet, None),
        INOTIFY => (Kind::Inotify, None),
        FANOTIFY => (Kind::Fanotify, None),
        NS => (Kind::Namespace, None),
        TUNF => (Kind::Tun, None),
        EXT => (Kind::External, None),
        BPFMAP => (Kind::BpfMap, None),
        other => (Kind::Unknown(other), None),
    };
    Descriptor {
        id: entry.id,
        kind,
        owner: owner.filter(|o| o.pid != 0),
    }
}

/// Each terminal's kind by its id, from `tty-info.img` (pure).
pub fn tty_types(tty_info_img: &[u8]) -> Result<HashMap<u32, i32>, BadImage> {
    entries(tty_info_img, TTY_INFO_MAGIC)?
        .into_iter()
        .map(|message| decoded::<TtyInfoEntry>(message).map(|t| (t.id, t.tty_type)))
        .collect()
}

/// Which process held each file as which descriptor: file id → (PID, fd),
/// from `pstree.img` and each process's `ids-PID.img` and its
/// `fdinfo-N.img`, read by `image` (pure but for `image`). What cannot be
/// read is left out: a message then names the file by its id.
pub fn holders(
    pstree_img: &[u8],
    image: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> HashMap<u32, Vec<(u32, u32)>> {
    let mut held: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    let pids = entries(pstree_img, PSTREE_MAGIC)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| decoded::<PstreeEntry>(m).ok().map(|p| p.pid));
    for pid in pids {
        let Some(files_id) = image(&format!("ids-{pid}.img")).and_then(|ids| {
            let first = entries(&ids, IDS_MAGIC).ok()?.into_iter().next()?;
            decoded::<TaskKobjIdsEntry>(first).ok().map(|i| i.files_id)
        }) else {
            continue;
        };
        let Some(fdinfo) = image(&format!("fdinfo-{files_id}.img")) else {
            continue;
        };
        for message in entries(&fdinfo, FDINFO_MAGIC).unwrap_or_default() {
            if let Ok(fd) = decoded::<FdinfoEntry>(message) {
                held.entry(fd.id).or_default().push((pid, fd.fd));
            }
        }
    }
    held
}

/// Who held file `id`, in words: `fd 5 of PID 1234` (the first holder; a
/// file shared after a fork is one file), else `file N of the images`
/// (pure).
pub fn held_as(holders: &HashMap<u32, Vec<(u32, u32)>>, id: u32) -> String {
    match holders.get(&id).and_then(|h| h.first()) {
        Some((pid, fd)) => format!("fd {fd} of PID {pid}"),
        None => format!("file {id} of the images"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::disk::criu_tool::messages::encoding::{bytes, image, number};

    fn fown(uid: u64, pid: u64) -> Vec<u8> {
        [number(1, uid), number(2, uid), number(3, 9), number(5, pid)].concat()
    }

    fn file(kind: u64, id: u64, field: u64, entry: &[u8]) -> Vec<u8> {
        [number(1, kind), number(2, id), bytes(field, entry)].concat()
    }

    /// Each kind is read with what decides who may open it, and an owner
    /// only where the file has one.
    #[test]
    fn every_kind_is_read_with_its_deciding_fields() {
        let inet = [
            number(4, 3),
            number(5, 1),
            number(7, 80),
            bytes(13, &fown(0, 1)),
            bytes(14, &[number(8, 7), number(10, 42)].concat()),
        ]
        .concat();
        let unix = [
            number(2, 77),
            bytes(9, &fown(1000, 0)),
            bytes(11, b"sock"),
            bytes(13, &[number(1, 0o755), number(2, 0), number(3, 0)].concat()),
            bytes(14, b"/run/app"),
        ]
        .concat();
        let netlink = [number(3, 9), number(8, 1), bytes(11, &fown(0, 0))].concat();
        let timer = [bytes(3, &fown(1000, 0)), number(4, 8)].concat();
        let tty = [number(1, 6), number(2, 40), bytes(4, &fown(1000, 0))].concat();
        let img = image(
            FILES_MAGIC,
            &[
                file(4, 1, 4, &inet),
                file(5, 2, 16, &unix),
                file(13, 3, 7, &netlink),
                file(17, 4, 12, &timer),
                file(11, 6, 19, &tty),
                [number(1, 10), number(2, 7)].concat(),
                [number(1, 99), number(2, 8)].concat(),
            ],
        );
        let ttys = HashMap::from([(40, 2)]);
        let found = descriptors(&img, &ttys).expect("reads");
        let kinds: Vec<&Kind> = found.iter().map(|d| &d.kind).collect();
        assert_eq!(
            kinds,
            [
                &Kind::Inet {
                    sock_type: 3,
                    proto: 1,
                    port: 80,
                    mark: Some(42),
                    priority: Some(7)
                },
                &Kind::Unix {
                    name: b"sock".to_vec(),
                    name_dir: Some(b"/run/app".to_vec()),
                    file_uid: Some(0)
                },
                &Kind::Netlink {
                    protocol: 9,
                    multicast: true
                },
                &Kind::Timer { clock: 8 },
                &Kind::Terminal { tty_type: Some(2) },
                &Kind::Packet,
                &Kind::Unknown(99),
            ]
        );
        assert_eq!(found[0].owner.map(|o| (o.euid, o.pid)), Some((0, 1)));
        assert!(
            found[1..].iter().all(|d| d.owner.is_none()),
            "an owner with no PID is none"
        );
        assert_eq!(Kind::Packet.in_words(), "a packet socket");
        assert_eq!(found[0].kind.in_words(), "a raw socket");
    }

    /// A file is named by the process and descriptor that held it.
    #[test]
    fn a_file_is_named_by_who_held_it() {
        let pstree = image(PSTREE_MAGIC, &[number(1, 1234)]);
        let ids = image(IDS_MAGIC, &[[number(1, 1), number(2, 7)].concat()]);
        let fdinfo = image(
            FDINFO_MAGIC,
            &[[number(1, 3), number(2, 0), number(3, 10), number(4, 5)].concat()],
        );
        let read = |name: &str| match name {
            "ids-1234.img" => Some(ids.clone()),
            "fdinfo-7.img" => Some(fdinfo.clone()),
            _ => None,
        };
        let held = holders(&pstree, &read);
        assert_eq!(held_as(&held, 3), "fd 5 of PID 1234");
        assert_eq!(held_as(&held, 4), "file 4 of the images");
        assert!(holders(b"not an image", &read).is_empty());
    }
}
