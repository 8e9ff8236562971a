#include "llmrr/format/status.h"

namespace llmrr {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kBadMagic:
      return "bad_magic";
    case ErrorCode::kVersionTooNew:
      return "version_too_new";
    case ErrorCode::kTruncated:
      return "truncated";
    case ErrorCode::kChecksumMismatch:
      return "checksum_mismatch";
    case ErrorCode::kFrameTooLarge:
      return "frame_too_large";
    case ErrorCode::kSizeMismatch:
      return "size_mismatch";
    case ErrorCode::kCorruptPayload:
      return "corrupt_payload";
    case ErrorCode::kBadFlatbuffer:
      return "bad_flatbuffer";
    case ErrorCode::kBadFooter:
      return "bad_footer";
    case ErrorCode::kSemantic:
      return "semantic";
    case ErrorCode::kUnknownKind:
      return "unknown_kind";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kBadModel:
      return "bad_model";
    case ErrorCode::kMissingTensor:
      return "missing_tensor";
    case ErrorCode::kShapeMismatch:
      return "shape_mismatch";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kWeightMismatch:
      return "weight_mismatch";
    case ErrorCode::kBadRequest:
      return "bad_request";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kIsDirectory:
      return "is_directory";
    case ErrorCode::kResourceLimit:
      return "resource_limit";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(error_code_name(code_)) + " (" + std::to_string(static_cast<int>(code_)) +
         "): " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + message_);
}

int exit_code_for(const Status& status) {
  if (status.ok()) return 0;
  return static_cast<int>(status.code()) >= 900 ? 3 : 2;
}

}  // namespace llmrr
