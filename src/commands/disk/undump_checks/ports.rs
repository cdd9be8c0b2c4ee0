//! The TCP ports the job listened on, against this host's sockets now,
//! before an undump lets CRIU bind them again: a port the kernel picked
//! for a listener (torchrun's store, NCCL's RAS, a server started on port
//! 0) is free once the job is dumped, and the host's own connections may
//! take it meanwhile; CRIU then fails on it ("Can't bind inet socket ...
//! Address already in use") after forking the tree. Met on a GPU host:
//! a server's port, 40893, taken between its dump and its undump.
//!
//! The job restores into cudackpt's network namespace (a dump of a tree
//! in a namespace of its own is refused), so this host's sockets are those
//! of /proc/self/net/tcp and tcp6.

use std::net::IpAddr;

use crate::commands::disk::criu_tool::image_files::Listened;
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

/// The job's listeners whose port a socket of this host holds now, each
/// with the first such socket (pure). A socket in TIME_WAIT does not
/// count (CRIU binds with SO_REUSEADDR over it). A listener with
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
                        && h.state != connections::TIME_WAIT
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
    let mut host = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        match crate::files::read_capped_bytes(std::path::Path::new(table), TABLE_CAP) {
            Ok(bytes) => host.extend(connections::sockets(&String::from_utf8_lossy(&bytes))),
            Err(why) => {
                remarks.push(format!("the ports the job listened on were not checked against this host's ({table}: {why}): CRIU says if one is taken"));
                return Ok(());
            }
        }
    }
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
        "the job listened on {}, and CRIU could not bind {} again (\"Address already in use\")",
        each.join(", "),
        if taken.len() == 1 { "it" } else { "them" }
    );
    if force {
        remarks.push(format!("{why} (going on: --force)"));
        return Ok(());
    }
    Err(DiskFailure::refused(
        "port_in_use",
        format!("refused before any change: {why}"),
        "free the port (/proc/net/tcp, or `ss -tanp` where there is one, names the socket holding it) or undump where it is free; a port the kernel picked for the job is taken again by chance, so a job that listens for others is best given a fixed port below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range); --force runs CRIU anyway",
    ))
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
