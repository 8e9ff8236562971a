// llmrr record-cuda [--step-range NAME] -o x.trace -- CMD ARGS...: runs an unmodified CUDA
// program with libllmrr_cupti.so injected (CUDA_INJECTION64_PATH) and records its kernel
// and memcpy sequence, step by step, into a trace that `llmrr diff` compares. The program's
// exit status is passed through (128 + signal when it was killed).
//
// The library is looked for, in order: $LLMRR_CUPTI_LIBRARY; libllmrr_cupti.so next to the
// llmrr binary (where the build writes it, and where an install puts both); ../lib/ from the
// binary; the build tree this llmrr was built in.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/replayer/diff_kernels.h"
#include "runtimes/adapter.h"

namespace llmrr::runtimes::cuda {

extern const Adapter kAdapter;

namespace {

using cli::absolute_path;
using cli::is_file;
using cli::self_dir;

[[maybe_unused]] std::string find_library(std::vector<std::string>* tried) {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("LLMRR_CUPTI_LIBRARY")) {  // when set, the only place
    tried->push_back(e);
    return is_file(e) ? absolute_path(e) : "";
  }
  const std::string dir = self_dir();
  if (!dir.empty()) {
    candidates.push_back(dir + "/libllmrr_cupti.so");
    candidates.push_back(dir + "/../lib/libllmrr_cupti.so");
  }
#ifdef LLMRR_CUPTI_BUILD_PATH
  candidates.push_back(LLMRR_CUPTI_BUILD_PATH);
#endif
  for (const std::string& c : candidates) {
    tried->push_back(c);
    if (is_file(c)) return absolute_path(c);
  }
  return "";
}

[[maybe_unused]] std::string quote(const std::string& a) {
  if (!a.empty() && a.find_first_of(" \t\n'\"\\$`") == std::string::npos) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int record(int argc, char** argv) {
  CLI::App app{
      "Record the kernel sequence of an unmodified CUDA program: CUPTI kernel and memcpy\n"
      "activity, split into steps at device/stream synchronisations or by an NVTX range.",
      "record-cuda"};
  std::string out, step_range;
  std::vector<std::string> command;
  bool no_memcpy = false, nvtx_all = false;
  int buffers = 8, buffer_mb = 4;
  app.add_option("-o,--output", out, "trace file to write")->required();
  app.add_option("--step-range", step_range,
                 "NVTX range name that delimits steps (push/pop or start/end); default: steps "
                 "end at cudaDeviceSynchronize / cudaStreamSynchronize");
  app.add_flag("--no-memcpy", no_memcpy, "record kernels only");
  app.add_flag("--nvtx-all", nvtx_all,
               "also record every NVTX range (CUPTI marker activity; costs more)");
  app.add_option("--buffers", buffers, "CUPTI activity buffers in the pool (default 8)")
      ->check(CLI::Range(2, 1024));
  app.add_option("--buffer-mb", buffer_mb, "size of each buffer in MiB (default 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("command", command, "the program and its arguments (after --)")->required();
  app.footer(
      "Examples:\n"
      "  llmrr record-cuda -o m1.trace -- ./gemm 1\n"
      "  llmrr record-cuda --step-range decode -o run.trace -- python serve.py\n"
      "  llmrr diff m1.trace m64.trace     # the first step whose kernel sequence differs\n"
      "\n"
      "Only kernel and memcpy activity is enabled (NVTX callbacks with --step-range): CUPTI\n"
      "injection can cost a serving engine much of its throughput when it records more.\n"
      "Activity is buffered in a fixed pool; when it is full CUPTI drops records rather than\n"
      "stall the program, and the trace says how many (lossy). Forked processes that use CUDA\n"
      "write their own trace, OUTPUT.<pid>.trace.\n"
      "\n"
      "Exit codes: the program's exit status (128 + signal if killed); 2 bad usage, a build\n"
      "without CUDA, or no trace written; 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
#ifndef LLMRR_HAVE_CUPTI
  (void)no_memcpy;
  (void)nvtx_all;
  return cli::report(
      "record-cuda",
      make_error(ErrorCode::kUnsupported,
                 "this llmrr was built without CUDA: record-cuda needs libllmrr_cupti.so, built "
                 "with -DLLMRR_CUDA=ON (cmake --preset cuda)"));
#else
  std::vector<std::string> tried;
  const std::string lib = find_library(&tried);
  if (lib.empty()) {
    std::string where;
    for (const std::string& t : tried) where += (where.empty() ? "" : ", ") + t;
    return cli::report("record-cuda", make_error(ErrorCode::kNotFound,
                                                 "libllmrr_cupti.so: expected it at one of " +
                                                     where + " (or set LLMRR_CUPTI_LIBRARY)"));
  }
  std::string cmdline;
  for (const std::string& c : command) cmdline += (cmdline.empty() ? "" : " ") + quote(c);
  cli::RecordedChild spec;
  spec.tool = "record-cuda";
  spec.output = out;
  spec.command = command;
  spec.no_trace_hint =
      "the program never initialized CUDA, or the injection library could not start (see its "
      "warnings)";
  spec.environment = [&](const std::string& written) {
    ::setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
    ::setenv("LLMRR_CUPTI_OUTPUT", written.c_str(), 1);
    ::setenv("LLMRR_CUPTI_PID", std::to_string(::getpid()).c_str(), 1);
    ::setenv("LLMRR_CUPTI_COMMAND", cmdline.c_str(), 1);
    ::setenv("LLMRR_CUPTI_BUFFERS", std::to_string(buffers).c_str(), 1);
    ::setenv("LLMRR_CUPTI_BUFFER_MB", std::to_string(buffer_mb).c_str(), 1);
    if (no_memcpy) ::setenv("LLMRR_CUPTI_MEMCPY", "0", 1);
    if (nvtx_all) ::setenv("LLMRR_CUPTI_NVTX_ALL", "1", 1);
    if (!step_range.empty()) {
      ::setenv("LLMRR_CUPTI_STEP_RANGE", step_range.c_str(), 1);
    } else {
      ::unsetenv("LLMRR_CUPTI_STEP_RANGE");
    }
#ifdef LLMRR_CUPTI_LIBRARY_PATH
    // NVTX hands its calls to CUPTI only through NVTX's own injection hook.
    if (!step_range.empty() || nvtx_all)
      ::setenv("NVTX_INJECTION64_PATH", LLMRR_CUPTI_LIBRARY_PATH, 0);
#endif
  };
  spec.summarize = [&](const std::string& written) -> Result<std::string> {
    auto sum = replay::summarize_kernel_trace(written);
    if (!sum.ok()) return sum.status();
    return std::to_string(sum->kernels) + " kernels, " + std::to_string(sum->memcpys) +
           " memcpys, " + std::to_string(sum->ranges) + " ranges in " +
           std::to_string(sum->steps) + " steps (" +
           (step_range.empty() ? std::string("split at synchronisations")
                               : "NVTX range " + step_range) +
           ")" +
           (sum->dropped ? ", " + std::to_string(sum->dropped) + " records DROPPED"
                         : std::string(sum->lossy ? ", LOSSY" : ""));
  };
  return cli::record_child(spec);
#endif
}

}  // namespace

const Adapter kAdapter{"cuda", record,
                       "record the kernel sequence of an unmodified CUDA program (CUPTI)", nullptr,
                       nullptr, nullptr};

}  // namespace llmrr::runtimes::cuda
