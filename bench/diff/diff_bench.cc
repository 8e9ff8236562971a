// diff_bench: `llmrr diff` on two big traces vs reading both traces once.
//
// Writes two synthetic traces of about --size-mb MiB each with TraceWriter into a temp
// directory (removed afterwards unless --keep): a decode-heavy serving run (64 request slots,
// a prefill chunk arriving every step, capture `all` on an 8-layer dense model: ~110 sites,
// top-32 logits, one token per request per step). B equals A except that one request's rows
// differ from one site at one step in the middle onwards (a numerical split), so the diff
// has its second pass to do. Then, each in a fresh process (so that peak RSS is the
// measurement's own), alternating for --reps repetitions:
//   read    StepCursor over A, then over B (every step decoded: the "read both once" bound)
//   read2   the same, A and B on two threads
//   diff    replay::diff_traces(A, B) (two threads, as `llmrr diff` runs)
//   diff1   the same on one thread
// and prints medians, the ratios diff / read and diff1 / read, and each one's peak RSS
// (VmHWM of the phase's process).
//
//   diff_bench [--size-mb 1024] [--reps 3] [--dir /tmp] [--keep]
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/format/site.h"

extern char** environ;

namespace {

using namespace llmrr;
using Clock = std::chrono::steady_clock;

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float unit() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24); }
};

constexpr int kLayers = 8;
constexpr int kSlots = 64;
constexpr int kPrompt = 16;
constexpr int kLife = 96;  // decode steps per request
constexpr int kTopK = 32;
constexpr int kHidden = 1024;

std::vector<uint64_t> sites() {
  std::vector<uint64_t> out;
  out.push_back(SiteId{SiteKind::kEmbed, -1, -1}.packed());
  for (int l = 0; l < kLayers; ++l) {
    for (SiteKind k :
         {SiteKind::kAttnNorm, SiteKind::kQ, SiteKind::kK, SiteKind::kV, SiteKind::kAttn,
          SiteKind::kO, SiteKind::kAttnResid, SiteKind::kMlpNorm, SiteKind::kGate, SiteKind::kUp,
          SiteKind::kAct, SiteKind::kDown, SiteKind::kLayerOut}) {
      out.push_back(SiteId{k, static_cast<int16_t>(l), -1}.packed());
    }
  }
  out.push_back(SiteId{SiteKind::kFinalNorm, -1, -1}.packed());
  return out;
}

trace::PlanRecord gemm_plan(uint32_t splits) {
  trace::PlanRecord p;
  p.op = trace::OpKind::kGemm;
  p.splits = splits;
  return p;
}

int write_pair(const std::string& a_path, const std::string& b_path, uint64_t target_bytes,
               int64_t* steps_out) {
  trace::WriterOptions wo;
  auto wa = trace::TraceWriter::open(a_path, wo);
  auto wb = trace::TraceWriter::open(b_path, wo);
  if (!wa.ok() || !wb.ok()) {
    std::fprintf(stderr, "diff_bench: cannot create the traces: %s %s\n",
                 wa.status().to_string().c_str(), wb.status().to_string().c_str());
    return 2;
  }
  trace::RunHeader h;
  h.tool_version = "diff_bench";
  h.run_id = "bench-a";
  h.model.name = "synthetic-dense-8l";
  h.model.weight_hash = "xxh3-64:0123456789abcdef";
  h.model.layers = kLayers;
  h.model.hidden = kHidden;
  h.model.vocab = 32000;
  h.engine.policy = "production";
  h.engine.capture = trace::CaptureLevel::kAll;
  if (!(*wa)->append_run_header(h).ok()) return 3;
  h.run_id = "bench-b";
  if (!(*wb)->append_run_header(h).ok()) return 3;

  const std::vector<uint64_t> all_sites = sites();
  const uint64_t logits_site = SiteId{SiteKind::kLogits, -1, -1}.packed();
  const uint64_t split_site = SiteId{SiteKind::kDown, 5, -1}.packed();
  Rng rng{42};
  struct Slot {
    uint64_t id = 0;
    int32_t pos = 0;
    int32_t left = 0;  // decode steps left; 0 = prefill next
    bool fresh = true;
  };
  std::vector<Slot> slots(kSlots);
  uint64_t next_id = 0;
  for (int i = 0; i < kSlots; ++i) {
    slots[i].id = next_id++;
    slots[i].left = -(i * (kLife / kSlots + 1));  // stagger the first arrivals
  }
  // The split: one request, from its row at the middle step, at L5.mlp.down onward.
  const int64_t est_steps =
      static_cast<int64_t>(target_bytes / (kSlots * (all_sites.size() + 1) * 18 + 4096));
  const int64_t split_step = std::max<int64_t>(est_steps / 2, 1);
  uint64_t split_request = UINT64_MAX;

  trace::StepRecord s, sb;
  int64_t step = 0;
  for (;; ++step) {
    const trace::WriterStats ws = (*wa)->stats();
    if (ws.file_bytes + ws.bytes_in_flight >= target_bytes) break;
    s.clear();
    s.step = step;
    // Batch: decodes first, then at most a few prefills.
    std::vector<int> decode, prefill;
    for (int i = 0; i < kSlots; ++i) {
      Slot& sl = slots[i];
      if (sl.left < 0) {
        ++sl.left;
        continue;
      }
      if (sl.fresh) {
        prefill.push_back(i);
      } else {
        decode.push_back(i);
      }
    }
    std::vector<std::pair<int, trace::Segment>> segs;
    for (int i : decode) {
      trace::Segment g;
      g.request = slots[i].id;
      g.start = slots[i].pos;
      g.count = 1;
      g.cached = slots[i].pos;
      g.kind = trace::SegmentKind::kDecode;
      g.sample = true;
      segs.push_back({i, g});
    }
    for (int i : prefill) {
      trace::RequestRecord a;
      a.id = slots[i].id;
      a.prompt.resize(kPrompt);
      for (int32_t& t : a.prompt) t = static_cast<int32_t>(rng.next() % 32000);
      a.max_tokens = kLife + 1;
      a.arrival_step = step;
      s.arrivals.push_back(std::move(a));
      trace::Segment g;
      g.request = slots[i].id;
      g.start = 0;
      g.count = kPrompt;
      g.kind = trace::SegmentKind::kPrefill;
      g.sample = true;
      segs.push_back({i, g});
    }
    for (auto& [i, g] : segs) s.segments.push_back(g);
    const int64_t rows = s.row_count();
    // Plans: batch-shape dependent, so they change when the batch size does.
    const uint32_t splits = rows < 48 ? 4 : rows < 72 ? 2 : 1;
    for (uint64_t site : all_sites) {
      SiteId sid = SiteId::unpack(site);
      if (sid.kind == SiteKind::kEmbed || sid.kind == SiteKind::kAttnResid ||
          sid.kind == SiteKind::kAct || sid.kind == SiteKind::kLayerOut) {
        continue;
      }
      trace::PlanRecord p = gemm_plan(splits);
      if (sid.kind == SiteKind::kAttnNorm || sid.kind == SiteKind::kMlpNorm ||
          sid.kind == SiteKind::kFinalNorm) {
        p.op = trace::OpKind::kRmsNorm;
      }
      if (sid.kind == SiteKind::kAttn) {
        p.op = trace::OpKind::kAttention;
        p.mode = trace::SplitMode::kSize;
        p.split_size = 256;
        p.splits = 1;
      }
      s.plans.push_back({site, p});
    }
    s.plans.push_back({logits_site, gemm_plan(splits)});
    std::sort(s.plans.begin(), s.plans.end(),
              [](const auto& x, const auto& y) { return x.site < y.site; });
    for (uint64_t site : all_sites) {
      trace::SiteRows sr;
      sr.site = site;
      sr.cols = kHidden;
      sr.rows.resize(static_cast<size_t>(rows));
      for (trace::Fingerprint& f : sr.rows) {
        f.hash = rng.next();
        f.l2 = 10.0f + rng.unit();
        f.max_abs = 1.0f + rng.unit();
      }
      s.rows.push_back(std::move(sr));
    }
    // Logits (and the logits site) of the sampled rows.
    trace::SiteRows lr;
    lr.site = logits_site;
    lr.cols = 32000;
    int32_t row = 0;
    for (auto& [i, g] : segs) {
      row += g.count;
      trace::LogitsRecord l;
      l.request = g.request;
      l.position = g.start + g.count - 1;
      l.batch_row = row - 1;
      l.vocab = 32000;
      l.top_ids.resize(kTopK);
      l.top_values.resize(kTopK);
      float v = 20.0f;
      for (int k = 0; k < kTopK; ++k) {
        l.top_ids[k] = static_cast<int32_t>(rng.next() % 32000);
        l.top_values[k] = v;
        v -= rng.unit();
      }
      l.margin = l.top_values[0] - l.top_values[1];
      l.full = {rng.next(), 80.0f, 20.0f};
      lr.batch_rows.push_back(l.batch_row);
      lr.rows.push_back(l.full);
      s.logits.push_back(std::move(l));
      trace::TokenRecord t;
      t.request = g.request;
      t.position = g.start + g.count;
      t.token = s.logits.back().top_ids[0];
      s.tokens.push_back(t);
    }
    s.rows.push_back(std::move(lr));
    // Advance the slots; finished requests are replaced by new ones.
    for (auto& [i, g] : segs) {
      Slot& sl = slots[i];
      sl.pos = g.start + g.count;
      sl.fresh = false;
      if (++sl.left > kLife) {
        trace::FinishRecord f;
        f.request = sl.id;
        f.generated = kLife + 1;
        s.finishes.push_back(f);
        sl = Slot();
        sl.id = next_id++;
      }
    }
    // B: the same, except one request's rows after the split point.
    sb = s;
    if (step == split_step && !decode.empty()) split_request = slots[decode[0]].id;
    if (split_request != UINT64_MAX) {
      int32_t r0 = 0;
      for (const trace::Segment& g : sb.segments) {
        if (g.request == split_request) {
          for (trace::SiteRows& sr : sb.rows) {
            if (step == split_step && SiteId::unpack(sr.site) < SiteId::unpack(split_site)) {
              continue;
            }
            for (size_t k = 0; k < sr.rows.size(); ++k) {
              int32_t b = sr.batch_rows.empty() ? static_cast<int32_t>(k) : sr.batch_rows[k];
              if (b >= r0 && b < r0 + g.count) sr.rows[k].hash ^= 0x5a5a;
            }
          }
          for (trace::LogitsRecord& l : sb.logits) {
            if (l.request == split_request) l.full.hash ^= 0x5a5a;
          }
        }
        r0 += g.count;
      }
    }
    Status st = (*wa)->append_step(s);
    if (st.ok()) st = (*wb)->append_step(sb);
    if (!st.ok()) {
      std::fprintf(stderr, "diff_bench: step %lld: %s\n", static_cast<long long>(step),
                   st.to_string().c_str());
      return 3;
    }
  }
  Status ca = (*wa)->close(), cb = (*wb)->close();
  if (!ca.ok() || !cb.ok()) {
    std::fprintf(stderr, "diff_bench: close: %s %s\n", ca.to_string().c_str(),
                 cb.to_string().c_str());
    return 3;
  }
  *steps_out = step;
  return 0;
}

// ---- the measured phases (each in its own process) -----------------------------------------

int64_t read_all(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
    std::exit(3);
  }
  trace::StepCursor c = (*r)->steps();
  trace::StepRecord s;
  int64_t n = 0;
  for (;;) {
    Result<bool> got = c.next(&s);
    if (!got.ok()) {
      std::fprintf(stderr, "%s\n", got.status().to_string().c_str());
      std::exit(3);
    }
    if (!*got) break;
    n += static_cast<int64_t>(s.rows.size());
  }
  return n;
}

int run_phase(const std::string& phase, const std::string& a, const std::string& b) {
  auto t0 = Clock::now();
  if (phase == "read") {
    read_all(a);
    read_all(b);
  } else if (phase == "read2") {
    std::thread t([&] { read_all(b); });
    read_all(a);
    t.join();
  } else if (phase == "diff" || phase == "diff1") {
    replay::DiffOptions o;
    o.parallel = phase == "diff";
    o.model = "none";
    Result<replay::DiffReport> d = replay::diff_traces(a, b, o);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.status().to_string().c_str());
      return 3;
    }
    int split = 0;
    for (const replay::RequestDiff& r : d->requests)
      split += r.verdict != replay::Verdict::kIdentical;
    if (split != 1) {
      std::fprintf(stderr, "diff_bench: expected one split request, found %d\n", split);
      return 3;
    }
  } else {
    return 2;
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // Peak RSS of this process image (VmHWM; ru_maxrss would include the parent's memory
  // from before exec).
  long hwm_kb = 0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "VmHWM:", 6) == 0) hwm_kb = std::atol(line + 6);
    }
    std::fclose(f);
  }
  std::printf("%.6f %ld\n", secs, hwm_kb);
  return 0;
}

struct Sample {
  double secs = 0;
  long rss_kb = 0;
};

Sample spawn_phase(const std::string& self, const std::string& phase, const std::string& a,
                   const std::string& b) {
  int fd[2];
  if (pipe(fd) != 0) std::exit(3);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fd[0]);
  std::vector<std::string> args = {self, "--phase", phase, a, b};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0) std::exit(3);
  close(fd[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "diff_bench: phase %s failed\n", phase.c_str());
    std::exit(3);
  }
  Sample s;
  if (std::sscanf(out.c_str(), "%lf %ld", &s.secs, &s.rss_kb) != 2) std::exit(3);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--phase") return run_phase(argv[2], argv[3], argv[4]);
  uint64_t size_mb = 1024;
  int reps = 3;
  std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "diff_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mb") {
      size_mb = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "--reps") {
      reps = std::atoi(value().c_str());
    } else if (a == "--dir") {
      base = value();
    } else if (a == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr, "usage: diff_bench [--size-mb N] [--reps N] [--dir DIR] [--keep]\n");
      return 2;
    }
  }
  if (size_mb < 1 || reps < 1) return 2;
  std::string tmpl = base + "/llmrr-diff-bench-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string dir = buf.data();
  const std::string a = dir + "/a.trace", b = dir + "/b.trace";
  std::fprintf(stderr, "diff_bench: writing two traces of %llu MiB into %s ...\n",
               static_cast<unsigned long long>(size_mb), dir.c_str());
  auto t0 = Clock::now();
  int64_t steps = 0;
  int rc = write_pair(a, b, size_mb << 20, &steps);
  if (rc != 0) return rc;
  const double write_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  struct stat sa, sb;
  stat(a.c_str(), &sa);
  stat(b.c_str(), &sb);

  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 3;
  self[n] = '\0';
  const std::vector<std::string> phases = {"read", "read2", "diff", "diff1"};
  std::vector<std::vector<double>> secs(phases.size());
  std::vector<long> rss(phases.size(), 0);
  spawn_phase(self, "read", a, b);  // warm the page cache once
  for (int r = 0; r < reps; ++r) {
    for (size_t p = 0; p < phases.size(); ++p) {
      size_t q = (p + static_cast<size_t>(r)) % phases.size();  // rotate the order
      Sample s = spawn_phase(self, phases[q], a, b);
      secs[q].push_back(s.secs);
      rss[q] = std::max(rss[q], s.rss_kb);
    }
  }
  const double read = median(secs[0]);
  std::printf("traces: A %.1f MiB, B %.1f MiB, %lld steps each (written in %.1f s)\n",
              sa.st_size / 1048576.0, sb.st_size / 1048576.0, static_cast<long long>(steps),
              write_secs);
  std::printf("medians of %d repetitions, each phase in a fresh process:\n", reps);
  std::printf("| phase | seconds | / read both once | peak RSS |\n|---|---:|---:|---:|\n");
  const char* names[] = {"read both once (A then B, 1 thread)", "read both (2 threads)",
                         "llmrr diff (2 threads)", "llmrr diff (1 thread)"};
  for (size_t p = 0; p < phases.size(); ++p) {
    std::printf("| %s | %.2f | %.2f | %.0f MiB |\n", names[p], median(secs[p]),
                median(secs[p]) / read, rss[p] / 1024.0);
  }
  if (!keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else {
    std::printf("kept %s and %s\n", a.c_str(), b.c_str());
  }
  return 0;
}
