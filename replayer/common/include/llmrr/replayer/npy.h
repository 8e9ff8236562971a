// A tiny .npy (NumPy format 1.0) writer and reader: little-endian, C order, float32 ('<f4')
// or int32 ('<i4'). What `llmrr replay --materialize` writes; the reader exists so that the
// files can be checked without NumPy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"

namespace llmrr::replay {

Status write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
Status write_npy_i32(const std::string& path, const std::vector<int64_t>& shape,
                     const int32_t* data);

// Other element types ('<i8', '<u8'), for exports.
Status write_npy_i64(const std::string& path, const std::vector<int64_t>& shape,
                     const int64_t* data);
Status write_npy_u64(const std::string& path, const std::vector<int64_t>& shape,
                     const uint64_t* data);

struct NpyArray {
  std::string descr;  // "<f4" or "<i4"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // raw little-endian elements
  int64_t numel() const;
};

// Reads what the writers above write (and any v1/v2 C-order '<f4' / '<i4' file); errors
// name the file and what is wrong.
Result<NpyArray> read_npy(const std::string& path);

}  // namespace llmrr::replay
