// CPU seconds, not wall seconds, for the tests that bound how much work a refusal may do: a
// wall clock measures the machine (a CI host once ran this suite 20x slower than usual, and
// a 20 s wall bound on a 0.5 s refusal failed), CPU time measures the code. Header-only.
#pragma once

#include <sys/resource.h>
#include <time.h>

namespace llmrr::test {

// CPU seconds (user + system) this process has used so far.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU seconds (user + system) of every child this process has waited for, and theirs.
inline double children_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

// The largest resident set, in bytes, of any child this process has waited for.
inline long long children_max_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<long long>(ru.ru_maxrss) * 1024;
}

}  // namespace llmrr::test
