# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_cudackpt_global_optspecs
    string join \n json v/verbose q/quiet libcuda= y/yes record-dir= no-lock color= progress-fd= h/help V/version
end

function __fish_cudackpt_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_cudackpt_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_cudackpt_using_subcommand
    set -l cmd (__fish_cudackpt_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c cudackpt -n "__fish_cudackpt_needs_command" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_needs_command" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_needs_command" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_needs_command" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_needs_command" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "state" -d 'Print each process\'s CUDA state and restore thread id'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "lock" -d 'Block new CUDA calls and wait for submitted work to finish (running → locked)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "checkpoint" -d 'Copy GPU memory to host memory and release the GPUs (locked → checkpointed)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "restore" -d 'Reacquire GPUs and copy memory back (checkpointed → locked)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "unlock" -d 'Let CUDA calls run again (locked → running); a drained process then rebuilds'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "toggle" -d 'Suspend running processes, or resume checkpointed ones'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "suspend" -d 'Lock and checkpoint: running → checkpointed (already checkpointed is success). A group moves together or not at all'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "resume" -d 'Restore and unlock: checkpointed → running (already running is success). A group moves together or not at all. A process that drained before its checkpoint is then asked to rebuild'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "restore-tid" -d 'Print the id of the thread that restores each process\'s CUDA state (CRIU needs it unfrozen during restore)'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "wait" -d 'Wait until every process reaches a state'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "ps" -d 'List the CUDA processes on this host'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "check" -d 'Say, for each process, whether suspend and resume would be safe, and why not; change nothing'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "recover" -d 'Put back the processes of a cudackpt that died mid-change'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "devices" -d 'List the GPUs of this host'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "doctor" -d 'Check whether this host can checkpoint CUDA processes, and say what to fix'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "demo" -d 'Checkpoint and restore this process\'s own GPU memory and check that the data survives'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "install-compat" -d 'Install cudackpt as `cuda-checkpoint` (a symlink), so CRIU\'s CUDA plugin and scripts written for NVIDIA\'s tool use it unchanged'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "dump" -d 'Write a process tree to disk through CRIU, with a manifest'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "undump" -d 'Restore a job `dump` wrote, through CRIU, onto GPUs with room'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "slurm" -d '`cudackpt slurm`\'s two halves'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "man" -d 'Show the man page (or a command\'s), or write every page into a directory'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "criu-hook" -d 'Act as CRIU\'s action script, giving CUDA support to any CRIU'
complete -c cudackpt -n "__fish_cudackpt_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand state" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s t -l timeout -d 'How long to wait for the process\'s CUDA work to drain before giving up (exit 3; the process then keeps running). Milliseconds (500) or a duration (500ms, 5s, 2m); 0, the default, waits as long as it takes' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -l drain -d 'Before the first lock, ask every process to release what the driver cannot restore (NCCL communicators, CUDA IPC) and wait until each acknowledges; then check the evidence again and lock. A process that does not catch the drain signal refuses the group before anything is sent; one that does not acknowledge in time calls it off (exit 12). See DRAIN PROTOCOL in cudackpt(1)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand lock" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l verify -d 'Confirm through NVML that a checkpoint left the process holding no GPU memory, and that a restore put it back on the GPUs expected (from its checkpoint record and the map). A mismatch, or no NVML, fails the command'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l force -d 'Checkpoint even when a pre-flight refuses: a process this driver is known not to restore (a CUDA IPC party, a rank of an NCCL job over P2P or shared memory; its restore will fail and it will be lost), or GPU memory that host or cgroup memory cannot hold (the kernel will likely kill the process). Also CUDACKPT_FORCE=1'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l dry-run -d 'Run every check and pre-flight (targets, restorability, host and GPU memory, the map), say what would happen, and change nothing: a refusal exits as the real command would'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -l drain -d 'Before the first lock, ask every process to release what the driver cannot restore (NCCL communicators, CUDA IPC) and wait until each acknowledges; then check the evidence again and lock. A process that does not catch the drain signal refuses the group before anything is sent; one that does not acknowledge in time calls it off (exit 12). See DRAIN PROTOCOL in cudackpt(1)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand checkpoint" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s m -l map -d 'Restore onto other GPUs: OLD=NEW pairs (repeat, or separate with commas). OLD is a GPU the process was checkpointed on (its UUID, or its index on this host), NEW a UUID or a GPU index on this host; UUIDs with or without `GPU-`. The driver needs every GPU of the host mapped, each to a distinct GPU; a partial map of this host\'s GPUs is completed. `auto` maps the GPUs recorded at checkpoint onto this host\'s by index (same count and models)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l map-file -d 'Read OLD=NEW pairs from a JSON file: {"OLD": "NEW", ...}, a list of "OLD=NEW" strings, or the `map` cudackpt prints with --json' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l force -d 'Go on despite the pre-flights: restore onto a GPU with less free memory than the process held, and (toggle) checkpoint a process this driver is known not to restore'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l verify -d 'Confirm through NVML that a checkpoint left the process holding no GPU memory, and that a restore put it back on the GPUs expected (from its checkpoint record and the map). A mismatch, or no NVML, fails the command'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -l dry-run -d 'Run every check and pre-flight (targets, restorability, host and GPU memory, the map), say what would happen, and change nothing: a refusal exits as the real command would'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand unlock" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s t -l timeout -d 'How long to wait for the process\'s CUDA work to drain before giving up (exit 3; the process then keeps running). Milliseconds (500) or a duration (500ms, 5s, 2m); 0, the default, waits as long as it takes' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s m -l map -d 'Restore onto other GPUs: OLD=NEW pairs (repeat, or separate with commas). OLD is a GPU the process was checkpointed on (its UUID, or its index on this host), NEW a UUID or a GPU index on this host; UUIDs with or without `GPU-`. The driver needs every GPU of the host mapped, each to a distinct GPU; a partial map of this host\'s GPUs is completed. `auto` maps the GPUs recorded at checkpoint onto this host\'s by index (same count and models)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l map-file -d 'Read OLD=NEW pairs from a JSON file: {"OLD": "NEW", ...}, a list of "OLD=NEW" strings, or the `map` cudackpt prints with --json' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l deadline -d 'Give up on the whole group after this long: no new step starts, the group is rolled back and the report names the slowest process. Lock timeouts are shortened to fit. A duration with its unit (30s, 500ms, 2m); 0, the default, sets no deadline' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l force -d 'Go on despite the pre-flights: restore onto a GPU with less free memory than the process held, and (toggle) checkpoint a process this driver is known not to restore'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l verify -d 'Confirm through NVML that a checkpoint left the process holding no GPU memory, and that a restore put it back on the GPUs expected (from its checkpoint record and the map). A mismatch, or no NVML, fails the command'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l dry-run -d 'Run every check and pre-flight (targets, restorability, host and GPU memory, the map), say what would happen, and change nothing: a refusal exits as the real command would'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -l drain -d 'Before the first lock, ask every process to release what the driver cannot restore (NCCL communicators, CUDA IPC) and wait until each acknowledges; then check the evidence again and lock. A process that does not catch the drain signal refuses the group before anything is sent; one that does not acknowledge in time calls it off (exit 12). See DRAIN PROTOCOL in cudackpt(1)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand toggle" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s t -l timeout -d 'How long to wait for the process\'s CUDA work to drain before giving up (exit 3; the process then keeps running). Milliseconds (500) or a duration (500ms, 5s, 2m); 0, the default, waits as long as it takes' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l deadline -d 'Give up on the whole group after this long: no new step starts, the group is rolled back and the report names the slowest process. Lock timeouts are shortened to fit. A duration with its unit (30s, 500ms, 2m); 0, the default, sets no deadline' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l verify -d 'Confirm through NVML that a checkpoint left the process holding no GPU memory, and that a restore put it back on the GPUs expected (from its checkpoint record and the map). A mismatch, or no NVML, fails the command'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l force -d 'Checkpoint even when a pre-flight refuses: a process this driver is known not to restore (a CUDA IPC party, a rank of an NCCL job over P2P or shared memory; its restore will fail and it will be lost), or GPU memory that host or cgroup memory cannot hold (the kernel will likely kill the process). Also CUDACKPT_FORCE=1'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l dry-run -d 'Run every check and pre-flight (targets, restorability, host and GPU memory, the map), say what would happen, and change nothing: a refusal exits as the real command would'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -l drain -d 'Before the first lock, ask every process to release what the driver cannot restore (NCCL communicators, CUDA IPC) and wait until each acknowledges; then check the evidence again and lock. A process that does not catch the drain signal refuses the group before anything is sent; one that does not acknowledge in time calls it off (exit 12). See DRAIN PROTOCOL in cudackpt(1)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand suspend" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s m -l map -d 'Restore onto other GPUs: OLD=NEW pairs (repeat, or separate with commas). OLD is a GPU the process was checkpointed on (its UUID, or its index on this host), NEW a UUID or a GPU index on this host; UUIDs with or without `GPU-`. The driver needs every GPU of the host mapped, each to a distinct GPU; a partial map of this host\'s GPUs is completed. `auto` maps the GPUs recorded at checkpoint onto this host\'s by index (same count and models)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l map-file -d 'Read OLD=NEW pairs from a JSON file: {"OLD": "NEW", ...}, a list of "OLD=NEW" strings, or the `map` cudackpt prints with --json' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l deadline -d 'Give up on the whole group after this long: no new step starts, the group is rolled back and the report names the slowest process. Lock timeouts are shortened to fit. A duration with its unit (30s, 500ms, 2m); 0, the default, sets no deadline' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l force -d 'Go on despite the pre-flights: restore onto a GPU with less free memory than the process held, and (toggle) checkpoint a process this driver is known not to restore'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l verify -d 'Confirm through NVML that a checkpoint left the process holding no GPU memory, and that a restore put it back on the GPUs expected (from its checkpoint record and the map). A mismatch, or no NVML, fails the command'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -l dry-run -d 'Run every check and pre-flight (targets, restorability, host and GPU memory, the map), say what would happen, and change nothing: a refusal exits as the real command would'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand resume" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand restore-tid" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s s -l state -d 'The state to wait for' -r -f -a "running\t''
locked\t''
checkpointed\t''
failed\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s t -l timeout -d 'Give up after this long (exit 14). A duration with its unit (30s, 500ms, 2m); 0, the default, waits as long as it takes' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand wait" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l tree -d 'Only this process\'s tree (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l cgroup -d 'Only this cgroup and its child cgroups (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand ps" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s p -l pid -d 'A process ID to act on (repeatable; same as a positional PID)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l tree -d 'Every CUDA process in this process\'s tree: it and its descendants (repeatable)' -r -f
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l cgroup -d 'Every CUDA process in this cgroup and its child cgroups: a directory on a cgroup filesystem, or a path relative to the cgroup v2 root, e.g. a pod\'s (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l drain-signal -d 'The signal that asks a process to drain, and to rebuild after its resume: a real-time signal, as a number (34..64) or RTMIN+N / RTMAX-N. The target must catch the same one' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l drain-timeout -d 'How long to wait for every process to acknowledge a drain, and for every drained process to rebuild once running again: a duration with its unit (30s, 2m, 500ms)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l all -d 'Every CUDA process on this host (commands that change state also need --yes)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -l drain -d 'Check as `suspend --drain` would: say who would be asked to drain, who could not be (a process that does not catch the drain signal), and what each would have to release. Sends nothing: no process is signalled, and nothing is locked'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand check" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l drain-timeout -d 'The longest recover waits for a drained process to rebuild, or to show whether a signal reached it, whatever a record asks (records run side by side; a signal stops the waits and recover reports what it did)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -l dry-run -d 'Say what would be done, and do nothing'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand recover" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand devices" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l cgroup -d 'Also weigh this cgroup\'s memory limits (and its ancestors\') against the GPU memory of its processes: a checkpoint needs that much headroom (repeatable)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l criu -d 'Check this CRIU rather than the first `criu` on PATH, as `dump --criu PATH` would run it' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l size-mib -d 'How much GPU memory to fill and carry through the round trip' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l device -d 'The GPU to use (index)' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand demo" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l force -d 'Replace an existing cuda-checkpoint there (e.g. NVIDIA\'s); it is kept as cuda-checkpoint.orig, and the swap is atomic'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l allow-build-dir -d 'Link to this cudackpt even though it runs from a cargo build directory (the link breaks at the next rebuild or cargo clean)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -l uninstall -d 'Remove the cuda-checkpoint link to this very cudackpt and put back what it replaced (a backup root owns); anything else there is left alone'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand install-compat" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l to -d 'The images directory: created 0700, or an empty one' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l tree -d 'The root of the tree, as other commands name a tree' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l cgroup -d 'The one process tree this cgroup holds (a container\'s); a cgroup of several trees is refused, naming their roots' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l criu -d 'The CRIU binary (default: `criu` on PATH). As root, it must be root\'s and writable by nobody else' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l drain -d 'Drain the job\'s CUDA processes before the suspend (smaller images; NCCL jobs need it)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l leave-running -d 'Keep the job running after the dump'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -l force -d 'Go on past the pre-flights and the room check'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand dump" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l criu -d 'The CRIU binary (default: `criu` on PATH)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l map -d 'Where the job\'s GPUs go, OLD=NEW by UUID (repeatable or comma-separated); default: chosen from free memory' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -l force -d 'Restore despite what the checks refuse (a different driver, too little GPU memory, a port or an address CRIU cannot bind)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand undump" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -f -a "run" -d 'Run a batch job\'s command (as the job\'s user): at Slurm\'s preemption signal (USR1) the node\'s service writes the job to disk, and at its restart brings it back'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -f -a "serve" -d 'Serve the Slurm jobs of this node (as root): dump each at its preemption, restore it at its restart'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and not __fish_seen_subcommand_from run serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l socket -d 'The node\'s service' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from run" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l socket -d 'The socket the jobs\' wrappers connect to (mode 0666)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l store -d 'Where each job\'s images go (JOB/snapshot-*), on storage every node reads: made 0700, root\'s' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l criu -d 'The CRIU binary (default: `criu` on PATH)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l scontrol -d 'Slurm\'s `scontrol`, which says whose each job is' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from serve" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from help" -f -a "run" -d 'Run a batch job\'s command (as the job\'s user): at Slurm\'s preemption signal (USR1) the node\'s service writes the job to disk, and at its restart brings it back'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from help" -f -a "serve" -d 'Serve the Slurm jobs of this node (as root): dump each at its preemption, restore it at its restart'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand slurm; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand completions" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l dir -d 'Write cudackpt.1 and one page per command here (created if missing). Under sudo, pkexec or doas the pages are written with the invoking user\'s credentials; a link or another user\'s file at a page\'s name is left alone and refused (exit 6)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand man" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l libcuda -d 'The CUDA driver library to load instead of libcuda.so.1 (default: $CUDACKPT_LIBCUDA when set)' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l record-dir -d 'Where checkpoint records are kept (default /run/cudackpt as root, else $XDG_RUNTIME_DIR/cudackpt; also CUDACKPT_RECORD_DIR), e.g. a CRIU images directory so they travel with the images. It must belong to root (or to you, when not root) and not be writable by others' -r -F
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l color -d 'When to colour the output' -r -f -a "auto\t'Colour when stdout is a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l progress-fd -d 'Write progress events as JSON Lines to descriptor FD, which the caller opened (a pipe, a file, a terminal; 2 is stderr): each driver call started and ended, and each pre-flight remark, as it happens (schema/progress-event.schema.json). stdout keeps its one document' -r
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l json -d 'Print one JSON document on stdout instead of text'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -s v -l verbose -d 'Log what cudackpt does to stderr (-v for details, -vv for everything; RUST_LOG also works)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -s q -l quiet -d 'Print no result and no warnings; errors still go to stderr, and the exit status says the rest (as grep -q)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -s y -l yes -d 'Confirm a command that changes every CUDA process on the host (--all)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -l no-lock -d 'Change processes without taking cudackpt\'s per-process locks (when the lock directory cannot be used and nothing else can act on them)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand criu-hook" -s V -l version -d 'Print version'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "state" -d 'Print each process\'s CUDA state and restore thread id'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "lock" -d 'Block new CUDA calls and wait for submitted work to finish (running → locked)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "checkpoint" -d 'Copy GPU memory to host memory and release the GPUs (locked → checkpointed)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "restore" -d 'Reacquire GPUs and copy memory back (checkpointed → locked)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "unlock" -d 'Let CUDA calls run again (locked → running); a drained process then rebuilds'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "toggle" -d 'Suspend running processes, or resume checkpointed ones'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "suspend" -d 'Lock and checkpoint: running → checkpointed (already checkpointed is success). A group moves together or not at all'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "resume" -d 'Restore and unlock: checkpointed → running (already running is success). A group moves together or not at all. A process that drained before its checkpoint is then asked to rebuild'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "restore-tid" -d 'Print the id of the thread that restores each process\'s CUDA state (CRIU needs it unfrozen during restore)'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "wait" -d 'Wait until every process reaches a state'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "ps" -d 'List the CUDA processes on this host'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "check" -d 'Say, for each process, whether suspend and resume would be safe, and why not; change nothing'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "recover" -d 'Put back the processes of a cudackpt that died mid-change'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "devices" -d 'List the GPUs of this host'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "doctor" -d 'Check whether this host can checkpoint CUDA processes, and say what to fix'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "demo" -d 'Checkpoint and restore this process\'s own GPU memory and check that the data survives'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "install-compat" -d 'Install cudackpt as `cuda-checkpoint` (a symlink), so CRIU\'s CUDA plugin and scripts written for NVIDIA\'s tool use it unchanged'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "dump" -d 'Write a process tree to disk through CRIU, with a manifest'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "undump" -d 'Restore a job `dump` wrote, through CRIU, onto GPUs with room'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "slurm" -d 'Run a Slurm job so that a preemption writes it to disk and its restart brings it back, or serve such jobs on a node'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "completions" -d 'Print a shell completion script'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "man" -d 'Show the man page (or a command\'s), or write every page into a directory'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "criu-hook" -d 'Act as CRIU\'s action script, giving CUDA support to any CRIU'
complete -c cudackpt -n "__fish_cudackpt_using_subcommand help; and not __fish_seen_subcommand_from state lock checkpoint restore unlock toggle suspend resume restore-tid wait ps check recover devices doctor demo install-compat dump undump slurm completions man criu-hook help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
