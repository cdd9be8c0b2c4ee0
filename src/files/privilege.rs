//! Whether cudackpt runs with more power than the user who started it, and
//! so must treat every library it loads and every file it reads as root
//! does (docs/guide/safety.md, "Running as root: the trust model"). Root is not the only such case: a copy of cudackpt
//! given `cap_sys_ptrace+ep` (as the README offers) runs with the uid of
//! whoever starts it, yet may attach to any process, root's daemons
//! included; a library it loaded from that user would run with that power.
//! The kernel marks such an exec "secure" (`AT_SECURE` in the auxiliary
//! vector), as it does for set-uid programs.

use std::sync::OnceLock;

/// `AT_SECURE` in the auxiliary vector (linux/auxvec.h).
const AT_SECURE: u64 = 23;

/// What this process can do beyond its real user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// The effective uid is 0.
    pub root: bool,
    /// The effective capability set is not empty.
    pub capable: bool,
    /// The effective set holds CAP_SYS_PTRACE: it may act on any process.
    pub ptrace: bool,
    /// The kernel started this program in secure-execution mode (set-uid,
    /// set-gid or file capabilities).
    pub secure: bool,
}

impl Standing {
    /// Root, any effective capability, or secure execution: whatever this
    /// process loads or reads must pass root's checks.
    pub fn elevated(self) -> bool {
        self.root || self.capable || self.secure
    }
}

/// This process's standing, read once (a capget and, for a non-root
/// process, one small read of /proc/self/auxv).
pub fn standing() -> Standing {
    use rustix::thread::CapabilitySet;
    static STANDING: OnceLock<Standing> = OnceLock::new();
    *STANDING.get_or_init(|| {
        let root = rustix::process::geteuid().is_root();
        let effective = rustix::thread::capabilities(None).map(|sets| sets.effective);
        // Unreadable: assume the worst for the checks (capable), and no
        // power to act on others' processes (no ptrace).
        let capable = effective.map_or(true, |set| !set.is_empty());
        let ptrace = effective.is_ok_and(|set| set.contains(CapabilitySet::SYS_PTRACE));
        // Root is elevated whatever the auxiliary vector says.
        let secure = !root && secure_execution();
        Standing {
            root,
            capable,
            ptrace,
            secure,
        }
    })
}

/// Whether this process holds CAP_SYS_RESOURCE: root on a host does; root
/// in a container whose bounding set drops it does not, and may then not
/// read the resource limits of another user's processes (`prlimit`),
/// which CRIU reads of every process it dumps.
pub fn holds_sys_resource() -> bool {
    rustix::thread::capabilities(None).is_ok_and(|sets| {
        sets.effective
            .contains(rustix::thread::CapabilitySet::SYS_RESOURCE)
    })
}

/// [`Standing::elevated`] of this process.
pub fn elevated() -> bool {
    standing().elevated()
}

/// Whether the kernel set `AT_SECURE` for this exec. An auxiliary vector
/// that cannot be read counts as secure.
fn secure_execution() -> bool {
    match std::fs::read("/proc/self/auxv") {
        Ok(auxv) => at_secure(&auxv).unwrap_or(false),
        Err(_) => true,
    }
}

/// The value of `AT_SECURE` in an auxiliary vector's bytes (pairs of
/// native-endian words), `None` where it is absent (pure).
pub fn at_secure(auxv: &[u8]) -> Option<bool> {
    const WORD: usize = std::mem::size_of::<u64>();
    auxv.chunks_exact(2 * WORD).find_map(|pair| {
        let word = |at: usize| {
            let mut bytes = [0u8; WORD];
            bytes.copy_from_slice(&pair[at..at + WORD]);
            u64::from_ne_bytes(bytes)
        };
        (word(0) == AT_SECURE).then(|| word(WORD) != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auxv(pairs: &[(u64, u64)]) -> Vec<u8> {
        pairs
            .iter()
            .flat_map(|(k, v)| k.to_ne_bytes().into_iter().chain(v.to_ne_bytes()))
            .collect()
    }

    #[test]
    fn at_secure_is_read_from_the_auxiliary_vector() {
        assert_eq!(at_secure(&auxv(&[(33, 7), (23, 1), (0, 0)])), Some(true));
        assert_eq!(at_secure(&auxv(&[(23, 0), (0, 0)])), Some(false));
        assert_eq!(at_secure(&auxv(&[(6, 4096), (0, 0)])), None);
        assert_eq!(at_secure(&[1, 2, 3]), None);
    }

    #[test]
    fn any_power_beyond_the_user_counts() {
        let plain = Standing {
            root: false,
            capable: false,
            ptrace: false,
            secure: false,
        };
        assert!(!plain.elevated());
        assert!(Standing {
            root: true,
            ..plain
        }
        .elevated());
        assert!(Standing {
            capable: true,
            ..plain
        }
        .elevated());
        assert!(Standing {
            secure: true,
            ..plain
        }
        .elevated());
    }

    #[test]
    fn this_process_is_read() {
        // The tests run as root (CI) or as a user without capabilities.
        let me = standing();
        assert_eq!(me.root, rustix::process::geteuid().is_root());
        assert!(!me.secure, "cargo does not run tests set-uid");
    }
}
