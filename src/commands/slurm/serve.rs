//! `cudackpt slurm serve`: the node's service that dumps and undumps
//! Slurm jobs for their wrappers (`cudackpt slurm run`), as root, on a
//! Unix socket any user may connect to. Each connection is checked to be
//! a job's batch step (`job`); the service then acts on that job alone:
//! it dumps only the tree under the asker (or the tree it restored for
//! it), whose every process is the job's user's, into that job's own
//! directory of the store (`store`), and restores only that job's last
//! complete snapshot, into the job's network namespace, onto the GPUs
//! Slurm gave the job this time. A snapshot's images are read once
//! written and again before a restore: one that would restore more than
//! the job's user is never recorded, nor restored (`own_processes`).
//!
//! A job it restored is outside Slurm's reach (not a descendant of the
//! job's `slurmstepd`), so the connection is its lifeline: the service is
//! the restored job's parent (a child subreaper), tells the wrapper how it
//! ended, and kills it whole when the wrapper goes (Slurm ended the job,
//! or killed the wrapper): the job never runs on past its allocation.

use std::collections::BTreeSet;
use std::io::BufReader;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::job::{self, AskingJob};
use super::places::{Admitted, Counted};
use super::protocol::{receive, send, Ask, Reply};
use super::store::{Latest, Store};
use crate::commands::disk::manifest::Manifest;
use crate::commands::disk::undump_checks::restored_tree;

/// What the service is given.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub socket: PathBuf,
    pub store: PathBuf,
    pub criu: Option<PathBuf>,
    pub scontrol: PathBuf,
}

/// The socket's default path.
pub const DEFAULT_SOCKET: &str = "/run/cudackpt/slurm.sock";
/// The store's default path.
pub const DEFAULT_STORE: &str = "/var/lib/cudackpt/slurm";

/// The most connections the service checks at once: past it a new one
/// is closed unread, so that a flood of them costs the service no more
/// than this many threads (each checked connection is answered within a
/// second or so).
const CHECKS_AT_ONCE: usize = 64;

/// The most connections one job may hold: its wrapper holds one for the
/// job's life, and a restart's may meet the last run's still closing.
const CONNECTIONS_PER_JOB: usize = 4;

/// The service's state, shared by its connections.
struct Service {
    settings: ServeSettings,
    store: Store,
    /// Connections being checked now ([`CHECKS_AT_ONCE`]).
    checking: Counted<()>,
    /// Each job's connections now ([`CONNECTIONS_PER_JOB`]).
    connected: Counted<u64>,
    /// Children a connection waits for itself (a dump or undump it runs,
    /// a job it restored): the reaper leaves them alone.
    waited: Mutex<BTreeSet<i32>>,
    /// Whether a dump runs with the job's real ids (see
    /// [`Service::cudackpt`]): where root lacks CAP_SYS_RESOURCE.
    as_the_job: bool,
}

/// Runs the service until it is killed. An error that stops it from
/// starting, as a line to print.
pub fn run(settings: ServeSettings) -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err(
            "the Slurm service runs as root: it dumps and restores jobs of other users".into(),
        );
    }
    let store = Store::open(&settings.store)?;
    let listener = listen(&settings.socket)?;
    restored_tree::become_subreaper()
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    let as_the_job = !crate::files::privilege::holds_sys_resource();
    if as_the_job {
        prime_criu(settings.criu.as_deref());
    }
    let service = Arc::new(Service {
        settings,
        store,
        waited: Mutex::new(BTreeSet::new()),
        as_the_job,
        checking: Counted::default(),
        connected: Counted::default(),
    });
    let reaper = Arc::clone(&service);
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || reaper.reap_orphans())
        .map_err(|e| format!("cannot start the reaper: {e}"))?;
    say(&format!(
        "serving Slurm jobs on {}, their images in {}",
        service.settings.socket.display(),
        service.store.path().display()
    ));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let Some(checking) = service.checking.admit((), CHECKS_AT_ONCE) else {
            continue; // closed unread
        };
        let service = Arc::clone(&service);
        let _ = std::thread::Builder::new()
            .name("job".into())
            .spawn(move || service.serve(stream, checking));
    }
    Ok(())
}

/// A line of the service's log (its standard error: journald's).
fn say(line: &str) {
    super::tell(&format!("slurm: {line}"));
}

/// Listens on `socket`, in a directory made root's where missing; an old
/// socket of root's there is replaced, anything else refused. Any user may
/// connect: who they are is checked on each connection.
fn listen(socket: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let parent = socket
        .parent()
        .ok_or_else(|| format!("{} names no directory", socket.display()))?;
    crate::files::SafeDir::create_with_mode(parent, 0o755)
        .map_err(|e| format!("{e} ({})", e.hint()))?;
    match std::fs::symlink_metadata(socket) {
        Ok(old) if old.file_type().is_socket() && old.uid() == 0 => {
            std::fs::remove_file(socket).map_err(|e| format!("cannot replace {}: {e}", socket.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket of root's: remove it, or name another path with --socket",
                socket.display()
            ))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(socket)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot open {} to the jobs: {e}", socket.display()))?;
    Ok(listener)
}

/// A job this connection restored: the service's child, held.
struct RestoredJob {
    root: i32,
    pidfd: OwnedFd,
    /// Clock ticks since boot when the undump started: what it made is
    /// no older.
    since: u64,
}

impl Service {
    /// One wrapper's connection, to its end; `checking` is its place among
    /// the connections being checked, given up once it is.
    fn serve(&self, stream: UnixStream, checking: Admitted<()>) {
        let Ok(cred) = rustix::net::sockopt::socket_peercred(&stream) else {
            return;
        };
        let (pid, uid) = (cred.pid.as_raw_nonzero().get(), cred.uid.as_raw());
        let Ok(writer) = stream.try_clone() else {
            return;
        };
        let writer = Arc::new(Mutex::new(writer));
        let tell = |said: &Reply| {
            let mut w = writer.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = send(&mut *w, said);
        };
        let identified = job::identify(pid, uid, &self.settings.scontrol).and_then(|job| {
            let place = self
                .connected
                .admit(job.record.job, CONNECTIONS_PER_JOB)
                .ok_or_else(|| {
                    format!(
                        "job {} holds {CONNECTIONS_PER_JOB} connections to the service already",
                        job.record.job
                    )
                })?;
            Ok((job, place))
        });
        let (job, _place) = match identified {
            Ok(identified) => identified,
            Err(why) => {
                say(&format!("refused PID {pid} (uid {uid}): {why}"));
                tell(&Reply::Refused { why });
                hang_up(&stream);
                return;
            }
        };
        drop(checking);
        let id = job.record.job;
        say(&format!(
            "job {id} (uid {uid}) on {} connected, restart count {}",
            job.record.batch_host, job.record.restarts
        ));
        tell(&Reply::Hello {
            job: id,
            node: job.record.batch_host.clone(),
            uid,
            restarts: job.record.restarts,
        });
        let mut restored: Option<RestoredJob> = None;
        let mut reader = BufReader::new(stream);
        while let Ok(Some(ask)) = receive::<Ask>(&mut reader) {
            let reply = self.answer(ask, &job, &mut restored, &writer);
            tell(&reply);
        }
        // The wrapper is gone: a job restored for it goes too.
        if let Some(r) = restored {
            let running =
                !crate::targets::process::pidfd_exit_within(&r.pidfd, Some(Duration::ZERO))
                    .unwrap_or(true);
            if running {
                let killed = restored_tree::kill_trees(&[r.root], r.since);
                say(&format!(
                    "job {id}'s wrapper is gone: its restored processes {} are killed",
                    crate::vocabulary::prose::pids(&killed)
                ));
            }
        }
    }

    /// What the service replies to `ask` of job `job`; a job it restores
    /// is kept in `restored`, and followed on `writer`.
    fn answer(
        &self,
        ask: Ask,
        job: &AskingJob,
        restored: &mut Option<RestoredJob>,
        writer: &Arc<Mutex<UnixStream>>,
    ) -> Reply {
        let id = job.record.job;
        match ask {
            Ask::Restore if restored.is_some() => Reply::NotRestored {
                why: "this job was restored already".into(),
            },
            Ask::Restore => match self.restore(job) {
                Ok((reply, job_restored)) => {
                    self.follow(&job_restored, Arc::clone(writer));
                    *restored = Some(job_restored);
                    reply
                }
                Err(why) => {
                    say(&format!("job {id} not restored: {why}"));
                    Reply::NotRestored { why }
                }
            },
            Ask::Dump => self.dump(job, restored.as_ref()).unwrap_or_else(|why| {
                say(&format!("job {id} not dumped: {why}"));
                Reply::NotDumped { why }
            }),
            Ask::Signal { signal } => signalled(restored.as_ref(), signal),
            Ask::Finished { code } => {
                if code == 0 {
                    self.store.forget(id);
                    say(&format!("job {id} finished: its snapshots are removed"));
                } else {
                    say(&format!(
                        "job {id} ended with {code}: its last snapshot is kept"
                    ));
                }
                Reply::Noted
            }
        }
    }

    /// Job `job` back from its last complete snapshot: what to tell the
    /// wrapper, and the job now running.
    fn restore(&self, job: &AskingJob) -> Result<(Reply, RestoredJob), String> {
        let id = job.record.job;
        let (images, latest, manifest) = self.store.latest(id)?;
        if latest.uid != job.record.uid {
            return Err(format!(
                "the snapshot of job {id} is uid {}'s, and the job now uid {}'s",
                latest.uid, job.record.uid
            ));
        }
        refuse_beyond_the_job(&images, job)?;
        let mut args = vec!["undump".to_string(), images.display().to_string()];
        args.extend(self.criu_args());
        let gpus = gpu_map(&manifest, &job.record)?;
        if let Some(map) = &gpus {
            args.push("--map".into());
            args.push(map.clone());
        }
        let started = Instant::now();
        let (report, since) = self.cudackpt(job, &args, false)?;
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        let root = report["restored_root_pid"]
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .ok_or_else(|| "the undump named no restored process".to_string())?;
        self.waited_lock().insert(root);
        let pidfd = crate::targets::process::pidfd_of(root)
            .ok_or_else(|| format!("the restored job (PID {root}) is gone"))?;
        say(&format!(
            "job {id} restored on {} from {} in {:.1} s: PID {root}",
            job.record.batch_host,
            images.display(),
            took_ms / 1e3
        ));
        Ok((
            Reply::Restored {
                from: images.display().to_string(),
                written_on: latest.node,
                written_unix_s: latest.written_unix_s,
                took_ms,
                root,
                gpus,
            },
            RestoredJob { root, pidfd, since },
        ))
    }

    /// Waits, beside the connection, for the restored job to end, and
    /// tells the wrapper how.
    fn follow(&self, restored: &RestoredJob, writer: Arc<Mutex<UnixStream>>) {
        let Ok(pidfd) = restored.pidfd.try_clone() else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("waiter".into())
            .spawn(move || {
                let status = loop {
                    match rustix::process::waitid(
                        rustix::process::WaitId::PidFd(pidfd.as_fd()),
                        rustix::process::WaitIdOptions::EXITED,
                    ) {
                        Err(rustix::io::Errno::INTR) => continue,
                        other => break other,
                    }
                };
                let code = match status {
                    Ok(Some(s)) => s
                        .exit_status()
                        .or_else(|| s.terminating_signal().map(|n| 128 + n))
                        .unwrap_or(1),
                    _ => 1,
                };
                let mut w = writer.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = send(&mut *w, &Reply::Exited { code });
            });
    }

    /// Drains job `job` and writes it to disk: the tree the service
    /// restored for it, else the one child of its wrapper.
    fn dump(&self, job: &AskingJob, restored: Option<&RestoredJob>) -> Result<Reply, String> {
        let id = job.record.job;
        let root = tree_to_dump(job, restored)?;
        let snapshot = self.store.next_snapshot(id)?;
        let mut args = vec![
            "dump".to_string(),
            "--drain".to_string(),
            "--to".to_string(),
            snapshot.display().to_string(),
            root.to_string(),
        ];
        args.extend(self.criu_args());
        let started = Instant::now();
        let dumped = self
            .cudackpt(job, &args, self.as_the_job)
            .and_then(|(report, _)| {
                let took_ms = started.elapsed().as_secs_f64() * 1e3;
                // What was dumped, not what was checked before: the job ran on
                // meanwhile.
                refuse_beyond_the_job(&snapshot, job).map(|()| (report, took_ms))
            });
        let (report, took_ms) = dumped.inspect_err(|_| self.store.discard(&snapshot))?;
        let bytes = report["manifest"]["image_bytes"].as_u64().unwrap_or(0);
        let name = snapshot
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.store.commit(&Latest {
            snapshot: name,
            job: id,
            uid: job.record.uid,
            node: job.record.batch_host.clone(),
            written_unix_s: report["manifest"]["created_unix_s"].as_u64().unwrap_or(0),
            bytes,
        })?;
        self.note_in_slurm(id, &snapshot);
        say(&format!(
            "job {id} written to {} in {:.1} s ({} MB)",
            snapshot.display(),
            took_ms / 1e3,
            bytes / 1_000_000
        ));
        Ok(Reply::Dumped {
            to: snapshot.display().to_string(),
            bytes,
            took_ms,
        })
    }

    /// Where job `id`'s images are, in Slurm's own record of the job.
    fn note_in_slurm(&self, id: u64, snapshot: &Path) {
        let _ = std::process::Command::new(&self.settings.scontrol)
            .args([
                "update",
                &format!("JobId={id}"),
                &format!("Comment=cudackpt snapshot {}", snapshot.display()),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    fn criu_args(&self) -> Vec<String> {
        self.settings
            .criu
            .iter()
            .flat_map(|c| ["--criu".to_string(), c.display().to_string()])
            .collect()
    }

    /// Runs `cudackpt --json ARGS` in the job's network namespace: its
    /// report and when (clock ticks since boot) it started, on success,
    /// else why it failed. CRIU restores a job into
    /// its own namespace, and dumps one only from it: the command is
    /// started from a thread of the service moved into the job's
    /// namespace (a namespace is a thread's, and a child takes its
    /// parent thread's). With `as_the_job`, the command runs with the
    /// job's real user and group ids, root's effective ids and
    /// capabilities kept: the kernel lets a process read the resource
    /// limits of processes of its real user (`prlimit`, which CRIU reads
    /// of every process it dumps) without CAP_SYS_RESOURCE, which root
    /// lacks in a container; credentials, too, are a thread's.
    fn cudackpt(
        &self,
        job: &AskingJob,
        args: &[String],
        as_the_job: bool,
    ) -> Result<(serde_json::Value, u64), String> {
        let me = std::env::current_exe().map_err(|e| format!("cannot find this cudackpt: {e}"))?;
        let output = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    rustix::thread::move_into_link_name_space(
                        job.netns.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .map_err(|e| {
                        format!(
                            "cannot enter job {}'s network namespace: {e}",
                            job.record.job
                        )
                    })?;
                    if as_the_job {
                        let gid = rustix::process::Gid::from_raw(job.record.gid);
                        let uid = rustix::process::Uid::from_raw(job.record.uid);
                        rustix::thread::set_thread_res_gid(Some(gid), None, None)
                            .and_then(|()| {
                                rustix::thread::set_thread_res_uid(Some(uid), None, None)
                            })
                            .map_err(|e| {
                                format!("cannot take job {}'s real ids: {e}", job.record.job)
                            })?;
                    }
                    let child = std::process::Command::new(&me)
                        .arg("--json")
                        .args(args)
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| format!("cannot run cudackpt: {e}"))?;
                    let pid = child.id() as i32;
                    self.waited_lock().insert(pid);
                    let since = crate::targets::process::starttime(pid).unwrap_or(u64::MAX);
                    let output = child.wait_with_output();
                    self.waited_lock().remove(&pid);
                    output
                        .map(|output| (output, since))
                        .map_err(|e| format!("cudackpt {}: {e}", args[0]))
                })
                .join()
                .unwrap_or_else(|_| Err("the thread running cudackpt panicked".to_string()))
        })?;
        let (output, since) = output;
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|_| {
            format!(
                "cudackpt {} ended with {} and no report",
                args[0], output.status
            )
        })?;
        if output.status.success() {
            return Ok((report, since));
        }
        let error = &report["error"];
        Err(format!(
            "{} ({})",
            error["message"].as_str().unwrap_or("failed"),
            error["hint"].as_str().unwrap_or("")
        ))
    }

    fn waited_lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.waited.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reaps the service's children nobody waits for (processes of a
    /// restored job orphaned to it), once each has been a zombie for a
    /// second.
    fn reap_orphans(&self) {
        let mut seen: BTreeSet<i32> = BTreeSet::new();
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let zombies: BTreeSet<i32> = restored_tree::children_since(0)
                .into_iter()
                .filter(|&pid| {
                    crate::targets::process::read_status(pid)
                        .ok()
                        .flatten()
                        .is_some_and(|s| s.state == 'Z')
                })
                .collect();
            let waited = self.waited_lock().clone();
            for &pid in zombies.intersection(&seen) {
                if !waited.contains(&pid) {
                    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::waitpid(
                            Some(pid),
                            rustix::process::WaitOptions::NOHANG,
                        );
                    }
                }
            }
            seen = zombies;
        }
    }
}

/// The root of the tree a dump of job `job` takes: the tree the service
/// restored for it, else the one child of its wrapper; refused where a
/// process of it does not run as the job's user.
fn tree_to_dump(job: &AskingJob, restored: Option<&RestoredJob>) -> Result<i32, String> {
    let root = match restored {
        Some(r) => r.root,
        None if crate::targets::process::pidfd_exit_within(
            &job.asker_pidfd,
            Some(Duration::ZERO),
        )
        .unwrap_or(true) =>
        {
            return Err("the job's wrapper has ended".into())
        }
        None => only_child(job.asker)?,
    };
    let tree = crate::targets::discover::trees(&[root]);
    if let Some(other) = tree.iter().find(|&&pid| {
        crate::targets::process::read_status(pid)
            .ok()
            .flatten()
            .is_some_and(|s| s.uids.iter().any(|&u| u != job.record.uid))
    }) {
        return Err(format!(
            "PID {other} of the job's tree does not run as the job's user (uid {}): the service dumps a job's own processes only",
            job.record.uid
        ));
    }
    Ok(root)
}

/// Refuses the snapshot in `images` where it would restore more than job
/// `job`'s user with what Slurm gives its batch step (`own_processes`).
fn refuse_beyond_the_job(images: &Path, job: &AskingJob) -> Result<(), String> {
    let uid = job.record.uid;
    let mut found = super::own_processes::beyond_the_job(images, uid, &job.grant);
    if found.is_empty() {
        return Ok(());
    }
    let more = found.len().saturating_sub(4);
    found.truncate(4);
    if more > 0 {
        found.push(format!("and {more} more"));
    }
    Err(format!(
        "the snapshot {} would restore more than the job's user (uid {uid}): {}",
        images.display(),
        found.join("; ")
    ))
}

/// Ends a refused connection: what the asker sent meanwhile is read and
/// dropped, not left unread, for closing on unread bytes resets the
/// connection and the asker would not read why it was refused.
fn hang_up(stream: &UnixStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(
        &mut std::io::Read::take(stream, 64 << 10),
        &mut std::io::sink(),
    );
}

/// Sends `signal` to the job restored for this connection, by its pidfd.
fn signalled(restored: Option<&RestoredJob>, signal: i32) -> Reply {
    use rustix_libc_wrappers::process::SignalExt;
    match (restored, rustix::process::Signal::from_raw(signal)) {
        (Some(r), Some(sig)) => match rustix::process::pidfd_send_signal(&r.pidfd, sig) {
            Ok(()) => Reply::Signalled,
            Err(e) => Reply::Refused {
                why: format!("signal {signal}: {e}"),
            },
        },
        _ => Reply::Refused {
            why: "no job of this connection was restored, or no such signal".into(),
        },
    }
}

/// Runs `criu check` as root once, so that CRIU caches what the kernel
/// can do (in its run directory, where that is a tmpfs): a dump with a
/// job's real ids is run by the kernel in secure mode, in which CRIU's
/// own probe of nftables does not start, and reads the cache instead.
fn prime_criu(criu: Option<&Path>) {
    let criu = criu.unwrap_or(Path::new("criu"));
    let checked = std::process::Command::new(criu)
        .arg("check")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    say(&format!(
        "this root lacks CAP_SYS_RESOURCE: jobs are dumped with their real user and group ids, CRIU's kernel facts cached first (`{} check`: {})",
        criu.display(),
        checked.map_or_else(|e| e.to_string(), |s| s.to_string())
    ));
}

/// `OLD=NEW,...` from the snapshot's GPUs (its manifest's) to those Slurm
/// gave the job now, in order; `None` where Slurm names none or the
/// snapshot held none (an empty map is no `--map` to give).
fn gpu_map(manifest: &Manifest, record: &job::JobRecord) -> Result<Option<String>, String> {
    if record.gpu_indices.is_empty() || manifest.gpus.is_empty() {
        return Ok(None);
    }
    let old: Vec<String> = manifest.gpus.iter().map(|g| g.uuid.clone()).collect();
    let inventory = crate::gpu::inventory::Inventory::loading(None);
    let listing = inventory.without_cuda().ok_or("this host lists no GPU")?;
    let new: Vec<String> = record
        .gpu_indices
        .iter()
        .map(|&i| {
            listing
                .gpus
                .iter()
                .find(|g| g.index == i as usize)
                .map(|g| g.uuid.to_string())
                .ok_or_else(|| format!("Slurm gave GPU {i}, which this host does not list"))
        })
        .collect::<Result<_, _>>()?;
    map_in_order(&old, &new).map(Some)
}

/// The map from the snapshot's GPUs to the job's new ones, in order
/// (pure).
pub fn map_in_order(old: &[String], new: &[String]) -> Result<String, String> {
    if old.len() > new.len() {
        return Err(format!(
            "the snapshot used {} GPUs and Slurm gave the job {}",
            old.len(),
            new.len()
        ));
    }
    Ok(old
        .iter()
        .zip(new)
        .map(|(o, n)| format!("{o}={n}"))
        .collect::<Vec<_>>()
        .join(","))
}

/// The one child of the wrapper `asker` (its main thread's, the one that
/// starts it): the job's command.
fn only_child(asker: i32) -> Result<i32, String> {
    let children = restored_tree::children_of_task(asker, asker);
    match children.as_slice() {
        [one] => Ok(*one),
        [] => Err("the job's command is not running".into()),
        many => Err(format!(
            "the wrapper has {} children: the service dumps one tree",
            many.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_s_gpus_go_to_the_job_s_new_ones_in_order() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            map_in_order(&s(&["GPU-a", "GPU-b"]), &s(&["GPU-c", "GPU-d"])),
            Ok("GPU-a=GPU-c,GPU-b=GPU-d".to_string())
        );
        assert!(map_in_order(&s(&["GPU-a", "GPU-b"]), &s(&["GPU-c"])).is_err());
        assert_eq!(map_in_order(&[], &s(&["GPU-c"])), Ok(String::new()));
    }
}
