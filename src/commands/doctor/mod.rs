//! `doctor`: can this host checkpoint CUDA processes? Each check says what it
//! found and, when something is missing, what to do. Works with or without a
//! GPU or driver; the exit status is 0 only when checkpointing can work.

mod check;
mod criu;
mod places;

pub use check::{Check, Status};

use std::path::{Path, PathBuf};

use crate::commands::devices;
use crate::commands::headroom;
use crate::driver::{format_version, Driver, CHECKPOINT_FUNCTIONS};
use crate::exit::ExitStatus;
use crate::gpu::inventory::{Gpu, Inventory};
use crate::targets::process::Privileges;

#[derive(Debug, Clone, Default)]
pub struct DriverInfo {
    pub path: Option<PathBuf>,
    pub cuda_version: Option<String>,
    pub kernel_module_version: Option<String>,
    pub features: Features,
}

/// What this driver's checkpoint API can do, for scripts to test rather
/// than grep help texts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// The six checkpoint functions (driver 570 and newer).
    pub checkpoint_api: bool,
    /// `lock --timeout` (part of the same API).
    pub lock_timeout: bool,
    /// Restoring onto other GPUs (`--map`).
    pub gpu_remapping: bool,
}

/// Per-GPU modes that matter for checkpointing, as NVML reports them.
fn gpu_mode_checks(gpus: &[Gpu]) -> Vec<Check> {
    let mut checks = Vec::new();
    let off: Vec<String> = gpus
        .iter()
        .filter(|g| g.persistence_mode == Some(false))
        .map(|g| g.index.to_string())
        .collect();
    if !off.is_empty() {
        checks.push(
            Check::new("persistence mode", Status::Warn, format!("off on GPU {}", off.join(", ")))
                .hint("without persistence mode the driver tears GPU state down whenever no process uses it, which slows restores; run nvidia-persistenced (or nvidia-smi -pm 1)"),
        );
    } else if gpus.iter().any(|g| g.persistence_mode.is_some()) {
        checks.push(Check::new(
            "persistence mode",
            Status::Ok,
            "on for every GPU",
        ));
    }
    let mig: Vec<String> = gpus
        .iter()
        .filter(|g| g.mig_enabled == Some(true))
        .map(|g| g.index.to_string())
        .collect();
    if !mig.is_empty() {
        checks.push(
            Check::new("MIG", Status::Warn, format!("enabled on GPU {}", mig.join(", ")))
                .hint("cudackpt has not been tested on MIG instances; try a round trip (`cudackpt demo`) before relying on it"),
        );
    }
    checks
}

#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub checks: Vec<Check>,
    pub driver: DriverInfo,
    pub gpus: Vec<Gpu>,
}

impl DoctorReport {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    pub fn exit_status(&self) -> ExitStatus {
        self.checks
            .iter()
            .find(|c| c.status == Status::Fail)
            .map_or(ExitStatus::Success, |c| c.exit)
    }

    /// The failed checks, as one line each with their hints (for `demo`).
    pub fn failures(&self) -> Vec<&Check> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .collect()
    }
}

/// The transparent-huge-page mode: the host copy of a checkpoint goes
/// into the process's own memory, in 2 MiB pages only with `always`.
fn thp_check() -> Option<Check> {
    let text = crate::files::read_capped(
        Path::new("/sys/kernel/mm/transparent_hugepage/enabled"),
        4096,
    )
    .ok()?;
    let mode = parse_thp(&text)?;
    Some(if mode == "always" {
        Check::new(
            "transparent huge pages",
            Status::Ok,
            "always: checkpoints copy GPU memory into 2 MiB pages",
        )
    } else {
        Check::new(
            "transparent huge pages",
            Status::Info,
            format!("{mode}: checkpoints copy GPU memory into 4 KiB pages"),
        )
        .hint("a checkpoint writes GPU memory into the process's own pages, 4 KiB at a time unless THP is `always`; for a large checkpoint that may be faster: `echo always > /sys/kernel/mm/transparent_hugepage/enabled` (host-wide, for every process), and measure with `cudackpt-bench throughput` before and after")
    })
}

/// The bracketed mode of a THP setting: `always [madvise] never` (pure).
fn parse_thp(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

/// What this driver is known to restore, from the facts table in force.
fn restorability_check(cuda_version: Option<i32>) -> Check {
    use crate::ops::doors::preflights::{facts_for, Verdict};
    let facts = facts_for(cuda_version);
    let word = |verdict| match verdict {
        Verdict::Lost => "refused (never restored)",
        Verdict::Restorable => "allowed",
    };
    Check::new(
        "restorability facts",
        Status::Info,
        format!(
            "checkpoints of CUDA IPC parties: {}; of NCCL ranks over P2P or shared memory: {}; NCCL over sockets: allowed ({})",
            word(facts.ipc),
            word(facts.nccl_p2p_shm),
            facts.source
        ),
    )
}

/// The GPUs the driver lists, as a check.
fn gpus_check(listing: &devices::DevicesReport) -> Check {
    match (&listing.error, listing.gpus.is_empty()) {
        (Some(error), _) => Check::new(
            "GPUs",
            Status::Fail,
            format!("could not list GPUs: {error}"),
        )
        .hint("check `nvidia-smi`; the driver may be installed without a usable GPU"),
        (None, true) => Check::new("GPUs", Status::Fail, "the driver sees no GPU")
            .hint("check `nvidia-smi`, CUDA_VISIBLE_DEVICES and the container's device access"),
        (None, false) => {
            let names: Vec<String> = listing
                .gpus
                .iter()
                .map(|g| format!("{} {}", g.index, g.name))
                .collect();
            Check::new(
                "GPUs",
                Status::Ok,
                format!("{}: {}", listing.gpus.len(), names.join("; ")),
            )
        }
    }
}

/// `--cgroup PATH`: the cgroup's memory headroom as a check.
fn headroom_check(path: &Path) -> Check {
    use headroom::Fit;
    let found = headroom::check(path);
    let (status, exit) = match found.fit {
        Fit::Fits => (Status::Ok, ExitStatus::Failed),
        Fit::Short => (Status::Warn, ExitStatus::Failed),
        Fit::Unknown => (Status::Info, ExitStatus::Failed),
        Fit::NotACgroup => (Status::Fail, ExitStatus::Usage),
    };
    let check = Check::new("cgroup memory", status, found.detail).exit(exit);
    match found.hint {
        Some(hint) => check.hint(hint),
        None => check,
    }
}

/// NVML: what the host-memory pre-flight, `--verify`, `ps`'s memory column
/// and `devices`' free memory stand on. Its absence is no warning beside a
/// stand-in driver, whose GPUs NVML could not describe.
fn nvml_check(stand_in: bool) -> Check {
    match crate::gpu::nvml::open() {
        Err(why) if stand_in => Check::new(
            "NVML",
            Status::Info,
            format!("{why}; not needed: the driver library is a stand-in (cudackptStandIn), whose GPUs NVML could not describe"),
        ),
        Ok(nvml) => Check::new(
            "NVML",
            Status::Ok,
            match nvml.sys_driver_version() {
                Ok(version) => format!("libnvidia-ml loaded (driver {version})"),
                Err(_) => "libnvidia-ml loaded".to_string(),
            },
        ),
        Err(why) => Check::new("NVML", Status::Warn, why.to_string())
            .hint("install the driver's NVML (libnvidia-ml.so.1; in a container, the NVIDIA container toolkit's `utility` capability): without it a checkpoint cannot weigh GPU memory against host memory and cgroup limits, --verify fails, and ps and devices show no memory"),
    }
}

fn privilege_checks(privileges: &Privileges) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(if privileges.euid == 0 {
        Check::new("privileges", Status::Ok, "running as root")
    } else if privileges.cap_sys_ptrace {
        Check::new("privileges", Status::Ok, format!("uid {} with CAP_SYS_PTRACE", privileges.euid))
    } else {
        Check::new(
            "privileges",
            Status::Warn,
            format!("uid {} without CAP_SYS_PTRACE: can checkpoint its own processes only", privileges.euid),
        )
        .hint("other users' processes are refused (exit 6) and not listed by ps; run as root, or grant CAP_SYS_PTRACE (e.g. sudo setcap cap_sys_ptrace+ep $(which cudackpt)), to act on every process")
    });
    checks.push(match privileges.ptrace_scope {
        None => Check::new("ptrace scope", Status::Info, "no Yama ptrace restrictions in this kernel"),
        Some(scope @ 0..=1) => Check::new("ptrace scope", Status::Ok, format!("kernel.yama.ptrace_scope = {scope}")),
        Some(2) if privileges.is_privileged() => {
            Check::new("ptrace scope", Status::Ok, "kernel.yama.ptrace_scope = 2 (admin only; this user qualifies)")
        }
        Some(scope) => Check::new("ptrace scope", Status::Warn, format!("kernel.yama.ptrace_scope = {scope}"))
            .hint("scope 2 limits process access to CAP_SYS_PTRACE, scope 3 forbids it until reboot; CRIU needs it too"),
    });
    checks
}

/// Where a host with no driver is led: every command works on the tests'
/// fake driver.
const TUTORIAL: &str = "the tutorial tries every command on the tests' fake driver, then drains a two-rank PyTorch job on CPU (docs/guide/tutorial.md in cudackpt's source; /usr/share/doc/cudackpt/guide/tutorial.md from the .deb)";

/// Examines the host. Loads the driver from `libcuda` when given.
pub fn examine(libcuda: Option<&Path>, cgroups: &[PathBuf], criu: Option<&Path>) -> DoctorReport {
    let mut checks = Vec::new();
    let mut facts = DriverInfo {
        kernel_module_version: crate::gpu::kernel::module_version(),
        ..DriverInfo::default()
    };
    let mut gpus = Vec::new();
    // The driver's CUDA version as it reports it (13000 = 13.0).
    let mut cuda_version = None;
    let mut stand_in = false;
    match Driver::load(libcuda) {
        Err(error) => checks.push(
            Check::new("driver library", Status::Fail, error.to_string())
                .hint(match libcuda {
                    Some(_) => error.hint().to_string(),
                    None => format!("{}; no GPU here? {TUTORIAL}", error.hint()),
                })
                .exit(ExitStatus::DriverUnavailable),
        ),
        Ok(driver) => {
            stand_in = driver.is_stand_in();
            cuda_version = driver_checks(&driver, &mut facts, &mut checks);
            let listing = devices::list(&Inventory::with_driver(&driver));
            checks.push(gpus_check(&listing));
            checks.extend(gpu_mode_checks(&listing.gpus));
            gpus = listing.gpus;
        }
    }
    checks.push(nvml_check(stand_in));
    checks.extend(privilege_checks(&Privileges::current_with_ptrace_scope()));
    checks.extend(thp_check());
    checks.push(restorability_check(cuda_version));
    checks.extend(places::checks());
    checks.push(criu::check(criu));
    checks.extend(cgroups.iter().map(|path| headroom_check(path)));
    DoctorReport {
        checks,
        driver: facts,
        gpus,
    }
}

/// What the loaded driver says of itself (its library, its version, the
/// checkpoint API), into `checks` and `facts`; its CUDA version.
fn driver_checks(driver: &Driver, facts: &mut DriverInfo, checks: &mut Vec<Check>) -> Option<i32> {
    let path = driver.path();
    checks.push(Check::new(
        "driver library",
        Status::Ok,
        path.display().to_string(),
    ));
    facts.path = Some(path);
    let module = facts
        .kernel_module_version
        .as_deref()
        .map_or(String::new(), |v| format!(", kernel module {v}"));
    let version = driver.version();
    let cuda_version = version.as_ref().ok().copied();
    checks.push(match version {
        Ok(version) => {
            facts.cuda_version = Some(format_version(Some(version)));
            Check::new(
                "driver version",
                Status::Ok,
                format!("CUDA {}{module}", format_version(Some(version))),
            )
        }
        Err(error) => Check::new("driver version", Status::Warn, format!("{error}{module}")),
    });
    let missing = driver.missing_checkpoint_functions();
    checks.push(if missing.is_empty() {
        Check::new("checkpoint API", Status::Ok, format!("all {} functions present", CHECKPOINT_FUNCTIONS))
    } else {
        Check::new("checkpoint API", Status::Fail, format!("missing {}", missing.join(", ")))
            .hint("the checkpoint API needs display driver 570 or newer (GPU remapping 580); upgrade the driver")
            .exit(ExitStatus::DriverUnavailable)
    });
    let missing_api = !missing.is_empty();
    facts.features = Features {
        checkpoint_api: !missing_api,
        lock_timeout: !missing_api,
        gpu_remapping: !missing_api
            && cuda_version.is_some_and(|v| v >= crate::driver::GPU_REMAPPING_SINCE_CUDA),
    };
    cuda_version
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thp_mode_is_the_bracketed_one() {
        assert_eq!(parse_thp("always [madvise] never\n"), Some("madvise"));
        assert_eq!(parse_thp("[always] madvise never"), Some("always"));
        assert_eq!(parse_thp("nothing"), None);
    }

    #[test]
    fn the_facts_in_force_are_said() {
        let facts = restorability_check(Some(13000));
        assert_eq!(facts.status, Status::Info);
        assert!(
            facts.detail.contains("CUDA IPC parties: refused"),
            "{facts:?}"
        );
        assert!(facts.detail.contains("580.159.04"), "{facts:?}");
    }
}
