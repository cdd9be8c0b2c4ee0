//! What a process tree holds that CRIU must be told about, read from
//! /proc before anything changes, and the options chosen from it (pure):
//!
//! - established TCP connections: `--tcp-established` (else CRIU refuses
//!   them); where every one is over loopback, also `--network-lock skip`
//!   (nothing outside the host can send on them, and hosts without
//!   iptables or nftables cannot lock the network);
//! - a terminal (`/dev/pts/N`, `/dev/ttyN`), or a session or process
//!   group whose leader is outside the tree (a job started from a shell
//!   or a script without `setsid`; CRIU: "The root process ... is not a
//!   session leader"): `--shell-job`;
//! - a file lock (`/proc/locks`): `--file-locks`.
//!
//! The same options go to the restore (the manifest keeps them).
//!
//! What no option can make CRIU dump is a refusal ([`refusal`]): a Unix
//! socket connected outside the tree, and a session whose leader is outside
//! the job's PID namespace (session 0 there, the last `NSsid` of
//! /proc/PID/status, whatever namespace cudackpt reads it from: a job a
//! container's runtime started in a session made outside; CRIU: "A
//! session leader of ... is outside of its pid namespace", even with
//! `--shell-job`).

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use serde::{Deserialize, Serialize};

use crate::files;

/// /proc/PID/net/tcp of a busy host can be long.
const TCP_TABLE_CAP: u64 = 16 << 20;
/// /proc/locks likewise.
const LOCKS_CAP: u64 = 4 << 20;

/// What the tree holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeFacts {
    /// PIDs holding an established TCP connection, and those connections
    /// whose other end is not a socket of the tree (said), which CRIU must
    /// lock.
    pub tcp_established: BTreeSet<i32>,
    pub tcp_leaving: Vec<String>,
    /// What can lock the network here, asked only where a connection
    /// leaves the tree.
    pub lock_tools: LockTools,
    /// The deleted files CRIU must copy into the images.
    pub ghosts: crate::commands::disk::dump_checks::ghosts::Ghosts,
    /// PIDs with a terminal open.
    pub terminal: BTreeSet<i32>,
    /// PIDs whose session or process group leader is outside the tree.
    pub led_from_outside: BTreeSet<i32>,
    /// PIDs whose session leader is outside their PID namespace.
    pub session_outside_namespace: BTreeSet<i32>,
    /// PIDs holding a file lock.
    pub file_locks: BTreeSet<i32>,
    /// Unix sockets connected to a process outside the tree, by the PID
    /// holding them: what the other end is bound to, when it says.
    pub external_unix: std::collections::BTreeMap<i32, Vec<String>>,
    /// Processes of another user whose resource limits CRIU, run by this
    /// cudackpt, may not read (prlimit needs CAP_SYS_RESOURCE there), with
    /// their uid.
    pub limits_unreadable: std::collections::BTreeMap<i32, u32>,
}

/// What CRIU could lock the network with on this host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockTools {
    /// `criu check --feature network_lock_nftables` passed.
    pub nftables: bool,
    /// `iptables` and `iptables-restore` are on PATH.
    pub iptables: bool,
}

/// One CRIU option cudackpt chose, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChosenCriuOption {
    /// As CRIU takes it (`--tcp-established`, `--network-lock skip`).
    pub option: String,
    pub why: String,
}

impl ChosenCriuOption {
    /// The option as CRIU's arguments (`--network-lock skip` is two).
    pub fn args(&self) -> Vec<String> {
        self.option.split(' ').map(str::to_string).collect()
    }
}

/// Every option a dump may choose, as CRIU takes it: the closed list an
/// undump passes on from a manifest. A manifest is data that whoever could
/// write the images could have written; an option outside this list (an
/// action script, a plugin directory, a log elsewhere, all run or written
/// by a root CRIU) is refused, never passed.
pub const KNOWN_OPTIONS: [&str; 6] = [
    "--tcp-established",
    "--network-lock skip",
    "--network-lock nftables",
    "--shell-job",
    "--file-locks",
    "--ghost-limit N",
];

/// CRIU's arguments at restore for the options a manifest names, each one
/// of [`KNOWN_OPTIONS`] exactly (`--ghost-limit` with a number of bytes, a
/// dump's alone, not passed on), or the first that is not (pure). The
/// network lock is a dump's too: CRIU's restore reads the method from its
/// images and says of the option "--network-lock will be ignored in
/// restore command" (CRIU 4.2, config.c).
pub fn restore_args(chosen: &[ChosenCriuOption]) -> Result<Vec<&'static str>, String> {
    let mut args = Vec::new();
    for option in chosen {
        if let Some(bytes) = option.option.strip_prefix("--ghost-limit ") {
            if bytes.len() <= 20 && bytes.parse::<u64>().is_ok() && !bytes.starts_with('+') {
                continue;
            }
            return Err(option.option.clone());
        }
        let known = KNOWN_OPTIONS
            .iter()
            .filter(|known| !known.ends_with(" N"))
            .find(|known| **known == option.option)
            .ok_or_else(|| option.option.clone())?;
        if known.starts_with("--network-lock ") {
            continue;
        }
        args.extend(known.split(' '));
    }
    Ok(args)
}

/// Reads what `pids` hold; `criu` is asked what it could lock the
/// network with where a connection leaves the tree.
pub fn gather(pids: &[i32], criu: &std::path::Path) -> TreeFacts {
    let mut facts = TreeFacts::default();
    let locks = files::read_capped(std::path::Path::new("/proc/locks"), LOCKS_CAP)
        .map(|text| lock_holders(&text))
        .unwrap_or_default();
    let mut held: Vec<(i32, BTreeSet<u64>)> = Vec::new();
    // Who this cudackpt is: asked once, not once a process.
    let (me, capable) = (ids_of_self(), crate::files::privilege::holds_sys_resource());
    for &pid in pids {
        if let Some((group, session)) = group_and_session(pid) {
            if !pids.contains(&group) || !pids.contains(&session) {
                facts.led_from_outside.insert(pid);
            }
            // Where the kernel shows NSsid (4.1 on), it alone says it:
            // a leader outside this namespace is outside the job's too.
            if innermost_session(pid).unwrap_or(session) == 0 {
                facts.session_outside_namespace.insert(pid);
            }
        }
        let sockets = socket_inodes_and_terminal(pid, &mut facts);
        facts.ghosts.gather(pid);
        if locks.contains(&pid) {
            facts.file_locks.insert(pid);
        }
        if let Some((uids, gids)) = ids_of(pid) {
            if !prlimit_allowed(me, (uids, gids), capable) {
                facts.limits_unreadable.insert(pid, uids[0]);
            }
        }
        held.push((pid, sockets));
    }
    facts.external_unix = external_unix(&held);
    tcp_facts(&held, &mut facts);
    if !facts.tcp_leaving.is_empty() {
        facts.lock_tools = lock_tools(criu);
    }
    facts
}

/// The tree's established connections, from each network namespace's
/// tables read once, and which of them leave the tree.
fn tcp_facts(held: &[(i32, BTreeSet<u64>)], facts: &mut TreeFacts) {
    let owner: std::collections::BTreeMap<u64, i32> = held
        .iter()
        .flat_map(|(pid, sockets)| sockets.iter().map(move |inode| (*inode, *pid)))
        .collect();
    if owner.is_empty() {
        return;
    }
    let inodes: BTreeSet<u64> = owner.keys().copied().collect();
    let mut seen_namespaces = BTreeSet::new();
    let mut rows = Vec::new();
    for (pid, sockets) in held {
        let namespace = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino());
        if sockets.is_empty() || !seen_namespaces.insert(namespace.ok()) {
            continue;
        }
        for table in ["tcp", "tcp6"] {
            let path = format!("/proc/{pid}/net/{table}");
            if let Ok(text) = files::read_capped(std::path::Path::new(&path), TCP_TABLE_CAP) {
                rows.extend(crate::commands::disk::dump_checks::connections::established(&text));
            }
        }
    }
    for connection in crate::commands::disk::dump_checks::connections::held(&rows, &inodes) {
        if let Some(pid) = owner.get(&connection.inode) {
            facts.tcp_established.insert(*pid);
        }
    }
    facts.tcp_leaving = crate::commands::disk::dump_checks::connections::leaving(&rows, &inodes);
}

/// What CRIU could lock the network with here: its nftables lock (it says
/// whether it has one), else the iptables tools it runs from PATH.
fn lock_tools(criu: &std::path::Path) -> LockTools {
    let nftables = std::process::Command::new(criu)
        .args(["check", "--feature", "network_lock_nftables"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let path = crate::environment::text(crate::environment::PATH)
        .ok()
        .flatten()
        .unwrap_or_default();
    let on_path = |tool: &str| {
        path.split(':')
            .filter(|dir| dir.starts_with('/'))
            .any(|dir| std::path::Path::new(dir).join(tool).is_file())
    };
    LockTools {
        nftables,
        iptables: on_path("iptables") && on_path("iptables-restore"),
    }
}

/// The Unix sockets of `held` (PID, socket inodes) connected outside it.
fn external_unix(held: &[(i32, BTreeSet<u64>)]) -> std::collections::BTreeMap<i32, Vec<String>> {
    if held.iter().all(|(_, sockets)| sockets.is_empty()) {
        return Default::default();
    }
    match crate::targets::unix_peers::all() {
        Some(unix) => outside(held, &unix),
        None => Default::default(),
    }
}

/// Which of `held`'s Unix sockets have a peer none of `held` holds, each
/// said as what the peer is bound to (pure).
pub fn outside(
    held: &[(i32, BTreeSet<u64>)],
    unix: &std::collections::HashMap<u64, crate::targets::unix_peers::UnixSocket>,
) -> std::collections::BTreeMap<i32, Vec<String>> {
    let inside: BTreeSet<u64> = held.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    let mut found = std::collections::BTreeMap::new();
    for (pid, sockets) in held {
        for inode in sockets {
            let Some(peer) = unix.get(inode).and_then(|s| s.peer) else {
                continue;
            };
            // A peer the kernel does not list is still in a listener's
            // queue, held by nobody: CRIU dumps that connection.
            if inside.contains(&peer) || !unix.contains_key(&peer) {
                continue;
            }
            let said = match unix.get(&peer).and_then(|p| p.name.clone()) {
                // A name any process may bind: said with its control
                // characters escaped.
                Some(name) => format!("connected to {}", crate::targets::name::printable(&name)),
                None => "connected to an unnamed socket of another process".to_string(),
            };
            found.entry(*pid).or_insert_with(Vec::new).push(said);
        }
    }
    found
}

/// Why no CRIU option can dump a tree, and what would let it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRefusal {
    pub why: String,
    pub fix: String,
}

/// Why the tree cannot be dumped, if it cannot (pure).
pub fn refusal(facts: &TreeFacts) -> Option<TreeRefusal> {
    let mut whys = Vec::new();
    let mut fixes = Vec::new();
    if !facts.external_unix.is_empty() {
        let each: Vec<String> = facts
            .external_unix
            .iter()
            .map(|(pid, sockets)| {
                format!(
                    "PID {pid} holds a Unix socket {}",
                    sockets.join(", and one ")
                )
            })
            .collect();
        whys.push(format!(
            "{}: CRIU cannot dump a Unix socket whose other end is outside the tree",
            each.join("; ")
        ));
        fixes.push("give the job output of its own (a file, or a pipe read inside the tree) rather than a daemon's socket such as journald's, or dump the process that holds the other end with it");
    }
    if !facts.session_outside_namespace.is_empty() {
        let pids: Vec<i32> = facts.session_outside_namespace.iter().copied().collect();
        whys.push(format!(
            "the session of {} is led from outside its PID namespace (a container's runtime made it): CRIU cannot dump that, even as a shell job",
            crate::vocabulary::prose::pids(&pids)
        ));
        fixes.push("start the job in a session of its own (setsid COMMAND), or dump it from the namespace its session leader is in");
    }
    if !facts.tcp_leaving.is_empty() && !facts.lock_tools.nftables && !facts.lock_tools.iptables {
        whys.push(format!(
            "the tree holds TCP connections that leave it ({}), CRIU must lock them while it dumps, and this host has neither its nftables lock nor iptables",
            facts.tcp_leaving.join(", ")
        ));
        fixes.push("install nftables (with a CRIU built with it: `criu check --feature network_lock_nftables`) or iptables, or end those connections before the dump");
    }
    if !facts.limits_unreadable.is_empty() {
        let each: Vec<String> = facts
            .limits_unreadable
            .iter()
            .map(|(pid, uid)| format!("PID {pid} (uid {uid})"))
            .collect();
        whys.push(format!(
            "CRIU reads each process's resource limits (prlimit), and for {} that needs CAP_SYS_RESOURCE, which this cudackpt lacks (root in a container whose bounding set drops it): CRIU would fail after the suspend (\"Can't get rlimit\")",
            each.join(", ")
        ));
        fixes.push("run cudackpt with CAP_SYS_RESOURCE (root on the host has it), or as the job's own user");
    }
    (!whys.is_empty()).then(|| TreeRefusal {
        why: whys.join("; "),
        fix: format!(
            "{}; --force lets CRIU try (it fails, and the tree goes on running)",
            fixes.join("; ")
        ),
    })
}

/// `pid`'s session as its own PID namespace sees it: the last `NSsid`
/// of `/proc/PID/status` (0 when the leader is outside that namespace,
/// which `/proc/PID/stat` read from an outer namespace does not show).
fn innermost_session(pid: i32) -> Option<i32> {
    let status = crate::targets::process::read_proc_text(&format!("/proc/{pid}/status")).ok()?;
    parse_innermost_session(&status)
}

/// The last field of a `/proc/PID/status` text's `NSsid:` line (pure).
pub fn parse_innermost_session(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSsid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// `pid`'s real, effective, saved and filesystem uids and gids, from
/// `/proc/PID/status`.
fn ids_of(pid: i32) -> Option<([u32; 4], [u32; 4])> {
    let status = crate::targets::process::read_proc_text(&format!("/proc/{pid}/status")).ok()?;
    parse_ids(&status)
}

/// The `Uid:` and `Gid:` lines of a status text (pure).
pub fn parse_ids(status: &str) -> Option<([u32; 4], [u32; 4])> {
    let four = |key: &str| -> Option<[u32; 4]> {
        let line = status.lines().find_map(|l| l.strip_prefix(key))?;
        let values: Vec<u32> = line
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        values.try_into().ok()
    };
    Some((four("Uid:")?, four("Gid:")?))
}

/// This process's real uid and gid.
fn ids_of_self() -> (u32, u32) {
    (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    )
}

/// Whether a process of real ids `me` may read the resource limits of one
/// with `target`'s ids, as the kernel's prlimit decides: every uid of the
/// target (real, effective, saved) its real uid and every gid its real
/// gid, or CAP_SYS_RESOURCE (pure).
pub fn prlimit_allowed(me: (u32, u32), target: ([u32; 4], [u32; 4]), capable: bool) -> bool {
    let (uids, gids) = target;
    capable || (uids[..3].iter().all(|&u| u == me.0) && gids[..3].iter().all(|&g| g == me.1))
}

/// `pid`'s process group and session, from `/proc/PID/stat`.
fn group_and_session(pid: i32) -> Option<(i32, i32)> {
    let stat = crate::targets::process::read_proc_text(&format!("/proc/{pid}/stat")).ok()?;
    parse_group_and_session(&stat)
}

/// Fields 5 and 6 (pgrp, session) of a `/proc/PID/stat` text, counted after
/// the command name's last `)` (pure).
pub fn parse_group_and_session(stat: &str) -> Option<(i32, i32)> {
    let mut fields = crate::targets::process::stat_fields(stat)?.skip(2);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// The socket inodes `pid` holds; notes a terminal among its descriptors.
fn socket_inodes_and_terminal(pid: i32, facts: &mut TreeFacts) -> BTreeSet<u64> {
    let mut sockets = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return sockets;
    };
    for entry in entries.flatten() {
        let Ok(metadata) = entry.path().metadata() else {
            continue;
        };
        if metadata.file_type().is_socket() {
            sockets.insert(metadata.ino());
        } else if metadata.file_type().is_char_device() && is_terminal(metadata.rdev()) {
            facts.terminal.insert(pid);
        }
    }
    sockets
}

/// Whether a character device is a terminal: a pseudo-terminal (majors
/// 136–143) or a virtual console or serial line (major 4), by device
/// number, never by name (pure).
pub fn is_terminal(rdev: u64) -> bool {
    let major = rustix::fs::major(rdev);
    major == 4 || (136..=143).contains(&major)
}

/// The PIDs /proc/locks names as holding a lock (pure).
pub fn lock_holders(text: &str) -> BTreeSet<i32> {
    text.lines()
        .filter(|line| !line.contains("->")) // a waiter, not a holder
        .filter_map(|line| line.split_whitespace().nth(4)?.parse().ok())
        .collect()
}

/// The options for what the tree holds (pure).
pub fn choose(facts: &TreeFacts) -> Vec<ChosenCriuOption> {
    let pids = |set: &BTreeSet<i32>| {
        let pids: Vec<i32> = set.iter().copied().collect();
        crate::vocabulary::prose::pids(&pids)
    };
    let mut chosen = Vec::new();
    if !facts.tcp_established.is_empty() {
        chosen.push(ChosenCriuOption {
            option: "--tcp-established".into(),
            why: format!(
                "{} hold established TCP connections",
                pids(&facts.tcp_established)
            ),
        });
        if facts.tcp_leaving.is_empty() {
            chosen.push(ChosenCriuOption {
                option: "--network-lock skip".into(),
                why: "every established connection's other end is a socket of the tree (on whatever address of this host), and CRIU freezes the tree whole: nothing else sends on them".into(),
            });
        } else if facts.lock_tools.nftables {
            chosen.push(ChosenCriuOption {
                option: "--network-lock nftables".into(),
                why: format!(
                    "a connection leaves the tree ({}): CRIU locks it with nftables while it dumps",
                    facts.tcp_leaving.join(", ")
                ),
            });
        }
        // Else iptables, CRIU's own default (refused before any change
        // where neither is here: `refusal`).
    }
    if let Some(limit) = facts.ghosts.limit() {
        chosen.push(ChosenCriuOption {
            option: format!("--ghost-limit {limit}"),
            why: format!(
                "the tree holds {} deleted file{} CRIU copies into the images, the largest {} MiB (CRIU's own limit is 1 MiB)",
                facts.ghosts.files.len(),
                if facts.ghosts.files.len() == 1 { "" } else { "s" },
                facts.ghosts.largest().div_ceil(1 << 20)
            ),
        });
    }
    let mut shell_job = Vec::new();
    if !facts.terminal.is_empty() {
        shell_job.push(format!("{} have a terminal open", pids(&facts.terminal)));
    }
    if !facts.led_from_outside.is_empty() {
        shell_job.push(format!(
            "the session or process group of {} is led from outside the tree (started from a shell, without setsid)",
            pids(&facts.led_from_outside)
        ));
    }
    if !shell_job.is_empty() {
        chosen.push(ChosenCriuOption {
            option: "--shell-job".into(),
            why: shell_job.join("; "),
        });
    }
    if !facts.file_locks.is_empty() {
        chosen.push(ChosenCriuOption {
            option: "--file-locks".into(),
            why: format!("{} hold file locks", pids(&facts.file_locks)),
        });
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_holders_are_read_and_waiters_left_out() {
        let locks = "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n1: -> POSIX  ADVISORY  WRITE 77 08:01:1234 0 EOF\n2: FLOCK  ADVISORY  WRITE 99 00:1a:5 0 EOF\n";
        assert_eq!(lock_holders(locks), BTreeSet::from([4242, 99]));
    }

    #[test]
    fn options_follow_what_the_tree_holds() {
        assert!(choose(&TreeFacts::default()).is_empty());
        let facts = TreeFacts {
            tcp_established: BTreeSet::from([7, 9]),
            terminal: BTreeSet::from([7]),
            ..TreeFacts::default()
        };
        let options: Vec<String> = choose(&facts).into_iter().map(|o| o.option).collect();
        assert_eq!(
            options,
            ["--tcp-established", "--network-lock skip", "--shell-job"]
        );
        // A connection leaving the tree: nftables where CRIU has its lock,
        // else iptables (CRIU's default, no option), else refused.
        let leaving = TreeFacts {
            tcp_leaving: vec!["127.0.0.1:40000 -> 127.0.0.1:3306".into()],
            lock_tools: LockTools {
                nftables: true,
                iptables: false,
            },
            ..facts.clone()
        };
        let chosen = choose(&leaving);
        assert_eq!(chosen[1].option, "--network-lock nftables");
        assert!(
            chosen[1].why.contains("127.0.0.1:3306"),
            "{}",
            chosen[1].why
        );
        assert!(chosen[0].why.contains("PIDs 7 and 9"), "{}", chosen[0].why);
        assert_eq!(refusal(&leaving), None);
        let iptables = TreeFacts {
            lock_tools: LockTools {
                nftables: false,
                iptables: true,
            },
            ..leaving.clone()
        };
        assert!(choose(&iptables)
            .iter()
            .all(|o| !o.option.starts_with("--network-lock")));
        assert_eq!(refusal(&iptables), None);
        let neither = TreeFacts {
            lock_tools: LockTools::default(),
            ..leaving
        };
        let refused = refusal(&neither).expect("refused");
        assert!(
            refused.why.contains("127.0.0.1:3306") && refused.fix.contains("nftables"),
            "{refused:?}"
        );
    }

    #[test]
    fn deleted_files_above_criu_s_limit_set_it() {
        let mut facts = TreeFacts::default();
        facts
            .ghosts
            .files
            .insert((1, 2), ("/dev/shm/torch_1 (deleted)".into(), 8 << 20));
        let chosen = choose(&facts);
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].args(), ["--ghost-limit", "8388608"]);
        assert!(chosen[0].why.contains("largest 8 MiB"), "{}", chosen[0].why);
        // Not passed to the restore, but accepted from a manifest.
        assert_eq!(restore_args(&chosen), Ok(vec![]));
    }

    #[test]
    fn a_tree_led_from_outside_is_a_shell_job() {
        let facts = TreeFacts {
            led_from_outside: BTreeSet::from([42]),
            ..TreeFacts::default()
        };
        let chosen = choose(&facts);
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].option, "--shell-job");
        assert!(chosen[0].why.contains("PID 42"), "{}", chosen[0].why);
        assert_eq!(refusal(&facts), None, "a shell job is dumped");
        let stat = "42 (a b) c) S 1 40 39 0 -1 4194560";
        assert_eq!(parse_group_and_session(stat), Some((40, 39)));
        assert_eq!(parse_group_and_session("garbage"), None);
    }

    #[test]
    fn a_session_led_from_outside_the_pid_namespace_is_refused_with_the_fix() {
        let facts = TreeFacts {
            led_from_outside: BTreeSet::from([42, 43]),
            session_outside_namespace: BTreeSet::from([42, 43]),
            ..TreeFacts::default()
        };
        let said = refusal(&facts).expect("refused");
        assert!(said.why.contains("PIDs 42 and 43"), "{said:?}");
        assert!(said.why.contains("outside its PID namespace"), "{said:?}");
        assert!(said
            .fix
            .starts_with("start the job in a session of its own (setsid"));
        assert!(said.fix.ends_with("the tree goes on running)"), "{said:?}");
        // Forced, CRIU is still told it is a shell job.
        assert_eq!(choose(&facts)[0].option, "--shell-job");
        // Seen from an outer namespace, the session is the outer one's
        // number; the job's own namespace says 0.
        let status = "Name:\tsleep\nNSpid:\t24503\t2\nNSsid:\t9895\t0\nVmRSS:\t1 kB\n";
        assert_eq!(parse_innermost_session(status), Some(0));
        assert_eq!(parse_innermost_session("NSsid:\t42\n"), Some(42));
        assert_eq!(parse_innermost_session("Name:\tx\n"), None);
    }

    #[test]
    fn a_unix_socket_with_its_peer_outside_the_tree_is_found() {
        use crate::targets::unix_peers::UnixSocket;
        let socket = |peer: Option<u64>, name: Option<&str>| UnixSocket {
            peer,
            name: name.map(str::to_string),
        };
        let unix = std::collections::HashMap::from([
            (1, socket(Some(2), None)),
            (2, socket(Some(1), None)),
            (3, socket(Some(9), None)),
            (9, socket(Some(3), Some("/run/systemd/journal/stdout"))),
            (4, socket(None, Some("/tmp/listening"))),
            (5, socket(Some(77), None)),
        ]);
        // 1 and 2 are a pair inside the tree; 3 talks to journald; 4
        // listens; 5's peer waits, unaccepted, in a listener's queue.
        let held = [
            (10, BTreeSet::from([1, 3])),
            (11, BTreeSet::from([2, 4, 5])),
        ];
        let found = outside(&held, &unix);
        assert_eq!(found.len(), 1);
        assert_eq!(found[&10], ["connected to /run/systemd/journal/stdout"]);
        let facts = TreeFacts {
            external_unix: found,
            ..TreeFacts::default()
        };
        let said = refusal(&facts).expect("refused");
        assert!(
            said.why
                .starts_with("PID 10 holds a Unix socket connected to /run/systemd/journal/stdout"),
            "{said:?}"
        );
        assert!(said.fix.contains("journald"), "{said:?}");
        assert_eq!(refusal(&TreeFacts::default()), None);
        // A planted name cannot write to the terminal.
        let planted = std::collections::HashMap::from([
            (1, socket(Some(2), None)),
            (2, socket(Some(1), Some("/tmp/\u{1b}[2Jx"))),
        ]);
        let found = outside(&[(10, BTreeSet::from([1]))], &planted);
        assert!(!found[&10][0].contains('\u{1b}'), "{:?}", found[&10]);
    }

    #[test]
    fn terminals_are_known_by_device_number() {
        assert!(is_terminal(rustix::fs::makedev(136, 3)));
        assert!(is_terminal(rustix::fs::makedev(4, 1)));
        assert!(!is_terminal(rustix::fs::makedev(195, 0)));
        assert!(!is_terminal(rustix::fs::makedev(1, 3)));
    }

    #[test]
    fn a_manifest_passes_on_only_the_options_a_dump_chooses() {
        let said = |option: &str| ChosenCriuOption {
            option: option.into(),
            why: String::new(),
        };
        assert_eq!(
            restore_args(&[said("--tcp-established"), said("--network-lock skip")]),
            Ok(vec!["--tcp-established"]),
            "the lock is the dump's: a restore ignores it"
        );
        assert_eq!(
            restore_args(&[said("--network-lock nftables"), said("--shell-job")]),
            Ok(vec!["--shell-job"])
        );
        for planted in [
            "--action-script /home/alice/pwn.sh",
            "--libdir /home/alice",
            "--shell-job --action-script x",
            "--network-lock  skip",
            "--network-lock iptables",
            "--ghost-limit N",
            "--ghost-limit 1 --action-script x",
            "--ghost-limit -1",
            "--ghost-limit +5",
        ] {
            assert_eq!(restore_args(&[said(planted)]), Err(planted.to_string()));
        }
    }

    #[test]
    fn another_users_limits_are_read_only_with_cap_sys_resource() {
        let status =
            "Name:\tsleep\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\n";
        let nobody = parse_ids(status).expect("ids");
        assert_eq!(nobody, ([65534; 4], [65534; 4]));
        assert!(
            !prlimit_allowed((0, 0), nobody, false),
            "root, without the capability"
        );
        assert!(prlimit_allowed((0, 0), nobody, true));
        assert!(prlimit_allowed((65534, 65534), nobody, false), "their own");
        let setuid = ([1000, 0, 0, 1000], [1000; 4]);
        assert!(!prlimit_allowed((1000, 1000), setuid, false));
        let facts = TreeFacts {
            limits_unreadable: [(7, 65534)].into(),
            ..TreeFacts::default()
        };
        let refused = refusal(&facts).expect("refused");
        assert!(
            refused.why.contains("PID 7 (uid 65534)") && refused.why.contains("CAP_SYS_RESOURCE")
        );
    }
}
