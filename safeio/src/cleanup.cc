#include "llmrr/safeio/cleanup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

namespace llmrr::safeio {
namespace {

// A slot's life: kFree → kFilling (the owner copies the path) → kLive → kFree on release;
// the handler claims a live slot (kLive → kClaimed) before it reads the path, so a release
// racing it never frees a path that is being read.
enum : int { kFree = 0, kFilling = 1, kLive = 2, kClaimed = 3 };

struct Slot {
  std::atomic<int> state{kFree};
  bool tree = false;
  char path[PATH_MAX] = {};
};

constexpr int kSlots = 64;
Slot g_slots[kSlots];
static_assert(std::atomic<int>::is_always_lock_free, "the handler reads slot states");

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};

void on_signal(int sig) {
  const int saved = errno;
  for (Slot& s : g_slots) {
    int live = kLive;
    if (!s.state.compare_exchange_strong(live, kClaimed)) continue;
    if (s.tree) {
      remove_tree(s.path);
    } else {
      ::unlink(s.path);
    }
  }
  // The default action, re-raised: blocked while this handler runs, it is delivered when
  // the handler returns and ends the process as the signal says.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved;
  ::raise(sig);
}

// Removes `name` in `dirfd` and, when it is a directory (never a link to one), everything
// under it. Only async-signal-safe system calls.
bool remove_at(int dirfd, const char* name, int depth) {
  if (::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR && errno != EPERM) return false;
  if (depth > 64) return false;
  const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  // Entries removed while the directory is read may make the listing skip some: read it
  // again until it is empty (a few passes at most).
  for (int pass = 0; pass < 4; ++pass) {
    bool removed_any = false;
    ::lseek(fd, 0, SEEK_SET);
    alignas(8) char buf[1024];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
        unsigned short reclen;
        std::memcpy(&reclen, buf + off + 16, sizeof reclen);
        const char* entry = buf + off + 19;
        off += reclen;
        if (reclen == 0) break;
        if (std::strcmp(entry, ".") == 0 || std::strcmp(entry, "..") == 0) continue;
        if (remove_at(fd, entry, depth + 1)) removed_any = true;
      }
    }
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
      ::close(fd);
      return true;
    }
    if (!removed_any) break;
  }
  ::close(fd);
  return false;
}

std::mutex g_install_mu;

}  // namespace

bool remove_tree(const char* path) {
  if (path == nullptr || path[0] == '\0') return true;
  return remove_at(AT_FDCWD, path, 0);
}

void install_cleanup_handlers() {
  // Checked at every call, not once: a disposition put back to the default since (a
  // one-shot handler that fired, a child that reset its signals) gets the handler again.
  std::lock_guard<std::mutex> lk(g_install_mu);
  for (int sig : kSignals) {
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // One cleanup at a time: the other signals wait until the first has re-raised.
    for (int other : kSignals) sigaddset(&sa.sa_mask, other);
    ::sigaction(sig, &sa, nullptr);
  }
}

CleanupSlot::CleanupSlot(const std::string& path, bool tree) {
  if (path.empty() || path.size() >= PATH_MAX) return;
  install_cleanup_handlers();
  for (int i = 0; i < kSlots; ++i) {
    int free = kFree;
    if (!g_slots[i].state.compare_exchange_strong(free, kFilling)) continue;
    g_slots[i].tree = tree;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kLive, std::memory_order_release);
    slot_ = i;
    return;
  }
}

CleanupSlot::CleanupSlot(CleanupSlot&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }

CleanupSlot& CleanupSlot::operator=(CleanupSlot&& o) noexcept {
  if (this != &o) {
    release();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

void CleanupSlot::release() {
  if (slot_ < 0) return;
  int live = kLive;
  // A slot the handler claimed stays claimed: the process is ending.
  g_slots[slot_].state.compare_exchange_strong(live, kFree);
  slot_ = -1;
}

}  // namespace llmrr::safeio
