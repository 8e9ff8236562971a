// Temporaries removed when a signal ends the process.
//
// Every temporary output (OutputFile's file, OutputDir's staging directory, pack's redacted
// copies) is listed here while it lives. Tracking a path installs a handler for SIGINT,
// SIGTERM, SIGHUP and SIGXFSZ (each only where its disposition is the default: a signal the
// caller ignores or handles itself is left alone) that removes every listed
// path with async-signal-safe calls only (unlink, and for a directory open / getdents64 /
// unlinkat / rmdir, never following a link), then restores the default action and re-raises
// the signal, so the process still ends as that signal says (exit status 128+N in a shell).
// A writer killed by SIGKILL leaves its temporary: nothing can run then.
#pragma once

#include <string>

namespace llmrr::safeio {

class CleanupSlot {
 public:
  // Tracks `path` (a file, or with `tree` a directory removed with everything in it) until
  // release() or destruction. An empty path tracks nothing. When every slot is taken (64
  // temporaries alive at once) the path is not tracked: it is still removed on every error,
  // only not on a signal.
  CleanupSlot() = default;
  CleanupSlot(const std::string& path, bool tree);
  CleanupSlot(CleanupSlot&& o) noexcept;
  CleanupSlot& operator=(CleanupSlot&& o) noexcept;
  CleanupSlot(const CleanupSlot&) = delete;
  CleanupSlot& operator=(const CleanupSlot&) = delete;
  ~CleanupSlot() { release(); }

  // Stops tracking (the path was renamed into place, or removed).
  void release();
  bool tracked() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

// Installs the handler for each of the four signals whose disposition is the default now
// (every CleanupSlot does it too). Idempotent; thread-safe.
void install_cleanup_handlers();

// Removes `path` and, when it is a directory, everything in it, without following a link
// (a link is removed, never what it points to). Async-signal-safe; also what the destructors
// of the output classes call. Returns false when something could not be removed.
bool remove_tree(const char* path);

}  // namespace llmrr::safeio
