// The activity-buffer parser on synthetic buffers built from the real CUPTI structs of the
// installed headers (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMarker2
// for CUPTI_API_VERSION 130001), laid out back to back as CUPTI fills a buffer.
#include <cupti_activity.h>
#include <cupti_version.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "llmrr/cupti/activity.h"

namespace {

using namespace llmrr;
using llmrr::cupti::ActivityParser;
using llmrr::cupti::ParseStats;
using trace::ActivityKind;
using trace::KernelRecord;

class Buffer {
 public:
  template <typename T>
  void add(const T& rec) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &rec, sizeof(T));
  }
  const uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

CUpti_ActivityKernel10 kernel(const char* name, uint32_t corr, int gx, int bx, int32_t smem_s,
                              int32_t smem_d) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.correlationId = corr;
  k.gridX = gx;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = bx;
  k.blockY = 1;
  k.blockZ = 1;
  k.staticSharedMemory = smem_s;
  k.dynamicSharedMemory = smem_d;
  k.streamId = 7;
  k.deviceId = 1;
  k.start = 1000 + corr;
  k.end = 2000 + corr;
  return k;
}

CUpti_ActivityMemcpy6 memcpy_rec(uint32_t corr, uint64_t bytes, uint8_t kind) {
  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = kind;
  m.bytes = bytes;
  m.correlationId = corr;
  m.streamId = 3;
  m.start = 50;
  m.end = 80;
  return m;
}

CUpti_ActivityMarker2 marker(uint32_t id, CUpti_ActivityFlag flag, const char* name, uint64_t t) {
  CUpti_ActivityMarker2 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m.flags = flag;
  m.id = id;
  m.name = name;
  m.timestamp = t;
  return m;
}

TEST(CuptiParser, LayoutIsTheInstalledHeaders) {
  const auto li = cupti::layout_info();
  EXPECT_EQ(li.cupti_api_version, static_cast<uint32_t>(CUPTI_API_VERSION));
  EXPECT_EQ(li.kernel_record_bytes, sizeof(CUpti_ActivityKernel10));
  EXPECT_EQ(li.memcpy_record_bytes, sizeof(CUpti_ActivityMemcpy6));
  EXPECT_EQ(li.marker_record_bytes, sizeof(CUpti_ActivityMarker2));
}

TEST(CuptiParser, Demangles) {
  EXPECT_EQ(cupti::demangle("_Z6squarePfi"), "square(float*, int)");
  EXPECT_EQ(cupti::demangle("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(cupti::demangle("_Znot valid"), "_Znot valid");
  EXPECT_EQ(cupti::demangle(nullptr), "");
}

TEST(CuptiParser, KernelsAndMemcpysKeepEveryField) {
  Buffer b;
  b.add(kernel("_Z4gemmPKfS0_Pfiii", 11, 8, 256, 1024, 49152));
  b.add(memcpy_rec(12, 4096, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH));
  CUpti_ActivityKernel10 serial = kernel("splitKreduce_kernel", 13, 4, 128, 0, 0);
  serial.kind = CUPTI_ACTIVITY_KIND_KERNEL;  // same layout as CONCURRENT_KERNEL
  b.add(serial);
  ActivityParser p;
  std::vector<KernelRecord> out;
  ParseStats st = p.parse_buffer(b.data(), b.size(), &out);
  EXPECT_EQ(st.kernels, 2);
  EXPECT_EQ(st.memcpys, 1);
  EXPECT_EQ(st.malformed, 0);
  EXPECT_EQ(st.bytes_left, 0);
  ASSERT_EQ(out.size(), 3u);
  const KernelRecord& g = out[0];
  EXPECT_EQ(g.kind, ActivityKind::kKernel);
  EXPECT_EQ(g.name, "gemm(float const*, float const*, float*, int, int, int)");
  EXPECT_EQ(g.grid, (std::vector<int32_t>{8, 2, 1}));
  EXPECT_EQ(g.block, (std::vector<int32_t>{256, 1, 1}));
  EXPECT_EQ(g.static_shared, 1024);
  EXPECT_EQ(g.dynamic_shared, 49152);
  EXPECT_EQ(g.stream, 7u);
  EXPECT_EQ(g.device, 1);
  EXPECT_EQ(g.correlation, 11u);
  EXPECT_EQ(g.start_ns, 1011);
  EXPECT_EQ(g.end_ns, 2011);
  EXPECT_EQ(g.step, -1);  // the sink assigns it
  const KernelRecord& m = out[1];
  EXPECT_EQ(m.kind, ActivityKind::kMemcpy);
  EXPECT_EQ(m.bytes, 4096u);
  EXPECT_EQ(m.copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
  EXPECT_EQ(std::string(trace::memcpy_kind_name(m.copy_kind)), "DtoH");
  EXPECT_EQ(m.correlation, 12u);
  EXPECT_EQ(m.stream, 3u);
  EXPECT_TRUE(m.grid.empty());
  EXPECT_EQ(out[2].name, "splitKreduce_kernel");
  EXPECT_EQ(out[2].grid[0], 4);
}

TEST(CuptiParser, NvtxRangesPairAcrossBuffers) {
  ActivityParser p;
  Buffer b1, b2;
  b1.add(marker(5, CUPTI_ACTIVITY_FLAG_MARKER_START, "decode", 100));
  b1.add(kernel("k", 1, 1, 32, 0, 0));
  b2.add(marker(9, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, 300));  // never started
  b2.add(marker(5, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, 250));
  b2.add(marker(6, CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, "mark", 260));
  std::vector<KernelRecord> out;
  ParseStats s1 = p.parse_buffer(b1.data(), b1.size(), &out);
  EXPECT_EQ(s1.ranges, 0);
  EXPECT_EQ(s1.kernels, 1);
  ParseStats s2 = p.parse_buffer(b2.data(), b2.size(), &out);
  EXPECT_EQ(s2.ranges, 1);
  EXPECT_EQ(s2.malformed, 1);
  EXPECT_EQ(s2.skipped, 1);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].kind, ActivityKind::kRange);
  EXPECT_EQ(out[1].name, "decode");
  EXPECT_EQ(out[1].start_ns, 100);
  EXPECT_EQ(out[1].end_ns, 250);
}

TEST(CuptiParser, OpenRangesAreBounded) {
  ActivityParser p;
  Buffer b;
  for (uint32_t i = 0; i < ActivityParser::kMaxOpenRanges + 10; ++i)
    b.add(marker(i, CUPTI_ACTIVITY_FLAG_MARKER_START, "r", i));
  std::vector<KernelRecord> out;
  ParseStats st = p.parse_buffer(b.data(), b.size(), &out);
  EXPECT_EQ(st.malformed, 10);  // the oldest ten were forgotten
  Buffer e;
  e.add(marker(0, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, 9999));  // forgotten
  e.add(marker(ActivityParser::kMaxOpenRanges + 9, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, 9999));
  st = p.parse_buffer(e.data(), e.size(), &out);
  EXPECT_EQ(st.malformed, 1);
  EXPECT_EQ(st.ranges, 1);
}

TEST(CuptiParser, TruncatedAndUnknownRecordsStopTheLayoutWalkCleanly) {
  Buffer b;
  b.add(kernel("a", 1, 1, 1, 0, 0));
  b.add(kernel("b", 2, 1, 1, 0, 0));
  std::vector<uint8_t> cut(b.bytes().begin(), b.bytes().end() - 8);  // last record torn
  ActivityParser p;
  std::vector<KernelRecord> out;
  ParseStats st = p.parse_buffer(cut.data(), cut.size(), &out);
  EXPECT_EQ(st.kernels, 1);
  EXPECT_EQ(st.bytes_left, static_cast<int64_t>(sizeof(CUpti_ActivityKernel10) - 8));
  // An unknown kind: the walk cannot know its size and stops there.
  Buffer u;
  u.add(kernel("a", 1, 1, 1, 0, 0));
  CUpti_ActivityKernel10 odd = kernel("b", 2, 1, 1, 0, 0);
  odd.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  u.add(odd);
  out.clear();
  st = p.parse_buffer(u.data(), u.size(), &out);
  EXPECT_EQ(st.kernels, 1);
  EXPECT_EQ(st.bytes_left, static_cast<int64_t>(sizeof(CUpti_ActivityKernel10)));
  // Decoding a record directly: other kinds are skipped, short ones malformed.
  ParseStats d;
  p.decode(&odd, sizeof odd, &out, &d);
  EXPECT_EQ(d.skipped, 1);
  CUpti_ActivityKernel10 k = kernel("c", 3, 1, 1, 0, 0);
  p.decode(&k, sizeof k - 1, &out, &d);
  EXPECT_EQ(d.malformed, 1);
  // A negative grid (corrupted record) is refused rather than written.
  k.gridX = -4;
  p.decode(&k, sizeof k, &out, &d);
  EXPECT_EQ(d.malformed, 2);
  EXPECT_EQ(d.kernels, 0);
}

// The injection library walks buffers with cuptiActivityGetNextRecord; any walker works.
const void* every_other(const uint8_t* buffer, size_t valid, const void* prev, void* ctx) {
  const size_t n = sizeof(CUpti_ActivityKernel10);
  size_t at = prev ? static_cast<size_t>(static_cast<const uint8_t*>(prev) - buffer) + 2 * n : 0;
  ++*static_cast<int*>(ctx);
  return at + n <= valid ? buffer + at : nullptr;
}

TEST(CuptiParser, UsesTheWalkerItIsGiven) {
  Buffer b;
  for (uint32_t i = 0; i < 5; ++i) b.add(kernel("k", i, 1, 1, 0, 0));
  ActivityParser p;
  std::vector<KernelRecord> out;
  int calls = 0;
  ParseStats st = p.parse_buffer(b.data(), b.size(), &out, every_other, &calls);
  EXPECT_EQ(st.kernels, 3);
  EXPECT_EQ(calls, 4);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].correlation, 4u);
}

TEST(CuptiParser, RepeatedNamesAreDemangledOnce) {
  // Same text at different addresses must give the same name (the cache is by content).
  std::string n1 = "_Z3fooi", n2 = "_Z3fooi";
  Buffer b;
  b.add(kernel(n1.c_str(), 1, 1, 1, 0, 0));
  b.add(kernel(n2.c_str(), 2, 1, 1, 0, 0));
  ActivityParser p;
  std::vector<KernelRecord> out;
  p.parse_buffer(b.data(), b.size(), &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "foo(int)");
  EXPECT_EQ(out[1].name, "foo(int)");
}

}  // namespace
