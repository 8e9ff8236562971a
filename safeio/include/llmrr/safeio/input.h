// Untrusted input files: refused unless regular before anything opens them, read with a cap.
//
// A FIFO, a character device (/dev/zero), a socket or a directory given where a file is
// expected is refused with kIsDirectory / kInvalidArgument naming what it is, without an
// open() that could block (a FIFO with no writer) or a read that never ends (/dev/zero).
// The check is made with stat() and made again with fstat() on the descriptor, which is
// opened O_NONBLOCK so that a FIFO swapped in between cannot block the open either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "llmrr/format/status.h"

namespace llmrr::safeio {

// "a FIFO", "a character device", "a directory", ... for a stat mode.
std::string file_kind(unsigned mode);

// Ok when `path` is a regular file (symlinks followed). `what` names the role in messages:
// "trace", "bundle", "model file", "requests file". Missing: kNotFound; a directory:
// kIsDirectory; any other non-regular file: kInvalidArgument ("path: is a FIFO, expected a
// regular trace file").
Status require_regular_file(const std::string& path, std::string_view what);

// Ok when `path` is a regular file or a directory (a model may be either).
Status require_file_or_directory(const std::string& path, std::string_view what);

// Opens a regular file read-only (O_CLOEXEC, blocking mode restored after the checks).
// The caller owns the descriptor.
Result<int> open_regular(const std::string& path, std::string_view what);

// The whole of a regular file, refused when it is over `limit` bytes (kResourceLimit, naming
// the size and the limit) — checked against the size before reading and again while reading,
// so a file that grows cannot exceed it either.
Result<std::string> read_file(const std::string& path, uint64_t limit, std::string_view what);

}  // namespace llmrr::safeio
