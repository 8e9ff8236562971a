/* Fault injection for the reliability campaign and tests (docs/reliability.md).
 *
 * Preloaded into a process (LD_PRELOAD=libllmrr_fault_inject.so), it makes the system calls
 * TraceWriter writes a trace with (pwrite, pwritev, ftruncate, fsync, close) fail with a
 * chosen errno on the files whose path matches LLMRR_FAULT_PATH, as a failing or full device
 * would, and leaves every other file descriptor alone: stdout, stderr, model files and the
 * same path opened read-only are never touched.
 *
 *   LLMRR_FAULT_PATH      fnmatch(3) pattern for the path as the program passes it to
 *                         open/openat/creat; only descriptors opened for writing are
 *                         tracked. Unset: the library does nothing.
 *   LLMRR_FAULT_OP        write | truncate | fsync | close, or several, comma-separated
 *                         (default write; write = pwrite and pwritev)
 *   LLMRR_FAULT_ERRNO     EIO (default), ENOSPC, EFBIG, EDQUOT, EROFS or a number
 *   LLMRR_FAULT_AT_CALL   K: the K-th call of those operations on tracked descriptors (all of
 *                         them counted together, from 1) is the first to fail (default 1)
 *   LLMRR_FAULT_AT_BYTE   N: for writes, instead of AT_CALL: the file holds no byte at or past
 *                         offset N. A write that crosses N is cut short there (a short count,
 *                         not an error); one that starts at N or later fails. A full disk.
 *   LLMRR_FAULT_TIMES     how many calls fail: 0 (default) every one from the first on (a
 *                         device that is gone; a disk that stays full), 1 a single bad write
 *                         or a write-back error reported once. Spent, the library is inert.
 *   LLMRR_FAULT_QUIET     1: no line on stderr for each injected fault
 *
 * A failed close still closes the descriptor (as Linux does); a failed fsync or write does
 * not reach the file. A bad setting is reported and the process exits with status 125, so
 * a test never passes because the injection silently did nothing. */
#undef _FORTIFY_SOURCE /* the fortified open() is an inline wrapper we could not replace */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_WRITE = 1, OP_TRUNCATE = 2, OP_FSYNC = 4, OP_CLOSE = 8 };

static struct {
  int on;
  const char* pattern;
  int ops;
  int err;
  long long at_call;
  long long at_byte; /* -1: not set */
  long long times;
  int quiet;
} cfg;

enum { kMaxTracked = 64 };
static struct {
  int fd;
  char path[256];
} tracked[kMaxTracked];
static int n_tracked;
static long long calls;  /* calls of the chosen operations on tracked descriptors */
static long long faults; /* faults injected */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void die(const char* what, const char* value) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, "llmrr_fault_inject: %s: '%s'\n", what, value ? value : "");
  if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  _exit(125);
}

static long long env_number(const char* name, long long fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || x < 0) die("expected a number >= 0", v);
  return x;
}

__attribute__((constructor)) static void fault_init(void) {
  cfg.pattern = getenv("LLMRR_FAULT_PATH");
  if (!cfg.pattern || !*cfg.pattern) return;
  const char* ops = getenv("LLMRR_FAULT_OP");
  if (!ops || !*ops) ops = "write";
  char buf[128];
  if (strlen(ops) >= sizeof buf) die("LLMRR_FAULT_OP: too long", ops);
  strcpy(buf, ops);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "write"))
      cfg.ops |= OP_WRITE;
    else if (!strcmp(t, "truncate"))
      cfg.ops |= OP_TRUNCATE;
    else if (!strcmp(t, "fsync"))
      cfg.ops |= OP_FSYNC;
    else if (!strcmp(t, "close"))
      cfg.ops |= OP_CLOSE;
    else
      die("LLMRR_FAULT_OP: expected write, truncate, fsync or close", t);
  }
  const char* e = getenv("LLMRR_FAULT_ERRNO");
  if (!e || !*e || !strcmp(e, "EIO"))
    cfg.err = EIO;
  else if (!strcmp(e, "ENOSPC"))
    cfg.err = ENOSPC;
  else if (!strcmp(e, "EFBIG"))
    cfg.err = EFBIG;
  else if (!strcmp(e, "EDQUOT"))
    cfg.err = EDQUOT;
  else if (!strcmp(e, "EROFS"))
    cfg.err = EROFS;
  else {
    cfg.err = (int)env_number("LLMRR_FAULT_ERRNO", 0);
    if (cfg.err <= 0)
      die("LLMRR_FAULT_ERRNO: expected EIO, ENOSPC, EFBIG, EDQUOT, EROFS or a number > 0", e);
  }
  cfg.at_call = env_number("LLMRR_FAULT_AT_CALL", 1);
  if (cfg.at_call < 1)
    die("LLMRR_FAULT_AT_CALL: expected 1 or more", getenv("LLMRR_FAULT_AT_CALL"));
  cfg.at_byte = env_number("LLMRR_FAULT_AT_BYTE", -1);
  cfg.times = env_number("LLMRR_FAULT_TIMES", 0);
  const char* q = getenv("LLMRR_FAULT_QUIET");
  cfg.quiet = q && !strcmp(q, "1");
  cfg.on = 1;
}

/* The next definition of `name` after this library (libc's). */
#define REAL(ret, name, ...)                                                 \
  static ret (*real_##name)(__VA_ARGS__);                                    \
  if (!real_##name) {                                                        \
    *(void**)(&real_##name) = dlsym(RTLD_NEXT, #name);                       \
    if (!real_##name) die("dlsym(RTLD_NEXT) found no definition of", #name); \
  }

static int find(int fd) {
  for (int i = 0; i < n_tracked; ++i)
    if (tracked[i].fd == fd) return i;
  return -1;
}

static void track(int fd, const char* path, int flags) {
  if (!cfg.on || fd < 0 || !path || (flags & O_ACCMODE) == O_RDONLY) return;
  if (fnmatch(cfg.pattern, path, 0) != 0) return;
  pthread_mutex_lock(&mu);
  int i = find(fd);
  if (i < 0 && n_tracked < kMaxTracked) i = n_tracked++;
  if (i >= 0) {
    tracked[i].fd = fd;
    snprintf(tracked[i].path, sizeof tracked[i].path, "%s", path);
  }
  pthread_mutex_unlock(&mu);
  if (i < 0) die("more than 64 matching files open at once", path);
}

/* Decides one call. Returns the errno to fail it with, or 0 to let it through; for writes,
 * *len may come back shorter (a write cut at AT_BYTE). Called under no lock. */
static int decide(int op, int fd, const char* fn, long long at, size_t* len) {
  if (!cfg.on || !(cfg.ops & op)) return 0;
  pthread_mutex_lock(&mu);
  int i = find(fd);
  int fail = 0;
  if (i >= 0 && (cfg.times == 0 || faults < cfg.times)) {
    ++calls;
    if (op == OP_WRITE && cfg.at_byte >= 0) {
      if (at >= cfg.at_byte)
        fail = 1;
      else if (len && (unsigned long long)at + *len > (unsigned long long)cfg.at_byte)
        *len = (size_t)(cfg.at_byte - at);
    } else {
      fail = calls >= cfg.at_call;
    }
  }
  char msg[512], where[64] = "";
  int n = 0;
  if (fail) {
    ++faults;
    if (at >= 0) snprintf(where, sizeof where, " at offset %lld", at);
    if (!cfg.quiet)
      n = snprintf(msg, sizeof msg,
                   "llmrr_fault_inject: %s(fd %d, %s)%s: %s (injected fault %lld)\n", fn, fd,
                   tracked[i].path, where, strerror(cfg.err), faults);
  }
  pthread_mutex_unlock(&mu);
  if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  return fail ? cfg.err : 0;
}

/* ---- opening: track the descriptors of matching paths ---------------------------------- */

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int open(const char* path, int flags, ...) {
  REAL(int, open, const char*, int, ...)
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  int fd = real_open(path, flags, mode);
  track(fd, path, flags);
  return fd;
}

int open64(const char* path, int flags, ...) {
  REAL(int, open64, const char*, int, ...)
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  int fd = real_open64(path, flags, mode);
  track(fd, path, flags);
  return fd;
}

int openat(int dir, const char* path, int flags, ...) {
  REAL(int, openat, int, const char*, int, ...)
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  int fd = real_openat(dir, path, flags, mode);
  track(fd, path, flags);
  return fd;
}

int openat64(int dir, const char* path, int flags, ...) {
  REAL(int, openat64, int, const char*, int, ...)
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  int fd = real_openat64(dir, path, flags, mode);
  track(fd, path, flags);
  return fd;
}

int creat(const char* path, mode_t mode) {
  REAL(int, creat, const char*, mode_t)
  int fd = real_creat(path, mode);
  track(fd, path, O_WRONLY);
  return fd;
}

int creat64(const char* path, mode_t mode) {
  REAL(int, creat64, const char*, mode_t)
  int fd = real_creat64(path, mode);
  track(fd, path, O_WRONLY);
  return fd;
}

/* ---- what TraceWriter calls ------------------------------------------------------------ */

ssize_t pwrite(int fd, const void* p, size_t n, off_t at) {
  REAL(ssize_t, pwrite, int, const void*, size_t, off_t)
  int e = decide(OP_WRITE, fd, "pwrite", (long long)at, &n);
  if (e) return errno = e, -1;
  return real_pwrite(fd, p, n, at);
}

ssize_t pwrite64(int fd, const void* p, size_t n, off64_t at) {
  REAL(ssize_t, pwrite64, int, const void*, size_t, off64_t)
  int e = decide(OP_WRITE, fd, "pwrite64", (long long)at, &n);
  if (e) return errno = e, -1;
  return real_pwrite64(fd, p, n, at);
}

/* Cuts iov[0..cnt) to `keep` bytes in `out`; returns the new count. */
static int cut_iov(const struct iovec* iov, int cnt, size_t keep, struct iovec* out) {
  int k = 0;
  for (; k < cnt && keep > 0; ++k) {
    out[k] = iov[k];
    if (out[k].iov_len > keep) out[k].iov_len = keep;
    keep -= out[k].iov_len;
  }
  return k;
}

static size_t iov_bytes(const struct iovec* iov, int cnt) {
  size_t n = 0;
  for (int k = 0; k < cnt; ++k) n += iov[k].iov_len;
  return n;
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t at) {
  REAL(ssize_t, pwritev, int, const struct iovec*, int, off_t)
  size_t total = cnt > 0 ? iov_bytes(iov, cnt) : 0, n = total;
  int e = decide(OP_WRITE, fd, "pwritev", (long long)at, &n);
  if (e) return errno = e, -1;
  if (n == total || cnt > IOV_MAX) return real_pwritev(fd, iov, cnt, at);
  struct iovec cut[IOV_MAX];
  return real_pwritev(fd, cut, cut_iov(iov, cnt, n, cut), at);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off64_t at) {
  REAL(ssize_t, pwritev64, int, const struct iovec*, int, off64_t)
  size_t total = cnt > 0 ? iov_bytes(iov, cnt) : 0, n = total;
  int e = decide(OP_WRITE, fd, "pwritev64", (long long)at, &n);
  if (e) return errno = e, -1;
  if (n == total || cnt > IOV_MAX) return real_pwritev64(fd, iov, cnt, at);
  struct iovec cut[IOV_MAX];
  return real_pwritev64(fd, cut, cut_iov(iov, cnt, n, cut), at);
}

int ftruncate(int fd, off_t len) {
  REAL(int, ftruncate, int, off_t)
  int e = decide(OP_TRUNCATE, fd, "ftruncate", -1, NULL);
  if (e) return errno = e, -1;
  return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off64_t len) {
  REAL(int, ftruncate64, int, off64_t)
  int e = decide(OP_TRUNCATE, fd, "ftruncate64", -1, NULL);
  if (e) return errno = e, -1;
  return real_ftruncate64(fd, len);
}

int fsync(int fd) {
  REAL(int, fsync, int)
  int e = decide(OP_FSYNC, fd, "fsync", -1, NULL);
  if (e) return errno = e, -1;
  return real_fsync(fd);
}

int close(int fd) {
  REAL(int, close, int)
  int e = decide(OP_CLOSE, fd, "close", -1, NULL);
  if (cfg.on) {
    /* Forget the descriptor before it is released: its number may be reused at once. */
    pthread_mutex_lock(&mu);
    int i = find(fd);
    if (i >= 0) tracked[i] = tracked[--n_tracked];
    pthread_mutex_unlock(&mu);
  }
  int rc = real_close(fd);
  if (e) return errno = e, -1;
  return rc;
}
