//! What the fake knows about processes, read from `/proc`: whether a PID
//! exists, its thread-group leader, its start time, its threads, and whether
//! it maps this library (which is what makes it a "CUDA process").

use std::sync::OnceLock;

use crate::codes::{CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_OPERATING_SYSTEM};

/// The process a checkpoint call acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The thread-group id: the PID itself, or the process of a thread id.
    pub tgid: i32,
    /// Field 22 of `/proc/TGID/stat`.
    pub starttime: u64,
}

/// Resolves `pid` as the real driver does: no `/proc/PID` gives
/// `CUDA_ERROR_OPERATING_SYSTEM`; a live process that does not map the fake
/// gives `CUDA_ERROR_NOT_INITIALIZED`; a thread id gives its process.
pub fn resolve(pid: i32) -> Result<Target, i32> {
    if pid <= 0 {
        return Err(CUDA_ERROR_OPERATING_SYSTEM);
    }
    let status =
        read_lossy(format!("/proc/{pid}/status")).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
    let tgid = parse_tgid(&status).ok_or(CUDA_ERROR_OPERATING_SYSTEM)?;
    let stat = read_lossy(format!("/proc/{tgid}/stat")).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
    let starttime = parse_starttime(&stat).ok_or(CUDA_ERROR_OPERATING_SYSTEM)?;
    // Unreadable maps (another user's process, PID 1 for a non-root caller)
    // count as "not a CUDA process", as for PID 1 under the real driver.
    let maps = read_lossy(format!("/proc/{tgid}/maps")).unwrap_or_default();
    match own_library() {
        Some(me) if maps_library(&maps, me) && !crate::forks::is_forked_child(tgid) => {
            Ok(Target { tgid, starttime })
        }
        _ => Err(CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// The thread ids of process `tgid`.
pub fn threads(tgid: i32) -> std::io::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{tgid}/task"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// The restore thread id: the lowest thread id other than `tgid`, or `tgid`
/// when the process has one thread.
pub fn restore_tid(tgid: i32, tids: &[i32]) -> i32 {
    tids.iter()
        .copied()
        .filter(|t| *t != tgid)
        .min()
        .unwrap_or(tgid)
}

/// `Tgid:` of a `/proc/PID/status` text.
fn parse_tgid(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether `pid` is a live process: it exists and is not a zombie.
pub fn is_running(pid: i32) -> bool {
    read_lossy(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("State:"))
            .is_some_and(|state| !state.trim_start().starts_with('Z'))
    })
}

/// Field 22 of `/proc/PID/stat`: when process `pid` started.
pub fn starttime(pid: i32) -> Option<u64> {
    parse_starttime(&read_lossy(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 (starttime) of a `/proc/PID/stat` text; the command name (field
/// 2) may hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_starttime(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after the command name.
    after_comm.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: u64,
    end: u64,
    device: &'a str,
    inode: u64,
    path: &'a str,
}

fn parse_maps_line(line: &str) -> Option<Mapping<'_>> {
    let mut rest = line;
    let mut fields = [""; 5];
    for field in &mut fields {
        rest = rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let (start, end) = fields[0].split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        device: fields[3],
        inode: fields[4].parse().ok()?,
        path: rest.trim_start(),
    })
}

/// The file this library was loaded from, as the kernel names it.
#[derive(Debug, PartialEq, Eq)]
struct LibraryId {
    path: String,
    device: String,
    inode: u64,
}

/// Finds this library's file: the mapping of `/proc/self/maps` that holds
/// one of its functions (what `dladdr` answers, but always absolute).
fn own_library() -> Option<&'static LibraryId> {
    static ME: OnceLock<Option<LibraryId>> = OnceLock::new();
    ME.get_or_init(|| {
        let address = own_library as *const () as u64;
        let maps = read_lossy("/proc/self/maps".to_string()).ok()?;
        maps.lines()
            .filter_map(parse_maps_line)
            .find(|m| m.start <= address && address < m.end && m.inode != 0)
            .map(|m| LibraryId {
                path: m.path.trim_end_matches(" (deleted)").to_owned(),
                device: m.device.to_owned(),
                inode: m.inode,
            })
    })
    .as_ref()
}

/// Whether a `/proc/PID/maps` text maps the library `me` (same file, or a
/// file of the same path that has since been replaced).
fn maps_library(maps: &str, me: &LibraryId) -> bool {
    maps.lines().filter_map(parse_maps_line).any(|m| {
        (m.inode == me.inode && m.device == me.device)
            || m.path.trim_end_matches(" (deleted)") == me.path
    })
}

/// A /proc text file, whatever bytes the process's name holds (the real
/// driver does not refuse a process for its name either).
/// The process's `FAKE_CUDA_IDENTITY`, from its environment as its memory
/// holds it (`/proc/PID/environ`).
pub fn identity(pid: i32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(b"FAKE_CUDA_IDENTITY="))
        .map(|value| String::from_utf8_lossy(value).into_owned())
        .filter(|value| !value.is_empty())
}

fn read_lossy(path: String) -> std::io::Result<String> {
    std::fs::read(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starttime_is_field_22_even_with_odd_command_names() {
        let stat = "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 2265088 160 18446744073709551615";
        assert_eq!(parse_starttime(stat), Some(987654));
        assert_eq!(parse_starttime("1 (init) S 0"), None);
        assert_eq!(parse_starttime("no parenthesis"), None);
    }

    #[test]
    fn tgid_comes_from_status() {
        let status =
            "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4250\n";
        assert_eq!(parse_tgid(status), Some(4242));
        assert_eq!(parse_tgid("Name:\tx\n"), None);
    }

    #[test]
    fn restore_tid_is_the_lowest_other_thread() {
        assert_eq!(restore_tid(100, &[100]), 100);
        assert_eq!(restore_tid(100, &[100, 105, 103, 110]), 103);
        assert_eq!(restore_tid(100, &[]), 100);
    }

    #[test]
    fn maps_lines_parse_with_and_without_paths() {
        let line = "7f1c2a000000-7f1c2a021000 r-xp 00001000 fd:01 1234567                    /work/t/lib fake.so (deleted)";
        let m = parse_maps_line(line);
        assert_eq!(
            m,
            Some(Mapping {
                start: 0x7f1c2a000000,
                end: 0x7f1c2a021000,
                device: "fd:01",
                inode: 1234567,
                path: "/work/t/lib fake.so (deleted)",
            })
        );
        let anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0");
        assert_eq!(anon.map(|m| (m.inode, m.path)), Some((0, "")));
        assert_eq!(parse_maps_line("garbage"), None);
    }

    #[test]
    fn a_process_maps_the_library_by_inode_or_path() {
        let me = LibraryId {
            path: "/t/libfake_libcuda.so".into(),
            device: "fd:01".into(),
            inode: 77,
        };
        let same_inode = "1000-2000 r-xp 0 fd:01 77 /elsewhere/link.so\n";
        let replaced = "1000-2000 r-xp 0 fd:01 99 /t/libfake_libcuda.so (deleted)\n";
        let other = "1000-2000 r-xp 0 fd:01 78 /usr/lib/libc.so.6\n1000-2000 rw-p 0 00:00 0\n";
        assert!(maps_library(same_inode, &me));
        assert!(maps_library(replaced, &me));
        assert!(!maps_library(other, &me));
        assert!(!maps_library("", &me));
    }

    #[test]
    fn resolves_processes_like_the_driver() {
        assert_eq!(resolve(0), Err(CUDA_ERROR_OPERATING_SYSTEM));
        assert_eq!(resolve(-3), Err(CUDA_ERROR_OPERATING_SYSTEM));
        assert_eq!(resolve(i32::MAX), Err(CUDA_ERROR_OPERATING_SYSTEM));
        // Here the "library" is the test binary, which maps itself: the
        // caller counts as a CUDA process, and so does any of its threads.
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let target = resolve(me);
        assert_eq!(target.map(|t| t.tgid), Ok(me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap_or(0);
        assert_ne!(tid, me);
        assert_eq!(resolve(tid), target);
        let _ = done_tx.send(());
        let _ = worker.join();
        // PID 1 does not map this binary.
        assert_eq!(resolve(1), Err(CUDA_ERROR_NOT_INITIALIZED));
    }
}
