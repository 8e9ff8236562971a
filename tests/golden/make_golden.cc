// Writes the golden traces into a directory (default: the source folder's tests/golden).
// Run by hand when the set changes; the committed files must keep decoding (golden_test).
//   build/<dir>/tests/golden/make_golden tests/golden
#include <cstdio>

#include "golden_cases.h"

using namespace llmrr::trace;
using namespace llmrr::trace::golden;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : LLMRR_GOLDEN_DIR;
  for (const Case& c : cases()) {
    const std::string path = dir + "/" + c.file;
    WriterOptions opt;
    opt.max_steps_per_chunk = 4;
    if (std::string(c.file) == "uncompressed.trace") opt.zstd_level = 0;
    // Only columns.trace is column-coded: the rest stay the format 1.2 layout they were
    // committed in.
    opt.column_chunks = std::string(c.file) == "columns.trace";
    std::vector<float> ref = logit_like(512, 0);
    llmrr::Status st = write_expected(
        path, c.expected(), opt, std::string(c.file) == "xor_reference.trace" ? &ref : nullptr);
    if (!st.ok()) {
      std::fprintf(stderr, "make_golden: %s\n", st.to_string().c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
  }
  // crashed.trace: moe_run.trace cut mid-frame.
  const std::string moe = dir + "/moe_run.trace";
  auto r = TraceReader::open(moe);
  if (!r.ok()) return 1;
  int chunk = 0;
  uint64_t cut = 0;
  for (const FrameInfo& f : (*r)->frames())
    if (f.kind == FrameKind::kStepChunk && chunk++ == kCrashedChunk)
      cut = f.offset + kFrameHeaderBytes + f.stored_size / 2;
  std::vector<uint8_t> bytes = testing::read_file(moe);
  bytes.resize(cut);
  if (cut == 0 || !testing::write_file(dir + "/crashed.trace", bytes)) return 1;
  std::printf("wrote %s/crashed.trace\n", dir.c_str());
  return 0;
}
