/* The attacker of tests/cli/disk_trust.rs: an unprivileged user who owns
 * PARENT watches it with inotify and, at event EVENT on NAME (create, the
 * first close, close2 the second: a check that opens twice is past its
 * second look then), swaps NAME for something of theirs:
 *
 *   swapper PARENT NAME EVENT READY exchange OTHER   renameat2(RENAME_EXCHANGE)
 *   swapper PARENT NAME EVENT READY link TARGET      NAME moved away, then a
 *                                                    symbolic link to TARGET
 *   swapper PARENT NAME EVENT READY plant FILE=TEXT  TEXT written to FILE in
 *                                                    PARENT (a pidfile)
 *
 * READY is created once the watch is in place; "swapped" is printed after
 * the swap. Exits 2 if nothing happened within 60 s. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: swapper PARENT NAME create|close READY exchange|link ARG\n");
        return 64;
    }
    const char *parent = argv[1], *name = argv[2], *event = argv[3];
    const char *ready = argv[4], *action = argv[5], *arg = argv[6];
    uint32_t mask = strcmp(event, "create") == 0 ? IN_CREATE : IN_CLOSE_NOWRITE;
    int wanted = strcmp(event, "close2") == 0 ? 2 : 1, seen_so_far = 0;
    int watch = inotify_init1(IN_CLOEXEC);
    int dir = open(parent, O_DIRECTORY | O_RDONLY);
    if (watch < 0 || dir < 0 || inotify_add_watch(watch, parent, mask) < 0) {
        perror("watch");
        return 1;
    }
    close(open(ready, O_CREAT | O_WRONLY, 0644));
    char buffer[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct pollfd poller = {.fd = watch, .events = POLLIN};
    while (poll(&poller, 1, 60000) == 1) {
        ssize_t got = read(watch, buffer, sizeof buffer);
        for (char *at = buffer; got > 0 && at < buffer + got;) {
            struct inotify_event *seen = (struct inotify_event *)at;
            at += sizeof *seen + seen->len;
            if (!(seen->mask & mask) || seen->len == 0 || strcmp(seen->name, name) != 0)
                continue;
            if (++seen_so_far < wanted)
                continue;
            int done;
            if (strcmp(action, "exchange") == 0) {
                done = renameat2(dir, name, dir, arg, RENAME_EXCHANGE);
            } else if (strcmp(action, "plant") == 0) {
                char file[4096];
                snprintf(file, sizeof file, "%s", arg);
                char *text = strchr(file, '=');
                done = -1;
                if (text) {
                    *text++ = 0;
                    int planted = openat(dir, file, O_CREAT | O_TRUNC | O_WRONLY, 0644);
                    done = planted >= 0 && write(planted, text, strlen(text)) >= 0 ? 0 : -1;
                }
            } else {
                char away[4096];
                snprintf(away, sizeof away, "%s.moved", name);
                done = renameat(dir, name, dir, away);
                if (done == 0)
                    done = symlinkat(arg, dir, name);
            }
            if (done != 0) {
                perror("swap");
                return 1;
            }
            printf("swapped\n");
            return 0;
        }
    }
    return 2;
}
