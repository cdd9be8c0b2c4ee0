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

use super::criu_images::{self, Listened};
use super::report::DiskFailure;
use super::source::HeldImages;

/// /proc/net/tcp is read this far at most (a host with a million sockets
/// prints about 150 MB; beyond this the check says it did not finish).
const TABLE_CAP: u64 = 64 << 20;
/// The kernel's TCP_TIME_WAIT, in /proc/net/tcp's hexadecimal: such a
/// socket does not keep CRIU from binding (it binds with SO_REUSEADDR).
const TIME_WAIT: &str = "06";

/// A socket of this host that holds a local port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSocket {
    pub addr: String,
    pub port: u16,
    /// Its state, in /proc/net/tcp's hexadecimal (`0A` LISTEN).
    pub state: String,
}

/// The sockets of a /proc/net/tcp or tcp6 text (pure): every line but the
/// header, its local address and port, its state.
pub fn host_sockets(table: &str) -> Vec<HostSocket> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            let (addr, port) = local.split_once(':')?;
            Some(HostSocket {
                addr: addr.to_ascii_uppercase(),
                port: u16::from_str_radix(port, 16).ok()?,
                state: state.to_string(),
            })
        })
        .collect()
}

/// An address's IPv4 part: itself, or an IPv4-mapped IPv6 one's (pure).
fn v4_of(addr: &str) -> Option<&str> {
    match addr.len() {
        8 => Some(addr),
        32 => addr.strip_prefix("0000000000000000FFFF0000"),
        _ => None,
    }
}

fn wildcard(addr: &str) -> bool {
    addr.bytes().all(|b| b == b'0')
}

/// Whether two bound addresses of one port keep each other from binding
/// (pure): the same address, or a wildcard that covers the other (an IPv6
/// wildcard covers IPv4 too, as a dual-stack socket's does).
fn overlaps(a: &str, b: &str) -> bool {
    if wildcard(a) || wildcard(b) {
        let (any, other) = if wildcard(a) { (a, b) } else { (b, a) };
        return any.len() == other.len() || any.len() == 32 || v4_of(other).is_some();
    }
    match (v4_of(a), v4_of(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The job's listeners whose port a socket of this host holds now, each
/// with the first such socket (pure). A listener with `SO_REUSEPORT` is
/// left out: whether it may share the port depends on the other socket's
/// options, which /proc does not show.
pub fn taken<'a>(
    listened: &'a [Listened],
    host: &'a [HostSocket],
) -> Vec<(&'a Listened, &'a HostSocket)> {
    listened
        .iter()
        .filter(|l| !l.reuseport && l.port != 0)
        .filter_map(|l| {
            host.iter()
                .find(|h| h.port == l.port && h.state != TIME_WAIT && overlaps(&l.addr, &h.addr))
                .map(|h| (l, h))
        })
        .collect()
}

/// `127.0.0.1:40893`, `[::]:28028` (pure).
pub fn shown(addr: &str, port: u16) -> String {
    let words: Vec<u32> = (0..addr.len() / 8)
        .filter_map(|i| u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).ok())
        .collect();
    // Each word holds its bytes in network order as the kernel keeps them.
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match bytes.len() {
        4 => format!("{}.{}.{}.{}:{port}", bytes[0], bytes[1], bytes[2], bytes[3]),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes);
            format!("[{}]:{port}", std::net::Ipv6Addr::from(octets))
        }
        _ => format!("{addr}:{port}"),
    }
}

/// What a host socket's state is called.
fn state_name(state: &str) -> &'static str {
    match state {
        "01" => "an established connection",
        "0A" => "a listener",
        "07" => "a bound socket",
        _ => "a socket",
    }
}

/// Refuses the undump when a port the job listened on is held on this
/// host now (`--force` goes on, with a remark); says so in a remark when
/// the images or the host's tables cannot tell.
pub fn refuse_taken(
    images: &HeldImages,
    force: bool,
    remarks: &mut Vec<String>,
) -> Result<(), DiskFailure> {
    let listened = match images.read("files.img", 256 << 20) {
        Ok(Some(img)) => criu_images::listened(&img),
        _ => return Ok(()), // said by the open files' check
    };
    let Ok(listened) = listened else {
        return Ok(());
    };
    if listened.is_empty() {
        return Ok(());
    }
    let mut host = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        match crate::files::read_capped_bytes(std::path::Path::new(table), TABLE_CAP) {
            Ok(bytes) => host.extend(host_sockets(&String::from_utf8_lossy(&bytes))),
            Err(why) => {
                remarks.push(format!("the ports the job listened on were not checked against this host's ({table}: {why}): CRIU says if one is taken"));
                return Ok(());
            }
        }
    }
    let taken = taken(&listened, &host);
    if taken.is_empty() {
        return Ok(());
    }
    let each: Vec<String> = taken
        .iter()
        .map(|(l, h)| {
            format!(
                "{} ({} of this host holds {})",
                shown(&l.addr, l.port),
                state_name(&h.state),
                shown(&h.addr, h.port)
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

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:9FBD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n   1: 0100007F:8CCC 0100007F:D79D 06 00000000:00000000 03:00001768 00000000     0        0 0 3 0\n   2: 020200C0:C3E5 020200C0:6E9C 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0\n";

    fn listened(addr: &str, port: u16) -> Listened {
        Listened {
            addr: addr.to_string(),
            port,
            reuseport: false,
        }
    }

    #[test]
    fn the_host_s_table_is_read_line_by_line() {
        let host = host_sockets(TCP);
        assert_eq!(host.len(), 3);
        assert_eq!(
            host[0],
            HostSocket {
                addr: "0100007F".into(),
                port: 40893,
                state: "0A".into()
            }
        );
        assert_eq!(shown(&host[0].addr, host[0].port), "127.0.0.1:40893");
        assert_eq!(shown(&host[2].addr, host[2].port), "192.0.2.2:50149");
        assert!(host_sockets("header only\n").is_empty());
        assert!(host_sockets("h\n 0: garbage\n").is_empty());
    }

    #[test]
    fn a_port_held_by_a_listener_or_a_connection_is_taken_and_time_wait_is_not() {
        let host = host_sockets(TCP);
        // The server's port, listened on by another now.
        let server = [listened("0100007F", 40893)];
        assert_eq!(taken(&server, &host).len(), 1);
        // A port only a TIME_WAIT socket holds is free for CRIU.
        assert!(taken(&[listened("0100007F", 36044)], &host).is_empty());
        // An established connection's local port is taken, on any address
        // of the job's wildcard listener.
        assert_eq!(taken(&[listened("00000000", 50149)], &host).len(), 1);
        // Another address of the host: free.
        assert!(taken(&[listened("0100007F", 50149)], &host).is_empty());
        // SO_REUSEPORT: not judged.
        let shared = Listened {
            reuseport: true,
            ..listened("0100007F", 40893)
        };
        assert!(taken(&[shared], &host).is_empty());
    }

    #[test]
    fn addresses_overlap_across_families_where_a_socket_would() {
        let any6 = "0".repeat(32);
        let mapped = "0000000000000000FFFF00000100007F";
        assert!(overlaps("0100007F", mapped));
        assert!(overlaps(&any6, "0100007F"), "a dual-stack wildcard");
        assert!(overlaps("00000000", mapped));
        assert!(!overlaps("00000000", "000080FE000000000000000000000001"));
        assert!(!overlaps("0100007F", "020200C0"));
        assert_eq!(shown(&any6, 28028), "[::]:28028");
        assert_eq!(shown(mapped, 1), "[::ffff:127.0.0.1]:1");
    }
}
