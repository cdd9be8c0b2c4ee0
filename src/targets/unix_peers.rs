//! Which Unix socket each Unix socket is connected to, from the kernel's
//! socket diagnostics (`NETLINK_SOCK_DIAG`, sock_diag(7)): /proc says which
//! sockets a process holds, never their peers. A dump needs it: CRIU cannot
//! dump a Unix socket connected to a process outside the tree (a job whose
//! output goes to journald's socket, a client of a daemon), and says so
//! only after the tree was suspended.
//!
//! The answer covers this network namespace only (sock_diag's reach);
//! anything it cannot tell is absent, never a verdict.

use std::collections::HashMap;
use std::time::Duration;

use rustix::net::netlink::{SocketAddrNetlink, SOCK_DIAG};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// One Unix socket: the inode of its peer (connected sockets only) and the
/// name it is bound to, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnixSocket {
    pub peer: Option<u64>,
    pub name: Option<String>,
}

// sock_diag(7) and linux/unix_diag.h.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const AF_UNIX: u8 = 1;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_PEER: u32 = 0x4;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_PEER: u16 = 2;
const HEADER_LEN: usize = 16;
const MESSAGE_LEN: usize = 16;
/// A dump of every Unix socket of a large host is a few megabytes: stop
/// reading well past that.
const READ_CAP: usize = 256 << 20;

/// Every Unix socket of this network namespace by inode, or `None` when the
/// kernel cannot be asked.
pub fn all() -> Option<HashMap<u64, UnixSocket>> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(SOCK_DIAG),
    )
    .ok()?;
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(Duration::from_secs(2)),
    )
    .ok()?;
    rustix::net::sendto(
        &fd,
        &request(),
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )
    .ok()?;
    let mut sockets = HashMap::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut read = 0;
    loop {
        let (len, _) = rustix::net::recv(&fd, &mut buffer[..], RecvFlags::empty()).ok()?;
        read += len;
        match parse_datagram(&buffer[..len.min(buffer.len())], &mut sockets) {
            Datagram::More if read < READ_CAP => {}
            Datagram::Done => return Some(sockets),
            Datagram::More | Datagram::Error => return None,
        }
    }
}

/// The dump request: every Unix socket, with its peer and name (pure).
pub fn request() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + 24);
    let total = (HEADER_LEN + 24) as u32;
    bytes.extend_from_slice(&total.to_ne_bytes());
    bytes.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    bytes.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    bytes.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    bytes.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
                                                  // struct unix_diag_req
    bytes.push(AF_UNIX);
    bytes.push(0); // protocol
    bytes.extend_from_slice(&0u16.to_ne_bytes()); // pad
    bytes.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    bytes.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    bytes.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_PEER).to_ne_bytes());
    bytes.extend_from_slice(&u32::MAX.to_ne_bytes()); // cookie: none
    bytes.extend_from_slice(&u32::MAX.to_ne_bytes());
    bytes
}

/// What one datagram of the answer said.
#[derive(Debug, PartialEq, Eq)]
pub enum Datagram {
    More,
    Done,
    Error,
}

/// Reads the messages of one datagram into `sockets` (pure).
pub fn parse_datagram(bytes: &[u8], sockets: &mut HashMap<u64, UnixSocket>) -> Datagram {
    let mut at = 0;
    while at + HEADER_LEN <= bytes.len() {
        let len = u32_at(bytes, at) as usize;
        let kind = u16_at(bytes, at + 4);
        if len < HEADER_LEN || at + len > bytes.len() {
            return Datagram::Error;
        }
        match kind {
            NLMSG_DONE => return Datagram::Done,
            NLMSG_ERROR => return Datagram::Error,
            SOCK_DIAG_BY_FAMILY => {
                if let Some((inode, socket)) = parse_message(&bytes[at + HEADER_LEN..at + len]) {
                    sockets.insert(inode, socket);
                }
            }
            _ => {}
        }
        at += align(len);
    }
    Datagram::More
}

/// One `unix_diag_msg` and its attributes (pure).
fn parse_message(bytes: &[u8]) -> Option<(u64, UnixSocket)> {
    if bytes.len() < MESSAGE_LEN {
        return None;
    }
    let inode = u64::from(u32_at(bytes, 4));
    let mut socket = UnixSocket::default();
    let mut at = MESSAGE_LEN;
    while at + 4 <= bytes.len() {
        let len = usize::from(u16_at(bytes, at));
        let kind = u16_at(bytes, at + 2) & 0x3fff;
        if len < 4 || at + len > bytes.len() {
            break;
        }
        let payload = &bytes[at + 4..at + len];
        match kind {
            UNIX_DIAG_PEER if payload.len() >= 4 => {
                socket.peer = Some(u64::from(u32_at(payload, 0)))
            }
            UNIX_DIAG_NAME => socket.name = Some(name_of(payload)),
            _ => {}
        }
        at += align(len);
    }
    Some((inode, socket))
}

/// A bound name: a path, or `@name` for an abstract one (pure).
fn name_of(payload: &[u8]) -> String {
    match payload.split_first() {
        Some((0, rest)) => format!("@{}", String::from_utf8_lossy(rest).trim_end_matches('\0')),
        _ => String::from_utf8_lossy(payload)
            .trim_end_matches('\0')
            .to_string(),
    }
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One answer message for `inode`, with a peer and a name.
    fn message(inode: u32, peer: Option<u32>, name: Option<&[u8]>) -> Vec<u8> {
        let mut body = vec![AF_UNIX, 1, 1, 0];
        body.extend_from_slice(&inode.to_ne_bytes());
        body.extend_from_slice(&[0xff; 8]);
        let mut attribute = |kind: u16, payload: &[u8]| {
            body.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&kind.to_ne_bytes());
            body.extend_from_slice(payload);
            while body.len() % 4 != 0 {
                body.push(0);
            }
        };
        if let Some(name) = name {
            attribute(UNIX_DIAG_NAME, name);
        }
        if let Some(peer) = peer {
            attribute(UNIX_DIAG_PEER, &peer.to_ne_bytes());
        }
        let mut bytes = ((HEADER_LEN + body.len()) as u32).to_ne_bytes().to_vec();
        bytes.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        bytes.extend_from_slice(&[0; 10]);
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn peers_and_names_are_read_from_the_answer() {
        let mut datagram = message(10, Some(11), None);
        datagram.extend(message(11, Some(10), Some(b"/run/systemd/journal/stdout")));
        datagram.extend(message(12, None, Some(b"\0abstract")));
        let mut sockets = HashMap::new();
        assert_eq!(parse_datagram(&datagram, &mut sockets), Datagram::More);
        assert_eq!(sockets[&10].peer, Some(11));
        assert_eq!(
            sockets[&11].name.as_deref(),
            Some("/run/systemd/journal/stdout")
        );
        assert_eq!(
            sockets[&12],
            UnixSocket {
                peer: None,
                name: Some("@abstract".into())
            }
        );
        let mut done = (HEADER_LEN as u32).to_ne_bytes().to_vec();
        done.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        done.extend_from_slice(&[0; 10]);
        assert_eq!(parse_datagram(&done, &mut sockets), Datagram::Done);
        assert_eq!(parse_datagram(&[0xff; 20], &mut sockets), Datagram::Error);
    }

    #[test]
    fn the_kernel_answers_with_this_process_s_own_pair() {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("a pair");
        let inode = |s: &std::os::unix::net::UnixStream| {
            use std::os::fd::AsRawFd;
            std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
                .expect("stat")
                .ino()
        };
        let sockets = all().expect("sock_diag answers on Linux");
        assert_eq!(
            sockets.get(&inode(&a)).and_then(|s| s.peer),
            Some(inode(&b))
        );
        assert_eq!(request().len(), 40);
    }
}
