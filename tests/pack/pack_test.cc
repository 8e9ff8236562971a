// llmrr pack / unpack and redaction. The redaction test plants distinctive prompts and
// labels in the requests it redacts and searches every byte of the bundle, after
// decompressing the bundle and every zstd frame inside its traces, for their token ids,
// their text, their labels and the fingerprints of their rows.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "../common/test_paths.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/pack.h"
#include "llmrr/replayer/replay.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::builtin;
using rtest::read_file;
using rtest::run_command;
using rtest::temp_path;

const char* kSecrets[] = {"ZEBRA-QUOKKA-7741 the vault code is plum",
                          "WALRUS-NARWHAL-1234 my diary", "OCELOT-IBEX-9911 private key hunter2"};
const char* kSecretLabels[] = {"alice@example.com", "bob-private-label", "carol-ssn-123"};

// Target (request 0) plus three requests carrying secrets, arriving over the first steps;
// production policy (plans change with the batch), full logits (blobs), every site.
const std::string& secret_trace() {
  static const std::string path = [] {
    const LoadedModel& m = builtin("tiny-moe");
    rtest::RunSpec spec;
    spec.logits = trace::LogitsMode::kFull;
    RequestSpec t;
    t.id = 0;
    t.label = "target";
    t.prompt = rtest::bytes("Kept prompt: once upon a time");
    t.max_tokens = 6;
    t.stop_at_eos = false;
    spec.requests.push_back(t);
    for (int i = 0; i < 3; ++i) {
      RequestSpec r;
      r.id = static_cast<RequestId>(i + 1);
      r.label = kSecretLabels[i];
      r.prompt = rtest::bytes(kSecrets[i]);
      r.max_tokens = 5;
      r.arrival_step = i;
      r.stop_at_eos = false;
      spec.requests.push_back(r);
    }
    rtest::Recorded rec = rtest::record(m, spec, temp_path("secret.trace"));
    EXPECT_TRUE(rec.ok);
    return rec.path;
  }();
  return path;
}

// Every byte a reader of the bundle could get at: the bundle decompressed (unpack), each
// extracted file as stored, and every zstd frame found in it decompressed.
std::string all_bytes(const std::string& dir, const std::vector<std::string>& files) {
  std::string out;
  for (const std::string& f : files) {
    const std::string b = read_file(dir + "/" + f);
    out += b;
    for (size_t at = 0; at + 4 <= b.size(); ++at) {
      if (std::memcmp(b.data() + at, "\x28\xb5\x2f\xfd", 4) != 0) continue;
      size_t n = ZSTD_findFrameCompressedSize(b.data() + at, b.size() - at);
      if (ZSTD_isError(n)) continue;
      unsigned long long raw = ZSTD_getFrameContentSize(b.data() + at, n);
      if (raw == ZSTD_CONTENTSIZE_ERROR || raw == ZSTD_CONTENTSIZE_UNKNOWN || raw > (64u << 20)) {
        continue;
      }
      std::string d(raw, '\0');
      size_t got = ZSTD_decompress(d.data(), d.size(), b.data() + at, n);
      if (!ZSTD_isError(got)) out += d.substr(0, got);
    }
  }
  return out;
}

std::string as_ids(const std::vector<int32_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// Fingerprint hashes of request `id`'s rows and logits in a trace.
std::vector<uint64_t> fingerprints_of(const std::string& path, RequestId id) {
  std::vector<uint64_t> out;
  auto r = trace::TraceReader::open(path);
  EXPECT_TRUE(r.ok());
  trace::StepCursor cur = (*r)->steps();
  trace::StepRecord s;
  while (*cur.next(&s)) {
    std::vector<RequestId> owner;
    for (const trace::Segment& g : s.segments) owner.insert(owner.end(), g.count, g.request);
    for (const trace::SiteRows& sr : s.rows) {
      for (size_t i = 0; i < sr.rows.size(); ++i) {
        size_t row = sr.batch_rows.empty() ? i : static_cast<size_t>(sr.batch_rows[i]);
        if (row < owner.size() && owner[row] == id) out.push_back(sr.rows[i].hash);
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      if (l.request == id) out.push_back(l.full.hash);
    }
  }
  return out;
}

TEST(Pack, RedactedBundleHoldsNoOtherRequestsData) {
  const std::string bundle = temp_path("redacted.llmrr");
  replay::PackOptions o;
  o.traces = {secret_trace()};
  o.redact = true;
  o.keep = {0};
  auto s = replay::write_pack(bundle, o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->redactions.size(), 1u);
  EXPECT_EQ(s->redactions[0].redacted, (std::vector<RequestId>{1, 2, 3}));
  EXPECT_GT(s->redactions[0].row_fingerprints_removed, 0);
  EXPECT_GT(s->redactions[0].blobs_removed, 0);

  const std::string dir = temp_path("redacted-out");
  auto c = replay::unpack(bundle, dir);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<std::string> files;
  for (const replay::PackEntry& e : c->entries) files.push_back(e.name);
  const std::string hay = all_bytes(dir, files) + read_file(bundle);
  ASSERT_GT(hay.size(), read_file(bundle).size() * 3) << "frames were not decompressed";

  // The search finds what is there: the kept request's prompt and label.
  EXPECT_TRUE(contains(hay, as_ids(rtest::bytes("Kept prompt: once upon a time"))));
  EXPECT_TRUE(contains(hay, "target"));
  for (int i = 0; i < 3; ++i) {
    const std::string text = kSecrets[i];
    EXPECT_FALSE(contains(hay, as_ids(rtest::bytes(text)))) << "token ids of " << text;
    // Any 6 consecutive prompt tokens.
    std::vector<int32_t> ids = rtest::bytes(text);
    for (size_t at = 0; at + 6 <= ids.size(); ++at) {
      std::vector<int32_t> part(ids.begin() + at, ids.begin() + at + 6);
      ASSERT_FALSE(contains(hay, as_ids(part))) << text << " at " << at;
    }
    EXPECT_FALSE(contains(hay, text.substr(0, 12))) << text;
    EXPECT_FALSE(contains(hay, kSecretLabels[i]));
    // Rows that are a function of the token alone (embed of a byte both prompts share)
    // have the kept request's fingerprints too: those may stay.
    const std::vector<uint64_t> kept_fps = fingerprints_of(secret_trace(), 0);
    const std::set<uint64_t> kept_set(kept_fps.begin(), kept_fps.end());
    const std::vector<uint64_t> fps = fingerprints_of(secret_trace(), i + 1);
    ASSERT_GT(fps.size(), 10u);
    size_t searched = 0;
    for (uint64_t h : fps) {
      if (kept_set.count(h)) continue;
      ++searched;
      ASSERT_FALSE(contains(hay, std::string(reinterpret_cast<const char*>(&h), 8)))
          << "a fingerprint of request " << i + 1;
    }
    EXPECT_GT(searched, fps.size() / 2);
  }
  // The kept request's fingerprints are all there.
  for (uint64_t h : fingerprints_of(secret_trace(), 0)) {
    ASSERT_TRUE(contains(hay, std::string(reinterpret_cast<const char*>(&h), 8)));
  }

  // Shape stays: every request, its prompt length, arrival and finish.
  ASSERT_EQ(c->traces.size(), 1u);
  auto orig = trace::TraceReader::open(secret_trace());
  auto red = trace::TraceReader::open(c->traces[0]);
  ASSERT_TRUE(orig.ok() && red.ok());
  ASSERT_EQ((*orig)->requests().size(), (*red)->requests().size());
  for (size_t i = 0; i < (*orig)->requests().size(); ++i) {
    const trace::RequestSummary &a = (*orig)->requests()[i], &b = (*red)->requests()[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.prompt_len, b.prompt_len);
    EXPECT_EQ(a.arrival_step, b.arrival_step);
    EXPECT_EQ(a.finish_step, b.finish_step);
    EXPECT_EQ(a.generated, b.generated);
    EXPECT_EQ(a.reason, b.reason);
  }
  EXPECT_TRUE((*red)->run_header().command_line.empty());
  EXPECT_TRUE((*red)->verify().ok());
  nlohmann::json m = nlohmann::json::parse(c->manifest_json);
  EXPECT_EQ(m["redacted"], true);
  EXPECT_EQ(m["kept"], nlohmann::json::array({0}));
  EXPECT_EQ(m["traces"][0]["redaction"]["redacted_requests"], nlohmann::json::array({1, 2, 3}));
  EXPECT_EQ(m["traces"][0]["model"]["weight_hash"], (*orig)->run_header().model.weight_hash);
}

TEST(Pack, KeptRequestReplaysBitExactFromTheBundle) {
  const std::string bundle = temp_path("replay.llmrr");
  replay::PackOptions o;
  o.traces = {secret_trace()};
  o.redact = true;
  o.keep = {0, 2};
  ASSERT_TRUE(replay::write_pack(bundle, o).ok());
  auto c = replay::unpack(bundle, temp_path("replay-out"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const LoadedModel& m = builtin("tiny-moe");
  auto orig = trace::TraceReader::open(secret_trace());
  auto red = trace::TraceReader::open(c->traces[0]);
  ASSERT_TRUE(orig.ok() && red.ok());
  for (RequestId id : {RequestId{0}, RequestId{2}}) {
    replay::ReplayOptions ro;
    ro.request = id;
    auto want = replay::replay_trace(**orig, m, ro);
    auto got = replay::replay_trace(**red, m, ro);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().to_string();
    EXPECT_TRUE(got->bit_exact()) << replay::format_replay_report(*got);
    // Everything the original trace let a request-alone replay check is still checked.
    EXPECT_EQ(got->rows_checked, want->rows_checked);
    EXPECT_EQ(got->logits_checked, want->logits_checked);
    EXPECT_EQ(got->logit_blobs_checked, want->logit_blobs_checked);
    EXPECT_EQ(got->routings_checked, want->routings_checked);
    EXPECT_EQ(got->plans_checked, want->plans_checked);
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_GT(got->rows_checked, 0);
  }
  // From the command line, straight from the bundle.
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay " + bundle + " --request 2", &out, true);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "of request 2 alone: bit-exact")) << out;
  rc = run_command(rtest::llmrr_binary() + " replay " + bundle + " --request 1", &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(contains(out, "redacted")) << out;
}

TEST(Pack, CliRedactReplaysTheKeptRequestByDefault) {
  const std::string bundle = temp_path("cli.llmrr");
  std::string out;
  int rc = run_command(
      rtest::llmrr_binary() + " pack " + secret_trace() + " --redact --keep 0 -o " + bundle, &out,
      true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "redacted")) << out;
  rc = run_command(rtest::llmrr_binary() + " replay " + bundle, &out, true);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "of request 0 alone: bit-exact")) << out;
  rc = run_command(rtest::llmrr_binary() + " inspect " + bundle, &out, true);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "redaction")) << out;
  // Usage errors: one line, exit 2.
  for (const std::string& args : {std::string(" --redact -o ") + bundle + ".x",
                                  std::string(" --redact --keep 99 -o ") + bundle + ".x"}) {
    rc = run_command(rtest::llmrr_binary() + " pack " + secret_trace() + args, &out, true);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST(Pack, UnredactedRoundTripIsByteIdentical) {
  const LoadedModel& m = builtin("tiny-moe");
  rtest::RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Round trip", 5, 4);
  rtest::Recorded loaded = rtest::record(m, spec, temp_path("rt-loaded.trace"));
  ASSERT_TRUE(loaded.ok);
  const std::string bundle = temp_path("rt.llmrr");
  std::string out;
  int rc = run_command(
      rtest::llmrr_binary() + " pack " + secret_trace() + " " + loaded.path + " -o " + bundle, &out,
      true);
  ASSERT_EQ(rc, 0) << out;
  const std::string dir = temp_path("rt-out");
  rc = run_command(rtest::llmrr_binary() + " unpack " + bundle + " -o " + dir, &out, true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(read_file(dir + "/traces/secret.trace"), read_file(secret_trace()));
  EXPECT_EQ(read_file(dir + "/traces/rt-loaded.trace"), read_file(loaded.path));
  nlohmann::json man = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  EXPECT_EQ(man["redacted"], false);
  EXPECT_EQ(man["traces"][0]["command_line"], "test");
  EXPECT_FALSE(man["tool_version"].get<std::string>().empty());
  // diff takes the bundle of two traces as A and B (their prompts differ: paired by id).
  std::string direct, packed;
  int rc_direct = run_command(rtest::llmrr_binary() + " diff --model none --align ids " +
                                  secret_trace() + " " + loaded.path,
                              &direct);
  int rc_packed =
      run_command(rtest::llmrr_binary() + " diff --model none --align ids " + bundle, &packed);
  EXPECT_EQ(rc_direct, 1) << direct;
  EXPECT_EQ(rc_direct, rc_packed) << packed;
  EXPECT_FALSE(packed.empty());
  // Every line but the two header lines (they name the paths) is the same.
  auto body = [](const std::string& s) {
    std::string out;
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (n >= 2) out += s[i];
      if (s[i] == '\n') ++n;
    }
    return out;
  };
  EXPECT_EQ(body(direct), body(packed));
}

TEST(Pack, DamagedBundlesExitTwoWithOneLine) {
  const std::string bundle = temp_path("good.llmrr");
  replay::PackOptions o;
  o.traces = {secret_trace()};
  ASSERT_TRUE(replay::write_pack(bundle, o).ok());
  const std::string good = read_file(bundle);
  struct Case {
    std::string name, bytes, code;
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x20;
  std::string newer = good;
  newer[8] = 9;
  std::vector<Case> cases = {
      {"empty", "", "bad_magic"},
      {"text", "hello, not a bundle\n", "bad_magic"},
      {"header-only", good.substr(0, 16), "truncated"},
      {"truncated", good.substr(0, good.size() / 2), "truncated"},
      {"flipped", flipped, ""},
      {"newer", newer, "version_too_new"},
      {"trailing", good + "x", ""},
  };
  for (const Case& k : cases) {
    const std::string p = temp_path("bad-" + k.name + ".llmrr");
    rtest::write_file(p, k.bytes);
    for (const std::string& cmd :
         {std::string(" unpack --list "), std::string(" replay "), std::string(" inspect ")}) {
      std::string out;
      int rc = run_command(rtest::llmrr_binary() + cmd + p, &out, true);
      // Not a bundle ("empty", "text"): unpack says so; the trace commands read it as a
      // (bad) trace. A damaged bundle: every command names the problem.
      EXPECT_EQ(rc, 2) << k.name << cmd << out;
      if (!k.code.empty() && cmd == " unpack --list ") {
        EXPECT_TRUE(contains(out, k.code)) << k.name << cmd << out;
      }
      EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << k.name << cmd << out;
    }
  }
  auto c = replay::unpack(bundle, "");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
}

TEST(Pack, WithModelBundlesAFileModel) {
  // The GGUF fixture is small: bundled, and replay takes the model from the bundle.
  const std::string gguf = LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama-f32.gguf";
  auto model = load_model(gguf);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  rtest::RunSpec spec;
  RequestSpec r;
  r.prompt = {1, 5, 9, 3};
  r.max_tokens = 4;
  r.stop_at_eos = false;
  spec.requests = {r};
  rtest::Recorded rec = rtest::record(*model, spec, temp_path("gguf.trace"));
  ASSERT_TRUE(rec.ok);
  const std::string bundle = temp_path("gguf.llmrr");
  replay::PackOptions o;
  o.traces = {rec.path};
  o.with_model = true;
  auto s = replay::write_pack(bundle, o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const std::string dir = temp_path("gguf-out");
  auto c = replay::unpack(bundle, dir);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model, dir + "/model/tiny-llama-f32.gguf");
  EXPECT_EQ(read_file(c->model), read_file(gguf));
  o.max_model_bytes = 100;
  auto too_big = replay::write_pack(bundle + ".2", o);
  EXPECT_FALSE(too_big.ok());
}

}  // namespace
}  // namespace llmrr
