// Status and Result<T>: how every llmrr library reports failure.
//
// No exception leaves format/ or crosses the C ABI. A Status carries a stable numbered
// code (the numbers below never change meaning; new codes are appended, zstd_errors.h is
// the model) and a message that names the file, the offset or step, what was expected and
// what was found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace llmrr {

// Stable error codes. Never renumber; append only. Grouped by the exit code the CLI maps
// them to (see exit_code_for): 1xx bad input (exit 2), 2xx environment / I/O (exit 2),
// 9xx internal (exit 3).
enum class ErrorCode : uint16_t {
  kOk = 0,

  // Bad input: trace files.
  kBadMagic = 100,          // not an llmrr trace, or a frame does not start with the frame magic
  kVersionTooNew = 101,     // trace written by a newer major format version
  kTruncated = 102,         // file or frame ends before its declared size
  kChecksumMismatch = 103,  // xxh3 of a frame's stored bytes differs from its header
  kFrameTooLarge = 104,     // declared size over the frame limit or past end of file
  kSizeMismatch = 105,      // raw size in a frame header differs from the decoded size
  kCorruptPayload = 106,    // zstd refused the payload, or a blob is malformed
  kBadFlatbuffer = 107,     // FlatBuffers Verifier rejected a payload
  kBadFooter = 108,         // footer or trailer points at garbage
  kSemantic = 109,          // records verify structurally but contradict each other
  kUnknownKind = 110,       // frame kind or codec this reader does not know

  // Bad input: models, requests, command lines.
  kInvalidArgument = 120,   // a command-line value or API argument is out of its domain
  kBadModel = 121,          // a model file is malformed (header, offsets, shapes)
  kMissingTensor = 122,     // a tensor the architecture needs is absent
  kShapeMismatch = 123,     // a tensor has a shape other than the config implies
  kUnsupported = 124,       // dtype, architecture or feature not supported
  kWeightMismatch = 125,    // model weights differ from the trace's weight hash
  kBadRequest = 126,        // a requests file line is malformed

  // Environment.
  kIo = 200,                // read / write / open failed (errno in the message)
  kNotFound = 201,          // path does not exist
  kIsDirectory = 202,       // a file was expected
  kResourceLimit = 203,     // a bound (memory in flight, frame count) would be exceeded

  // Internal.
  kInternal = 900,          // a bug in llmrr
};

// The code's stable name, e.g. "checksum_mismatch".
const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "checksum_mismatch (103): run.trace: frame 4 at offset 8812: ..."
  std::string to_string() const;

  // Prefix context ("while reading run.trace: ") to the message, keeping the code.
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status make_error(ErrorCode code, std::string message) {
  return Status(code, std::move(message));
}

// Exit code of the CLI for a status: 0 ok, 2 bad input or environment, 3 internal.
// (Exit 1, "runs differ", is a result, not an error.)
int exit_code_for(const Status& status);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}    // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace llmrr

#define LLMRR_CONCAT_INNER_(a, b) a##b
#define LLMRR_CONCAT_(a, b) LLMRR_CONCAT_INNER_(a, b)

// Return the status of `expr` from the enclosing function if it is an error.
#define RETURN_IF_ERROR(expr)                     \
  do {                                            \
    ::llmrr::Status _llmrr_st = (expr);           \
    if (!_llmrr_st.ok()) return _llmrr_st;        \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(LLMRR_CONCAT_(_llmrr_res_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(res, lhs, expr) \
  auto res = (expr);                           \
  if (!res.ok()) return res.status();          \
  lhs = std::move(res).value()
