// Recipes for the golden bad inputs: each makes one damaged trace, names the error code
// `llmrr verify` must report (exit 2) and a substring of its one-line message.
// make_golden_errors writes them to tests/golden-errors/NAME.trace + NAME.expected.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "raw_trace.h"
#include "sample_records.h"

namespace llmrr::trace::golden_errors {

using testing::FrameLies;
using testing::RawTrace;

struct BadInput {
  std::string name;
  std::string what;  // one line for the .expected file
  std::vector<uint8_t> bytes;
  std::string code;  // error_code_name of the expected error
  std::string substring;
};

// The valid trace the damage is done to: a run header, two step chunks with a blob
// between them, footer and trailer.
struct Base {
  RawTrace t;
  std::vector<StepRecord> steps;
  std::vector<FrameInfo> frames;  // run header, chunk, blob, chunk
  uint64_t footer_offset = 0;
};

inline std::vector<StepRecord> base_steps() {
  return testing::SampleRun(5, 2, 3).all();
}

inline Base make_base(uint16_t major = kFormatMajor, uint16_t minor = kFormatMinor) {
  Base b;
  b.t = RawTrace(major, minor);
  b.steps = base_steps();
  b.t.add_run_header(testing::sample_header("golden-errors"));
  const size_t half = b.steps.size() / 2;
  b.t.add_steps({b.steps.begin(), b.steps.begin() + static_cast<std::ptrdiff_t>(half)});
  std::vector<float> v = testing::logit_like(64, 3);
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  b.t.add_blob(DType::kF32, {64}, bytes);
  b.t.add_steps({b.steps.begin() + static_cast<std::ptrdiff_t>(half), b.steps.end()});
  b.frames = b.t.frames;
  b.footer_offset = b.t.bytes.size();
  b.t.finish();
  return b;
}

inline std::vector<uint8_t> prefix(const std::vector<uint8_t>& v, uint64_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

inline std::vector<uint8_t> flip(std::vector<uint8_t> v, uint64_t at, int bit = 0) {
  v[at] ^= static_cast<uint8_t>(1u << bit);
  return v;
}

// A raw (not yet zstd-compressed) StepChunk FlatBuffer of `steps`.
inline std::vector<uint8_t> chunk_bytes(const std::vector<StepRecord>& steps) {
  detail::ChunkBuilder b;
  detail::KindCounters kc;
  for (const StepRecord& s : steps) b.add_step(s, &kc);
  std::vector<uint8_t> raw;
  b.finish(&raw);
  return raw;
}

// A trace with only the run header and one chunk of `steps`, plus footer.
inline std::vector<uint8_t> one_chunk(const std::vector<StepRecord>& steps, bool footer = true) {
  RawTrace t;
  t.add_run_header(testing::sample_header("golden-errors"));
  t.add_steps(steps);
  if (footer) t.finish();
  return t.bytes;
}

inline std::vector<BadInput> bad_inputs() {
  std::vector<BadInput> v;
  const Base base = make_base();
  const std::vector<uint8_t>& good = base.t.bytes;
  const FrameInfo& hdr = base.frames[0];
  const FrameInfo& chunk1 = base.frames[1];
  const FrameInfo& blob = base.frames[2];
  const FrameInfo& chunk2 = base.frames[3];
  auto add = [&](std::string name, std::string what, std::vector<uint8_t> bytes, std::string code,
                 std::string substring) {
    v.push_back({std::move(name), std::move(what), std::move(bytes), std::move(code),
                 std::move(substring)});
  };

  // --- not a trace ---------------------------------------------------------------------
  add("empty", "an empty file", {}, "truncated", "found an empty file");
  {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data(), "GIF89a\0\0", 8);
    add("wrong_magic", "a file that starts like a GIF", b, "bad_magic", "not an llmrr trace");
  }
  {
    const std::string text = "step,token\n0,42\n1,17\n";
    add("text_file", "a CSV file", {text.begin(), text.end()}, "bad_magic",
        "expected the llmrr trace magic");
  }
  add("newer_major", "written by format 2.1", make_base(2, 1).t.bytes, "version_too_new",
      "found 2.1: written by a newer llmrr");

  // --- truncated ---------------------------------------------------------------------------
  add("truncated_header", "cut inside the 16-byte file header", prefix(good, 12), "truncated",
      "16-byte llmrr trace header");
  add("truncated_no_run_header", "cut inside frame 0 (the run header)",
      prefix(good, hdr.offset + 20), "truncated", "expected frame 0 (run header)");
  add("truncated_mid_frame", "cut in the middle of the second step chunk",
      prefix(good, chunk2.offset + kFrameHeaderBytes + chunk2.stored_size / 2), "truncated",
      "torn: declares");
  add("truncated_at_frame_end", "cut right after the blob frame (no footer)",
      prefix(good, blob.end()), "truncated", "incomplete trace");
  add("truncated_in_trailer", "cut 5 bytes before the end (inside the trailer)",
      prefix(good, good.size() - 5), "truncated", "trailer is missing or torn");
  add("truncated_in_footer", "cut inside the footer frame", prefix(good, base.footer_offset + 40),
      "truncated", "torn: declares");

  // --- flipped bits ------------------------------------------------------------------------
  add("flip_magic", "one bit flipped in the file magic", flip(good, 3, 2), "bad_magic",
      "expected the llmrr trace magic");
  add("flip_frame_magic", "one bit flipped in a frame magic", flip(good, chunk1.offset + 1, 0),
      "bad_magic", "expected frame magic");
  add("flip_frame_header", "one bit flipped in a frame header's raw size",
      flip(good, chunk1.offset + 9, 3), "checksum_mismatch", "frame header check");
  add("flip_step_payload", "one bit flipped inside a step chunk payload",
      flip(good, chunk1.offset + kFrameHeaderBytes + chunk1.stored_size / 2, 5),
      "checksum_mismatch", "payload checksum");
  add("flip_blob_payload", "one bit flipped inside a tensor blob payload",
      flip(good, blob.end() - 3, 1), "checksum_mismatch", "payload checksum");
  add("flip_footer", "one bit flipped inside the footer payload",
      flip(good, base.footer_offset + kFrameHeaderBytes + 5, 6), "checksum_mismatch", "footer");
  add("flip_run_header_payload", "one bit flipped inside the run header payload",
      flip(good, hdr.offset + kFrameHeaderBytes + 10, 4), "checksum_mismatch",
      "frame 0 (run header)");

  // --- sizes ---------------------------------------------------------------------------------
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.stored_size = 1 << 20;
    t.add_chunk_bytes(chunk_bytes(base_steps()), 0, 0, lies);
    add("frame_past_eof", "a frame that declares 1 MiB of stored bytes the file does not have",
        t.bytes, "truncated", "declares 1048576 stored bytes");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.raw_size = 32 << 20;
    t.add_chunk_bytes(chunk_bytes(base_steps()), 0, 0, lies);
    add("frame_over_limit", "a frame that declares 32 MiB of raw bytes (limit 16 MiB)", t.bytes,
        "frame_too_large", "expected raw size <= 16777216");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.stored_size = 20 << 20;
    t.add_chunk_bytes(chunk_bytes(base_steps()), 0, 0, lies);
    add("stored_over_limit", "a frame that declares 20 MiB of stored bytes", t.bytes,
        "frame_too_large", "stored size <= 17825792");
  }
  {
    // 1 MiB of zeros compresses to a few hundred bytes; the header claims 4 KiB.
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.raw_size = 4096;
    t.add_chunk_bytes(std::vector<uint8_t>(1 << 20, 0), 0, 0, lies);
    t.finish();
    add("decompression_bomb", "a frame whose raw size lies (4 KiB declared, 1 MiB inside)", t.bytes,
        "size_mismatch", "found more (a raw size that lies");
  }
  {
    const std::vector<uint8_t> raw = chunk_bytes(base_steps());
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.raw_size = static_cast<int64_t>(raw.size()) + 100;
    t.add_chunk_bytes(raw, base_steps().front().step, base_steps().back().step, lies,
                      static_cast<int64_t>(base_steps().size()));
    t.finish();
    add("raw_size_too_large", "a frame that declares 100 raw bytes more than it holds", t.bytes,
        "size_mismatch", "decoded bytes (raw size), found");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    std::vector<uint8_t> garbage = {0x28, 0xb5, 0x2f, 0xfd};  // zstd magic, then noise
    for (int i = 0; i < 60; ++i) garbage.push_back(static_cast<uint8_t>(i * 37 + 11));
    t.add_chunk_bytes(std::vector<uint8_t>(200, 1), 0, 0, {}, 1, &garbage);
    t.finish();
    add("corrupt_zstd", "a step chunk whose zstd stream is noise (checksum intact)", t.bytes,
        "corrupt_payload", "zstd refuses");
  }

  // --- FlatBuffers -------------------------------------------------------------------------
  {
    std::vector<uint8_t> raw = chunk_bytes(base_steps());
    detail::store_u32(raw.data(), 0xFFFFFF00u);  // root offset far outside the buffer
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_chunk_bytes(raw, base_steps().front().step, base_steps().back().step);
    t.finish();
    add("flatbuffer_bad_offsets", "a step chunk whose root offset points outside the buffer",
        t.bytes, "bad_flatbuffer", "Verifier rejects");
  }
  {
    // Built field by field: the generated builder would assert on the missing field.
    flatbuffers::FlatBufferBuilder fbb;
    const auto start = fbb.StartTable();  // a StepChunk without its required `steps`
    fbb.Finish(flatbuffers::Offset<flatbuffers::Table>(fbb.EndTable(start)));
    std::vector<uint8_t> raw(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_chunk_bytes(raw, 0, 0);
    t.finish();
    add("flatbuffer_missing_steps", "a step chunk without its required steps vector", t.bytes,
        "bad_flatbuffer", "required fields missing");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    const auto start = fbb.StartTable();  // a RunHeader without its required `tool_version`
    fbb.AddElement<uint16_t>(fb::RunHeader::VT_FORMAT_MAJOR, kFormatMajor, 0);
    fbb.Finish(flatbuffers::Offset<flatbuffers::Table>(fbb.EndTable(start)));
    std::vector<uint8_t> raw(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    RawTrace t;
    t.add_frame(FrameKind::kRunHeader, raw);
    t.finish();
    add("run_header_missing_tool_version", "a run header without its required tool_version",
        t.bytes, "bad_flatbuffer", "RunHeader FlatBuffer");
  }

  // --- footer and trailer --------------------------------------------------------------------
  {
    std::vector<uint8_t> b = good;
    uint8_t tr[kTrailerBytes];
    detail::encode_trailer(chunk1.offset + kFrameHeaderBytes + 7, tr);
    std::memcpy(b.data() + b.size() - kTrailerBytes, tr, kTrailerBytes);
    add("footer_points_to_garbage", "a trailer pointing into the middle of a step chunk", b,
        "bad_footer", "expected a footer frame at offset");
  }
  {
    std::vector<uint8_t> b = good;
    uint8_t tr[kTrailerBytes];
    detail::encode_trailer(uint64_t{1} << 40, tr);
    std::memcpy(b.data() + b.size() - kTrailerBytes, tr, kTrailerBytes);
    add("footer_offset_out_of_range", "a trailer pointing 1 TiB past the end of the file", b,
        "bad_footer", "expected a footer offset in");
  }
  {
    // Rebuild: same frames, but the footer index shifts frame 2 by 8 bytes.
    Base b2 = make_base();
    RawTrace u;
    u.bytes = prefix(b2.t.bytes, b2.footer_offset);
    u.frames = b2.frames;
    u.frames[2].offset += 8;
    u.finish();
    add("footer_index_wrong", "a footer whose frame index gives a wrong offset", u.bytes,
        "bad_footer", "expected offset");
  }
  {
    Base b2 = make_base();
    detail::FooterFields f;
    f.complete = true;
    f.frames = b2.frames;
    f.first_step = b2.steps.front().step;
    f.last_step = b2.steps.back().step;
    f.steps = static_cast<int64_t>(b2.steps.size()) + 1;  // one step too many
    for (const StepRecord& s : b2.steps) f.tokens += static_cast<int64_t>(s.tokens.size());
    f.blobs = 1;
    for (const FrameInfo& fi : f.frames) f.raw_bytes += fi.raw_size;
    f.stored_bytes = b2.footer_offset;
    std::vector<uint8_t> raw;
    detail::build_footer(f, &raw);
    RawTrace u;
    u.bytes = prefix(b2.t.bytes, b2.footer_offset);
    u.frames = b2.frames;
    u.finish(true, &raw);
    add("footer_counts_wrong", "a footer that counts one step more than the frames hold", u.bytes,
        "bad_footer", "steps: expected");
  }

  // --- frame kinds, order and semantics ------------------------------------------------------
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_frame(static_cast<FrameKind>(9), std::vector<uint8_t>(32, 7));
    add("unknown_frame_kind", "a frame of kind 9 in a 1.0 trace", t.bytes, "unknown_kind",
        "expected frame kind 1..5, found 9");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    FrameLies lies;
    lies.index = 7;
    t.add_steps(base_steps(), lies);
    add("frame_index_wrong", "frame 1 whose header says it is frame 7", t.bytes, "semantic",
        "expected frame index 1, found 7");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_run_header(testing::sample_header("golden-errors"));
    t.finish();
    add("second_run_header", "two run headers", t.bytes, "semantic", "expected one run header");
  }
  {
    std::vector<StepRecord> s = base_steps();
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_steps({s[0], s[1], s[2]});
    t.add_steps({s[2]});  // step numbers repeat across chunks
    add("steps_not_increasing", "a chunk whose step repeats the previous chunk's last step",
        t.bytes, "semantic", "in increasing order");
  }
  {
    // Hand-built: one plan in the dictionary, a delta that refers to plan 5.
    flatbuffers::FlatBufferBuilder fbb;
    auto plan = fb::CreatePlan(fbb);
    std::vector<fb::SitePlanRef> delta = {fb::SitePlanRef(2, 5)};
    auto d = fbb.CreateVectorOfStructs(delta);
    fb::StepBuilder sb(fbb);
    sb.add_step(0);
    sb.add_plans_reset(true);
    sb.add_plan_delta(d);
    auto step = sb.Finish();
    std::vector<flatbuffers::Offset<fb::Plan>> plans = {plan};
    std::vector<flatbuffers::Offset<fb::Step>> steps = {step};
    auto pv = fbb.CreateVector(plans);
    auto sv = fbb.CreateVector(steps);
    fb::StepChunkBuilder cb(fbb);
    cb.add_plans(pv);
    cb.add_steps(sv);
    fbb.Finish(cb.Finish());
    std::vector<uint8_t> raw(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    t.add_chunk_bytes(raw, 0, 0);
    t.finish();
    add("plan_index_out_of_range", "a step whose plan delta names plan 5 of a 1-plan dictionary",
        t.bytes, "semantic", "expected a plan index < 1, found 5");
  }
  {
    std::vector<StepRecord> s = base_steps();
    s[1].segments[0].request = 999;
    add("unknown_request", "a batch segment of a request that never arrived", one_chunk(s),
        "semantic", "found request 999, which has not arrived");
  }
  {
    std::vector<StepRecord> s = base_steps();
    s[1].logits[0].blob = 3;
    add("blob_ref_out_of_range", "logits that name blob 3 in a trace without blobs", one_chunk(s),
        "semantic", "blob: expected -1 or a blob id in [0, 0), found 3");
  }
  {
    std::vector<StepRecord> s = base_steps();
    s[0].routing[0].chosen.pop_back();
    add("routing_size_mismatch", "routing with one chosen expert missing", one_chunk(s), "semantic",
        "chosen: expected rows x k");
  }
  {
    std::vector<StepRecord> s = base_steps();
    s[0].finishes.push_back({s[0].segments[0].request, FinishReason::kEos, 1});
    s[1].finishes.push_back({s[0].segments[0].request, FinishReason::kEos, 1});
    add("finished_twice", "a request that finishes twice", one_chunk(s), "semantic",
        "which finished at step");
  }
  {
    RawTrace t;
    t.add_run_header(testing::sample_header("golden-errors"));
    std::vector<uint8_t> data(64 * 4, 0x3c);
    t.add_blob(DType::kF32, {65}, data);  // shape says 65 floats, 64 stored
    t.finish();
    add("blob_shape_mismatch", "a blob whose shape needs 260 bytes but holds 256", t.bytes,
        "size_mismatch", "product(shape) x elem_size");
  }
  return v;
}

}  // namespace llmrr::trace::golden_errors
