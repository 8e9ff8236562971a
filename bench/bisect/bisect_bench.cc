// bisect_bench: `llmrr bisect A B` (the library call replay::bisect_traces) against one
// request-alone replay of B's request, on a pair recorded with `llmrr record`.
//
// Alternating for --reps repetitions, in one process (the model is loaded by each phase the
// way the command loads it):
//   alone    replay::replay_trace(B, --request R): one request-alone replay, the unit of work
//   bisect1  replay::bisect_traces(A, B) with --jobs 1
//   bisect2  the same with --jobs 2
// and prints medians of wall time, the number of replays each bisect ran, and the ratios
// bisect / alone ("bisect costs as much as N request-alone replays of the whole run").
//
//   bisect_bench A.trace B.trace [--request R] [--reps 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llmrr/replayer/bisect.h"
#include "llmrr/replayer/replay.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llmrr;
  std::vector<std::string> paths;
  int reps = 5;
  RequestId request = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--request") && i + 1 < argc) {
      request = std::strtoull(argv[++i], nullptr, 10);
    } else {
      paths.push_back(argv[i]);
    }
  }
  if (paths.size() != 2 || reps < 1) {
    std::fprintf(stderr, "usage: bisect_bench A.trace B.trace [--request R] [--reps 5]\n");
    return 2;
  }
  std::vector<double> alone, b1, b2;
  int64_t replays1 = 0, replays2 = 0, factors = 0;
  for (int r = 0; r < reps; ++r) {
    for (int phase = 0; phase < 3; ++phase) {
      const int which = (phase + r) % 3;  // rotated order
      const auto t0 = Clock::now();
      if (which == 0) {
        replay::ReplayOptions o;
        o.request = request;
        Result<replay::ReplayReport> rr = replay::replay_trace(paths[1], o);
        if (!rr.ok() || !rr->bit_exact()) {
          std::fprintf(stderr, "replay failed: %s\n",
                       rr.ok() ? "not bit-exact" : rr.status().to_string().c_str());
          return 3;
        }
        alone.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      } else {
        replay::BisectOptions o;
        o.request = std::make_pair(request, request);
        o.jobs = which;
        Result<replay::BisectReport> br = replay::bisect_traces(paths[0], paths[1], o);
        if (!br.ok()) {
          std::fprintf(stderr, "bisect failed: %s\n", br.status().to_string().c_str());
          return 3;
        }
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        (which == 1 ? b1 : b2).push_back(s);
        (which == 1 ? replays1 : replays2) = br->replays;
        factors = static_cast<int64_t>(br->factors.size());
      }
    }
  }
  const double a = median(alone), m1 = median(b1), m2 = median(b2);
  std::printf("%d repetitions, %lld factors\n", reps, static_cast<long long>(factors));
  std::printf("| phase | replays | seconds (median) | / request-alone replay |\n");
  std::printf("|---|---:|---:|---:|\n");
  std::printf("| replay --request %llu (one request-alone replay) | 1 | %.2f | 1.00 |\n",
              static_cast<unsigned long long>(request), a);
  std::printf("| bisect --jobs 1 | %lld | %.2f | %.1f |\n", static_cast<long long>(replays1), m1,
              a > 0 ? m1 / a : 0);
  std::printf("| bisect --jobs 2 | %lld | %.2f | %.1f |\n", static_cast<long long>(replays2), m2,
              a > 0 ? m2 / a : 0);
  return 0;
}
