/*
 * cordon-launcher: starts commands for cordon's agent.
 *
 * Why it exists: Node starts a child with fork(), which copies the page tables
 * of the whole agent (tens of MiB) and then pays a page fault for every page
 * either side touches before the child execs. Measured on the machines cordon
 * is benchmarked on, that is 5-6 ms of a 10 ms exec round trip; vfork() from a
 * process this small costs a fraction of it. The agent starts this program once
 * and asks it to start every command. Everything else about a command (its
 * output, input, timeouts, tree kill, accounting) stays in the agent.
 *
 * Why C and not a library: it must run in any image (no libc of the image's is
 * assumed: it is linked statically), it runs as the agent's user with the
 * agent's capabilities, and it is small enough to read in one sitting. It does
 * no parsing beyond the length-prefixed frames below and never interprets a
 * command.
 *
 * Protocol. Only the agent can talk to it: its stdin and stdout are pipes to
 * the agent, a process of the same (root) user that the sandbox's user cannot
 * signal, trace or open the descriptors of.
 *
 *   agent -> launcher, on stdin, frames: u32 length (little-endian), then
 *     'S' u32 id u32 flags u32 uid u32 gid u32 group u32 argc u32 envc
 *         cwd\0 file\0 argv[0]\0 ... argv[argc-1]\0 env[0]\0 ... env[envc-1]\0
 *       start a command (flags: 1 stdin is a pipe, 2 new session,
 *       4 raise its OOM score to 1000; uid/gid 0xffffffff: keep the launcher's;
 *       a command that changes user gets `group` as its only supplementary
 *       group, 0xffffffff: none; the agent tags each exec's processes so,
 *       see the agent's exec-group.ts)
 *     'R' u32 id
 *       the agent holds its own copies of the command's pipes (it opened
 *       /proc/<launcher>/fd/<n>): the launcher closes its ends
 *
 *   launcher -> agent, on stdout, lines:
 *     ready <pid>
 *     started <id> <pid> <stdout fd> <stderr fd> <stdin fd or -1>
 *     failed <id> <errno>
 *     exited <id> <exit code or -1> <signal number or 0>
 *
 * The launcher exits when its stdin ends (the agent is gone).
 *
 * Every command it starts runs under a system call filter of cordon's own,
 * installed on the launcher itself (so inherited by every command and all
 * their descendants) on top of the engine's profile; see install_syscall_filter.
 * `cordon-launcher --exec <program> [arguments]` installs the same filter on
 * itself and becomes the program: for the one kind of command that does not
 * start here (a terminal, which the engine's exec starts).
 *
 * Or it starts the agent: `cordon-launcher --agent <program> [arguments]`
 * (a container's entry) starts the program as its child, with the two pipes
 * above as the child's descriptors 3 (frames to the launcher) and 4 (lines
 * from it), named in CORDON_AGENT_LAUNCHER_FDS=3,4. That spares the agent a
 * fork of itself (Node) at start-up, on the path of every sandbox's create.
 * The launcher then passes on to the agent the signals a container's init
 * sends (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2), and exits when
 * the agent does, with its status (128 + the signal if it was killed).
 *
 * Or it joins a connection: `cordon-launcher --pipe <socket>` connects to the
 * Unix socket and copies bytes between it and its own stdin and stdout, both
 * ways, until either end closes; see pipe_to_socket.
 *
 * Or it ends a user's processes: `cordon-launcher --kill-user <uid> <gid>`,
 * run by the agent (as root) before it seals the outputs; see kill-user.c.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kill-user.h"

#define FLAG_STDIN_PIPE 1u
#define FLAG_NEW_SESSION 2u
#define FLAG_RAISE_OOM_SCORE 4u
#define KEEP_ID 0xffffffffu
/* Far above any argv and environment the kernel accepts (ARG_MAX is 2 MiB by default). */
#define MAX_FRAME (64u << 20)
#define MAX_PATH_CANDIDATE 4096

struct command {
  uint32_t id;
  pid_t pid; /* 0 once reaped */
  int out_fd, err_fd, in_fd; /* the launcher's ends, -1 once released */
};

static struct command *commands;
static size_t command_count, command_capacity;
static int dev_null = -1;
/* Where frames come from and replies go: stdin and stdout, or the pipes to an agent this process started. */
static int request_fd = STDIN_FILENO, reply_fd = STDOUT_FILENO;
static pid_t agent_pid;

static void die(const char *what) {
  fprintf(stderr, "cordon-launcher: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_all(int fd, const char *text, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, text, length);
    if (written < 0) {
      if (errno == EINTR) continue;
      /* The agent is gone: a launcher it started goes too; one that started it exits with its status, when reaped. */
      if (agent_pid) return;
      exit(0);
    }
    text += written;
    length -= (size_t)written;
  }
}

static void reply(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *format, ...) {
  char line[160];
  va_list args;
  va_start(args, format);
  int length = vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (length < 0 || (size_t)length >= sizeof line) {
    fprintf(stderr, "cordon-launcher: reply too long\n");
    exit(1);
  }
  write_all(reply_fd, line, (size_t)length);
}

static uint32_t read_u32(const unsigned char *at) {
  return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

static void close_if_open(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static struct command *remember(uint32_t id) {
  if (command_count == command_capacity) {
    size_t capacity = command_capacity ? command_capacity * 2 : 16;
    struct command *grown = realloc(commands, capacity * sizeof *grown);
    if (!grown) die("out of memory");
    commands = grown;
    command_capacity = capacity;
  }
  struct command *command = &commands[command_count++];
  memset(command, 0, sizeof *command);
  command->id = id;
  command->out_fd = command->err_fd = command->in_fd = -1;
  return command;
}

/* A command is forgotten once it is reaped and its pipes are released. */
static void forget_finished(void) {
  size_t kept = 0;
  for (size_t i = 0; i < command_count; i++) {
    struct command *command = &commands[i];
    if (command->pid == 0 && command->out_fd < 0 && command->err_fd < 0 && command->in_fd < 0)
      continue;
    commands[kept++] = *command;
  }
  command_count = kept;
}

/*
 * The system call filter every command runs under, added to the engine's own
 * profile (filters stack; the stricter answer wins).
 *
 * fallocate(): only mode 0 (allocate within the file's size, growing it,
 * which the kernel holds to the file size limit, RLIMIT_FSIZE) and
 * PUNCH_HOLE|KEEP_SIZE (free space). Every other mode is refused with
 * EOPNOTSUPP, what a filesystem without the mode answers and what callers
 * fall back from: with FALLOC_FL_KEEP_SIZE the kernel allocates blocks past
 * the file's end without checking RLIMIT_FSIZE, so one call could take
 * hundreds of gigabytes of a host directory's disk before any measurement
 * could see it (measured here: 300 MiB in one call under a 50 MiB limit).
 *
 * kcmp(), pidfd_getfd(), process_madvise(): refused with EPERM, as the
 * engine's default profile refuses them to a container without
 * CAP_SYS_PTRACE. The agent holds that capability (to read its user's
 * descriptor tables for the storage cap), and the engine then opens these
 * three calls to every process of the container; commands get them back closed.
 *
 * inotify_add_watch() asking for read events (IN_ACCESS, IN_OPEN,
 * IN_CLOSE_NOWRITE): refused with EPERM. They tell a watcher when a
 * directory is opened and listed, and so where the agent's walk of a capped
 * host directory is: an independent audit moved 120 MiB between two
 * directories, always into one the walk had just listed, and no walk of a
 * 16 MiB cap ever saw it. Watches of changes (create, modify, move, delete,
 * attributes, close after writing), which file watchers and build tools
 * use, are untouched; a watch asking for every event (IN_ALL_EVENTS) is
 * refused and has to name the ones it needs.
 *
 * Each architecture a command could call in (x86_64 and its 32-bit and x32
 * ABIs, or aarch64 and 32-bit ARM) has a block of its own with that ABI's
 * numbers; the x32 bit is masked off, since x32 uses the x86_64 numbers.
 */
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_process_madvise
#define __NR_process_madvise 440
#endif
#define FALLOCATE_PUNCH_HOLE_KEEP_SIZE 3u

/* Read events of inotify, which show where the storage walk is (see above). */
#define INOTIFY_READ_EVENTS 0x31u /* IN_ACCESS | IN_CLOSE_NOWRITE | IN_OPEN */

/*
 * One architecture's block: 19 instructions; the accumulator holds the arch
 * on entry. Jump offsets count from the next instruction.
 */
#define ARCH_BLOCK(arch, nr_mask, nr_fallocate, nr_inotify_add_watch, nr_kcmp, nr_pidfd_getfd,   \
                   nr_process_madvise)                                                            \
  BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (arch), 0, 18),                                               \
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),                        \
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, (nr_mask)),                                               \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr_fallocate), 6, 0),                                    \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr_inotify_add_watch), 10, 0),                           \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr_kcmp), 2, 0),                                         \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr_pidfd_getfd), 1, 0),                                  \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr_process_madvise), 0, 1),                              \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),                    \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),                                                 \
      /* fallocate's mode, the low half of its second argument (both ABIs are little-endian) */    \
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),                   \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),                                                 \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FALLOCATE_PUNCH_HOLE_KEEP_SIZE, 1, 0),                    \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EOPNOTSUPP & SECCOMP_RET_DATA)),               \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),                                                 \
      /* inotify_add_watch's mask, the low half of its third argument */                           \
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),                   \
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, INOTIFY_READ_EVENTS, 0, 1),                              \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),                    \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void install_syscall_filter(void) {
  static struct sock_filter program[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
#if defined(__x86_64__)
      ARCH_BLOCK(AUDIT_ARCH_X86_64, ~0x40000000u, __NR_fallocate, __NR_inotify_add_watch,
                 __NR_kcmp, __NR_pidfd_getfd, __NR_process_madvise),
      /* i386 numbers (arch/x86/entry/syscalls/syscall_32.tbl) */
      ARCH_BLOCK(AUDIT_ARCH_I386, ~0u, 324, 292, 349, 438, 440),
#elif defined(__aarch64__)
      ARCH_BLOCK(AUDIT_ARCH_AARCH64, ~0u, __NR_fallocate, __NR_inotify_add_watch, __NR_kcmp,
                 __NR_pidfd_getfd, __NR_process_madvise),
      /* 32-bit ARM numbers (arch/arm/tools/syscall.tbl) */
      ARCH_BLOCK(AUDIT_ARCH_ARM, ~0u, 352, 317, 378, 438, 440),
#else
#error "cordon-launcher: no system call filter for this architecture"
#endif
      /* No other ABI can run here. */
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog filter = {.len = sizeof program / sizeof program[0], .filter = program};
  /* The container already has no-new-privileges; set here too, as the kernel requires it of a filter. */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) != 0) die("prctl(PR_SET_SECCOMP)");
}

/*
 * Everything the child does between vfork() and execve(): only system calls,
 * no allocation, no locks, nothing that touches the parent's state except
 * `child_errno` (the vfork child shares the parent's memory until it execs).
 * Mirrors what Node's own spawn does (libuv's uv__process_child_init), in its
 * order: descriptors, signals, session, directory, groups, group, user, exec.
 */
static volatile int child_errno;

static void child_fail(int error) {
  child_errno = error;
  _exit(127);
}

/*
 * The signals whose disposition in this process is not the default, found
 * once its set-up is done (find_non_default_signals): only they need setting
 * back in a command. execve() itself resets every caught signal, and this
 * launcher catches none (it reads its signals from a signalfd); what survives
 * an exec is an ignored signal (SIGPIPE here, and whatever its parent left
 * ignored). Resetting all 64 cost a command 64 system calls in the vfork
 * child, which under gVisor's ptrace platform each stop the child and wake
 * gVisor's kernel: in a traced exec('true') the loop took longer than
 * starting the command's process (bench/misses.md, issue 30).
 */
static int non_default_signals[NSIG];
static int non_default_count;

static void find_non_default_signals(void) {
  non_default_count = 0;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    /* The kernel's call: glibc's sigaction() refuses 32 and 33, which it keeps
     * for itself, yet a parent may leave them ignored (pnpm 12 does). Its
     * handler comes first, and SIG_DFL is 0. One that cannot be read is reset. */
    unsigned long kernel_action[4] = {0, 0, 0, 0};
    if (syscall(SYS_rt_sigaction, sig, NULL, kernel_action, sizeof(unsigned long)) != 0 ||
        kernel_action[0] != 0)
      non_default_signals[non_default_count++] = sig;
  }
}

static void child(const char *cwd, const char *file, char *const argv[], char *const envp[],
                  const char *search_path, uint32_t flags, uint32_t uid, uint32_t gid,
                  uint32_t group, int in_fd, int out_fd, int err_fd) {
  if (dup2(in_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
      dup2(err_fd, STDERR_FILENO) < 0)
    child_fail(errno);
  /* Signals this launcher ignores or blocks must not reach the command so (see non_default_signals). */
  for (int i = 0; i < non_default_count; i++) {
    /* A kernel sigaction of zeros is the default whatever its layout on this machine. */
    unsigned long kernel_action[4] = {0, 0, 0, 0};
    (void)syscall(SYS_rt_sigaction, non_default_signals[i], kernel_action, NULL,
                  sizeof(unsigned long));
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) child_fail(errno);
  if ((flags & FLAG_NEW_SESSION) && setsid() < 0) child_fail(errno);
  if (flags & FLAG_RAISE_OOM_SCORE) {
    /* The kernel's OOM killer then picks a runaway command before the agent. */
    int score = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (score >= 0) {
      (void)!write(score, "1000", 4);
      close(score);
    }
  }
  if (cwd[0] && chdir(cwd) != 0) child_fail(errno);
  /* Raw system calls: glibc's wrappers would try to change every thread's ids.
   * One setgroups() whether or not the command is tagged: the tag costs the exec nothing. */
  if (uid != KEEP_ID || gid != KEEP_ID) {
    gid_t groups[1] = {(gid_t)group};
    if (syscall(SYS_setgroups, group == KEEP_ID ? 0 : 1, groups) != 0) child_fail(errno);
  }
  if (gid != KEEP_ID && syscall(SYS_setgid, gid) != 0) child_fail(errno);
  if (uid != KEEP_ID && syscall(SYS_setuid, uid) != 0) child_fail(errno);

  if (strchr(file, '/')) {
    execve(file, argv, envp);
    child_fail(errno);
  }
  /* Search PATH as execvp does, from the command's own environment: a missing
   * or unsearchable entry moves on, a file found but refused is remembered,
   * any other failure (not an executable, too many arguments) ends the search. */
  char candidate[MAX_PATH_CANDIDATE];
  size_t file_length = strlen(file);
  int denied = 0;
  const char *entry = search_path;
  for (;;) {
    const char *end = strchr(entry, ':');
    size_t dir_length = end ? (size_t)(end - entry) : strlen(entry);
    const char *dir = dir_length ? entry : ".";
    if (!dir_length) dir_length = 1;
    if (dir_length + 1 + file_length + 1 <= sizeof candidate) {
      memcpy(candidate, dir, dir_length);
      candidate[dir_length] = '/';
      memcpy(candidate + dir_length + 1, file, file_length + 1);
      execve(candidate, argv, envp);
      if (errno == EACCES) denied = 1;
      else if (errno != ENOENT && errno != ENOTDIR) child_fail(errno);
    }
    if (!end) break;
    entry = end + 1;
  }
  child_fail(denied ? EACCES : ENOENT);
}

static const char *search_path_of(char *const envp[]) {
  for (size_t i = 0; envp[i]; i++)
    if (strncmp(envp[i], "PATH=", 5) == 0) return envp[i] + 5;
  return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
}

static void start_command(const unsigned char *frame, size_t length) {
  if (length < 29) {
    fprintf(stderr, "cordon-launcher: short start frame\n");
    exit(1);
  }
  uint32_t id = read_u32(frame + 1), flags = read_u32(frame + 5);
  uint32_t uid = read_u32(frame + 9), gid = read_u32(frame + 13), group = read_u32(frame + 17);
  uint32_t argc = read_u32(frame + 21), envc = read_u32(frame + 25);
  size_t strings = 2 + (size_t)argc + (size_t)envc;
  if (argc == 0 || strings > length) {
    fprintf(stderr, "cordon-launcher: bad start frame\n");
    exit(1);
  }
  char **list = calloc(strings + 2, sizeof *list); /* room for two NULL terminators */
  if (!list) die("out of memory");
  char *at = (char *)frame + 29;
  char *end = (char *)frame + length;
  for (size_t i = 0; i < strings; i++) {
    char *nul = memchr(at, '\0', (size_t)(end - at));
    if (!nul) {
      fprintf(stderr, "cordon-launcher: unterminated string in start frame\n");
      exit(1);
    }
    list[i] = at;
    at = nul + 1;
  }
  /* cwd, file, argv[argc], NULL, env[envc], NULL */
  char *cwd = list[0], *file = list[1];
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  if (!argv || !envp) die("out of memory");
  memcpy(argv, list + 2, argc * sizeof *argv);
  memcpy(envp, list + 2 + argc, envc * sizeof *envp);

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      ((flags & FLAG_STDIN_PIPE) && pipe2(in_pipe, O_CLOEXEC) != 0)) {
    int error = errno;
    close_if_open(&out_pipe[0]); close_if_open(&out_pipe[1]);
    close_if_open(&err_pipe[0]); close_if_open(&err_pipe[1]);
    close_if_open(&in_pipe[0]); close_if_open(&in_pipe[1]);
    reply("failed %u %d\n", id, error);
    free(list); free(argv); free(envp);
    return;
  }
  int child_in = (flags & FLAG_STDIN_PIPE) ? in_pipe[0] : dev_null;
  const char *search_path = search_path_of(envp);
  child_errno = 0;
  pid_t pid = vfork();
  if (pid == 0)
    child(cwd, file, argv, envp, search_path, flags, uid, gid, group, child_in, out_pipe[1],
          err_pipe[1]);
  int error = pid < 0 ? errno : child_errno;
  /* The child shared this process's memory map until it exec'd, and its
   * setuid() marked that map not dumpable, which would stop the agent (same
   * user, no CAP_SYS_PTRACE) from opening /proc/<launcher>/fd/<n>. Restore it:
   * this process never changes its own ids, so it is what it was before. */
  if (pid > 0) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  close_if_open(&out_pipe[1]);
  close_if_open(&err_pipe[1]);
  close_if_open(&in_pipe[0]);
  free(list); free(argv); free(envp);
  if (pid > 0 && error != 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  if (error != 0) {
    close_if_open(&out_pipe[0]);
    close_if_open(&err_pipe[0]);
    close_if_open(&in_pipe[1]);
    reply("failed %u %d\n", id, error);
    return;
  }
  struct command *command = remember(id);
  command->pid = pid;
  command->out_fd = out_pipe[0];
  command->err_fd = err_pipe[0];
  command->in_fd = in_pipe[1];
  reply("started %u %d %d %d %d\n", id, (int)pid, command->out_fd, command->err_fd, command->in_fd);
}

static void release_command(const unsigned char *frame, size_t length) {
  if (length < 5) {
    fprintf(stderr, "cordon-launcher: short release frame\n");
    exit(1);
  }
  uint32_t id = read_u32(frame + 1);
  for (size_t i = 0; i < command_count; i++) {
    if (commands[i].id != id) continue;
    close_if_open(&commands[i].out_fd);
    close_if_open(&commands[i].err_fd);
    close_if_open(&commands[i].in_fd);
  }
  forget_finished();
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (pid == agent_pid) {
      /* The sandbox ends with its agent; its status is the container's. */
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    for (size_t i = 0; i < command_count; i++) {
      if (commands[i].pid != pid) continue;
      commands[i].pid = 0;
      if (WIFEXITED(status)) reply("exited %u %d 0\n", commands[i].id, WEXITSTATUS(status));
      else reply("exited %u -1 %d\n", commands[i].id, WTERMSIG(status));
    }
    forget_finished();
  }
}

/* Feeds bytes from stdin into whole frames; returns 0 at end of input. */
static int read_frames(void) {
  static unsigned char *buffer;
  static size_t filled, capacity;
  if (capacity - filled < 65536) {
    size_t grown_capacity = capacity ? capacity * 2 : 262144;
    unsigned char *grown = realloc(buffer, grown_capacity);
    if (!grown) die("out of memory");
    buffer = grown;
    capacity = grown_capacity;
  }
  ssize_t got = read(request_fd, buffer + filled, capacity - filled);
  if (got < 0) return errno == EINTR || errno == EAGAIN ? 1 : 0;
  if (got == 0) return 0;
  filled += (size_t)got;
  size_t at = 0;
  while (filled - at >= 4) {
    uint32_t length = read_u32(buffer + at);
    if (length == 0 || length > MAX_FRAME) {
      fprintf(stderr, "cordon-launcher: bad frame length %u\n", length);
      exit(1);
    }
    if (filled - at - 4 < length) {
      /* Make room for the rest of a large frame. */
      while (capacity < (size_t)length + 4) {
        unsigned char *grown = realloc(buffer, capacity * 2);
        if (!grown) die("out of memory");
        buffer = grown;
        capacity *= 2;
      }
      break;
    }
    const unsigned char *frame = buffer + at + 4;
    if (frame[0] == 'S') start_command(frame, length);
    else if (frame[0] == 'R') release_command(frame, length);
    else {
      fprintf(stderr, "cordon-launcher: unknown frame type %u\n", frame[0]);
      exit(1);
    }
    at += 4 + (size_t)length;
  }
  memmove(buffer, buffer + at, filled - at);
  filled -= at;
  return 1;
}

/*
 * Descriptors this process inherited without close-on-exec (Node passes on
 * whatever its own parent left open) must not reach commands: mark them all
 * close-on-exec once, here. Every descriptor opened later is opened so.
 * (Once, rather than a close loop in every child: under gVisor each system
 * call of such a loop is slow.)
 */
static void close_inherited_on_exec(void) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) die("opendir /proc/self/fd");
  int own = dirfd(dir);
  struct dirent *entry;
  while ((entry = readdir(dir))) {
    int fd = atoi(entry->d_name);
    if (fd <= STDERR_FILENO || fd == own || entry->d_name[0] == '.') continue;
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  closedir(dir);
}

/* A descriptor moved above 4, so that placing the agent's ends at 3 and 4 never meets one of them. */
static int above_agent_fds(int fd) {
  if (fd > 4) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 5);
  if (moved < 0) die("fcntl");
  close(fd);
  return moved;
}

/* Starts the agent (argv: its program and arguments) with its pipes to this process at 3 and 4. */
/*
 * Starts the agent with the signal mask and SIGPIPE disposition this process
 * had before it changed them (it blocks the signals it passes on before the
 * agent starts, so that none sent between the two is lost or kills it).
 */
static void start_agent(char **argv, const sigset_t *agent_mask,
                        const struct sigaction *agent_sigpipe) {
  int requests[2], replies[2];
  if (pipe2(requests, O_CLOEXEC) != 0 || pipe2(replies, O_CLOEXEC) != 0) die("pipe2");
  for (int i = 0; i < 2; i++) {
    requests[i] = above_agent_fds(requests[i]);
    replies[i] = above_agent_fds(replies[i]);
  }
  extern char **environ;
  size_t count = 0;
  while (environ[count]) count++;
  char **envp = calloc(count + 2, sizeof *envp);
  if (!envp) die("out of memory");
  memcpy(envp, environ, count * sizeof *envp);
  envp[count] = "CORDON_AGENT_LAUNCHER_FDS=3,4";
  pid_t pid = vfork();
  if (pid < 0) die("vfork");
  if (pid == 0) {
    /* dup2 leaves the copies without close-on-exec: the agent gets exactly these two. */
    static const char failed[] = "cordon-launcher: cannot start the agent\n";
    if (sigaction(SIGPIPE, agent_sigpipe, NULL) == 0 &&
        sigprocmask(SIG_SETMASK, agent_mask, NULL) == 0 && dup2(requests[1], 3) >= 0 &&
        dup2(replies[0], 4) >= 0)
      execve(argv[0], argv, envp);
    (void)!write(STDERR_FILENO, failed, sizeof failed - 1);
    _exit(127);
  }
  free(envp);
  close(requests[1]);
  close(replies[0]);
  request_fd = requests[0];
  reply_fd = replies[1];
  agent_pid = pid;
}

/*
 * `--pipe`: the host's way back to an agent restored from a memory snapshot
 * under gVisor, whose restored stdin pipe gVisor does not wake again. The
 * host starts this with the engine's exec, as root (the agent's socket is
 * root's, mode 0600, in a root-only directory), and the connection then
 * carries the agent's whole session, as the container's stdin and stdout
 * did. A C program rather than the agent's own relay (Node), because it is
 * on the path of every restore: it starts in a fraction of Node's time. It
 * copies bytes and parses none; the agent authenticates what comes over it.
 * Writes block: both peers (the engine's exec stream, the agent) buffer, so
 * neither waits on this process to read before it reads in turn.
 */
static int pipe_to_socket(const char *path) {
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof address.sun_path) {
    fprintf(stderr, "cordon-launcher: socket path too long: %s\n", path);
    return 2;
  }
  memcpy(address.sun_path, path, strlen(path) + 1);
  int connection = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connection < 0) die("socket");
  if (connect(connection, (const struct sockaddr *)&address, sizeof address) != 0) {
    fprintf(stderr, "cordon-launcher: %s: %s\n", path, strerror(errno));
    return 1;
  }
  /* A write to a closed end fails (and write_all ends this process) rather than killing it unseen. */
  signal(SIGPIPE, SIG_IGN);
  static char buffer[64 * 1024];
  struct pollfd ends[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                           {.fd = connection, .events = POLLIN}};
  for (;;) {
    if (poll(ends, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (ends[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t got = read(STDIN_FILENO, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        /* The host is gone or done: the agent sees its session end, and answers by closing. */
        shutdown(connection, SHUT_WR);
        ends[0].fd = -1;
      } else {
        write_all(connection, buffer, (size_t)got);
      }
    }
    if (ends[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t got = read(connection, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return 0;
      write_all(STDOUT_FILENO, buffer, (size_t)got);
    }
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    puts("cordon-launcher 2");
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "--exec") == 0) {
    install_syscall_filter();
    execvp(argv[2], argv + 2);
    fprintf(stderr, "cordon-launcher: %s: %s\n", argv[2], strerror(errno));
    return errno == ENOENT ? 127 : 126;
  }
  if (argc == 3 && strcmp(argv[1], "--pipe") == 0) return pipe_to_socket(argv[2]);
  if (argc == 4 && strcmp(argv[1], "--kill-user") == 0)
    return kill_user_processes((uid_t)strtoul(argv[2], NULL, 10), (gid_t)strtoul(argv[3], NULL, 10));
  close_inherited_on_exec();
  int starts_agent = argc > 2 && strcmp(argv[1], "--agent") == 0;
  if (argc > 1 && !starts_agent) {
    fprintf(stderr,
            "usage: cordon-launcher [--agent <program> [arguments]]\n"
            "       cordon-launcher --exec <program> [arguments]\n"
            "       cordon-launcher --pipe <socket>\n"
            "       cordon-launcher --kill-user <uid> <gid>\n");
    return 2;
  }
  dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (dev_null < 0) die("open /dev/null");
  /* What the agent starts with: what this process was given. */
  sigset_t agent_mask;
  struct sigaction agent_sigpipe;
  if (sigprocmask(SIG_SETMASK, NULL, &agent_mask) != 0 ||
      sigaction(SIGPIPE, NULL, &agent_sigpipe) != 0)
    die("sigaction");
  /* The agent ignores SIGPIPE; a write to a gone agent then fails and ends this process. */
  signal(SIGPIPE, SIG_IGN);
  sigset_t child_signals;
  sigemptyset(&child_signals);
  sigaddset(&child_signals, SIGCHLD);
  static const int passed_on[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  if (starts_agent)
    for (size_t i = 0; i < sizeof passed_on / sizeof passed_on[0]; i++)
      sigaddset(&child_signals, passed_on[i]);
  if (sigprocmask(SIG_BLOCK, &child_signals, NULL) != 0) die("sigprocmask");
  int signals = signalfd(-1, &child_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signals < 0) die("signalfd");
  /* Only now: a signal sent from here on waits in `signals`, even one sent the moment the agent runs. */
  if (starts_agent) start_agent(argv + 2, &agent_mask, &agent_sigpipe);
  /* After the agent has exec'd (vfork waits for that): the agent is not filtered, every command is. */
  install_syscall_filter();
  /* Last: every disposition this process will have is set by now. */
  find_non_default_signals();
  reply("ready %d\n", (int)getpid());
  struct pollfd watched[2] = {{.fd = request_fd, .events = POLLIN}, {.fd = signals, .events = POLLIN}};
  for (;;) {
    if (poll(watched, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (watched[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(signals, &info, sizeof info) > 0) {
        if (info.ssi_signo != SIGCHLD) kill(agent_pid, (int)info.ssi_signo);
      }
      reap();
    }
    if (watched[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!read_frames()) {
        if (!agent_pid) return 0;
        /* The agent closed its pipe but runs on: wait for its end, which ends this process. */
        watched[0].fd = -1;
      }
    }
  }
}
