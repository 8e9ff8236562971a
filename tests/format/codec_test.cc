// How the writer hands bytes to zstd: near-random spans (fingerprint hashes, low mantissa
// planes) go into stored zstd frames of their own, and the stream stays plain concatenated
// zstd frames that every reader decodes as one.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "sample_records.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using detail::Buffer;
using detail::NoisySpan;
using detail::ZstdCompressor;
using detail::ZstdDecompressor;

// Number of zstd frames in [p, p + n), or -1 when the bytes are not whole frames.
int count_zstd_frames(const uint8_t* p, size_t n) {
  int frames = 0;
  while (n > 0) {
    const size_t f = ZSTD_findFrameCompressedSize(p, n);
    if (ZSTD_isError(f) || f > n) return -1;
    p += f;
    n -= f;
    ++frames;
  }
  return frames;
}

std::vector<uint8_t> decode(const Buffer& stored, size_t raw_size) {
  std::vector<uint8_t> out(raw_size);
  ZstdDecompressor d;
  size_t decoded = 0;
  std::string err;
  EXPECT_EQ(d.decompress(stored.data(), stored.size(), out.data(), raw_size, &decoded, &err),
            ZstdDecompressor::Result::kOk)
      << err;
  return out;
}

// Text-like compressible bytes with random stretches at known places.
std::vector<uint8_t> mixed_payload(std::vector<NoisySpan>* noisy) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> v;
  auto text = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>("the batch split "[i % 16]));
  };
  auto noise = [&](size_t n) {
    const size_t b = v.size();
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(rng()));
    noisy->push_back({b, v.size()});
  };
  text(5000);
  noise(20000);
  text(300);  // a short gap: folded into the spans around it
  noise(30000);
  text(8000);
  noise(500);  // a short span: coded with its neighbours
  text(4000);
  return v;
}

TEST(Codec, SpansAreSeparateFramesThatDecodeAsOneStream) {
  std::vector<NoisySpan> noisy;
  const std::vector<uint8_t> raw = mixed_payload(&noisy);
  ZstdCompressor z;
  Buffer stored;
  std::string err;
  ASSERT_TRUE(z.compress_spans(raw.data(), raw.size(), 1, noisy, &stored, &err)) << err;
  // text | noise + short text + noise | text + short noise + text
  EXPECT_EQ(z.last_frames(), 3u);
  EXPECT_EQ(count_zstd_frames(stored.data(), stored.size()), 3);
  EXPECT_EQ(decode(stored, raw.size()), raw);

  // A span that is not near-random is compressed with its neighbours after all.
  Buffer judged;
  ASSERT_TRUE(
      z.compress_spans(raw.data(), raw.size(), 1, {{0, 5000}, {55300, 63300}}, &judged, &err));
  EXPECT_EQ(z.last_frames(), 1u);
  EXPECT_EQ(decode(judged, raw.size()), raw);

  // No spans: one frame, the same bytes as plain compress().
  Buffer single, plain;
  ASSERT_TRUE(z.compress_spans(raw.data(), raw.size(), 1, {}, &single, &err));
  EXPECT_EQ(z.last_frames(), 1u);
  ASSERT_TRUE(z.compress(raw.data(), raw.size(), 1, &plain, &err));
  EXPECT_EQ(single, plain);
}

TEST(Codec, StoredFramesAreValidZstdAtEveryBlockBoundary) {
  std::mt19937_64 rng(1);
  for (size_t n : {size_t{0}, size_t{1}, detail::kZstdBlockMax - 1, detail::kZstdBlockMax,
                   detail::kZstdBlockMax + 1, 3 * detail::kZstdBlockMax + 17}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<uint8_t> raw(n);
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    Buffer stored;
    detail::append_stored_zstd_frame(raw.data(), n, &stored);
    ASSERT_EQ(count_zstd_frames(stored.data(), stored.size()), 1);
    EXPECT_EQ(ZSTD_getFrameContentSize(stored.data(), stored.size()), n);
    EXPECT_EQ(decode(stored, n), raw);
  }
}

TEST(Codec, SpansAtTheEdgesAndOverlappingSpans) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> raw(40000);
  for (auto& b : raw) b = static_cast<uint8_t>(rng());
  for (size_t i = 10000; i < 30000; ++i) raw[i] = static_cast<uint8_t>(i % 7);
  ZstdCompressor z;
  std::string err;
  // Overlapping and out-of-range spans are clipped or skipped, never read past the end.
  const std::vector<NoisySpan> spans = {{0, 10000}, {5000, 9000}, {30000, 90000}};
  Buffer stored;
  ASSERT_TRUE(z.compress_spans(raw.data(), raw.size(), 1, spans, &stored, &err)) << err;
  EXPECT_EQ(z.last_frames(), 3u);
  EXPECT_EQ(decode(stored, raw.size()), raw);
}

TEST(Codec, NoisyPlanesOfShuffledFloats) {
  // Gaussian logits, shuffled: the three low planes of fp32 are near-random, the sign and
  // exponent plane is not.
  const std::vector<float> v = testing::logit_like(8 * 32000, 11);
  const size_t n = v.size();
  std::vector<uint8_t> shuffled(n * 4);
  detail::shuffle_bytes(reinterpret_cast<const uint8_t*>(v.data()), shuffled.data(), n * 4, 4);
  const std::vector<NoisySpan> spans = detail::noisy_planes(shuffled.data(), n, 4);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].begin, 0u);
  EXPECT_GE(spans[0].end, 2 * n);  // at least planes 0 and 1
  EXPECT_LE(spans[0].end, 3 * n);  // never the exponent plane

  std::vector<uint8_t> zeros(64000, 0);
  EXPECT_TRUE(detail::noisy_planes(zeros.data(), zeros.size() / 4, 4).empty());
  EXPECT_NEAR(detail::sampled_entropy(zeros.data(), zeros.size()), 0.0, 1e-12);
}

// The stored payload (after a blob's metadata prefix) of frame `i`.
std::vector<uint8_t> stored_payload(const std::string& path, const FrameInfo& f) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(f.offset + kFrameHeaderBytes));
  std::vector<uint8_t> v(f.stored_size);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size()));
  if (f.kind == FrameKind::kTensorBlob) {
    uint32_t padded;
    std::memcpy(&padded, v.data(), 4);
    v.erase(v.begin(), v.begin() + 8 + padded);
  }
  return v;
}

// Decode steps with fingerprints at many sites (the bulk of a real trace's bytes).
std::vector<StepRecord> fingerprint_steps() {
  std::mt19937_64 rng(9);
  std::vector<StepRecord> steps;
  for (int s = 0; s < 8; ++s) {
    StepRecord st;
    st.step = s;
    for (int r = 0; r < 16; ++r) {
      if (s == 0) {
        RequestRecord q;
        q.id = static_cast<uint64_t>(r);
        q.prompt = {1, 2, 3};
        q.max_tokens = 100;
        st.arrivals.push_back(q);
      }
      st.segments.push_back(
          {static_cast<uint64_t>(r), 3 + s, 1, 3 + s, SegmentKind::kDecode, true});
    }
    for (int site = 0; site < 64; ++site) {
      SiteRows sr;
      sr.site = testing::site(site % 12 + 1, site / 12);
      sr.cols = 512;
      for (int r = 0; r < 16; ++r)
        sr.rows.push_back({rng(), 40.0f + testing::uniform01(rng), 3.0f + testing::uniform01(rng)});
      st.rows.push_back(std::move(sr));
    }
    // Top-32 logits of every row: compressible bytes between two steps' fingerprints.
    for (int r = 0; r < 16; ++r) {
      LogitsRecord lr;
      lr.request = static_cast<uint64_t>(r);
      lr.position = 3 + s;
      lr.batch_row = r;
      lr.vocab = 512;
      for (int k = 0; k < 32; ++k) {
        lr.top_ids.push_back(k * 7 + r);
        lr.top_values.push_back(20.0f - 0.25f * static_cast<float>(k));
      }
      lr.full = {rng(), 300.0f, 20.0f};
      lr.margin = 0.25f;
      st.logits.push_back(std::move(lr));
      st.tokens.push_back(
          {static_cast<uint64_t>(r), 4 + s, static_cast<int32_t>(rng() % 512), -1.0});
    }
    steps.push_back(std::move(st));
  }
  return steps;
}

std::string write_sample(int level, const std::vector<StepRecord>& steps,
                         const std::vector<float>& blob, bool columns = true) {
  const std::string path = testing::temp_path("codec_l" + std::to_string(level));
  WriterOptions opt;
  opt.zstd_level = level;
  opt.column_chunks = columns;
  auto w = TraceWriter::open(path, opt);
  EXPECT_TRUE(w.ok()) << w.status().message();
  EXPECT_TRUE((*w)->append_run_header(testing::sample_header()).ok());
  for (const StepRecord& s : steps) EXPECT_TRUE((*w)->append_step(s).ok());
  BlobSpec b;
  b.shape = {static_cast<int64_t>(blob.size())};
  b.data = blob.data();
  b.bytes = blob.size() * 4;
  EXPECT_TRUE((*w)->append_blob(b).ok());
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

TEST(Codec, WriterCodesFingerprintsApartAtFastLevelsOnly) {
  const std::vector<StepRecord> steps = fingerprint_steps();
  const std::vector<float> blob = testing::logit_like(32000, 4);
  for (int level : {1, 2, 3})
    for (bool columns : {false, true}) {
      SCOPED_TRACE("level " + std::to_string(level) + (columns ? ", columns" : ", plain"));
      const std::string path = write_sample(level, steps, blob, columns);
      auto r = TraceReader::open(path);
      ASSERT_TRUE(r.ok()) << r.status().message();
      ASSERT_TRUE((*r)->verify().ok());
      int chunk_frames = 0, blob_frames = 0;
      for (const FrameInfo& f : (*r)->frames()) {
        const std::vector<uint8_t> p = stored_payload(path, f);
        if (f.kind == FrameKind::kStepChunk) {
          ASSERT_EQ(f.codec, columns ? Codec::kColumnZstd : Codec::kZstd);
          chunk_frames += count_zstd_frames(p.data(), p.size());
        } else if (f.kind == FrameKind::kTensorBlob) {
          ASSERT_EQ(f.codec, Codec::kShuffleZstd);
          blob_frames += count_zstd_frames(p.data(), p.size());
        }
      }
      if (level <= detail::kMaxSpanLevel && columns) {
        // The FlatBuffer, the hash column stored, the float planes' compressible and random
        // planes, the top-K columns.
        EXPECT_GE(chunk_frames, 3);
        EXPECT_EQ(blob_frames, 2);
      } else if (level <= detail::kMaxSpanLevel) {
        EXPECT_GT(chunk_frames, 8);  // a fingerprint span per step, with gaps between
        EXPECT_EQ(blob_frames, 2);   // low mantissa planes, then the exponent plane
      } else {
        EXPECT_EQ(chunk_frames, 1);
        EXPECT_EQ(blob_frames, 1);
      }
      // Whatever the framing, every record and the blob come back bit for bit.
      for (const StepRecord& s : steps) {
        StepRecord got;
        ASSERT_TRUE((*r)->read_step(s.step, &got).ok());
        EXPECT_EQ(got, s);
      }
      std::vector<uint8_t> bytes;
      ASSERT_TRUE((*r)->read_blob(0, &bytes).ok());
      ASSERT_EQ(bytes.size(), blob.size() * 4);
      EXPECT_EQ(std::memcmp(bytes.data(), blob.data(), bytes.size()), 0);
      std::remove(path.c_str());
    }
}

}  // namespace
}  // namespace llmrr::trace
