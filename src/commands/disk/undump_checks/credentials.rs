//! Images are credentials: CRIU restores each thread with the credentials
//! its `core-TID.img` records, and, as root, makes a deleted file again
//! with the owner and mode its ghost image records. Images another user
//! could have written are restored only as that user: every thread runs
//! as them, in their groups, with no capability, and no file CRIU makes
//! is another's or setuid or setgid; nor may such images carry a user or
//! mount namespace of their own, or a tmpfs CRIU would unpack as root
//! (their contents could give back what the checks take away); and every
//! file CRIU would open by path, as root, for the job (open or mapped) must
//! be one that user could open so themselves, judged by the kernel on a
//! thread holding their credentials. Anything else is refused before CRIU
//! starts.

use rustix::fs::Access;

use crate::commands::disk::criu_tool::image_files::{self as criu_images, Creds};
use crate::commands::disk::report::DiskFailure;
use crate::commands::disk::undump_checks::open_files::JobFiles;
use crate::commands::disk::undump_checks::source::HeldImages;

/// Images no user but root may bring: namespaces and file systems CRIU
/// makes as root, and the credentials CRIU's older images kept apart.
const ROOTS_ONLY: [(&str, &str); 5] = [
    ("userns-", "a user namespace"),
    ("mountpoints-", "a mount namespace"),
    ("tmpfs-", "a tmpfs's contents"),
    ("netns-", "a network namespace"),
    ("creds-", "credentials apart from the threads' cores"),
];

/// The images another user's may hold, by name: what CRIU 4 writes for a
/// job of its own. Any other image (`*.img`, the names a stage gives
/// CRIU) is refused: CRIU reads images of every kind it ever wrote, and an
/// older kind (`packetsk.img`, `inetsk.img`, `reg-files.img`,
/// `rlimit-N.img`, `cgroup.img` ...) would restore what `files.img` and
/// the cores, which cudackpt checks, do not say. Other files (the
/// manifest, logs, stats) never reach CRIU.
const DUMP_IMAGES: [&str; 12] = [
    "inventory.img",
    "pstree.img",
    "files.img",
    "seccomp.img",
    "tty-info.img",
    "tty-data.img",
    "pipes-data.img",
    "fifo-data.img",
    "sk-queues.img",
    "remap-fpath.img",
    "memfd.img",
    "filelocks.img",
];

/// The same, for images named with a number (`core-TID.img`, ...).
const DUMP_IMAGES_NUMBERED: [&str; 11] = [
    "core-",
    "ids-",
    "mm-",
    "pagemap-",
    "pagemap-shmem-",
    "pages-",
    "fdinfo-",
    "fs-",
    "timens-",
    "tcp-stream-",
    "ghost-file-",
];

/// Why another user's images may not hold the image `name` (pure): `None`
/// when a dump writes such images.
pub fn image_beyond(name: &str) -> Option<String> {
    if let Some((_, what)) = ROOTS_ONLY.iter().find(|(p, _)| name.starts_with(p)) {
        return Some(format!("{name} holds {what}, which CRIU makes as root"));
    }
    let never_criu_s = !name.ends_with(".img");
    if never_criu_s
        || DUMP_IMAGES.contains(&name)
        || DUMP_IMAGES_NUMBERED
            .iter()
            .any(|prefix| is_numbered(name, prefix))
    {
        return None;
    }
    Some(format!(
        "{} is not an image a dump of a job writes, and CRIU would restore it unchecked, as root",
        crate::targets::name::printable(name)
    ))
}

/// Whether `name` is `PREFIX` + a hexadecimal number + `.img`, as CRIU
/// names an image of one task or file (pure).
pub fn is_numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(".img"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A ghost file's most an image another user wrote may ask for: no
/// setuid, setgid or sticky bit.
const SPECIAL_BITS: u32 = 0o7000;

/// What `creds` grants beyond user `uid` in `groups` (pure): empty when
/// nothing.
pub fn beyond(creds: &Creds, uid: u32, groups: &[u32]) -> Vec<String> {
    let mut found = Vec::new();
    let uids = [
        ("uid", creds.uid),
        ("euid", creds.euid),
        ("saved uid", creds.suid),
        ("fsuid", creds.fsuid),
    ];
    for (what, value) in uids {
        if value != uid {
            found.push(format!("{what} {value}"));
        }
    }
    let gids = [
        ("gid", creds.gid),
        ("egid", creds.egid),
        ("saved gid", creds.sgid),
        ("fsgid", creds.fsgid),
    ];
    for (what, value) in gids {
        if !groups.contains(&value) {
            found.push(format!("{what} {value}"));
        }
    }
    for group in &creds.groups {
        if !groups.contains(group) {
            found.push(format!("supplementary group {group}"));
        }
    }
    let capabilities = [
        ("permitted", &creds.cap_prm),
        ("effective", &creds.cap_eff),
        ("inheritable", &creds.cap_inh),
        ("ambient", &creds.cap_amb),
    ];
    for (set, words) in capabilities {
        if words.iter().any(|w| *w != 0) {
            found.push(format!("{set} capabilities"));
        }
    }
    found
}

/// What a ghost file of `uid`'s images would be made as, beyond them
/// (pure): `None` when nothing.
pub fn ghost_beyond(owner: u32, group: u32, mode: u32, uid: u32, groups: &[u32]) -> Option<String> {
    let mut found = Vec::new();
    if owner != uid {
        found.push(format!("owner {owner}"));
    }
    if !groups.contains(&group) {
        found.push(format!("group {group}"));
    }
    found.extend(special_bits(mode));
    (!found.is_empty()).then(|| found.join(", "))
}

/// A file mode's set-user-ID, set-group-ID or sticky bit, in words (pure):
/// `None` when it has none.
pub fn special_bits(mode: u32) -> Option<String> {
    (mode & SPECIAL_BITS != 0).then(|| format!("mode {:04o}", mode & 0o7777))
}

/// Refuses images another user (`uid`) could have written that would
/// restore anything as more than that user.
pub fn refuse_beyond(source: &HeldImages, job: &JobFiles, uid: u32) -> Result<(), DiskFailure> {
    let groups = crate::files::users::groups_of(uid);
    let mut found: Vec<String> = Vec::new();
    let mut cores = 0;
    for name in source.names() {
        if let Some(why) = image_beyond(name) {
            found.push(why);
        } else if name.starts_with("core-") {
            cores += 1;
            found.extend(core_beyond(source, name, uid, &groups));
        } else if name.starts_with("ghost-file-") {
            found.extend(ghost_file_beyond(source, name, uid, &groups));
        }
    }
    if cores == 0 {
        found.push("the images hold no thread's core (core-TID.img)".into());
    }
    found.extend(
        crate::commands::disk::undump_checks::descriptor_bound::held_beyond(source, uid, &groups),
    );
    found.extend(files_beyond(job, uid, &groups));
    if found.is_empty() {
        return Ok(());
    }
    found.truncate(12);
    Err(DiskFailure::refused(
        "credentials",
        format!(
            "refused before any change: uid {uid} could have written these images, and they would restore more than uid {uid}: {}",
            found.join("; ")
        ),
        format!("restore them as uid {uid} (CRIU restores a job of one's own without root where its host allows), or from a directory only root can write, all the way up, if root made them"),
    ))
}

/// The files CRIU would open by path, as root, and hand to the job (open
/// files and mapped ones, from `files.img`; not those it makes again from
/// its own copy) that uid `uid` could not open so themselves: an fd of a
/// file of root's is more than that user.
fn files_beyond(job: &JobFiles, uid: u32, groups: &[u32]) -> Vec<String> {
    let files = match &job.files {
        Ok(Some(files)) => files,
        Ok(None) => return Vec::new(), // no file open
        Err(why) => return vec![format!("files.img cannot be read ({why})")],
    };
    let opened: Vec<(std::path::PathBuf, Access)> = files
        .iter()
        .filter(|f| !job.remapped.contains(&f.id))
        .map(|f| (f.path.clone(), access_for(f.flags.unwrap_or(0))))
        .collect();
    let user = crate::files::users::user(uid);
    let denied = crate::files::users::as_user_in_groups(user, groups, || {
        opened
            .iter()
            .filter(|(path, access)| {
                rustix::fs::accessat(rustix::fs::CWD, path, *access, rustix::fs::AtFlags::EACCESS)
                    .is_err()
            })
            .map(|(path, access)| {
                format!(
                    "{} is opened for the job ({}) and uid {uid} may not open it so",
                    crate::targets::name::printable_path(path),
                    in_words(*access)
                )
            })
            .collect::<Vec<String>>()
    });
    match denied {
        Ok(denied) => denied,
        Err(why) => vec![format!(
            "the files the job had open could not be checked as uid {uid} ({why})"
        )],
    }
}

/// The access CRIU's open with `flags` needs (pure): reading, writing or
/// both by `O_ACCMODE`; an `O_PATH` descriptor, only that the path is
/// reachable.
pub fn access_for(flags: u32) -> Access {
    const O_PATH: u32 = 0o10000000;
    if flags & O_PATH != 0 {
        return Access::EXISTS;
    }
    match flags & 0o3 {
        0 => Access::READ_OK,
        1 => Access::WRITE_OK,
        _ => Access::READ_OK | Access::WRITE_OK,
    }
}

fn in_words(access: Access) -> &'static str {
    if access == Access::READ_OK | Access::WRITE_OK {
        "to read and write"
    } else if access == Access::WRITE_OK {
        "to write"
    } else if access == Access::READ_OK {
        "to read"
    } else {
        "as a path"
    }
}

/// The most of a core image read: a thread's core is kilobytes.
pub const CORE_CAP: u64 = 16 << 20;
const GHOST_HEAD_CAP: u64 = 1 << 30;

fn core_beyond(source: &HeldImages, name: &str, uid: u32, groups: &[u32]) -> Option<String> {
    let limits = SchedulingLimits::own();
    core_image_beyond(
        name,
        held_bytes(source, name, CORE_CAP),
        uid,
        groups,
        limits,
    )
}

/// An image held for the undump, read capped; a name gone since is an
/// error.
fn held_bytes(source: &HeldImages, name: &str, cap: u64) -> Result<Vec<u8>, String> {
    match source.read(name, cap) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err("gone".into()),
        Err(why) => Err(why.to_string()),
    }
}

/// What the core image `name` (its bytes as read, or why they could not
/// be) grants beyond user `uid` in `groups` with `limits` (pure): a line
/// saying so, `None` when nothing.
pub fn core_image_beyond(
    name: &str,
    read: Result<Vec<u8>, String>,
    uid: u32,
    groups: &[u32],
    limits: SchedulingLimits,
) -> Option<String> {
    let thread = read.and_then(|bytes| criu_images::thread_of(&bytes).map_err(|e| e.to_string()));
    match thread {
        Ok(thread) => {
            let beyond = thread_beyond(&thread, uid, groups, limits);
            (!beyond.is_empty())
                .then(|| format!("{name} runs its thread with {}", beyond.join(", ")))
        }
        Err(why) => Some(format!("{name} cannot be read ({why})")),
    }
}

/// `SCHED_FIFO`, `SCHED_RR`, `SCHED_DEADLINE`: a real-time policy, which
/// CRIU sets as root and a user may not.
const REAL_TIME: [u32; 3] = [1, 2, 6];

/// The hard limits of `RLIMIT_NICE` and `RLIMIT_RTPRIO` a restored thread
/// may have: no more than this undump's own (a process cannot raise its
/// hard limit above what it was given; root's session's are what the host
/// gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulingLimits {
    pub nice: u64,
    pub rtprio: u64,
}

impl SchedulingLimits {
    /// This process's hard limits.
    pub fn own() -> SchedulingLimits {
        use rustix::process::{getrlimit, Resource};
        let hard = |resource| getrlimit(resource).maximum.unwrap_or(u64::MAX);
        SchedulingLimits {
            nice: hard(Resource::Nice),
            rtprio: hard(Resource::Rtprio),
        }
    }
}

/// What a thread's core grants beyond user `uid` (pure): its credentials
/// ([`beyond`]), a real-time policy, a nice value below 0, an OOM score
/// adjustment below 0 (CAP_SYS_RESOURCE: -1000 is never OOM-killed), or a
/// hard limit of `RLIMIT_NICE` or `RLIMIT_RTPRIO` above `limits` (with
/// which the user could take either themselves once restored).
pub fn thread_beyond(
    thread: &criu_images::Thread,
    uid: u32,
    groups: &[u32],
    limits: SchedulingLimits,
) -> Vec<String> {
    let mut found = match &thread.creds {
        Some(creds) => beyond(creds, uid, groups),
        None => vec!["no recorded credentials".to_string()],
    };
    if let Some(policy) = thread.sched_policy.filter(|p| REAL_TIME.contains(p)) {
        found.push(format!("the real-time scheduling policy {policy}"));
    }
    if let Some(nice) = thread.sched_nice.filter(|n| *n < 0) {
        found.push(format!("nice {nice}"));
    }
    if let Some(adj) = thread.oom_score_adj.filter(|a| *a < 0) {
        found.push(format!("an OOM score adjustment of {adj}"));
    }
    if let Some(nice) = thread.nice_limit.filter(|n| *n > limits.nice) {
        found.push(format!(
            "a hard RLIMIT_NICE of {nice} (this host's: {})",
            limits.nice
        ));
    }
    if let Some(rtprio) = thread.rtprio_limit.filter(|r| *r > limits.rtprio) {
        found.push(format!(
            "a hard RLIMIT_RTPRIO of {rtprio} (this host's: {})",
            limits.rtprio
        ));
    }
    found
}

fn ghost_file_beyond(source: &HeldImages, name: &str, uid: u32, groups: &[u32]) -> Option<String> {
    ghost_image_beyond(
        name,
        held_bytes(source, name, GHOST_HEAD_CAP),
        |owner, group, mode| ghost_beyond(owner, group, mode, uid, groups),
    )
}

/// What the ghost image `name` (its bytes as read, or why they could not
/// be) makes beyond what `beyond` allows of a file's owner, group and mode
/// (pure): a line saying so, `None` when nothing.
pub fn ghost_image_beyond(
    name: &str,
    read: Result<Vec<u8>, String>,
    beyond: impl Fn(u32, u32, u32) -> Option<String>,
) -> Option<String> {
    let made =
        read.and_then(|bytes| criu_images::ghost_owner_and_mode(&bytes).map_err(|e| e.to_string()));
    match made {
        Ok((owner, group, mode)) => beyond(owner, group, mode)
            .map(|what| format!("{name} makes a deleted file again with {what}")),
        Err(why) => Some(format!("{name} cannot be read ({why})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_of_one_task_or_file_is_named_with_a_hexadecimal_number() {
        assert!(is_numbered("core-1a2b.img", "core-"));
        assert!(is_numbered("ghost-file-7.img", "ghost-file-"));
        assert!(!is_numbered("core-.img", "core-"));
        assert!(!is_numbered("core-12.img.tmp", "core-"));
        assert!(!is_numbered("core-12x.img", "core-"));
    }

    fn alice() -> Creds {
        Creds {
            uid: 1000,
            gid: 1000,
            euid: 1000,
            egid: 1000,
            suid: 1000,
            sgid: 1000,
            fsuid: 1000,
            fsgid: 1000,
            cap_inh: vec![0, 0],
            cap_prm: vec![0, 0],
            cap_eff: vec![0, 0],
            groups: vec![1000, 27],
            cap_amb: vec![],
        }
    }

    #[test]
    fn a_thread_of_the_user_alone_is_restored() {
        assert!(beyond(&alice(), 1000, &[1000, 27]).is_empty());
        let thread = criu_images::Thread {
            creds: Some(alice()),
            sched_policy: Some(0),
            sched_nice: Some(5),
            oom_score_adj: Some(200),
            nice_limit: Some(0),
            rtprio_limit: Some(0),
        };
        assert!(thread_beyond(&thread, 1000, &[1000, 27], HOST).is_empty());
    }

    /// A host whose processes may not raise their priority.
    const HOST: SchedulingLimits = SchedulingLimits { nice: 0, rtprio: 0 };

    /// Scheduling and the OOM killer's judgement are a root's to raise.
    #[test]
    fn real_time_scheduling_negative_nice_oom_adjustment_and_their_limits_are_beyond_a_user() {
        let thread = criu_images::Thread {
            creds: Some(alice()),
            sched_policy: Some(1),
            sched_nice: Some(-5),
            oom_score_adj: Some(-1000),
            nice_limit: Some(40),
            rtprio_limit: Some(99),
        };
        assert_eq!(
            thread_beyond(&thread, 1000, &[1000, 27], HOST),
            [
                "the real-time scheduling policy 1",
                "nice -5",
                "an OOM score adjustment of -1000",
                "a hard RLIMIT_NICE of 40 (this host's: 0)",
                "a hard RLIMIT_RTPRIO of 99 (this host's: 0)"
            ]
        );
        let none = criu_images::Thread::default();
        assert_eq!(
            thread_beyond(&none, 1000, &[1000], HOST),
            ["no recorded credentials"]
        );
    }

    /// What a dump writes may be another user's; an older kind of image
    /// (read by CRIU, not checked here) or anything else may not.
    #[test]
    fn another_users_images_hold_only_what_a_dump_writes() {
        for name in [
            "core-4242.img",
            "pages-1.img",
            "pagemap-shmem-31.img",
            "tcp-stream-1a2b.img",
            "ghost-file-a.img",
            "files.img",
            "cudackpt-manifest.json",
            "restore.log",
            "stats-dump",
        ] {
            assert_eq!(image_beyond(name), None, "{name}");
        }
        for name in [
            "packetsk.img",
            "inetsk.img",
            "reg-files.img",
            "rlimit-1.img",
            "cgroup.img",
            "core-.img",
            "core-x.img",
            "userns-1.img",
            "evil\x1b.img",
        ] {
            let why = image_beyond(name).unwrap_or_else(|| panic!("{name} allowed"));
            assert!(!why.contains('\x1b'), "{why}");
        }
    }

    #[test]
    fn every_identity_beyond_the_user_is_named() {
        let root_euid = Creds {
            euid: 0,
            suid: 0,
            ..alice()
        };
        assert_eq!(
            beyond(&root_euid, 1000, &[1000, 27]),
            ["euid 0", "saved uid 0"]
        );
        let shadow = Creds {
            sgid: 42,
            groups: vec![1000, 42],
            ..alice()
        };
        assert_eq!(
            beyond(&shadow, 1000, &[1000]),
            ["saved gid 42", "supplementary group 42"]
        );
        let capable = Creds {
            cap_eff: vec![0, 1 << 5],
            cap_amb: vec![1],
            ..alice()
        };
        assert_eq!(
            beyond(&capable, 1000, &[1000, 27]),
            ["effective capabilities", "ambient capabilities"]
        );
    }

    #[test]
    fn the_access_an_open_needs_follows_its_flags() {
        assert_eq!(access_for(0), Access::READ_OK);
        assert_eq!(access_for(0o2001), Access::WRITE_OK, "O_WRONLY|O_APPEND");
        assert_eq!(access_for(0o2), Access::READ_OK | Access::WRITE_OK);
        assert_eq!(access_for(0o10000000), Access::EXISTS);
    }

    #[test]
    fn a_ghost_file_is_made_only_as_the_user_and_never_setuid() {
        assert_eq!(ghost_beyond(1000, 1000, 0o100644, 1000, &[1000]), None);
        assert_eq!(
            ghost_beyond(0, 1000, 0o104755, 1000, &[1000]).as_deref(),
            Some("owner 0, mode 4755")
        );
        assert_eq!(
            ghost_beyond(1000, 0, 0o102755, 1000, &[1000]).as_deref(),
            Some("group 0, mode 2755")
        );
    }
}
