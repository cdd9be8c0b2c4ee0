//! The kernel log (/dev/kmsg, readable by root), for the post-mortem of a
//! target that died during a checkpoint: the OOM killer logs `Killed process
//! PID (name)` whether the limit was a cgroup's or the host's. The log is
//! opened and positioned at its end before the driver calls, so only what
//! the kernel logs during the command is read afterwards; reads are
//! non-blocking and capped.

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

/// Where the kernel log is read.
pub const KERNEL_LOG: &str = "/dev/kmsg";
/// At most this much of the log is read after a command.
const READ_CAP: usize = 4 << 20;

/// The kernel log from a point in time on.
pub struct KernelLog {
    file: std::fs::File,
}

impl KernelLog {
    /// Opens `path` (the kernel log, or a file standing for it) at its end;
    /// `None` when it cannot be read (not root, no /dev/kmsg).
    pub fn from_now(path: &Path) -> Option<KernelLog> {
        let fd = crate::files::open_for_reading(path).ok()?;
        let mut file = std::fs::File::from(fd);
        file.seek(SeekFrom::End(0)).ok()?;
        Some(KernelLog { file })
    }

    /// Every message logged since, up to the cap. /dev/kmsg answers one
    /// record per read and `EAGAIN` at the end; a regular file, chunks.
    pub fn messages_since(&mut self) -> Vec<String> {
        let mut text = Vec::new();
        let mut buffer = vec![0u8; 16 * 1024];
        while text.len() < READ_CAP {
            match self.file.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => text.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // EAGAIN at the end; EPIPE when records were overwritten
                // meanwhile (the next read goes on from the oldest kept).
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => {
                    continue
                }
                Err(_) => break,
            }
        }
        parse_records(&String::from_utf8_lossy(&text))
    }
}

/// The messages of /dev/kmsg records, `PRIO,SEQ,TIME,FLAGS;MESSAGE`, one a
/// line; continuation lines (starting with a space) are dropped (pure).
pub fn parse_records(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.starts_with(' '))
        .map(|line| match line.split_once(';') {
            Some((_, message)) => message.to_string(),
            None => line.to_string(),
        })
        .collect()
}

/// The OOM killer's line about `pid`, if among `messages` (pure).
pub fn oom_kill_of(messages: &[String], pid: i32) -> Option<&str> {
    let needle = format!("Killed process {pid} (");
    messages.iter().find(|m| m.contains(&needle)).map(|m| {
        m.split(" total-vm:")
            .next()
            .unwrap_or(m)
            .trim_end_matches(',')
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const RECORDS: &str = concat!(
        "4,1201,98123456,-;cudackpt-gpu-ta invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0\n",
        " SUBSYSTEM=memory\n",
        "6,1240,98123999,-;Memory cgroup out of memory: Killed process 3630 (cudackpt-gpu-ta) total-vm:12345kB, anon-rss:2097152kB\n",
    );

    #[test]
    fn the_oom_killers_line_is_found_by_pid() {
        let messages = parse_records(RECORDS);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(
            oom_kill_of(&messages, 3630),
            Some("Memory cgroup out of memory: Killed process 3630 (cudackpt-gpu-ta)")
        );
        assert_eq!(oom_kill_of(&messages, 363), None, "no prefix match");
    }

    #[test]
    fn only_what_is_logged_after_opening_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kmsg");
        std::fs::write(&path, "6,1,1,-;Killed process 7 (old)\n").expect("log");
        let mut log = KernelLog::from_now(&path).expect("opens");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        file.write_all(RECORDS.as_bytes()).expect("append");
        let messages = log.messages_since();
        assert_eq!(oom_kill_of(&messages, 7), None, "logged before");
        assert!(oom_kill_of(&messages, 3630).is_some());
        assert!(
            KernelLog::from_now(&dir.path().join("none")).is_none(),
            "unreadable is no log"
        );
    }
}
