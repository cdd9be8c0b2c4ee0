/* A fake target for the drain tests (tests/cli/drain.rs): a "rank" with a
 * thread named as PyTorch's NCCL watchdog, speaking the drain protocol
 * through the reference C client. Its mode says how it behaves:
 *   ack            releases (the watchdog thread ends), acknowledges, rebuilds
 *   keep           acknowledges but keeps its watchdog thread (a lie)
 *   ignore         catches the signal, never reaches a drain point
 *   die            exits while releasing
 *   stuck-rebuild  never finishes its rebuild
 *   fail-rebuild   its rebuild fails: it says so (cudackpt_drain_rebuild_failed)
 *   plant          names a thread with the marker at start, never drains
 *   late           acknowledges a second after the request
 *   pretend        like plant, without the watchdog thread: a rank whose
 *                  only sign is its launcher environment, and a fake marker
 *   pool           acks, and starts a "compile-worker pool" at start: the
 *                  program DRAIN_TARGET_POOL run with the arguments
 *                  "device_forks DRAIN_TARGET_POOL_DEVICE" in a process
 *                  group of its own; a drain for a dump kills that group
 *   pool-kept      the same, but keeps the pool through every drain
 *   pool-no-notice the same as pool, but does not catch the dump notice
 * Releasing for a dump (the dump notice came first) notes "dump-notice".
 * With DRAIN_TARGET_SHRINK_TO_MIB set, releasing shrinks it: it appends
 * "PID:MIB" to the fake NVML's nvml-processes file in FAKE_CUDA_STATE_DIR
 * (the fake takes a process's last entry), as a job that empties its
 * allocator's cache shows less GPU memory to NVML.
 * Every event is appended to the file named by its second argument, and a
 * line per drain signal taken to that name with ".signals" added, so tests
 * can count what each rank was sent. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include "cudackpt_drain.h"
static const char *mode;
static FILE *events;
static pthread_t watchdog;
static void *watch(void *arg) { (void)arg; prctl(PR_SET_NAME, "pt_nccl_watchdg"); for (;;) pause(); return 0; }
static void *liar(void *arg) { (void)arg; prctl(PR_SET_NAME, CUDACKPT_DRAIN_MARKER); for (;;) pause(); return 0; }
static int signals_fd = -1;
static pid_t pool = -1;
static void start_pool(void) {
    const char *program = getenv("DRAIN_TARGET_POOL"), *device = getenv("DRAIN_TARGET_POOL_DEVICE");
    if (!program || !device) return;
    pool = fork();
    if (pool == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execlp("python3", "python3", program, "device_forks", device, (char *)0);
        _exit(127);
    }
}
/* The client's handler, counted first (write(2) is async-signal-safe). */
static void counted(int sig) { if (write(signals_fd, "signal\n", 7) < 0) {} cudackpt_on_request(sig); }
static void note(const char *what) { fprintf(events, "%s\n", what); fflush(events); }
static void shrink(void) {
    const char *to = getenv("DRAIN_TARGET_SHRINK_TO_MIB"), *dir = getenv("FAKE_CUDA_STATE_DIR");
    if (!to || !dir) return;
    char path[4096], line[64];
    snprintf(path, sizeof path, "%s/nvml-processes", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    int length = snprintf(line, sizeof line, "\n%d:%s\n", (int)getpid(), to);
    if (write(fd, line, (size_t)length) < 0) {}
    close(fd);
    note("shrunk");
}
static void release(void) {
    if (!strcmp(mode, "late")) sleep(1);
    if (cudackpt_drain_for_dump()) note("dump-notice");
    if (pool > 0 && cudackpt_drain_for_dump() && strcmp(mode, "pool-kept")) {
        kill(-pool, SIGKILL);
        waitpid(pool, 0, 0);
        pool = -1;
        note("pool-released");
    }
    note("released");
    if (!strcmp(mode, "die")) _exit(3);
    shrink();
    if (strcmp(mode, "keep")) { pthread_cancel(watchdog); pthread_join(watchdog, 0); }
}
static void rebuild(void) {
    if (!strcmp(mode, "stuck-rebuild")) for (;;) pause();
    if (!strcmp(mode, "fail-rebuild")) { note("rebuild-failed"); cudackpt_drain_rebuild_failed("NCCL error: remote process exited\x1b[2J"); return; }
    if (strcmp(mode, "keep")) pthread_create(&watchdog, 0, watch, 0);
    note("rebuilt");
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    mode = argv[1];
    events = fopen(argv[2], "a");
    if (strcmp(mode, "pretend")) pthread_create(&watchdog, 0, watch, 0);
    if (!strcmp(mode, "plant") || !strcmp(mode, "pretend")) { pthread_t planted; pthread_create(&planted, 0, liar, 0); }
    char signals_path[4096];
    snprintf(signals_path, sizeof signals_path, "%s.signals", argv[2]);
    signals_fd = open(signals_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    cudackpt_drain_init();
    if (!strcmp(mode, "pool-no-notice")) signal(CUDACKPT_DRAIN_DUMP_NOTICE, SIG_DFL);
    if (!strncmp(mode, "pool", 4)) start_pool();
    struct sigaction action = {0};
    action.sa_handler = counted;
    action.sa_flags = SA_RESTART;
    sigaction(CUDACKPT_DRAIN_SIGNAL, &action, 0);
    note("ready");
    int drains = strcmp(mode, "ignore") && strcmp(mode, "plant") && strcmp(mode, "pretend");
    for (;;) { if (drains) cudackpt_drain_point(release, rebuild); usleep(2000); }
}
