//! CRIU's images as cudackpt reads them: the framing (two magic numbers,
//! then each entry as its length, a little-endian u32, and a protobuf
//! message) and the messages, declared after CRIU's `images/*.proto` with
//! the fields cudackpt reads (prost skips the others). The readers are
//! `criu_images` (the files a job had open, its credentials) and
//! `descriptors` (every descriptor, by kind). Pure: the bytes come from the
//! caller.

/// Every CRIU image begins with this, then its own magic.
pub const IMG_COMMON_MAGIC: u32 = 0x5456_4319;
/// `files.img`.
pub const FILES_MAGIC: u32 = 0x5630_3138;
/// `remap-fpath.img`.
pub const REMAP_FPATH_MAGIC: u32 = 0x5913_3954;
/// `core-TID.img`.
pub const CORE_MAGIC: u32 = 0x5505_3847;
/// `ghost-file-N.img`.
pub const GHOST_FILE_MAGIC: u32 = 0x5258_3605;
/// `tty-info.img`.
pub const TTY_INFO_MAGIC: u32 = 0x5945_3036;
/// `pstree.img`.
pub const PSTREE_MAGIC: u32 = 0x5027_3030;
/// `ids-PID.img`.
pub const IDS_MAGIC: u32 = 0x5443_2030;
/// `fdinfo-N.img`.
pub const FDINFO_MAGIC: u32 = 0x5621_3732;

/// Why an image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadImage(pub String);

/// The messages of an image whose magic is `magic` (pure).
pub fn entries(image: &[u8], magic: u32) -> Result<Vec<&[u8]>, BadImage> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0) != Some(IMG_COMMON_MAGIC) || word(4) != Some(magic) {
        return Err(BadImage(
            "not the CRIU image expected (its magic differs)".into(),
        ));
    }
    let mut found = Vec::new();
    let mut at = 8;
    while at < image.len() {
        let length = word(at).ok_or_else(|| BadImage("an entry's length is cut short".into()))?;
        let start = at + 4;
        let message = image
            .get(start..start + length as usize)
            .ok_or_else(|| BadImage("an entry runs past the end".into()))?;
        found.push(message);
        at = start + length as usize;
    }
    Ok(found)
}

/// The first message of an image whose entries are followed by raw bytes.
pub fn first_entry(image: &[u8], magic: u32) -> Result<&[u8], BadImage> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0) != Some(IMG_COMMON_MAGIC) || word(4) != Some(magic) {
        return Err(BadImage(
            "not the CRIU image expected (its magic differs)".into(),
        ));
    }
    let length = word(8).ok_or_else(|| BadImage("the entry's length is cut short".into()))?;
    image
        .get(12..12 + length as usize)
        .ok_or_else(|| BadImage("the entry runs past the end".into()))
}

/// One message, decoded.
pub fn decoded<M: prost::Message + Default>(message: &[u8]) -> Result<M, BadImage> {
    M::decode(message).map_err(|why| BadImage(format!("an entry does not decode: {why}")))
}

/// `fd_types` (`images/fdinfo.proto`): what a `file_entry` is.
pub mod fd_type {
    pub const REG: i32 = 1;
    pub const PIPE: i32 = 2;
    pub const FIFO: i32 = 3;
    pub const INETSK: i32 = 4;
    pub const UNIXSK: i32 = 5;
    pub const EVENTFD: i32 = 6;
    pub const EVENTPOLL: i32 = 7;
    pub const INOTIFY: i32 = 8;
    pub const SIGNALFD: i32 = 9;
    pub const PACKETSK: i32 = 10;
    pub const TTY: i32 = 11;
    pub const FANOTIFY: i32 = 12;
    pub const NETLINKSK: i32 = 13;
    pub const NS: i32 = 14;
    pub const TUNF: i32 = 15;
    pub const EXT: i32 = 16;
    pub const TIMERFD: i32 = 17;
    pub const MEMFD: i32 = 18;
    pub const BPFMAP: i32 = 19;
    pub const PIDFD: i32 = 20;
}

/// CRIU's `file_entry` (`images/fdinfo.proto`): one file the job held, of
/// the kind `kind` says, with that kind's entry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FileEntry {
    /// [`fd_type`].
    #[prost(int32, tag = "1")]
    pub kind: i32,
    #[prost(uint32, tag = "2")]
    pub id: u32,
    #[prost(message, optional, tag = "3")]
    pub reg: Option<RegFileEntry>,
    #[prost(message, optional, tag = "4")]
    pub isk: Option<InetSkEntry>,
    #[prost(message, optional, tag = "7")]
    pub nlsk: Option<NetlinkSkEntry>,
    #[prost(message, optional, tag = "8")]
    pub efd: Option<OwnedAt3>,
    #[prost(message, optional, tag = "9")]
    pub epfd: Option<OwnedAt3>,
    #[prost(message, optional, tag = "10")]
    pub sgfd: Option<OwnedAt3>,
    #[prost(message, optional, tag = "12")]
    pub tfd: Option<TimerfdEntry>,
    #[prost(message, optional, tag = "16")]
    pub usk: Option<UnixSkEntry>,
    #[prost(message, optional, tag = "18")]
    pub pipe: Option<OwnedAt4>,
    #[prost(message, optional, tag = "19")]
    pub tty: Option<TtyFileEntry>,
    #[prost(message, optional, tag = "20")]
    pub memfd: Option<OwnedAt4>,
    #[prost(message, optional, tag = "22")]
    pub pidfd: Option<OwnedAt5>,
}

/// CRIU's `fown_entry` (`images/fown.proto`): the owner `F_SETOWN` gave a
/// file, whom its signals go to (`pid`, 0 for none) and as whom they are
/// sent (`uid`, `euid`: the kernel lets a file owned by euid 0 signal any
/// process).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct FownEntry {
    #[prost(uint32, tag = "1")]
    pub uid: u32,
    #[prost(uint32, tag = "2")]
    pub euid: u32,
    #[prost(uint32, tag = "3")]
    pub signum: u32,
    #[prost(uint32, tag = "5")]
    pub pid: u32,
}

/// An entry of a kind whose only field read is its owner, at tag 3
/// (eventfd's, eventpoll's, signalfd's).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnedAt3 {
    #[prost(message, optional, tag = "3")]
    pub fown: Option<FownEntry>,
}

/// The same at tag 4 (a pipe's, a memfd's).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnedAt4 {
    #[prost(message, optional, tag = "4")]
    pub fown: Option<FownEntry>,
}

/// The same at tag 5 (a pidfd's).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnedAt5 {
    #[prost(message, optional, tag = "5")]
    pub fown: Option<FownEntry>,
}

/// CRIU's `reg_file_entry` (`images/regfile.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegFileEntry {
    /// How CRIU opens it again, as root, for the job.
    #[prost(uint32, optional, tag = "2")]
    pub flags: Option<u32>,
    #[prost(message, optional, tag = "5")]
    pub fown: Option<FownEntry>,
    /// A path: bytes, as Linux's are.
    #[prost(bytes = "vec", tag = "6")]
    pub name: Vec<u8>,
    /// Absent for a file opened write-only for appending: CRIU checks no
    /// size there.
    #[prost(uint64, optional, tag = "8")]
    pub size: Option<u64>,
    /// CRIU checks it too ("has bad mode").
    #[prost(uint32, optional, tag = "10")]
    pub mode: Option<u32>,
}

/// CRIU's `inet_sk_entry` (`images/sk-inet.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InetSkEntry {
    #[prost(uint32, tag = "3")]
    pub family: u32,
    /// `SOCK_STREAM` 1, `SOCK_DGRAM` 2, `SOCK_RAW` 3 ...
    #[prost(uint32, tag = "4")]
    pub sock_type: u32,
    #[prost(uint32, tag = "5")]
    pub proto: u32,
    /// The kernel's TCP state: 10 is LISTEN.
    #[prost(uint32, tag = "6")]
    pub state: u32,
    #[prost(uint32, tag = "7")]
    pub src_port: u32,
    #[prost(uint32, tag = "8")]
    pub dst_port: u32,
    /// The address as the kernel keeps it: one 32-bit word for IPv4, four
    /// for IPv6 (`connections::address`).
    #[prost(uint32, repeated, tag = "11")]
    pub src_addr: Vec<u32>,
    #[prost(uint32, repeated, tag = "12")]
    pub dst_addr: Vec<u32>,
    #[prost(message, optional, tag = "13")]
    pub fown: Option<FownEntry>,
    #[prost(message, optional, tag = "14")]
    pub opts: Option<SkOptsEntry>,
}

/// CRIU's `sk_opts_entry` (`images/sk-opts.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SkOptsEntry {
    /// `SO_PRIORITY`: above 6 only with CAP_NET_ADMIN.
    #[prost(uint32, optional, tag = "8")]
    pub so_priority: Option<u32>,
    /// `SO_MARK`: only with CAP_NET_ADMIN (or CAP_NET_RAW).
    #[prost(uint32, optional, tag = "10")]
    pub so_mark: Option<u32>,
    #[prost(bool, optional, tag = "17")]
    pub so_reuseport: Option<bool>,
}

/// CRIU's `unix_sk_entry` (`images/sk-unix.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UnixSkEntry {
    #[prost(uint32, tag = "2")]
    pub ino: u32,
    /// The peer's inode number (0: none).
    #[prost(uint32, tag = "8")]
    pub peer: u32,
    #[prost(message, optional, tag = "9")]
    pub fown: Option<FownEntry>,
    /// The address: a path, or an abstract name (a NUL first).
    #[prost(bytes = "vec", tag = "11")]
    pub name: Vec<u8>,
    /// Who CRIU makes the socket's file as.
    #[prost(message, optional, tag = "13")]
    pub file_perms: Option<FilePermsEntry>,
    /// The directory a relative name is bound in.
    #[prost(bytes = "vec", optional, tag = "14")]
    pub name_dir: Option<Vec<u8>>,
}

/// CRIU's `file_perms_entry` (`images/sk-unix.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilePermsEntry {
    #[prost(uint32, tag = "1")]
    pub mode: u32,
    #[prost(uint32, tag = "2")]
    pub uid: u32,
    #[prost(uint32, tag = "3")]
    pub gid: u32,
}

/// CRIU's `netlink_sk_entry` (`images/sk-netlink.proto`), the fields read
/// here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetlinkSkEntry {
    #[prost(uint32, tag = "3")]
    pub protocol: u32,
    /// The multicast groups it is bound to, 32 a word.
    #[prost(uint32, repeated, packed = "false", tag = "8")]
    pub groups: Vec<u32>,
    #[prost(uint32, tag = "10")]
    pub dst_group: u32,
    #[prost(message, optional, tag = "11")]
    pub fown: Option<FownEntry>,
}

/// CRIU's `timerfd_entry` (`images/timerfd.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimerfdEntry {
    #[prost(message, optional, tag = "3")]
    pub fown: Option<FownEntry>,
    #[prost(uint32, tag = "4")]
    pub clockid: u32,
}

/// CRIU's `tty_file_entry` (`images/tty.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TtyFileEntry {
    #[prost(uint32, tag = "2")]
    pub tty_info_id: u32,
    #[prost(message, optional, tag = "4")]
    pub fown: Option<FownEntry>,
}

/// CRIU's `tty_info_entry` (`images/tty.proto`), the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TtyInfoEntry {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// `TtyType`: 1 a pseudo-terminal, 2 the console, 3 a virtual
    /// terminal, 4 a controlling terminal, 5 an external one, 6 a serial
    /// line.
    #[prost(int32, tag = "2")]
    pub tty_type: i32,
}

/// CRIU's `pstree_entry` (`images/pstree.proto`), the field read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PstreeEntry {
    #[prost(uint32, tag = "1")]
    pub pid: u32,
}

/// CRIU's `task_kobj_ids_entry` (`images/core.proto`), the field read here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskKobjIdsEntry {
    /// Which `fdinfo-N.img` holds the process's descriptors.
    #[prost(uint32, tag = "2")]
    pub files_id: u32,
}

/// CRIU's `fdinfo_entry` (`images/fdinfo.proto`): descriptor `fd` is file
/// `id` of `files.img`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FdinfoEntry {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    #[prost(uint32, tag = "4")]
    pub fd: u32,
}

/// CRIU's `remap_file_path_entry` (`images/remap-file-path.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemapFilePathEntry {
    #[prost(uint32, tag = "1")]
    pub orig_id: u32,
}

/// CRIU's `core_entry` (`images/core.proto`): its thread's core.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CoreEntry {
    #[prost(message, optional, tag = "3")]
    pub tc: Option<TaskCoreEntry>,
    #[prost(message, optional, tag = "5")]
    pub thread_core: Option<ThreadCoreEntry>,
}

/// CRIU's `task_core_entry` (`images/core.proto`), the fields CRIU sets as
/// root for the process.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskCoreEntry {
    /// The resource limits CRIU sets, as root, by resource number.
    #[prost(message, optional, tag = "8")]
    pub rlimits: Option<TaskRlimitsEntry>,
    /// The audit login uid CRIU writes (`/proc/PID/loginuid`).
    #[prost(uint32, optional, tag = "13")]
    pub loginuid: Option<u32>,
    /// Below 0 only with CAP_SYS_RESOURCE: -1000 is never OOM-killed.
    #[prost(int32, optional, tag = "14")]
    pub oom_score_adj: Option<i32>,
}

/// CRIU's `task_rlimits_entry` (`images/core.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskRlimitsEntry {
    #[prost(message, repeated, tag = "1")]
    pub rlimits: Vec<RlimitEntry>,
}

/// CRIU's `rlimit_entry` (`images/rlimit.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RlimitEntry {
    #[prost(uint64, tag = "1")]
    pub cur: u64,
    #[prost(uint64, tag = "2")]
    pub max: u64,
}

/// CRIU's `thread_core_entry`: the credentials and the scheduling CRIU
/// restores the thread with.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadCoreEntry {
    #[prost(sint32, optional, tag = "3")]
    pub sched_nice: Option<i32>,
    /// `SCHED_OTHER` 0, `SCHED_FIFO` 1, `SCHED_RR` 2, `SCHED_BATCH` 3,
    /// `SCHED_IDLE` 5, `SCHED_DEADLINE` 6.
    #[prost(uint32, optional, tag = "4")]
    pub sched_policy: Option<u32>,
    #[prost(message, optional, tag = "10")]
    pub creds: Option<Creds>,
}

/// CRIU's `creds_entry` (`images/creds.proto`), the fields that say who a
/// restored thread is and what it may do.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Creds {
    #[prost(uint32, tag = "1")]
    pub uid: u32,
    #[prost(uint32, tag = "2")]
    pub gid: u32,
    #[prost(uint32, tag = "3")]
    pub euid: u32,
    #[prost(uint32, tag = "4")]
    pub egid: u32,
    #[prost(uint32, tag = "5")]
    pub suid: u32,
    #[prost(uint32, tag = "6")]
    pub sgid: u32,
    #[prost(uint32, tag = "7")]
    pub fsuid: u32,
    #[prost(uint32, tag = "8")]
    pub fsgid: u32,
    #[prost(uint32, repeated, packed = "false", tag = "9")]
    pub cap_inh: Vec<u32>,
    #[prost(uint32, repeated, packed = "false", tag = "10")]
    pub cap_prm: Vec<u32>,
    #[prost(uint32, repeated, packed = "false", tag = "11")]
    pub cap_eff: Vec<u32>,
    #[prost(uint32, repeated, packed = "false", tag = "14")]
    pub groups: Vec<u32>,
    #[prost(uint32, repeated, packed = "false", tag = "19")]
    pub cap_amb: Vec<u32>,
}

/// CRIU's `ghost_file_entry` (`images/ghost-file.proto`): a deleted file
/// CRIU makes again, as root, with this owner and mode.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GhostFileEntry {
    #[prost(uint32, tag = "1")]
    pub uid: u32,
    #[prost(uint32, tag = "2")]
    pub gid: u32,
    #[prost(uint32, tag = "3")]
    pub mode: u32,
}

/// CRIU's images made in tests, field by field, as CRIU writes them.
#[cfg(test)]
pub mod encoding {
    use super::IMG_COMMON_MAGIC;

    /// A protobuf varint.
    pub fn varint(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    /// A number field.
    pub fn number(field: u64, value: u64) -> Vec<u8> {
        [varint(field << 3), varint(value)].concat()
    }

    /// A bytes, string or message field.
    pub fn bytes(field: u64, value: &[u8]) -> Vec<u8> {
        [
            varint((field << 3) | 2),
            varint(value.len() as u64),
            value.to_vec(),
        ]
        .concat()
    }

    /// An image of `messages` in CRIU's framing.
    pub fn image(magic: u32, messages: &[Vec<u8>]) -> Vec<u8> {
        let mut out = IMG_COMMON_MAGIC.to_le_bytes().to_vec();
        out.extend(magic.to_le_bytes());
        for m in messages {
            out.extend((m.len() as u32).to_le_bytes());
            out.extend(m);
        }
        out
    }
}
