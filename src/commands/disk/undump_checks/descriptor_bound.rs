//! What a descriptor in images another user could have written may be:
//! CRIU, as root, makes every descriptor again for the job (a socket, a
//! timer, a terminal), and a root-made one keeps root's powers whoever
//! then holds it: a packet socket captures the host's traffic, a file owned
//! by euid 0 (`F_SETOWN`) signals any process. So the job gets back only
//! what its owner could have made themselves:
//!
//! | kind | restored for another user's images |
//! | --- | --- |
//! | file, FIFO | when that user may open its path so (`credentials`) |
//! | pipe, eventfd, epoll, signalfd, memfd, pidfd | always |
//! | TCP or UDP socket | not bound below the first unprivileged port, no `SO_MARK`, `SO_PRIORITY` 6 at most |
//! | raw or other internet socket | never (CAP_NET_RAW) |
//! | Unix socket | its path in a directory that user may write, or a socket they may connect to; its file theirs |
//! | netlink socket | routing and uevents; other protocols with no multicast group |
//! | timerfd | not on an alarm clock (CAP_WAKE_ALARM) |
//! | terminal | a pseudo-terminal (or the job's controlling one) |
//! | packet socket, inotify, fanotify, namespace, tun/tap, external file, BPF map, unknown | never |
//!
//! and any descriptor whose owner (`F_SETOWN`) is another uid is refused.
//! [`beyond`] is the table, pure; [`held_beyond`] reads the descriptors
//! from the images held, judges each and checks the Unix sockets' paths as
//! the user, naming each refusal by the process and descriptor that held
//! it.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::commands::disk::undump_checks::descriptors::{self, Descriptor, Kind};
use crate::commands::disk::undump_checks::source::HeldImages;

/// CRIU's images of a job's files are read at most this far.
const IMAGE_CAP: u64 = 256 << 20;

/// What of the descriptors in `source` (images uid `uid` could have
/// written) restores more than that user could make: one line each, as
/// `fd 5 of PID 1234 is a packet socket: only CAP_NET_RAW may make one`.
pub fn held_beyond(source: &HeldImages, uid: u32, groups: &[u32]) -> Vec<String> {
    let read = |name: &str| source.read(name, IMAGE_CAP);
    let files = match read("files.img") {
        Ok(Some(files)) => files,
        Ok(None) => return Vec::new(), // no file held
        Err(why) => return vec![format!("files.img cannot be read ({why})")],
    };
    let ttys = match read("tty-info.img") {
        Ok(Some(info)) => descriptors::tty_types(&info).unwrap_or_default(),
        _ => HashMap::new(),
    };
    let held = match descriptors::descriptors(&files, &ttys) {
        Ok(held) => held,
        Err(why) => return vec![format!("files.img cannot be read ({why})")],
    };
    let holders = match read("pstree.img") {
        Ok(Some(pstree)) => descriptors::holders(&pstree, &|name| read(name).ok().flatten()),
        _ => HashMap::new(),
    };
    let rules = HostRules::here();
    let mut found: Vec<String> = held
        .iter()
        .filter_map(|d| {
            let why = beyond(d, uid, &rules)?;
            Some(format!(
                "{} is {} {why}",
                descriptors::held_as(&holders, d.id),
                d.kind.in_words()
            ))
        })
        .collect();
    found.extend(unix_paths_beyond(&held, &holders, uid, groups));
    found
}

/// The Unix sockets whose path uid `uid` could neither bind (the directory
/// writable and searchable to them) nor connect to (the socket writable to
/// them), judged by the kernel on a thread holding their credentials.
fn unix_paths_beyond(
    held: &[Descriptor],
    holders: &HashMap<u32, Vec<(u32, u32)>>,
    uid: u32,
    groups: &[u32],
) -> Vec<String> {
    use rustix::fs::{accessat, Access, AtFlags, CWD};
    let paths = unix_paths(held);
    if paths.is_empty() {
        return Vec::new();
    }
    let user = crate::files::users::user(uid);
    let checked = crate::files::users::as_user_in_groups(user, groups, || {
        paths
            .iter()
            .filter(|(_, path)| {
                let dir = path.parent().unwrap_or(std::path::Path::new("/"));
                let binds = accessat(
                    CWD,
                    dir,
                    Access::WRITE_OK | Access::EXEC_OK,
                    AtFlags::EACCESS,
                );
                let connects = accessat(CWD, path, Access::WRITE_OK, AtFlags::EACCESS);
                binds.is_err() && connects.is_err()
            })
            .map(|(id, path)| {
                format!(
                    "{} is a Unix socket at {}, which uid {uid} may neither make nor connect to",
                    descriptors::held_as(holders, *id),
                    crate::targets::name::printable_path(path)
                )
            })
            .collect::<Vec<String>>()
    });
    checked.unwrap_or_else(|why| {
        vec![format!(
            "the job's Unix sockets could not be checked as uid {uid} ({why})"
        )]
    })
}

/// What the host lets a user do, as read from its settings.
#[derive(Debug, Clone, Copy)]
pub struct HostRules {
    /// `net.ipv4.ip_unprivileged_port_start`: below it, binding needs
    /// CAP_NET_BIND_SERVICE.
    pub unprivileged_port_start: u32,
}

impl HostRules {
    /// This host's (1024, Linux's default, where it cannot be read).
    pub fn here() -> HostRules {
        let start = crate::files::read_capped(
            std::path::Path::new("/proc/sys/net/ipv4/ip_unprivileged_port_start"),
            64,
        )
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(1024);
        HostRules {
            unprivileged_port_start: start,
        }
    }
}

/// IPPROTO_TCP, IPPROTO_UDP, IPPROTO_UDPLITE.
const USER_PROTOCOLS: [u32; 3] = [6, 17, 136];
/// SOCK_STREAM, SOCK_DGRAM.
const USER_SOCKET_TYPES: [u32; 2] = [1, 2];
/// The highest `SO_PRIORITY` a user may set.
const USER_PRIORITY: u32 = 6;
/// NETLINK_ROUTE and NETLINK_KOBJECT_UEVENT: any user may listen to
/// their multicast groups.
const OPEN_NETLINK: [u32; 2] = [0, 15];
/// CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM.
const ALARM_CLOCKS: [u32; 2] = [8, 9];
/// `TtyType` PTY and CTTY.
const USER_TERMINALS: [i32; 2] = [1, 4];

/// Why `d` restores more than user `uid` could make (pure): `None` when
/// nothing.
pub fn beyond(d: &Descriptor, uid: u32, rules: &HostRules) -> Option<String> {
    if let Some(owner) = d.owner.filter(|o| o.uid != uid || o.euid != uid) {
        return Some(format!(
            "sends its signals to PID {} as uid {} (F_SETOWN), and a file owned as another uid may signal where uid {uid} may not",
            owner.pid, owner.euid
        ));
    }
    let never = |needs: &str| Some(format!("only {needs} may make one"));
    match &d.kind {
        Kind::Regular
        | Kind::Fifo
        | Kind::Pipe
        | Kind::Eventfd
        | Kind::Eventpoll
        | Kind::Signalfd
        | Kind::Memfd
        | Kind::Pidfd => None,
        Kind::Inet {
            sock_type,
            proto,
            port,
            mark,
            priority,
        } => {
            if !USER_SOCKET_TYPES.contains(sock_type) {
                return never("CAP_NET_RAW");
            }
            if !USER_PROTOCOLS.contains(proto) {
                return Some(format!("of protocol {proto}, which cudackpt restores only as root"));
            }
            if *port != 0 && *port < rules.unprivileged_port_start {
                return Some(format!(
                    "bound to port {port}, below this host's first unprivileged port ({}): only CAP_NET_BIND_SERVICE may bind it",
                    rules.unprivileged_port_start
                ));
            }
            if mark.is_some_and(|m| m != 0) {
                return Some("marked (SO_MARK), which only CAP_NET_ADMIN may do".into());
            }
            priority.filter(|p| *p > USER_PRIORITY).map(|p| {
                format!("of priority {p} (SO_PRIORITY), above {USER_PRIORITY} only with CAP_NET_ADMIN")
            })
        }
        Kind::Unix { file_uid, .. } => file_uid
            .filter(|owner| *owner != uid)
            .map(|owner| format!("whose file CRIU makes as uid {owner}")),
        Kind::Netlink {
            protocol,
            multicast,
        } => (*multicast && !OPEN_NETLINK.contains(protocol)).then(|| {
            format!("of protocol {protocol} bound to a multicast group, which only a capable process may listen to")
        }),
        Kind::Timer { clock } => ALARM_CLOCKS
            .contains(clock)
            .then(|| "on an alarm clock, which only CAP_WAKE_ALARM may set".into()),
        Kind::Terminal { tty_type } => match tty_type {
            Some(t) if USER_TERMINALS.contains(t) => None,
            Some(t) => Some(format!(
                "of CRIU's kind {t} (a console, a virtual terminal, a serial line or another's), which CRIU opens as root"
            )),
            None => Some("of a kind tty-info.img does not say".into()),
        },
        Kind::Packet => never("CAP_NET_RAW"),
        Kind::Inotify => Some(
            "whose watches CRIU makes by file handle, as root, on files the user may not read"
                .into(),
        ),
        Kind::Fanotify => never("CAP_SYS_ADMIN"),
        Kind::Tun => never("CAP_NET_ADMIN"),
        Kind::BpfMap => never("CAP_BPF"),
        Kind::Namespace | Kind::External | Kind::Unknown(_) => {
            Some("which cudackpt restores only as root".into())
        }
    }
}

/// The path a Unix socket is bound or connected at (pure): `None` for an
/// abstract name (a NUL first) or none.
pub fn unix_path(name: &[u8], name_dir: Option<&[u8]>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if name.is_empty() || name[0] == 0 {
        return None;
    }
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes(name));
    match name_dir {
        Some(dir) if !name.is_absolute() => {
            Some(std::path::Path::new(std::ffi::OsStr::from_bytes(dir)).join(name))
        }
        _ => Some(name.to_path_buf()),
    }
}

/// The Unix sockets' paths among `descriptors`, each with its descriptor's
/// id (pure).
pub fn unix_paths(descriptors: &[Descriptor]) -> Vec<(u32, PathBuf)> {
    descriptors
        .iter()
        .filter_map(|d| match &d.kind {
            Kind::Unix { name, name_dir, .. } => {
                unix_path(name, name_dir.as_deref()).map(|p| (d.id, p))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::disk::criu_tool::messages::FownEntry;

    const RULES: HostRules = HostRules {
        unprivileged_port_start: 1024,
    };

    fn of(kind: Kind) -> Descriptor {
        Descriptor {
            id: 1,
            kind,
            owner: None,
        }
    }

    fn inet(sock_type: u32, proto: u32, port: u32) -> Kind {
        Kind::Inet {
            sock_type,
            proto,
            port,
            mark: None,
            priority: None,
        }
    }

    /// What any user makes is restored.
    #[test]
    fn the_table_restores_what_a_user_could_make() {
        for kind in [
            Kind::Regular,
            Kind::Pipe,
            Kind::Eventfd,
            Kind::Eventpoll,
            Kind::Signalfd,
            Kind::Memfd,
            Kind::Pidfd,
            inet(1, 6, 29500),
            inet(2, 17, 0),
            Kind::Netlink {
                protocol: 0,
                multicast: true,
            },
            Kind::Netlink {
                protocol: 4,
                multicast: false,
            },
            Kind::Timer { clock: 1 },
            Kind::Terminal { tty_type: Some(1) },
        ] {
            assert_eq!(beyond(&of(kind.clone()), 1000, &RULES), None, "{kind:?}");
        }
    }

    /// Each thing only a capability (or root) makes is refused, named with
    /// what it needs.
    #[test]
    fn what_only_a_capability_makes_is_named() {
        let refused = [
            (Kind::Packet, "CAP_NET_RAW"),
            (inet(3, 1, 0), "CAP_NET_RAW"),
            (inet(2, 1, 0), "protocol 1"),
            (inet(1, 6, 80), "port 80"),
            (
                Kind::Inet {
                    sock_type: 1,
                    proto: 6,
                    port: 5000,
                    mark: Some(7),
                    priority: None,
                },
                "SO_MARK",
            ),
            (
                Kind::Inet {
                    sock_type: 1,
                    proto: 6,
                    port: 5000,
                    mark: None,
                    priority: Some(7),
                },
                "SO_PRIORITY",
            ),
            (
                Kind::Netlink {
                    protocol: 9,
                    multicast: true,
                },
                "multicast",
            ),
            (Kind::Timer { clock: 9 }, "CAP_WAKE_ALARM"),
            (Kind::Terminal { tty_type: Some(2) }, "as root"),
            (Kind::Terminal { tty_type: None }, "does not say"),
            (Kind::Inotify, "file handle"),
            (Kind::Fanotify, "CAP_SYS_ADMIN"),
            (Kind::Tun, "CAP_NET_ADMIN"),
            (Kind::BpfMap, "CAP_BPF"),
            (Kind::Namespace, "only as root"),
            (Kind::External, "only as root"),
            (Kind::Unknown(42), "only as root"),
            (
                Kind::Unix {
                    name: b"/tmp/s".to_vec(),
                    name_dir: None,
                    file_uid: Some(0),
                },
                "uid 0",
            ),
        ];
        for (kind, said) in refused {
            let why = beyond(&of(kind.clone()), 1000, &RULES)
                .unwrap_or_else(|| panic!("{kind:?} restored"));
            assert!(why.contains(said), "{kind:?}: {why}");
        }
    }

    /// A file owned as root signals any process: refused whatever it is.
    #[test]
    fn an_owner_of_another_uid_is_refused_on_any_descriptor() {
        let owned = |uid| Descriptor {
            owner: Some(FownEntry {
                uid,
                euid: uid,
                signum: 9,
                pid: 1,
            }),
            ..of(Kind::Pipe)
        };
        assert_eq!(beyond(&owned(1000), 1000, &RULES), None);
        let why = beyond(&owned(0), 1000, &RULES).expect("refused");
        assert!(why.contains("PID 1 as uid 0"), "{why}");
    }

    #[test]
    fn a_unix_socket_s_path_is_its_name_under_its_directory() {
        assert_eq!(unix_path(b"\0abstract", None), None);
        assert_eq!(unix_path(b"", None), None);
        assert_eq!(
            unix_path(b"/tmp/pymp-x/listener", None),
            Some(PathBuf::from("/tmp/pymp-x/listener"))
        );
        assert_eq!(
            unix_path(b"sock", Some(b"/run/app")),
            Some(PathBuf::from("/run/app/sock"))
        );
        assert_eq!(
            unix_path(b"/abs", Some(b"/run/app")),
            Some(PathBuf::from("/abs"))
        );
    }
}
