/* The cudackpt drain protocol, version 1, for a C program with a main loop
 * (cudackpt(1), DRAIN PROTOCOL). Public domain; copy it into your program.
 *
 *   cudackpt_drain_init();                       once, at start
 *   cudackpt_drain_point(release, rebuild);      at every safe point
 *
 * On a request (signal 40, SIGRTMIN+6 under glibc) the next safe point
 * calls release() (free what the driver cannot restore: NCCL
 * communicators, CUDA IPC mappings; and shrink: the driver checkpoints
 * every byte the process has allocated from CUDA, so cudaFree what can be
 * built again, such as a KV cache, and return a memory pool's free
 * blocks with cudaMemPoolTrimTo(pool, 0) or a caching allocator's own
 * trim, after cudaDeviceSynchronize()), names this thread "cudackpt-drain1"
 * (the acknowledgement), and waits for the next signal: then it calls
 * rebuild() and takes its old name back. A second signal before the safe
 * point calls the request off. The thread that calls it is renamed while
 * drained; call it from the main loop's thread.
 *
 * rebuild() proves what it built (a collective on every communicator)
 * before it returns; if that fails it calls cudackpt_drain_rebuild_failed(why),
 * and the thread keeps the name "cudackpt-fail1" instead of its old one:
 * cudackpt then reports the process rebuild_failed (exit 13), never
 * rebuilt, and quotes `why` (its first 200 characters): the reason is the
 * name of a memfd, "cudackpt-error:WHY", kept open until the next rebuild.
 *
 * When the drain serves a dump (CRIU's pre-dump), cudackpt first sends the
 * dump notice, the signal above the drain's (41), to a process that
 * catches it: cudackpt_drain_for_dump() is then true in release(), which
 * may free what only a dump needs gone (what CRIU cannot dump and a
 * suspend keeps). The notice is forgotten at the rebuild. */
#ifndef CUDACKPT_DRAIN_H
#define CUDACKPT_DRAIN_H
#include <linux/memfd.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CUDACKPT_DRAIN_SIGNAL 40
#define CUDACKPT_DRAIN_DUMP_NOTICE (CUDACKPT_DRAIN_SIGNAL + 1)
#define CUDACKPT_DRAIN_MARKER "cudackpt-drain1"
#define CUDACKPT_DRAIN_FAIL_MARKER "cudackpt-fail1"
#define CUDACKPT_DRAIN_ERROR_MEMFD "cudackpt-error:"

static volatile sig_atomic_t cudackpt_requests; /* counted by the handler */
static sig_atomic_t cudackpt_baseline;          /* the count at the last rebuild */

static int cudackpt_rebuild_failed;              /* set by rebuild() on failure */
static int cudackpt_error_fd = -1;               /* the memfd that says why */

static volatile sig_atomic_t cudackpt_dump_noticed; /* set by the dump notice */

static void cudackpt_on_request(int sig) { (void)sig; cudackpt_requests++; }
static void cudackpt_on_dump_notice(int sig) { (void)sig; cudackpt_dump_noticed = 1; }

/* Whether the drain under way serves a dump (for release()). */
static int cudackpt_drain_for_dump(void) { return cudackpt_dump_noticed; }

/* Called by rebuild() when what it built does not work; `why` (or NULL)
 * is what cudackpt quotes. A memfd's name holds 249 bytes. */
static void cudackpt_drain_rebuild_failed(const char *why) {
    cudackpt_rebuild_failed = 1;
    if (!why || cudackpt_error_fd >= 0) return;
    char name[250];
    snprintf(name, sizeof name, "%s%s", CUDACKPT_DRAIN_ERROR_MEMFD, why);
    cudackpt_error_fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
}

static void cudackpt_drain_init(void) {
    struct sigaction action = {0};
    action.sa_handler = cudackpt_on_request;
    action.sa_flags = SA_RESTART;
    sigaction(CUDACKPT_DRAIN_SIGNAL, &action, 0);
    action.sa_handler = cudackpt_on_dump_notice;
    sigaction(CUDACKPT_DRAIN_DUMP_NOTICE, &action, 0);
}

static void cudackpt_drain_point(void (*release)(void), void (*rebuild)(void)) {
    if ((cudackpt_requests - cudackpt_baseline) % 2 == 0) return; /* nothing asked */
    release();
    sig_atomic_t acknowledged = cudackpt_requests;
    char name[16] = {0};
    prctl(PR_GET_NAME, name);
    if ((acknowledged - cudackpt_baseline) % 2 == 1) {      /* not called off meanwhile */
        prctl(PR_SET_NAME, CUDACKPT_DRAIN_MARKER);
        while (cudackpt_requests == acknowledged) usleep(10000); /* checkpointed here */
    }
    cudackpt_rebuild_failed = 0;
    if (cudackpt_error_fd >= 0) { close(cudackpt_error_fd); cudackpt_error_fd = -1; }
    rebuild();
    cudackpt_dump_noticed = 0;
    cudackpt_baseline = cudackpt_requests;
    prctl(PR_SET_NAME, cudackpt_rebuild_failed ? CUDACKPT_DRAIN_FAIL_MARKER : name);
}
#endif
