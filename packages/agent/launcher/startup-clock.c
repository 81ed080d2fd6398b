/*
 * cordon-startup-clock.so: spares the agent's Node most of its clock system
 * calls in a gVisor sandbox's first second. x86-64 only.
 *
 * Why it exists: runsc's clock is not calibrated for about a second after a
 * sandbox boots, and until it is, its vDSO hands every clock_gettime() to
 * gVisor's kernel as a system call: on the ptrace platform a round trip
 * through the host's scheduler, tens of microseconds each. Node's start and
 * the agent's first answer read the clock hundreds of times in that second
 * (V8 times every function it compiles, whether anyone reads the timer or
 * not): 679 of the 1,465 system calls from a gVisor sandbox's boot to its
 * first command (runsc --strace, bench/misses.md). A bare runsc container
 * reached a listening Node in 63-81 ms with this library against 119-228 ms
 * without it.
 *
 * What it does: it defines clock_gettime() ahead of libc's (the agent's
 * loader is given `--preload`, so only the agent's own process has it; the
 * commands it starts never do). CLOCK_MONOTONIC and CLOCK_REALTIME are read
 * for real at most once per window of 200,000 time-stamp-counter cycles (at
 * most about 0.2 ms on any x86-64 that runs gVisor) and at most once per 64
 * calls; in between, a call gets the last value read. Values never go back:
 * what is kept is the largest read so far, across threads. Every other clock
 * goes straight through. The first real read that comes back in under 4,000
 * cycles (a vDSO that answers without a system call: gVisor's clock is
 * calibrated, or the sandbox is not gVisor at all) turns it off for good:
 * from then on every call goes straight to the vDSO, as libc's would.
 *
 * Why C and not a library: it must be loaded into Node before Node runs, by
 * the dynamic loader. It links only libc symbols that have not changed since
 * glibc 2.16 (getauxval, syscall, __errno_location), so it loads with any
 * glibc whose loader has `--preload` (2.30 and later; the backend checks).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "cordon-startup-clock is built for x86-64 only"
#endif

/* A window this many cycles long answers from the last read. */
#define WINDOW_CYCLES 200000ULL
/* And at most this many calls in a row, whatever the counter says. */
#define MAX_KEPT_CALLS 64
/* A real read faster than this did not leave the process: stop keeping. */
#define FAST_READ_CYCLES 4000ULL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn vdso_clock_gettime;
static int passing_through;

struct kept {
  uint64_t read_at; /* time-stamp counter at the last real read */
  uint64_t nanoseconds; /* the largest value read so far */
  uint32_t calls; /* answered from it since that read */
};
static struct kept kept[2]; /* CLOCK_MONOTONIC, CLOCK_REALTIME */

static inline uint64_t cycles(void) { return __builtin_ia32_rdtsc(); }

/* The vDSO's own symbol, looked up in its dynamic symbol table (it exports
 * __vdso_clock_gettime on Linux and on gVisor alike). */
static clock_gettime_fn find_vdso_clock_gettime(void) {
  const unsigned char *base = (const unsigned char *)getauxval(AT_SYSINFO_EHDR);
  if (!base) return 0;
  const Elf64_Ehdr *ehdr = (const Elf64_Ehdr *)base;
  if (memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0 || ehdr->e_ident[EI_CLASS] != ELFCLASS64) return 0;
  const Elf64_Phdr *phdrs = (const Elf64_Phdr *)(base + ehdr->e_phoff);
  uintptr_t load_offset = 0;
  const Elf64_Dyn *dynamic = 0;
  int loaded = 0;
  for (int i = 0; i < ehdr->e_phnum; i++) {
    if (phdrs[i].p_type == PT_LOAD && !loaded) {
      load_offset = (uintptr_t)base + phdrs[i].p_offset - phdrs[i].p_vaddr;
      loaded = 1;
    } else if (phdrs[i].p_type == PT_DYNAMIC) {
      dynamic = (const Elf64_Dyn *)(base + phdrs[i].p_offset);
    }
  }
  if (!loaded || !dynamic) return 0;
  const Elf64_Sym *symbols = 0;
  const char *names = 0;
  const uint32_t *hash = 0;
  const uint32_t *gnu_hash = 0;
  for (const Elf64_Dyn *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
    uintptr_t at = load_offset + entry->d_un.d_ptr;
    if (entry->d_tag == DT_SYMTAB) symbols = (const Elf64_Sym *)at;
    else if (entry->d_tag == DT_STRTAB) names = (const char *)at;
    else if (entry->d_tag == DT_HASH) hash = (const uint32_t *)at;
    else if (entry->d_tag == DT_GNU_HASH) gnu_hash = (const uint32_t *)at;
  }
  if (!symbols || !names || (!hash && !gnu_hash)) return 0;
  uint32_t count = 0;
  if (hash) {
    count = hash[1]; /* nchain: one entry per symbol */
  } else {
    /* GNU hash: the highest symbol index any bucket reaches, then its chain's end. */
    uint32_t buckets = gnu_hash[0], first = gnu_hash[1], bloom_words = gnu_hash[2];
    const uint32_t *bucket = (const uint32_t *)(gnu_hash + 4 + 2 * bloom_words);
    const uint32_t *chain = bucket + buckets;
    for (uint32_t b = 0; b < buckets; b++)
      if (bucket[b] >= count) count = bucket[b] + 1;
    if (count > first)
      while (!(chain[count - 1 - first] & 1)) count++;
  }
  for (uint32_t i = 0; i < count; i++) {
    const Elf64_Sym *symbol = &symbols[i];
    if (ELF64_ST_TYPE(symbol->st_info) != STT_FUNC || symbol->st_shndx == SHN_UNDEF) continue;
    if (strcmp(names + symbol->st_name, "__vdso_clock_gettime") == 0)
      return (clock_gettime_fn)(load_offset + symbol->st_value);
  }
  return 0;
}

/* Runs as the loader maps the library, before Node's first instruction. */
__attribute__((constructor)) static void find_the_clock(void) {
  vdso_clock_gettime = find_vdso_clock_gettime();
}

/* What libc's clock_gettime() does: the vDSO, else the system call. */
static int read_clock(clockid_t id, struct timespec *ts) {
  if (vdso_clock_gettime && vdso_clock_gettime(id, ts) == 0) return 0;
  /* No vDSO, or it failed: the system call sets errno as libc would. */
  return (int)syscall(SYS_clock_gettime, id, ts);
}

static void set_timespec(struct timespec *ts, uint64_t nanoseconds) {
  ts->tv_sec = (time_t)(nanoseconds / 1000000000ULL);
  ts->tv_nsec = (long)(nanoseconds % 1000000000ULL);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  if (__atomic_load_n(&passing_through, __ATOMIC_RELAXED) ||
      (id != CLOCK_MONOTONIC && id != CLOCK_REALTIME))
    return read_clock(id, ts);
  struct kept *clock = &kept[id == CLOCK_MONOTONIC ? 0 : 1];
  uint64_t now = cycles();
  uint64_t read_at = __atomic_load_n(&clock->read_at, __ATOMIC_ACQUIRE);
  if (read_at != 0 && now - read_at < WINDOW_CYCLES &&
      __atomic_add_fetch(&clock->calls, 1, __ATOMIC_RELAXED) < MAX_KEPT_CALLS) {
    set_timespec(ts, __atomic_load_n(&clock->nanoseconds, __ATOMIC_ACQUIRE));
    return 0;
  }
  if (read_clock(id, ts) != 0) return -1;
  uint64_t after = cycles();
  if (after - now < FAST_READ_CYCLES) {
    __atomic_store_n(&passing_through, 1, __ATOMIC_RELAXED);
    return 0;
  }
  /* Keep the largest value read, by any thread, and answer with it. */
  uint64_t value = (uint64_t)ts->tv_sec * 1000000000ULL + (uint64_t)ts->tv_nsec;
  uint64_t largest = __atomic_load_n(&clock->nanoseconds, __ATOMIC_ACQUIRE);
  while (value > largest &&
         !__atomic_compare_exchange_n(&clock->nanoseconds, &largest, value, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
  }
  if (value < largest) set_timespec(ts, largest);
  __atomic_store_n(&clock->calls, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&clock->read_at, after, __ATOMIC_RELEASE);
  return 0;
}
