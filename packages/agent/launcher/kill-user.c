/*
 * `cordon-launcher --kill-user <uid> <gid>`: ends every process of one user,
 * including processes that keep forking, for the agent's last act before it
 * seals the outputs (the agent's output-seal.ts) and when a storage cap is
 * passed.
 *
 * Why not the agent's own loop over /proc: a chain of processes each of
 * which forks and exits at once can empty a pass. The pass lists a pid, the
 * pid forks and exits before its status is read, and its child was born
 * after the listing: nothing of the user seen, the seal starts, and the
 * chain plants a link behind it (an independent audit did this under
 * gVisor, about one run in four).
 *
 * How: as the user itself (so `kill(-1, ...)` reaches exactly the user's
 * processes, the caller excepted, and never root's), stop them all with
 * SIGSTOP until one look at /proc finds none of them able to run, then kill
 * them with SIGKILL. A stopped process can neither fork nor exit, so a look
 * that finds every process of the user stopped has seen every one of them:
 * a child forked just before its parent stopped was in the process table
 * before the parent was seen stopped. A process the look saw running (born
 * after the last SIGSTOP, or not stopped yet) means another round.
 *
 * The process changes its ids from root's without executing anything
 * afterwards, so the kernel has made it non-dumpable: the user's processes
 * may kill it (it is theirs now), which the agent sees and retries, but
 * cannot trace it.
 *
 * Exit status: 0 when the user has no live process left; 1 when rounds ran
 * out with some still running; 2 when the ids could not be taken.
 */
#define _GNU_SOURCE
#include "kill-user.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Rounds of SIGSTOP and a look before giving up (a millisecond apart at least). */
#define MAX_ROUNDS 5000

enum look { NONE_LEFT, ALL_STOPPED, SOME_RUNNING, LOOK_FAILED };

/* The state letter and real uid of one process, from /proc/<pid>/status; 0 when it is gone. */
static int read_status(const char *pid, char *state, unsigned long *uid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/status", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[4096];
  ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return 0;
  text[got] = '\0';
  const char *state_line = strstr(text, "\nState:");
  const char *uid_line = strstr(text, "\nUid:");
  if (!state_line || !uid_line) return 0;
  state_line += strlen("\nState:");
  while (*state_line == ' ' || *state_line == '\t') state_line++;
  *state = *state_line;
  *uid = strtoul(uid_line + strlen("\nUid:"), NULL, 10);
  return 1;
}

/* What the user's processes, this one aside, are doing now. */
static enum look look_at(unsigned long uid, pid_t self) {
  DIR *proc = opendir("/proc");
  if (!proc) return LOOK_FAILED;
  int seen = 0, running = 0;
  struct dirent *entry;
  while ((entry = readdir(proc))) {
    const char *name = entry->d_name;
    if (name[0] < '0' || name[0] > '9') continue;
    if (strtol(name, NULL, 10) == self) continue;
    char state;
    unsigned long owner;
    if (!read_status(name, &state, &owner) || owner != uid) continue;
    /* Z and X: dead, waiting to be reaped. T and t: stopped, by a signal or a tracer. */
    if (state == 'Z' || state == 'X') continue;
    seen++;
    if (state != 'T' && state != 't') running++;
  }
  closedir(proc);
  if (seen == 0) return NONE_LEFT;
  return running ? SOME_RUNNING : ALL_STOPPED;
}

static void pause_briefly(void) {
  struct timespec millisecond = {.tv_sec = 0, .tv_nsec = 1000000};
  nanosleep(&millisecond, NULL);
}

int kill_user_processes(uid_t uid, gid_t gid) {
  if (uid == 0) {
    fprintf(stderr, "cordon-launcher: --kill-user refuses root\n");
    return 2;
  }
  if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) {
    fprintf(stderr, "cordon-launcher: --kill-user: taking uid %u: %s\n", (unsigned)uid,
            strerror(errno));
    return 2;
  }
  pid_t self = getpid();
  for (int round = 0; round < MAX_ROUNDS; round++) {
    kill(-1, SIGSTOP);
    enum look look = look_at(uid, self);
    if (look == NONE_LEFT) return 0;
    if (look == ALL_STOPPED) {
      kill(-1, SIGKILL);
      /* SIGKILL ends a stopped process; what is left is on its way out. */
      for (int wait = 0; wait < 1000; wait++) {
        if (look_at(uid, self) == NONE_LEFT) return 0;
        pause_briefly();
      }
      continue;
    }
    if (look == LOOK_FAILED) kill(-1, SIGKILL);
    pause_briefly();
  }
  kill(-1, SIGKILL);
  return 1;
}
