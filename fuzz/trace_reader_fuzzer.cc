// Fuzz target: arbitrary bytes as a .trace file. Open, read every step sequentially and by
// random access, every blob and kernel frame, and verify. Nothing may crash, hang, leak or
// allocate without bound; errors are fine.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "llmrr/format/trace_reader.h"

using namespace llmrr::trace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static llmrr::fuzz::MemFile file;
  if (!file.ok() || !file.assign(data, size)) return 0;
  auto r = TraceReader::open(file.path());
  if (!r.ok()) return 0;
  TraceReader& rd = **r;
  (void)rd.run_header();
  StepRecord s;
  std::vector<int64_t> seen;
  StepCursor c = rd.steps();
  for (int i = 0; i < 100000; ++i) {
    auto more = c.next(&s);
    if (!more.ok() || !*more) break;
    seen.push_back(s.step);
    (void)s.find_plan(0);
  }
  for (size_t i = 0; i < seen.size() && i < 8; ++i)
    (void)rd.read_step(seen[seen.size() - 1 - i], &s);
  std::vector<uint8_t> blob;
  for (int64_t b = 0; b < rd.blob_count() && b < 16; ++b) {
    (void)rd.blob_info(b);
    (void)rd.read_blob(b, &blob);
    uint8_t ref[64] = {};
    (void)rd.read_blob(b, &blob, ref, sizeof ref);
  }
  std::vector<KernelRecord> k;
  for (size_t f = 0; f < rd.frames().size() && f < 64; ++f)
    if (rd.frames()[f].kind == FrameKind::kKernelRecords)
      (void)rd.read_kernels(static_cast<int64_t>(f), &k);
  VerifyReport rep;
  (void)rd.verify(&rep);
  return 0;
}
