//! The TCP ports the job listened on, against this host's sockets now,
//! before an undump lets CRIU bind them again: a port the kernel picked
//! for a listener (torchrun's store, NCCL's RAS, a server started on port
//! 0) is free once the job is dumped, and the host's own connections may
//! take it meanwhile; CRIU then fails on it ("Can't bind inet socket ...
//! Address already in use") after forking the tree. Met on a GPU host:
//! a server's port, 40893, taken between its dump and its undump.
//!
//! A snapshot's job that crashed or ended since leaves its closed
//! connections on those ports for a while, sockets no process holds
//! (TIME_WAIT, FIN_WAIT...): NCCL's bootstrap listens without
//! `SO_REUSEADDR`, so CRIU's bind fails on them too, for up to a minute.
//! They are closed before CRIU runs ([`close_left_over`]), each said.
//!
//! The job restores into cudackpt's network namespace (a dump of a tree
//! in a namespace of its own is refused), so this host's sockets are those
//! of /proc/self/net/tcp and tcp6.

use std::net::IpAddr;

use crate::commands::disk::criu_tool::image_files::{Connected, Listened};
use crate::commands::disk::dump_checks::connections::{self, Socket};
use crate::commands::disk::report::DiskFailure;
use crate::commands::disk::undump_checks::open_files::JobFiles;

/// /proc/net/tcp is read this far at most (a host with a million sockets
/// prints about 150 MB; beyond this the check says it did not finish).
const TABLE_CAP: u64 = 64 << 20;

/// Whether two bound addresses of one port keep each other from binding
/// (pure): the same address, or a wildcard that covers the other (an IPv6
/// wildcard covers IPv4 too, as a dual-stack socket's does; IPv4-mapped
/// addresses are IPv4 already, [`connections::address`]).
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    if a == b {
        return true;
    }
    let (any, other) = match (a.is_unspecified(), b.is_unspecified()) {
        (true, _) => (a, b),
        (_, true) => (b, a),
        _ => return false,
    };
    any.is_ipv6() || other.is_ipv4()
}

/// The kernel's states of a closed connection's socket on its way out:
/// FIN_WAIT1, FIN_WAIT2, TIME_WAIT, LAST_ACK, CLOSING.
const CLOSING: [u8; 5] = [0x04, 0x05, connections::TIME_WAIT, 0x09, 0x0B];

/// Whether a host socket is what a closed connection left: closing, and
/// held by no process (inode 0).
fn left_by_a_closed_connection(socket: &Socket) -> bool {
    socket.inode == 0 && CLOSING.contains(&socket.state)
}

/// The sockets closed connections left where the job's snapshot binds
/// again (pure): on a port it listened on, or with the two ends of a
/// connection it restores.
pub fn left_over<'a>(
    listened: &[Listened],
    connected: &[Connected],
    host: &'a [Socket],
) -> Vec<&'a Socket> {
    host.iter()
        .filter(|h| left_by_a_closed_connection(h))
        .filter(|h| {
            listened
                .iter()
                .any(|l| l.port != 0 && h.local.1 == l.port && overlaps(l.addr, h.local.0))
                || connected
                    .iter()
                    .any(|c| c.local == h.local && c.remote == h.remote)
        })
        .collect()
}

/// The job's listeners whose port a socket of this host holds now, each
/// with the first such socket (pure). What a closed connection left does
/// not count ([`close_left_over`] closes it). A listener with
/// `SO_REUSEPORT` is left out: whether it may share the port depends on
/// the other socket's options, which /proc does not show.
pub fn taken<'a>(listened: &'a [Listened], host: &'a [Socket]) -> Vec<(&'a Listened, &'a Socket)> {
    listened
        .iter()
        .filter(|l| !l.reuseport && l.port != 0)
        .filter_map(|l| {
            host.iter()
                .find(|h| {
                    h.local.1 == l.port
                        && !left_by_a_closed_connection(h)
                        && overlaps(l.addr, h.local.0)
                })
                .map(|h| (l, h))
        })
        .collect()
}

/// What a host socket's state is called.
fn state_name(state: u8) -> &'static str {
    match state {
        connections::ESTABLISHED => "an established connection",
        0x0A => "a listener",
        0x07 => "a bound socket",
        _ => "a socket",
    }
}

/// Refuses the undump when a port the job listened on is held on this
/// host now (`--force` goes on, with a remark); says so in a remark when
/// the images or the host's tables cannot tell.
pub fn refuse_taken(
    job: &JobFiles,
    force: bool,
    remarks: &mut Vec<String>,
) -> Result<(), DiskFailure> {
    // Unreadable images are said by the open files' check.
    let listened = &job.listened;
    if listened.is_empty() {
        return Ok(());
    }
    let Some(host) = host_sockets(
        "the ports the job listened on were not checked against this host's",
        remarks,
    ) else {
        return Ok(());
    };
    let taken = taken(listened, &host);
    if taken.is_empty() {
        return Ok(());
    }
    let each: Vec<String> = taken
        .iter()
        .map(|(l, h)| {
            format!(
                "{} ({} of this host holds {})",
                connections::shown((l.addr, l.port)),
                state_name(h.state),
                connections::shown(h.local)
            )
        })
        .collect();
    let why = format!(
        "the job listened on {}, and CRIU could not bind {} again",
        each.join(", "),
        if taken.len() == 1 { "it" } else { "them" }
    );
    in_use(why, force, remarks, "free the port (/proc/net/tcp, or `ss -tanp` where there is one, names the socket holding it) or undump where it is free; a port the kernel picked for the job is taken again by chance, so a job that listens for others is best given a fixed port below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range); --force runs CRIU anyway".into())
}

/// A port CRIU could not bind again (`why`): refused before any change,
/// or said in a remark under `--force`.
fn in_use(
    why: String,
    force: bool,
    remarks: &mut Vec<String>,
    hint: String,
) -> Result<(), DiskFailure> {
    let why = format!("{why} (\"Address already in use\")");
    DiskFailure::unless_forced("port_in_use", &why, hint, force, remarks)
}

/// This host's TCP sockets, or `None` with a remark that begins with
/// `unchecked` when a table cannot be read.
fn host_sockets(unchecked: &str, remarks: &mut Vec<String>) -> Option<Vec<Socket>> {
    let mut host = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        match crate::files::read_capped_bytes(std::path::Path::new(table), TABLE_CAP) {
            Ok(bytes) => host.extend(connections::sockets(&String::from_utf8_lossy(&bytes))),
            Err(why) => {
                remarks.push(format!(
                    "{unchecked} ({table}: {why}): CRIU says if one is taken"
                ));
                return None;
            }
        }
    }
    Some(host)
}

/// A socket a closed connection left, in words (pure).
fn left_over_shown(socket: &Socket) -> String {
    let state = match socket.state {
        connections::TIME_WAIT => "TIME_WAIT",
        0x04 => "FIN_WAIT1",
        0x05 => "FIN_WAIT2",
        0x09 => "LAST_ACK",
        _ => "CLOSING",
    };
    format!(
        "{} to {} ({state})",
        connections::shown(socket.local),
        connections::shown(socket.remote)
    )
}

/// Closes the sockets closed connections left where the snapshot binds
/// again, the job's last run's (a crash, or its end): each is said in a
/// remark. Where the kernel cannot close one (no
/// `CONFIG_INET_DIAG_DESTROY`, or not root), the undump is refused before
/// CRIU runs, with the time the longest has left (`--force` goes on).
pub fn close_left_over(
    job: &JobFiles,
    force: bool,
    remarks: &mut Vec<String>,
) -> Result<(), DiskFailure> {
    if job.listened.is_empty() && job.connected.is_empty() {
        return Ok(());
    }
    let Some(host) = host_sockets(
        "what closed connections left on the job's ports was not looked for",
        remarks,
    ) else {
        return Ok(());
    };
    let left = left_over(&job.listened, &job.connected, &host);
    let mut closed = Vec::new();
    let mut stuck = Vec::new();
    for socket in left {
        match super::sock_destroy::close(socket.local, socket.remote) {
            Ok(()) => closed.push(left_over_shown(socket)),
            Err(why) => stuck.push((socket, why)),
        }
    }
    if !closed.is_empty() {
        remarks.push(format!(
            "closed {} left by closed connections of the job's last run where the job binds again: {}",
            crate::vocabulary::prose::count(closed.len(), "socket", "sockets"),
            closed.join(", ")
        ));
    }
    let Some(longest) = stuck.iter().map(|(s, _)| s.timer_ticks).max() else {
        return Ok(());
    };
    let each: Vec<String> = stuck
        .iter()
        .map(|(s, why)| format!("{} (could not close it: {why})", left_over_shown(s)))
        .collect();
    let why = format!(
        "closed connections left {} where the job binds again, and CRIU could not bind over {}",
        each.join(", "),
        if stuck.len() == 1 { "it" } else { "them" }
    );
    let hint = format!(
        "they go by themselves within {} s: undump again then; root closes them at once where the kernel has CONFIG_INET_DIAG_DESTROY; --force runs CRIU anyway",
        longest.div_ceil(100).max(1)
    );
    in_use(why, force, remarks, hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:9FBD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n   1: 0100007F:8CCC 0100007F:D79D 06 00000000:00000000 03:00001768 00000000     0        0 0 3 0\n   2: 020200C0:C3E5 020200C0:6E9C 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0\n";

    fn listened(addr: IpAddr, port: u16) -> Listened {
        Listened {
            addr,
            port,
            reuseport: false,
        }
    }

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const ANY: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

    #[test]
    fn the_host_s_table_is_read_line_by_line() {
        let host = connections::sockets(TCP);
        assert_eq!(host.len(), 3);
        assert_eq!((host[0].local, host[0].state), ((LOOPBACK, 40893), 0x0A));
        assert_eq!(connections::shown(host[0].local), "127.0.0.1:40893");
        assert_eq!(connections::shown(host[2].local), "192.0.2.2:50149");
        assert!(connections::sockets("header only\n").is_empty());
        assert!(connections::sockets("h\n 0: garbage\n").is_empty());
    }

    #[test]
    fn a_port_held_by_a_listener_or_a_connection_is_taken_and_time_wait_is_not() {
        let host = connections::sockets(TCP);
        // The server's port, listened on by another now.
        let server = [listened(LOOPBACK, 40893)];
        assert_eq!(taken(&server, &host).len(), 1);
        // A port only a TIME_WAIT socket holds is free for CRIU.
        assert!(taken(&[listened(LOOPBACK, 36044)], &host).is_empty());
        // An established connection's local port is taken, on any address
        // of the job's wildcard listener.
        assert_eq!(taken(&[listened(ANY, 50149)], &host).len(), 1);
        // Another address of the host: free.
        assert!(taken(&[listened(LOOPBACK, 50149)], &host).is_empty());
        // SO_REUSEPORT: not judged.
        let shared = Listened {
            reuseport: true,
            ..listened(LOOPBACK, 40893)
        };
        assert!(taken(&[shared], &host).is_empty());
    }

    #[test]
    fn what_closed_connections_left_on_the_job_s_ports_is_found_and_nothing_else() {
        // Row 1: TIME_WAIT on 127.0.0.1:36044, no process holds it, 60 s
        // left (0x1768 ticks of 100 a second).
        let host = connections::sockets(TCP);
        assert_eq!(host[1].timer_ticks, 0x1768);
        let on_a_listener = left_over(&[listened(ANY, 36044)], &[], &host);
        assert_eq!(on_a_listener.len(), 1);
        assert_eq!(
            left_over_shown(on_a_listener[0]),
            "127.0.0.1:36044 to 127.0.0.1:55197 (TIME_WAIT)"
        );
        // The two ends of a connection the job restores.
        let connection = Connected {
            local: (LOOPBACK, 36044),
            remote: (LOOPBACK, 55197),
        };
        assert_eq!(
            left_over(&[], std::slice::from_ref(&connection), &host).len(),
            1
        );
        let other_peer = Connected {
            remote: (LOOPBACK, 1),
            ..connection
        };
        assert!(left_over(&[], &[other_peer], &host).is_empty());
        // Another port, another address: not the job's.
        assert!(left_over(&[listened(ANY, 40893)], &[], &host).is_empty());
        assert!(left_over(
            &[listened(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 36044)],
            &[],
            &host
        )
        .is_empty());
        // A closing socket a process still holds is the process's.
        let held = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:8CCC 0100007F:D79D 05 00000000:00000000 00:00000000 00000000     0        0 77 1 0\n";
        let host = connections::sockets(held);
        assert!(left_over(&[listened(ANY, 36044)], &[], &host).is_empty());
        assert_eq!(
            taken(&[listened(ANY, 36044)], &host).len(),
            1,
            "and it is taken"
        );
    }

    #[test]
    fn addresses_overlap_across_families_where_a_socket_would() {
        let any6 = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        let mapped = connections::endpoint("0000000000000000FFFF00000100007F:0001")
            .expect("an IPv4-mapped address")
            .0;
        assert_eq!(mapped, LOOPBACK, "an IPv4-mapped address is its IPv4");
        assert!(overlaps(LOOPBACK, mapped));
        assert!(overlaps(any6, LOOPBACK), "a dual-stack wildcard");
        assert!(overlaps(ANY, mapped));
        assert!(!overlaps(ANY, IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(!overlaps(LOOPBACK, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2))));
        assert_eq!(connections::shown((any6, 28028)), "[::]:28028");
    }
}
