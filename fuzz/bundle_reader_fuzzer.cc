// Fuzz target: arbitrary bytes as a bundle (llmrr pack). unpack() checks the header, every
// entry header against manifest.json and the expansion cap, every hash and the end record,
// extracting nothing (list mode). Nothing may crash, hang, or decode without bound: a bomb
// must fail at its entry header.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "llmrr/replayer/pack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static llmrr::fuzz::MemFile file;
  if (!file.ok() || !file.assign(data, size)) return 0;
  (void)llmrr::replay::is_pack_file(file.path());
  (void)llmrr::replay::unpack(file.path(), "");
  return 0;
}
