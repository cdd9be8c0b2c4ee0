//! NVML (`libnvidia-ml.so.1`, loaded at run time through nvml-wrapper) for
//! what the CUDA driver does not say without a context: how much GPU memory
//! each process holds. NVML being absent is a fact to report ("unknown"),
//! never an error; only commands that show memory pay its start-up.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::OnceLock;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;

use crate::driver::GpuUuid;
use crate::gpu::device::Gpu;

/// The names tried, in order: the runtime name first (the bare `.so` is
/// usually only installed with development packages).
const LIBRARY_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// Why NVML could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// No library could be loaded and initialised (each name tried, why).
    #[error("NVML is not available: {}", unavailable(.0))]
    Unavailable(Vec<(String, String)>),
    /// A query failed (NVML's words).
    #[error("{0}")]
    Query(String),
    /// NVML named a GPU by a UUID that does not read as one.
    #[error("{0}")]
    Uuid(String),
}

impl From<nvml_wrapper::error::NvmlError> for NvmlError {
    fn from(error: nvml_wrapper::error::NvmlError) -> NvmlError {
        NvmlError::Query(error.to_string())
    }
}

/// NVML for this process: loaded and initialised on first use only (its
/// start-up costs tens of milliseconds), then shared by every caller.
pub fn open() -> Result<&'static Nvml, NvmlError> {
    static SHARED: OnceLock<Result<Nvml, NvmlError>> = OnceLock::new();
    SHARED.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Loads and initialises NVML, or says why not.
fn load() -> Result<Nvml, NvmlError> {
    let mut reasons = Vec::new();
    for name in LIBRARY_NAMES {
        match Nvml::builder().lib_path(OsStr::new(name)).init() {
            Ok(nvml) => return Ok(nvml),
            Err(error) => reasons.push((name.to_string(), why_not(name, &error.to_string()))),
        }
    }
    Err(NvmlError::Unavailable(reasons))
}

/// What the loader said about one name, without the wrapper's "a
/// libloading error occurred: " and the name it repeats (pure).
fn why_not(name: &str, said: &str) -> String {
    let said = said
        .strip_prefix("a libloading error occurred: ")
        .unwrap_or(said);
    said.strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(said)
        .to_string()
}

/// Why none of the names could be used, said once when it is the same
/// reason for each (pure).
fn unavailable(reasons: &[(String, String)]) -> String {
    let names: Vec<&str> = reasons.iter().map(|(name, _)| name.as_str()).collect();
    match reasons {
        [] => "no library was tried".to_string(),
        [(name, why)] => format!("{name}: {why}"),
        [(_, why), rest @ ..] if rest.iter().all(|(_, other)| other == why) => {
            format!("neither {} can be loaded: {why}", names.join(" nor "))
        }
        _ => reasons
            .iter()
            .map(|(name, why)| format!("{name}: {why}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// GPU memory in use per PID and GPU, as [`memory_by_process_and_gpu`]
/// reads it.
pub type Usage = HashMap<i32, Vec<(GpuUuid, u64)>>;

/// GPU memory in use per PID, summed over every GPU, for processes running
/// compute work. A checkpointed process holds none and is not listed.
pub fn memory_by_process(nvml: &Nvml) -> Result<HashMap<i32, u64>, NvmlError> {
    Ok(totals(&memory_by_process_and_gpu(nvml, &Gpus::All)?))
}

/// Each PID's use summed over its GPUs (pure).
pub fn totals(usage: &Usage) -> HashMap<i32, u64> {
    usage
        .iter()
        .map(|(pid, uses)| (*pid, uses.iter().map(|(_, bytes)| bytes).sum()))
        .collect()
}

/// Every GPU NVML sees, in its index order (PCI bus order), without
/// creating a CUDA context; the GPUs are asked at once, as in
/// [`memory_by_process_and_gpu`].
pub fn gpus(nvml: &Nvml) -> Result<Vec<Gpu>, NvmlError> {
    let indices: Vec<u32> = (0..nvml.device_count()?).collect();
    at_once(&indices, |&index| describe(nvml, index))
        .into_iter()
        .collect()
}

/// One GPU as NVML describes it.
fn describe(nvml: &Nvml, index: u32) -> Result<Gpu, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let memory = device.memory_info().ok();
    Ok(Gpu {
        index: index as usize,
        uuid: uuid_of(&device)?,
        name: device.name()?,
        pci_bus_id: device.pci_info().ok().map(|pci| pci.bus_id),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        memory_free_bytes: memory.as_ref().map(|m| m.free),
        mig_enabled: device.mig_mode().ok().map(|mode| mode.current == 1),
        persistence_mode: device.is_in_persistent_mode().ok(),
    })
}

/// `ask` of every item, each on a thread of its own, in the items' order.
/// Where no thread can be started (a pids limit: `ps` is meant to work
/// under one), that item is asked on this thread, after the others.
fn at_once<I: Sync, T: Send>(
    items: &[I],
    ask: impl Fn(&I) -> Result<T, NvmlError> + Sync,
) -> Vec<Result<T, NvmlError>> {
    let ask = &ask;
    std::thread::scope(|scope| {
        let started: Vec<_> = items
            .iter()
            .map(|item| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || ask(item))
                    .ok()
            })
            .collect();
        started
            .into_iter()
            .zip(items)
            .map(|(thread, item)| match thread {
                Some(thread) => thread.join().unwrap_or_else(|_| {
                    Err(NvmlError::Query("an NVML query panicked".to_string()))
                }),
                None => ask(item),
            })
            .collect()
    })
}

fn uuid_of(device: &nvml_wrapper::Device<'_>) -> Result<GpuUuid, NvmlError> {
    device
        .uuid()?
        .parse()
        .map_err(|e: crate::driver::UuidError| NvmlError::Uuid(e.to_string()))
}

/// What each process holds on each GPU now, NVML opened for it, every GPU
/// of the host asked (`verify`, `ps`: anyone may hold memory anywhere).
pub fn usage_now() -> Result<Usage, NvmlError> {
    open().and_then(|nvml| memory_by_process_and_gpu(nvml, &Gpus::All))
}

/// What `pids` (and anyone beside them) hold on the GPUs `pids` have open:
/// every other GPU is left unasked, since NVML's start on a GPU costs ~6 ms
/// and a pre-flight needs only these processes' footprints. When which GPUs
/// they have open cannot be told, every GPU is asked.
pub fn usage_of(pids: &[i32]) -> Result<Usage, NvmlError> {
    let gpus = crate::gpu::opened::bus_ids_opened_by(pids, &crate::gpu::kernel::listing_dir())
        .map_or(Gpus::All, Gpus::ByBusId);
    open().and_then(|nvml| memory_by_process_and_gpu(nvml, &gpus))
}

/// Starts NVML on a thread of its own, for a command that will ask it after
/// work of its own (the checkpoint pre-flights): its start (~10 ms) overlaps
/// that work, and the first caller of [`open`] waits for what is left.
pub fn open_in_background() {
    // No thread (a pids limit): NVML starts when first asked, as before.
    let Ok(start) = std::thread::Builder::new().spawn(|| {
        let _ = open();
    }) else {
        return;
    };
    if let Ok(mut slot) = BACKGROUND.lock() {
        *slot = Some(start);
    }
}

/// Waits for a start begun by [`open_in_background`], if any: a process
/// must not exit while another thread is inside `dlopen` or `nvmlInit`
/// (the library's destructors would run under it).
pub fn settle() {
    let start = BACKGROUND.lock().ok().and_then(|mut slot| slot.take());
    if let Some(start) = start {
        let _ = start.join();
    }
}

/// The start begun in the background, until [`settle`] waits for it.
static BACKGROUND: std::sync::Mutex<Option<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(None);

/// Which GPUs to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gpus {
    /// Every GPU NVML sees.
    All,
    /// These, by PCI bus id (as the kernel driver lists them).
    ByBusId(Vec<String>),
}

/// GPU memory in use per PID and GPU (UUID), for compute processes, on the
/// GPUs asked; the GPUs are asked at once (NVML's first touch of a GPU is
/// its slow part, and it overlaps).
pub fn memory_by_process_and_gpu(nvml: &Nvml, gpus: &Gpus) -> Result<Usage, NvmlError> {
    let per_gpu = match gpus {
        Gpus::All => {
            let indices: Vec<u32> = (0..nvml.device_count()?).collect();
            at_once(&indices, |&index| {
                processes_on(nvml.device_by_index(index)?)
            })
        }
        Gpus::ByBusId(ids) => at_once(ids, |id| {
            processes_on(nvml.device_by_pci_bus_id(id.as_str())?)
        }),
    };
    let mut used: Usage = HashMap::new();
    for gpu in per_gpu {
        let (uuid, processes) = gpu?;
        for (pid, bytes) in processes {
            used.entry(pid).or_default().push((uuid, bytes));
        }
    }
    Ok(used)
}

/// One GPU's UUID and the memory (PID, bytes) each compute process holds
/// on it.
type OnOneGpu = (GpuUuid, Vec<(i32, u64)>);

/// What one GPU says: [`OnOneGpu`].
fn processes_on(device: nvml_wrapper::Device<'_>) -> Result<OnOneGpu, NvmlError> {
    let uuid = uuid_of(&device)?;
    let processes = device
        .running_compute_processes()?
        .into_iter()
        .filter_map(
            |process| match (i32::try_from(process.pid), process.used_gpu_memory) {
                (Ok(pid), UsedGpuMemory::Used(bytes)) => Some((pid, bytes)),
                _ => None,
            },
        )
        .collect();
    Ok((uuid, processes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_said_once_without_the_wrappers_words() {
        let said = "a libloading error occurred: libnvidia-ml.so.1: cannot open shared object file: No such file or directory";
        let why = why_not("libnvidia-ml.so.1", said);
        assert_eq!(
            why,
            "cannot open shared object file: No such file or directory"
        );
        let both = NvmlError::Unavailable(vec![
            ("libnvidia-ml.so.1".into(), why.clone()),
            ("libnvidia-ml.so".into(), why),
        ]);
        assert_eq!(
            both.to_string(),
            "NVML is not available: neither libnvidia-ml.so.1 nor libnvidia-ml.so can be loaded: cannot open shared object file: No such file or directory"
        );
        let different =
            NvmlError::Unavailable(vec![("a".into(), "x".into()), ("b".into(), "y".into())]);
        assert_eq!(different.to_string(), "NVML is not available: a: x; b: y");
    }

    #[test]
    fn asked_at_once_the_answers_keep_the_items_order() {
        let items: Vec<u32> = (0..16).collect();
        let answers = at_once(&items, |&i| {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(16 - i)));
            if i == 3 {
                Err(NvmlError::Query("three".into()))
            } else {
                Ok(i * 10)
            }
        });
        assert_eq!(answers.len(), 16);
        assert_eq!(answers[0], Ok(0));
        assert_eq!(answers[3], Err(NvmlError::Query("three".into())));
        assert_eq!(answers[15], Ok(150));
    }
}
