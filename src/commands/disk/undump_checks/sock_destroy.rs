//! Closing a TCP socket no process holds, by its two ends, through the
//! kernel's socket diagnostics (`SOCK_DESTROY` on `NETLINK_SOCK_DIAG`,
//! what `ss -K` sends; root's, with `CONFIG_INET_DIAG_DESTROY`): the way
//! to end a TIME_WAIT socket that keeps a snapshot's listener from binding
//! its port again. The request is built and its answer read here (pure,
//! tested); the socket calls are rustix's.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use rustix::net::{netlink, AddressFamily, RecvFlags, SendFlags, SocketType};

/// `SOCK_DESTROY`, the message type (linux/sock_diag.h).
const SOCK_DESTROY: u16 = 21;
/// `NLMSG_ERROR`: the kernel's answer, an errno (0: done).
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST | NLM_F_ACK`.
const REQUEST_WITH_ACK: u16 = 0x1 | 0x4;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
/// `INET_DIAG_NOCOOKIE`: found by its ends, whatever its cookie.
const NO_COOKIE: u32 = u32::MAX;
/// The kernel answers at once; a reply later than this is none.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// An address as `inet_diag_sockid` holds it: 16 bytes, IPv4 in the first
/// four, network order.
fn address_bytes(address: IpAddr) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    match address {
        IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => bytes.copy_from_slice(&v6.octets()),
    }
    bytes
}

/// The netlink message that asks the kernel to close the TCP socket with
/// these two ends (pure): `nlmsghdr`, then `inet_diag_req_v2` with every
/// state and no cookie. An IPv4 pair is asked as IPv4 (a dual-stack
/// socket's IPv4-mapped ends are found so too).
pub fn request(local: (IpAddr, u16), remote: (IpAddr, u16), sequence: u32) -> Vec<u8> {
    let family = if local.0.is_ipv4() && remote.0.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    };
    let mut body = vec![family, IPPROTO_TCP, 0, 0];
    body.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    body.extend_from_slice(&local.1.to_be_bytes());
    body.extend_from_slice(&remote.1.to_be_bytes());
    body.extend_from_slice(&address_bytes(mapped_as(local.0, family)));
    body.extend_from_slice(&address_bytes(mapped_as(remote.0, family)));
    body.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    body.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    body.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    let length = u32::try_from(16 + body.len()).unwrap_or(u32::MAX);
    let mut message = Vec::with_capacity(16 + body.len());
    message.extend_from_slice(&length.to_ne_bytes());
    message.extend_from_slice(&SOCK_DESTROY.to_ne_bytes());
    message.extend_from_slice(&REQUEST_WITH_ACK.to_ne_bytes());
    message.extend_from_slice(&sequence.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes()); // to the kernel
    message.extend(body);
    message
}

/// An IPv4 address asked in an IPv6 request is asked IPv4-mapped.
fn mapped_as(address: IpAddr, family: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) if family == AF_INET6 => IpAddr::V6(v4.to_ipv6_mapped()),
        other => other,
    }
}

/// What the kernel's answer says (pure): `Ok` when the socket was closed
/// or was gone already, else the errno it gave.
pub fn answer(reply: &[u8]) -> Result<(), i32> {
    let field = |at: usize, len: usize| reply.get(at..at + len);
    let kind = field(4, 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let errno = field(16, 4).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match (kind, errno) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        // Gone between the table and the request: what was asked.
        (Some(NLMSG_ERROR), Some(e)) if -e == ENOENT => Ok(()),
        (Some(NLMSG_ERROR), Some(e)) => Err(-e),
        _ => Err(EPROTO),
    }
}

/// `EPROTO`: an answer that is not the kernel's acknowledgement.
const EPROTO: i32 = 71;
/// `ENOENT`: no such socket.
const ENOENT: i32 = 2;

/// Asks the kernel to close the TCP socket with these two ends.
pub fn close(local: (IpAddr, u16), remote: (IpAddr, u16)) -> io::Result<()> {
    let socket = rustix::net::socket(
        AddressFamily::NETLINK,
        SocketType::RAW,
        Some(netlink::SOCK_DIAG),
    )?;
    rustix::net::sockopt::set_socket_timeout(
        &socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(ANSWER_WAIT),
    )?;
    rustix::net::send(&socket, &request(local, remote, 1), SendFlags::empty())?;
    let mut reply = [0u8; 512];
    let (got, _) = rustix::net::recv(&socket, &mut reply[..], RecvFlags::empty())?;
    answer(&reply[..got.min(reply.len())]).map_err(io::Error::from_raw_os_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn an_ipv4_pair_is_asked_as_ipv4_with_its_ports_in_network_order() {
        let message = request((LOOPBACK, 0xDB21), (LOOPBACK, 0xAD6C), 7);
        assert_eq!(message.len(), 72, "nlmsghdr 16 + inet_diag_req_v2 56");
        assert_eq!(
            u32::from_ne_bytes(message[..4].try_into().unwrap_or_default()),
            72
        );
        assert_eq!(u16::from_ne_bytes([message[4], message[5]]), SOCK_DESTROY);
        assert_eq!(
            u32::from_ne_bytes(message[8..12].try_into().unwrap_or_default()),
            7
        );
        assert_eq!(&message[16..18], &[AF_INET, IPPROTO_TCP]);
        assert_eq!(&message[24..28], &[0xDB, 0x21, 0xAD, 0x6C]);
        assert_eq!(&message[28..32], &[127, 0, 0, 1]);
        assert_eq!(&message[32..44], &[0; 12]);
        assert_eq!(&message[44..48], &[127, 0, 0, 1]);
        assert_eq!(&message[64..72], &[0xFF; 8], "no cookie");
    }

    #[test]
    fn a_pair_with_an_ipv6_end_is_asked_as_ipv6_with_ipv4_mapped() {
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let message = request((v6, 1), (LOOPBACK, 2), 1);
        assert_eq!(message[16], AF_INET6);
        assert_eq!(&message[28..44], &Ipv6Addr::LOCALHOST.octets());
        assert_eq!(
            &message[44..60],
            &Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets()
        );
    }

    fn reply(kind: u16, errno: i32) -> Vec<u8> {
        let mut bytes = vec![0u8; 36];
        bytes[4..6].copy_from_slice(&kind.to_ne_bytes());
        bytes[16..20].copy_from_slice(&errno.to_ne_bytes());
        bytes
    }

    #[test]
    fn the_kernel_s_answer_is_read_as_done_gone_or_its_errno() {
        assert_eq!(answer(&reply(NLMSG_ERROR, 0)), Ok(()));
        assert_eq!(answer(&reply(NLMSG_ERROR, -2)), Ok(()), "gone already");
        assert_eq!(answer(&reply(NLMSG_ERROR, -95)), Err(95), "EOPNOTSUPP");
        assert_eq!(answer(&reply(NLMSG_ERROR, -1)), Err(1), "EPERM");
        assert_eq!(answer(&reply(20, 0)), Err(EPROTO));
        assert_eq!(answer(&[0; 3]), Err(EPROTO));
    }
}
