//! The addresses the job's TCP sockets are bound to, against this host's
//! own, before an undump lets CRIU bind them again: a snapshot brought
//! back on another host (or in another network namespace) finds its
//! ranks' sockets bound to an address this host lacks (NCCL's bootstrap,
//! gloo, the store listen on the node's address), and CRIU fails on each
//! ("Cannot assign requested address") after forking the tree. A socket
//! bound to a wildcard moves with the job; loopback is every host's.
//!
//! This host's addresses are read from the kernel's tables of the undump's
//! own network namespace (the job restores into it): IPv4 from
//! `/proc/self/net/fib_trie` (its `host LOCAL` entries, ranges included:
//! all of 127.0.0.0/8 is local), IPv6 from `/proc/self/net/if_inet6`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::commands::disk::criu_tool::image_files::InetBound;
use crate::commands::disk::dump_checks::connections;
use crate::commands::disk::report::DiskFailure;
use crate::commands::disk::undump_checks::open_files::JobFiles;

/// The kernel's tables are read this far at most.
const TABLE_CAP: u64 = 16 << 20;

/// This host's local addresses: IPv4 ranges (address, prefix length) and
/// IPv6 addresses.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HostAddresses {
    pub v4: Vec<(Ipv4Addr, u8)>,
    pub v6: Vec<Ipv6Addr>,
}

impl HostAddresses {
    /// Whether a socket may be bound to `address` here (pure).
    pub fn has(&self, address: IpAddr) -> bool {
        match address {
            IpAddr::V4(v4) => self.v4.iter().any(|&(net, len)| {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(len.min(32)))
                    .unwrap_or(0);
                u32::from(v4) & mask == u32::from(net) & mask
            }),
            IpAddr::V6(v6) => v6.is_loopback() || self.v6.contains(&v6),
        }
    }
}

/// The `host LOCAL` entries of a `fib_trie` table (pure): each address
/// line (`|-- A.B.C.D`) followed by `/N host LOCAL`.
pub fn local_v4(fib_trie: &str) -> Vec<(Ipv4Addr, u8)> {
    let mut found = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in fib_trie.lines().map(str::trim) {
        if let Some(address) = line.strip_prefix("|-- ") {
            last = address.parse().ok();
        } else if let (Some(address), Some(rest)) = (last, line.strip_prefix('/')) {
            let mut words = rest.split_whitespace();
            let length = words.next().and_then(|n| n.parse::<u8>().ok());
            if let (Some(length), Some("host"), Some("LOCAL")) =
                (length, words.next(), words.next())
            {
                if !found.contains(&(address, length)) {
                    found.push((address, length));
                }
            }
        }
    }
    found
}

/// The addresses of an `if_inet6` table (pure): its first field, 32 hex
/// digits.
pub fn local_v6(if_inet6: &str) -> Vec<Ipv6Addr> {
    if_inet6
        .lines()
        .filter_map(|line| {
            let hex = line.split_whitespace().next()?;
            u128::from_str_radix(hex, 16).ok().map(Ipv6Addr::from)
        })
        .collect()
}

/// The job's sockets bound to a specific address this host lacks (pure),
/// each in words, once each.
pub fn foreign(bound: &[InetBound], host: &HostAddresses) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for socket in bound {
        if socket.local.0.is_unspecified() || host.has(socket.local.0) {
            continue;
        }
        let what = match (socket.proto, socket.state) {
            (TCP, TCP_LISTEN) => "a TCP listener on",
            (TCP, _) => "a TCP socket on",
            (UDP, _) => "a UDP socket on",
            _ => "a socket on",
        };
        let said = format!("{what} {}", connections::shown(socket.local));
        if !found.contains(&said) {
            found.push(said);
        }
    }
    found
}

const TCP: u32 = 6;
const UDP: u32 = 17;
const TCP_LISTEN: u32 = 10;

/// Refuses the undump when a socket of the job is bound to an address
/// this host lacks (`--force` goes on); says so in a remark when this
/// host's tables cannot be read.
pub fn refuse_foreign(
    job: &JobFiles,
    force: bool,
    remarks: &mut Vec<String>,
) -> Result<(), DiskFailure> {
    if job.inet_bound.is_empty() {
        return Ok(());
    }
    let read = |table: &str| {
        crate::files::read_capped_bytes(std::path::Path::new(table), TABLE_CAP)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    };
    let host = match (
        read("/proc/self/net/fib_trie"),
        read("/proc/self/net/if_inet6"),
    ) {
        (Ok(v4), v6) => HostAddresses {
            v4: local_v4(&v4),
            // No IPv6 here: none of the job's IPv6 addresses but loopback.
            v6: v6.map(|t| local_v6(&t)).unwrap_or_default(),
        },
        (Err(why), _) => {
            remarks.push(format!("the addresses the job's sockets are bound to were not checked against this host's (/proc/self/net/fib_trie: {why}): CRIU says if one is missing"));
            return Ok(());
        }
    };
    let foreign = foreign(&job.inet_bound, &host);
    if foreign.is_empty() {
        return Ok(());
    }
    let why = format!(
        "the job's sockets are bound to addresses this host (this network namespace) lacks: {}; CRIU could not bind them (\"Cannot assign requested address\")",
        foreign.join(", ")
    );
    DiskFailure::unless_forced(
        "address_missing",
        &why,
        "undump on the host (or in the network namespace) that has those addresses, or give this one them (`ip addr add`); a job restores anywhere when its processes reach one another over loopback and listen on a wildcard (a single-node torchrun with --master-addr 127.0.0.1, NCCL_SOCKET_IFNAME=lo, GLOO_SOCKET_IFNAME=lo); --force runs CRIU anyway",
        force,
        remarks,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIB_TRIE: &str = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n        +-- 127.0.0.0/31 1 0 0\n           |-- 127.0.0.0\n              /8 host LOCAL\n           |-- 127.0.0.1\n              /32 host LOCAL\n        |-- 127.255.255.255\n           /32 link BROADCAST\n     +-- 192.0.2.0/24 2 0 2\n           |-- 192.0.2.0\n              /24 link UNICAST\n           |-- 192.0.2.2\n              /32 host LOCAL\nLocal:\n           |-- 127.0.0.1\n              /32 host LOCAL\n";
    const IF_INET6: &str = "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n00000000000000000000000000000001 01 80 10 80       lo\n";

    fn host() -> HostAddresses {
        HostAddresses {
            v4: local_v4(FIB_TRIE),
            v6: local_v6(IF_INET6),
        }
    }

    #[test]
    fn this_host_s_addresses_are_its_local_entries_ranges_included() {
        let host = host();
        assert_eq!(
            host.v4,
            [
                (Ipv4Addr::new(127, 0, 0, 0), 8),
                (Ipv4Addr::new(127, 0, 0, 1), 32),
                (Ipv4Addr::new(192, 0, 2, 2), 32)
            ]
        );
        assert!(
            host.has(IpAddr::V4(Ipv4Addr::new(127, 1, 2, 3))),
            "all of 127/8"
        );
        assert!(host.has(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2))));
        assert!(
            !host.has(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 3))),
            "a broadcast or a neighbour"
        );
        assert!(host.has(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(host.has("fe80::fc:ff:fe00:1".parse().expect("v6")));
        assert!(!host.has("fd00::2".parse().expect("v6")));
    }

    #[test]
    fn sockets_bound_to_an_address_this_host_lacks_are_named_and_wildcards_are_not() {
        let elsewhere = HostAddresses {
            v4: vec![
                (Ipv4Addr::new(127, 0, 0, 0), 8),
                (Ipv4Addr::new(10, 0, 0, 9), 32),
            ],
            v6: Vec::new(),
        };
        let node = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        let bound = |addr: IpAddr, port, proto, state| InetBound {
            local: (addr, port),
            remote: None,
            proto,
            state,
            reuseport: false,
        };
        let sockets = [
            bound(node, 29500, TCP, TCP_LISTEN),
            bound(node, 40000, TCP, 1),
            bound(node, 40000, TCP, 1),
            bound(node, 53124, UDP, 1),
            bound(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 1, TCP, TCP_LISTEN),
            bound(IpAddr::V4(Ipv4Addr::LOCALHOST), 2, TCP, TCP_LISTEN),
        ];
        assert_eq!(
            foreign(&sockets, &elsewhere),
            [
                "a TCP listener on 192.0.2.2:29500",
                "a TCP socket on 192.0.2.2:40000",
                "a UDP socket on 192.0.2.2:53124"
            ]
        );
        assert!(foreign(&sockets, &host()).is_empty(), "at home");
    }
}
