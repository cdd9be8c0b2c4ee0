//! The tree's established TCP connections and whether each stays inside
//! it, from the kernel's tables (`/proc/PID/net/tcp`, `tcp6`): a
//! connection whose other end is a socket the tree itself holds (on any
//! address of this host, loopback or not) needs no network lock, since
//! CRIU freezes the whole tree and nothing else can send on it. One that
//! leaves the tree does: CRIU locks it with nftables or iptables, and a host
//! with neither cannot dump it (CRIU: "Failed to lock TCP connection",
//! after the suspend).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One TCP socket, as a table row shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    pub inode: u64,
    pub local: (IpAddr, u16),
    pub remote: (IpAddr, u16),
    /// The kernel's TCP state ([`ESTABLISHED`], [`TIME_WAIT`], ...).
    pub state: u8,
    /// What is left of its timer, in the table's clock ticks (`USER_HZ`,
    /// 100 a second): a TIME_WAIT socket's time to go.
    pub timer_ticks: u64,
}

/// The kernel's TCP_ESTABLISHED.
pub const ESTABLISHED: u8 = 0x01;
/// The kernel's TCP_TIME_WAIT.
pub const TIME_WAIT: u8 = 0x06;

/// Every socket of a /proc/net/tcp or tcp6 table (pure).
pub fn sockets(table: &str) -> Vec<Socket> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (local, remote, state, timer, inode) = (
                fields.get(1)?,
                fields.get(2)?,
                fields.get(3)?,
                fields.get(5)?,
                fields.get(9)?,
            );
            Some(Socket {
                inode: inode.parse().ok()?,
                local: endpoint(local)?,
                remote: endpoint(remote)?,
                state: u8::from_str_radix(state, 16).ok()?,
                timer_ticks: timer
                    .split_once(':')
                    .and_then(|(_, when)| u64::from_str_radix(when, 16).ok())
                    .unwrap_or(0),
            })
        })
        .collect()
}

/// The established connections of a /proc/net/tcp or tcp6 table (pure).
pub fn established(table: &str) -> Vec<Socket> {
    sockets(table)
        .into_iter()
        .filter(|s| s.state == ESTABLISHED)
        .collect()
}

/// A table's `ADDR:PORT` in hex (pure): see [`address`].
pub fn endpoint(text: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    if host.len() % 8 != 0 {
        return None;
    }
    let words = (0..host.len() / 8)
        .map(|i| u32::from_str_radix(host.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<Vec<u32>>>()?;
    Some((address(&words)?, port))
}

/// An address as the kernel keeps it in 32-bit words (pure): one for
/// IPv4, four for IPv6, each holding its bytes in network order (tables
/// print each word in hex, CRIU's images keep the words); an IPv4-mapped
/// IPv6 address as the IPv4 it maps, so the two ends of one connection
/// compare equal whichever table shows them.
pub fn address(words: &[u32]) -> Option<IpAddr> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes);
            let v6 = Ipv6Addr::from(octets);
            Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => None,
    }
}

/// The connections among `rows` held by the tree (`inodes`) whose other
/// end is not a socket of the tree, each said (pure).
pub fn leaving(rows: &[Socket], inodes: &BTreeSet<u64>) -> Vec<String> {
    let ours: Vec<&Socket> = rows.iter().filter(|c| inodes.contains(&c.inode)).collect();
    ours.iter()
        .filter(|c| {
            !ours
                .iter()
                .any(|peer| peer.local == c.remote && peer.remote == c.local)
        })
        .map(|c| format!("{} -> {}", shown(c.local), shown(c.remote)))
        .collect()
}

/// The tree's own connections among `rows` (pure).
pub fn held<'a>(rows: &'a [Socket], inodes: &BTreeSet<u64>) -> Vec<&'a Socket> {
    rows.iter().filter(|c| inodes.contains(&c.inode)).collect()
}

/// `127.0.0.1:40893`, `[::1]:22` (pure).
pub fn shown((address, port): (IpAddr, u16)) -> String {
    match address {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_as_the_kernel_writes_them() {
        assert_eq!(
            endpoint("0100007F:1F90"),
            Some((IpAddr::V4(Ipv4Addr::LOCALHOST), 8080))
        );
        assert_eq!(
            endpoint("0200000A:0050"),
            Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 80))
        );
        // ::1
        assert_eq!(
            endpoint("00000000000000000000000001000000:0016"),
            Some((IpAddr::V6(Ipv6Addr::LOCALHOST), 22))
        );
        // ::ffff:192.0.2.2, as tcp6 shows a v4 peer of a dual-stack socket.
        assert_eq!(
            endpoint("0000000000000000FFFF0000020200C0:EE3B"),
            Some((IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 0xEE3B))
        );
        assert_eq!(endpoint("zz:1"), None);
        assert_eq!(endpoint("0100007:1"), None, "not whole words");
        // CRIU's images keep the same words.
        assert_eq!(
            address(&[0x0100_007F]),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(address(&[]), None);
    }

    fn row(inode: u64, local: &str, remote: &str) -> String {
        format!("  0: {local} {remote} 01 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0 20 4 30 10 -1\n")
    }

    #[test]
    fn a_connection_between_two_sockets_of_the_tree_stays_inside_it() {
        // Two ranks on the host's own non-loopback address, and one rank's
        // connection to a server outside the tree.
        let table = format!(
            "  sl  local_address rem_address   st ...\n{}{}{}{}",
            row(11, "020200C0:ED77", "020200C0:8E74"),
            row(12, "020200C0:8E74", "020200C0:ED77"),
            row(13, "0100007F:9C40", "0100007F:0CEA"),
            row(99, "0100007F:0CEA", "0100007F:9C40"),
        );
        let rows = established(&table);
        assert_eq!(rows.len(), 4);
        let tree: BTreeSet<u64> = [11, 12].into();
        assert!(leaving(&rows, &tree).is_empty());
        let tree: BTreeSet<u64> = [11, 12, 13].into();
        assert_eq!(leaving(&rows, &tree), ["127.0.0.1:40000 -> 127.0.0.1:3306"]);
        assert_eq!(held(&rows, &tree).len(), 3);
        // Listening and closing sockets are not established.
        let listening = "  sl\n  0: 0100007F:6D8C 00000000:0000 0A 0:0 0:0 0 0 0 5 1\n";
        assert!(established(listening).is_empty());
    }
}
