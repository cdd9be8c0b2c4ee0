/* A fake target for the drain tests (tests/cli/drain.rs): a "rank" with a
 * thread named as PyTorch's NCCL watchdog, speaking the drain protocol
 * through the reference C client. Its mode says how it behaves:
 *   ack            releases (the watchdog thread ends), acknowledges, rebuilds
 *   keep           acknowledges but keeps its watchdog thread (a lie)
 *   ignore         catches the signal, never reaches a drain point
 *   die            exits while releasing
 *   stuck-rebuild  never finishes its rebuild
 *   plant          names a thread with the marker at start, never drains
 * Every event is appended to the file named by its second argument. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cudackpt_drain.h"
static const char *mode;
static FILE *events;
static pthread_t watchdog;
static void *watch(void *arg) { (void)arg; prctl(PR_SET_NAME, "pt_nccl_watchdg"); for (;;) pause(); return 0; }
static void *liar(void *arg) { (void)arg; prctl(PR_SET_NAME, CUDACKPT_DRAIN_MARKER); for (;;) pause(); return 0; }
static void note(const char *what) { fprintf(events, "%s\n", what); fflush(events); }
static void release(void) {
    note("released");
    if (!strcmp(mode, "die")) _exit(3);
    if (strcmp(mode, "keep")) { pthread_cancel(watchdog); pthread_join(watchdog, 0); }
}
static void rebuild(void) {
    if (!strcmp(mode, "stuck-rebuild")) for (;;) pause();
    if (strcmp(mode, "keep")) pthread_create(&watchdog, 0, watch, 0);
    note("rebuilt");
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    mode = argv[1];
    events = fopen(argv[2], "a");
    pthread_create(&watchdog, 0, watch, 0);
    if (!strcmp(mode, "plant")) { pthread_t planted; pthread_create(&planted, 0, liar, 0); }
    cudackpt_drain_init();
    note("ready");
    int drains = strcmp(mode, "ignore") && strcmp(mode, "plant");
    for (;;) { if (drains) cudackpt_drain_point(release, rebuild); usleep(2000); }
}
