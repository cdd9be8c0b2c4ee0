//! Generated files: shell completions and man pages, both built from the
//! clap definition so they never drift from `--help`. The committed copies
//! under `completions/` and `man/` are checked against these by a test.

use std::io;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;
use roff::{bold, roman, Roff};

use crate::cli::args::Cli;
use crate::exit;

/// A completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut command = without_hidden_arguments(Cli::command());
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "cudackpt", &mut script);
    script
}

/// The command line without its hidden (internal) arguments, which
/// clap_complete would otherwise offer: each subcommand that has some is
/// rebuilt from its visible arguments.
fn without_hidden_arguments(command: clap::Command) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .filter(|sub| own_arguments(sub).iter().any(clap::Arg::is_hide_set))
        .map(|sub| sub.get_name().to_string())
        .collect();
    names.iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| {
            let visible: Vec<clap::Arg> = own_arguments(&sub)
                .into_iter()
                .filter(|a| !a.is_hide_set())
                .collect();
            // clap takes a command's name as 'static; this runs once per
            // generated script.
            let name: &'static str = Box::leak(sub.get_name().to_string().into_boxed_str());
            let mut rebuilt = clap::Command::new(name).args(visible);
            if let Some(about) = sub.get_about() {
                rebuilt = rebuilt.about(about.clone());
            }
            if let Some(long) = sub.get_long_about() {
                rebuilt = rebuilt.long_about(long.clone());
            }
            rebuilt
        })
    })
}

/// The JSON contract, for the man page (the guide, docs/guide/json.md,
/// carries the same).
pub const JSON_SCHEMA: &str = "\
With --json, every invocation prints exactly one JSON document on stdout (schema_version 1; fields are only ever added). Each kind of document has a JSON Schema (draft 2020-12): schema/*.schema.json in the source, /usr/share/cudackpt/schema in the package.

Process commands (state, lock, checkpoint, restore, unlock, toggle, suspend, resume, restore-tid, wait, ps): \
{\"schema_version\":1, \"command\":NAME, \"ok\":BOOL, \"exit_code\":N, \"duration_ms\":MS, \"error\":ERROR, \"warnings\":[TEXT], \
\"map\":[{\"old\":UUID, \"new\":UUID}] (restores with --map: the map passed to the driver, completed), \"processes\":[PROCESS...]}. ok is true only if the command and every process succeeded; exit_code is the exit status; \
the top-level error (a failure of the command as a whole, said once: e.g. --all without --yes, or a group refused before any process ran, whose processes are then not_attempted) and warnings (e.g. no CUDA process found) \
appear only when there are some.

PROCESS: {\"pid\":N, \"name\":COMM, \"ok\":BOOL, \"state_before\":STATE (compound commands), \"state\":STATE, \
\"restore_tid\":N (state, restore-tid, ps), \"duration_ms\":MS, \"steps\":[{\"step\":lock|checkpoint|restore|unlock, \"ok\":BOOL, \
\"rollback\":BOOL, \"duration_ms\":MS}], \"note\":TEXT, \"rolled_back\":BOOL, \"error\":ERROR, \"rollback_error\":ERROR, \
\"nccl\":BOOL (when looked at), \"warnings\":[TEXT], \"stopped\":true (when the driver could not be asked), \
\"gpu_memory_bytes\":N (with NVML: what ps shows it holding, what a checkpoint moved to host memory, or what a restore checked by --verify brought back; the next two fields say which), \"gpu_memory_held_bytes\":N (GPU memory it holds now: ps, and restores with --verify), \"gpu_memory_moved_bytes\":N (GPU memory its checkpoint moved to host memory), \"record\":PATH (the checkpoint record written), \"abandoned_by\":N (ps: a cudackpt that died while changing it; run recover), \"drain\":DRAIN}. STATE is running, locked, checkpointed, failed or unknown (after the command).

ERROR: {\"kind\":KIND, \"message\":TEXT, \"hint\":TEXT, \"cuda_error\":\"CUDA_ERROR_...\", \"code\":N}; cuda_error and code only when the driver answered. \
KIND is one of KINDS.

DRAIN (with --drain, or a rebuild after a resume): {\"signal\":N, \"outcome\":OUTCOME, \"acknowledged_ms\":MS (how long it took to show the marker), \"rebuilt_ms\":MS (how long until the marker went), \"exempted\":TEXT (the launcher environment not held against it because it acknowledged), \"released_bytes\":N (the GPU memory it gave back between the request and its acknowledgement, NVML), \"footprint_bytes\":N (the GPU memory it held once drained: what its checkpoint copies), \"rebuild_error\":TEXT (why its rebuild failed, in its own words: the first 200 characters it stated)}; a PROCESS has it as \"drain\" when the handshake touched it. OUTCOME is would_drain (a dry run), not_needed (it does not catch the signal and holds nothing the driver cannot restore, such as torchrun's agent: left out, nothing sent, checkpointed as it is), cannot_drain (it does not catch the signal yet is a rank or a CUDA IPC party, or is locked without having drained, or is stopped: nothing was sent to the group), not_acknowledged (no answer in time: the drain was called off), drained (it acknowledged and stays drained while checkpointed or locked), rebuilt (asked to rebuild, its marker went) not_rebuilt (its marker was still there at the end of the wait; it runs, nothing was rolled back), rebuild_failed (it said its rebuild failed, naming its marker thread cudackpt-fail1, or exited during it; nothing was rolled back) or rebuild_asked (asked while stopped, as CRIU's restore unlocks before it thaws: it rebuilds when it runs).

doctor: {\"schema_version\":1, \"command\":\"doctor\", \"ok\":BOOL, \"exit_code\":N, \"checks\":[{\"name\", \"status\":ok|warn|fail|info, \
\"detail\", \"hint\"}], \"driver\":{\"path\", \"cuda_version\", \"kernel_module_version\", \"features\":{\"checkpoint_api\":BOOL, \
\"lock_timeout\":BOOL, \"gpu_remapping\":BOOL}}, \"gpus\":[GPU]}.

devices: {\"schema_version\":1, \"command\":\"devices\", \"ok\":BOOL, \"exit_code\":N, \"source\":nvml|cuda_driver, \"warnings\":[TEXT], \
\"gpus\":[GPU]}. GPU: {\"index\", \"uuid\", \"name\", \"pci_bus_id\", \"memory_total_bytes\", \"memory_free_bytes\", \"mig_enabled\", \
\"persistence_mode\"}, null where unknown (without NVML: free memory, MIG, persistence).

demo: {\"schema_version\":1, \"command\":\"demo\", \"ok\":BOOL, \"exit_code\":N, \"pid\":N, \"size_bytes\":N, \"gpu\":GPU, \
\"steps\":[{\"step\", \"ok\", \"state\", \"duration_ms\"}], \"data_intact\":BOOL, \"hash_before\":HEX, \"hash_after\":HEX, \"error\":ERROR}.";

/// A subcommand's examples (its long after-help, "Examples:" and what
/// follows), kept as typed: they show a table.
fn examples(roff: &mut Roff, command: &clap::Command) {
    let Some(text) = command.get_after_long_help().map(ToString::to_string) else {
        return;
    };
    let Some(body) = text.strip_prefix("Examples:\n") else {
        return;
    };
    section(roff, "EXAMPLES");
    roff.control("nf", []);
    for line in body.lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
}

fn section(roff: &mut Roff, title: &str) {
    roff.control("SH", [title]);
}

/// The files cudackpt reads and writes.
const FILES: [(&str, &str); 10] = [
    (
        "/run/cudackpt",
        "The run directory as root (0700; $XDG_RUNTIME_DIR/cudackpt otherwise). It must belong to its user and be writable by nobody else.",
    ),
    (
        "/run/cudackpt/PID.json",
        "The checkpoint record of a process cudackpt checkpointed: its GPUs, memory, start time and driver (read by restore --map auto and the memory pre-flight; removed at restore). --record-dir or CUDACKPT_RECORD_DIR moves them, e.g. into a CRIU images directory.",
    ),
    (
        "/run/cudackpt/locks/PID.lock",
        "The per-process lock that keeps two cudackpt from changing one process at once (flock; the file holds the holder's PID). It stays while the process lives, so the next command opens it instead of creating it; it is removed at release once the process is gone, and by cudackpt recover.",
    ),
    (
        "/run/cudackpt/intents/OWNER.json",
        "The intent record of a command changing processes (more than one driver call, or a drain): written before its first change, removed when it ends. One left by a dead cudackpt makes others refuse those processes until cudackpt recover. A drain writes it again before each signal it sends, so it says which processes were sent what. OWNER.json.lock is the flock a recover holds while it acts on the record.",
    ),
    (
        "/run/cudackpt/drained/PID.json",
        "A process a cudackpt drained and left drained (locked or checkpointed), with its start time: the only place, besides the command that asked, whose word makes its drain marker believed. Removed when it is asked to rebuild.",
    ),
    (
        "/run/cudackpt/criu-hook.log",
        "What the CRIU hook did, when syslog is not available.",
    ),
    (
        "/proc/PID/maps, /proc/PID/environ, /proc/PID/task/*/comm, /proc/PID/status",
        "Read to find CUDA processes (libcuda mapped) and what cannot be restored (/dev/shm/cuda.shm.*, NCCL ranks); the drain handshake reads the signals a process catches (SigCgt) and its threads' names (the marker).",
    ),
    (
        "/proc/driver/nvidia/gpus",
        "The GPUs, as the kernel driver lists them, without creating a CUDA context.",
    ),
    (
        "/sys/fs/cgroup",
        "Memory limits (memory.max, memory.high, memory.current) and OOM kills (memory.events) of each target's cgroup v2 chain; where the memory controller is on cgroup v1, memory.limit_in_bytes, memory.usage_in_bytes and memory.oom_control of its v1 chain.",
    ),
    (
        "/dev/kmsg",
        "As root, the kernel log from the start of a checkpoint on, for the OOM killer's line about a target that died.",
    ),
];

/// NVIDIA's grammar, which cudackpt speaks when run as cuda-checkpoint.
const COMPATIBLE_MODE: &str = "\
Run as cuda-checkpoint (a symlink: cudackpt install-compat), or with NVIDIA's flags as its first argument, cudackpt speaks NVIDIA's cuda-checkpoint grammar exactly, so CRIU's CUDA plugin and scripts written for it drive cudackpt unchanged:

cuda-checkpoint --get-state --pid PID; cuda-checkpoint --get-restore-tid --pid PID; cuda-checkpoint --toggle --pid PID [--timeout MS]; cuda-checkpoint --action lock|checkpoint|restore|unlock --pid PID [--timeout MS] [--device-map OLD=NEW,...]; cuda-checkpoint --help.

Flags come in any order, as --flag value or --flag=value. --timeout is milliseconds. Output and exit statuses are NVIDIA's: the state or thread id on stdout, every failure exit 1 with two lines on stderr (the message, then an indented hint). A thread id acts on its process, as CRIU's plugin needs. The pre-flights run there too; CUDACKPT_FORCE=1 overrides them.";

/// `text` with the drain protocol's constants filled in from their one
/// source, `crate::drain::protocol` (pure): `{SIGNAL}`, `{MARKER}` and the
/// others, so that the man page cannot say another value than the code.
fn with_protocol(text: &str) -> String {
    use crate::drain::protocol::{self, DEFAULT_SIGNAL};
    let at_rtmax = protocol::DrainSignal::from_number(protocol::RTMAX)
        .map_or(0, |signal| signal.dump_notice().number());
    [
        ("{SIGNAL}", DEFAULT_SIGNAL.number().to_string()),
        (
            "{SIGNAL_OFFSET}",
            (DEFAULT_SIGNAL.number() - protocol::RTMIN).to_string(),
        ),
        (
            "{NOTICE}",
            DEFAULT_SIGNAL.dump_notice().number().to_string(),
        ),
        ("{NOTICE_AT_RTMAX}", at_rtmax.to_string()),
        ("{RTMIN}", protocol::RTMIN.to_string()),
        ("{RTMAX}", protocol::RTMAX.to_string()),
        ("{MARKER}", protocol::MARKER.to_string()),
        ("{FAIL_MARKER}", protocol::FAIL_MARKER.to_string()),
        ("{ERROR_MEMFD}", protocol::ERROR_MEMFD.to_string()),
        ("{ERROR_CHARS}", protocol::ERROR_CHARS.to_string()),
    ]
    .iter()
    .fold(text.to_string(), |text, (name, value)| {
        text.replace(name, value)
    })
}

/// The drain handshake (cudackpt(1), DRAIN PROTOCOL), as a target implements it;
/// the protocol's constants are filled in from their one source
/// ([`with_protocol`]).
const DRAIN_PROTOCOL: &str = "\
What the driver cannot restore (NCCL communicators over P2P or shared memory, CUDA IPC), a process can release on request and build again after: --drain on lock, checkpoint, suspend and toggle asks it to. Version 1 of the handshake, for a process to implement:

1. Catch the drain signal: {SIGNAL} (SIGRTMIN+{SIGNAL_OFFSET} under glibc) unless --drain-signal says otherwise. Count the signals in the handler. cudackpt reads SigCgt in /proc/PID/status first: a process that does not catch the signal is never sent it. If it holds nothing the driver cannot restore (a launcher such as torchrun's agent) it is left out of the handshake and checkpointed as it is (not_needed); if it does (a rank, a CUDA IPC party), the group is refused before any change (exit 8, cannot_drain).

2. At a safe point (between two steps), when the count since the last rebuild is odd: release (destroy every NCCL communicator or call ncclCommSuspend, drop every CUDA IPC mapping) and shrink (free what can be built again, such as a KV cache, and give an allocator's cached free blocks back to the driver: the checkpoint copies every byte the process has allocated), then name one thread {MARKER} (prctl PR_SET_NAME). That name is the acknowledgement; ranks of one job should agree first (an all-reduce of the request) so they release at the same step.

3. Wait until the count changes. The next signal asks for the rebuild: cudackpt sends it after the resume (resume, toggle, unlock), or at once when it calls the drain off. Rebuild, prove each rebuilt communicator with a collective, take the count as the new baseline, and give the thread its name back: the name going is the end of the rebuild. A rebuild that fails names the thread {FAIL_MARKER} instead, and keeps that name: cudackpt reports the process rebuild_failed (exit 13, kind rebuild_failed), never rebuilt, and rolls nothing back. It may say why: a memfd it keeps open named {ERROR_MEMFD}WHY (memfd_create(2); a name holds 249 bytes) is read from its link in /proc/PID/fd, never opened, and the first {ERROR_CHARS} characters of WHY are quoted in the message and as drain.rebuild_error. A signal that arrives before the safe point calls the request off (the count is even again).

4 (optional). When the drain serves a dump (the pre-dump of dump --drain, or of CRIU with CUDACKPT_DRAIN=1), cudackpt first sends the dump notice, the real-time signal above the drain signal ({NOTICE} by default; {NOTICE_AT_RTMAX} when the drain signal is {RTMAX}), to each process whose SigCgt shows it caught, and never to another. It changes no count: release then also what only a dump needs gone (the Python client shuts down torch.compile's compile-worker pool, which CRIU cannot dump and a suspend keeps), and forget the notice at the rebuild.

cudackpt sends signals through each process's pidfd and reads names in /proc/PID/task/*/comm, so the handshake crosses PID and mount namespaces and trusts no file the target could plant. It waits --drain-timeout (30s), or until --deadline if sooner, for every acknowledgement; then it checks the evidence again (no pt_nccl_* thread, no /dev/shm/cuda.shm.* mapping: a rank that acknowledged this command's request, or one a cudackpt drained and left drained, is no longer held to its launcher's WORLD_SIZE; a thread named {MARKER} that nobody asked for counts for nothing) and weighs host memory on the GPU memory each process kept (NVML, read before the request and after the acknowledgement; the report gives what each released), before the first lock: a group that fits its memory limits only once shrunk is checkpointed, and one that does not fit even then is refused (exit 8, insufficient_host_memory) with the drain called off. If any process does not acknowledge in time, every process asked is asked again, nothing is locked, and cudackpt exits 12 naming who did not (1, deadline_exceeded, when --deadline cut the wait). The waits for rebuilds are bounded by --deadline too, and a signal to cudackpt ends them at once (the signals are sent by then).

A cudackpt killed during a drain leaves an intent record written before each signal it sent: cudackpt recover sends each process exactly what undoes its drain: nothing to one never asked, one signal to one asked once, none to one asked twice. The one process a signal was going to at the kill is judged by what it does within the drain timeout (it drains: it had the request; its marker goes: it had the rebuild); one that took a request and never reaches a safe point cannot be told from one never asked, and recover says so by PID. One recover at a time acts on a record; another exits 10 (in_use) and sends nothing.

A C program: clients/c/cudackpt_drain.h in the source (cudackpt_drain_init() once, cudackpt_drain_point(release, rebuild) at every safe point). PyTorch: the cudackpt_drain package in clients/python (pip install ./clients/python), whose drain point agrees across ranks, destroys every process group, empties the caching allocator, runs the job's on_release hooks, and builds the groups again on the job's store.";

/// Every section but the options, in full, for cudackpt(1).
fn full_sections(roff: &mut Roff) {
    section(roff, "EXIT STATUS");
    roff.text([roman(
        "With several target processes, the status is that of the first failure.",
    )]);
    for status in exit::ALL {
        roff.control("TP", []);
        roff.text([bold(status.code().to_string())]);
        roff.text([roman(status.meaning())]);
    }
    section(roff, "JSON OUTPUT");
    let kinds: Vec<&str> = crate::vocabulary::failure::FaultKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    for paragraph in JSON_SCHEMA.split("\n\n") {
        roff.control("PP", []);
        roff.text([roman(paragraph.replace("KINDS", &kinds.join(", ")))]);
    }
    section(roff, "ENVIRONMENT");
    for (name, meaning) in crate::environment::DOCUMENTED {
        roff.control("TP", []);
        roff.text([bold(name)]);
        roff.text([roman(meaning)]);
    }
    section(roff, "FILES");
    for (name, meaning) in FILES {
        roff.control("TP", []);
        roff.text([bold(name)]);
        roff.text([roman(meaning)]);
    }
    section(roff, "COMPATIBLE MODE");
    for paragraph in COMPATIBLE_MODE.split("\n\n") {
        roff.control("PP", []);
        roff.text([roman(paragraph)]);
    }
    section(roff, "DRAIN PROTOCOL");
    for paragraph in with_protocol(DRAIN_PROTOCOL).split("\n\n") {
        roff.control("PP", []);
        roff.text([roman(paragraph)]);
    }
    section(roff, "WHAT CAN BE CHECKPOINTED");
    for (process, outcome) in checkpointable() {
        roff.control("TP", []);
        roff.text([bold(process)]);
        roff.text([roman(outcome)]);
    }
    // Where the facts come from: a paragraph after the list, not an item.
    roff.control("PP", []);
    roff.text([roman(format!(
        "These facts were {}; newer drivers are taken to behave the same until measured. doctor prints the facts in force.",
        crate::ops::preflight::restorable::facts_for(None).source
    ))]);
    section(roff, "SECURITY");
    for paragraph in with_protocol(TRUST_MODEL).split("\n\n") {
        roff.control("PP", []);
        roff.text([roman(paragraph)]);
    }
}

/// The "what can be checkpointed" table: the fixed rows, and those the
/// restorability facts in force for the newest measured driver decide.
fn checkpointable() -> Vec<(String, String)> {
    use crate::ops::preflight::restorable::{facts_for, Verdict};
    let facts = facts_for(None);
    let lost = |verdict, found: &str| {
        match verdict {
        Verdict::Lost => format!("The checkpoint succeeds and no restore ever does. Refused before any driver call (exit 8, unrestorable) when {found}; --force or CUDACKPT_FORCE=1 checkpoints anyway."),
        Verdict::Restorable => format!("Restored on this driver; checkpointed with a warning when {found}."),
    }
    };
    vec![
        ("Plain allocations, VMM, pinned host memory, several GPUs, CUDA graphs".into(), "Checkpointed and restored, data intact.".into()),
        ("Managed (UVM) memory".into(), "The driver refuses the checkpoint (CUDA_ERROR_NOT_SUPPORTED, 801); nothing is lost and the process goes on.".into()),
        ("A party to CUDA IPC (e.g. torch.multiprocessing sharing CUDA tensors)".into(), lost(facts.ipc, "its /proc/PID/maps shows the driver's /dev/shm/cuda.shm.* file (the peer is named)")),
        ("A rank of a multi-process NCCL job over P2P or shared memory".into(), lost(facts.nccl_p2p_shm, "it has PyTorch's pt_nccl_watchdg thread, or WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS above 1 in its environment")),
        ("The same rank launched with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 (sockets)".into(), "Restored; the job goes on. Suspend and resume every rank of the job in one command.".into()),
        ("A rank, or a CUDA IPC party, that speaks the drain protocol (suspend --drain)".into(), "It releases what cannot be restored, acknowledges, and is checkpointed once the evidence shows nothing left; after the resume it rebuilds. See DRAIN PROTOCOL.".into()),
        ("A process under a cgroup memory limit (a container)".into(), "The checkpoint copies its GPU memory into its own host memory, charged to its cgroup: without headroom of at least its GPU footprint the kernel OOM-kills it. Refused before any driver call (exit 8, insufficient_host_memory); doctor --cgroup PATH says whether a cgroup has the headroom. A target killed anyway is reported oom_killed (exit 5).".into()),
    ]
}

/// What a sudo rule for cudackpt grants, for the man page (the guide has
/// it at length).
const TRUST_MODEL: &str = "\
A sudo rule for cudackpt lets its users lock, checkpoint, restore and unlock the CUDA state of any process on the host, and nothing else.

Records and locks live in a directory owned by root (or by the user running cudackpt) and writable by nobody else unless sticky: /run/cudackpt, --record-dir, CUDACKPT_RECORD_DIR, CUDACKPT_LOCK_DIR. Another directory is refused before any driver call (exit 6). Files are created 0600, exclusively and never through a link; links, FIFOs, devices and other users' files there are never read or written. The per-process lock fails closed (exit 1) unless --no-lock.

As root, or with any capability or in secure execution (a setcap copy), --libcuda loads only a library owned by root and writable by nobody else, checked and loaded through the same descriptor, however root was reached (a login, sudo, doas, pkexec, a scheduler that passes a user's environment): nothing can tell whose choice a library was. --libcuda-unsafe (CUDACKPT_LIBCUDA_UNSAFE) no longer allows anything to anyone: it is accepted with a warning so that old scripts still run; a cudackpt without extra power loads whatever its user names, with or without it, since the library runs with that user's power alone. Under sudo, --map-file is opened with the credentials of the user who ran sudo, and no error shows its text. The drain signal is a real-time one ({RTMIN}..{RTMAX}). Process and thread names are printed with control characters escaped.

A root dump or undump reaches the images directory once, from /, by descriptor, with no symbolic link on any step, and CRIU works only through that descriptor (-D, -W and an empty --libdir of cudackpt's own as /proc/self/fd/N). Images that a user other than root could have written (a directory of theirs anywhere above them) restore only processes running as that user, with no capability and no file opened for them that they could not open, from a private stage in /run/cudackpt/undumps; several users' or anyone's are refused. CRIU's options at restore come only from the closed list a dump chooses, never from the manifest's text. After a failed restore only what that CRIU restored is killed.

Keep sudo's env_reset, so that no CUDACKPT_* variable passes through: %gpu-ops ALL=(root) NOPASSWD: /usr/local/bin/cudackpt";

/// A subcommand's own arguments: built on a copy, since they are deferred
/// until the subcommand is built (`defer` in args.rs), and without the
/// --help and --version that building adds (clap adds them again).
fn own_arguments(sub: &clap::Command) -> Vec<clap::Arg> {
    let mut built = sub.clone();
    built.build();
    built
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .cloned()
        .collect()
}

/// The OPTIONS of a subcommand's page, its own first, then the global ones
/// under GLOBAL OPTIONS (as `--help` separates them). clap_mangen renders
/// one flat list, so each half is rendered from a command holding only it.
fn render_options(command: &clap::Command, page: &mut Vec<u8>) -> io::Result<()> {
    let part = |global: bool| {
        let args: Vec<clap::Arg> = command
            .get_arguments()
            .filter(|a| a.is_global_set() == global)
            .cloned()
            .collect();
        // The cloned --help and --version stand in for the automatic ones.
        clap::Command::new("part")
            .version(env!("CARGO_PKG_VERSION"))
            .disable_help_flag(true)
            .disable_version_flag(true)
            .args(args)
    };
    clap_mangen::Man::new(part(false)).render_options_section(page)?;
    let mut global = Vec::new();
    clap_mangen::Man::new(part(true)).render_options_section(&mut global)?;
    let global =
        String::from_utf8_lossy(&global).replacen(".SH OPTIONS", ".SH \"GLOBAL OPTIONS\"", 1);
    page.extend_from_slice(global.as_bytes());
    Ok(())
}

fn render(command: &clap::Command, with_subcommands: bool, see_also: &str) -> io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    let mut synopsis = Vec::new();
    man.render_synopsis_section(&mut synopsis)?;
    page.extend_from_slice(
        synopsis_with_values(command, &String::from_utf8_lossy(&synopsis)).as_bytes(),
    );
    man.render_description_section(&mut page)?;
    if with_subcommands {
        man.render_options_section(&mut page)?;
    } else {
        render_options(command, &mut page)?;
    }
    if with_subcommands {
        man.render_subcommands_section(&mut page)?;
    }
    let mut roff = Roff::new();
    if with_subcommands {
        full_sections(&mut roff);
    } else {
        examples(&mut roff, command);
        // Said once, in cudackpt(1).
        section(&mut roff, "EXIT STATUS, JSON OUTPUT, ENVIRONMENT, FILES");
        roff.text([roman(
            "As for every cudackpt command: see cudackpt(1), which also says what can be checkpointed on this driver and what running as root trusts.",
        )]);
    }
    section(&mut roff, "SEE ALSO");
    roff.text([roman(see_also)]);
    page.extend_from_slice(roff.to_roff().as_bytes());
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// clap_mangen's synopsis names an option that takes a value without it
/// (`[--libcuda]`): give each its value name (`[--libcuda PATH]`).
fn synopsis_with_values(command: &clap::Command, synopsis: &str) -> String {
    let mut text = synopsis.to_string();
    for arg in command.get_arguments() {
        let (Some(long), Some(names)) = (arg.get_long(), arg.get_value_names()) else {
            continue;
        };
        if !arg.get_action().takes_values() {
            continue;
        }
        let long = long.replace('-', "\\-");
        let values: Vec<String> = names.iter().map(|n| format!("\\fI{n}\\fR")).collect();
        // `[--map]` or `[-m|--map]`: the long name closes the brackets.
        text = text.replace(
            &format!("\\fB\\-\\-{long}\\fR]"),
            &format!("\\fB\\-\\-{long}\\fR {}]", values.join(" ")),
        );
    }
    text
}

/// The command line as the man pages describe it: built, with no `help`
/// subcommand.
fn documented() -> clap::Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// The commands of `command` that have a page of their own.
fn paged(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|s| !s.is_hide_set())
}

/// cudackpt.1: (file name, roff text).
fn root_page(command: &clap::Command) -> io::Result<(String, Vec<u8>)> {
    let name = clap_mangen::Man::new(command.clone()).get_filename();
    Ok((name, render(command, true, "criu(8), nvidia-smi(1)")?))
}

/// A command's own page (cudackpt-dump.1): (file name, roff text).
fn command_page(sub: &clap::Command) -> io::Result<(String, Vec<u8>)> {
    let name = clap_mangen::Man::new(sub.clone()).get_filename();
    Ok((name, render(sub, false, "cudackpt(1)")?))
}

/// Every page: (file name, roff text). cudackpt.1 first.
pub fn man_pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    let command = documented();
    let mut pages = vec![root_page(&command)?];
    for sub in paged(&command) {
        pages.push(command_page(sub)?);
    }
    Ok(pages)
}

/// One page, rendered alone: cudackpt.1 (`command` None, what `cudackpt
/// man` shows), or a command's (`cudackpt man dump`: cudackpt-dump.1);
/// None for a command without a page.
pub fn man_page(command: Option<&str>) -> Option<Vec<u8>> {
    let documented = documented();
    let page = match command {
        None => root_page(&documented),
        Some(name) => command_page(paged(&documented).find(|s| s.get_name() == name)?),
    };
    page.ok().map(|(_, text)| text)
}

/// `cudackpt man COMMAND` names a command with a page of its own: a usage
/// error, as clap words one, where it does not.
pub fn check_man_command(name: &str) -> Result<(), clap::Error> {
    let mut command = documented();
    let commands: Vec<String> = paged(&command).map(|s| s.get_name().to_string()).collect();
    if commands.iter().any(|c| c == name) {
        return Ok(());
    }
    let man = command
        .find_subcommand_mut("man")
        .expect("cudackpt has a man command");
    Err(man.error(
        clap::error::ErrorKind::InvalidValue,
        format!(
            "no command {name:?} has a page; the commands are {}",
            commands.join(", ")
        ),
    ))
}

/// Writes every man page into `dir` (created if needed) for the user
/// cudackpt acts for, never through a link (`files::for_user`); the error
/// names the path it failed on.
pub fn write_man_pages(dir: &Path) -> Result<(), crate::files::UnsafeDir> {
    let pages = man_pages().map_err(|source| crate::files::UnsafeDir::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    crate::files::for_user::write_files(dir, &pages).map(drop)
}
