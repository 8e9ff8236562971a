// llmrr export TRACE --perfetto out.json | --npy DIR: the trace for the viewers and tools
// people already use (layouts in replayer/export/include/llmrr/replayer/export.h): Chrome
// trace-event JSON for ui.perfetto.dev / chrome://tracing, and NumPy arrays of fingerprints, top-K
// logits and routing; --parquet DIR: one Parquet file per table, written by pyarrow
// (python/llmrr/core/parquet.py) in the venv. Debian has no Arrow C++ packages (apt-cache policy
// libparquet-dev: none), and vendoring Arrow C++ would dwarf the project; pyarrow is the Parquet
// writer people already have, and it reads the reader's Arrow export without a copy.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "cli/child.h"
#include "cli/cli.h"
#include "cli/trace_input.h"
#include "llmrr/replayer/export.h"
#include "llmrr/safeio/output.h"

namespace {

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Runs `python -m llmrr.core.parquet TRACE STAGING`: $LLMRR_PYTHON, else the venv beside the
// build (build/venv, tools/setup/python). A checkout's python/ package and its build's library go
// first on the child's paths, so the CLI and the package it runs are the same version.
// Returns 0 or the exit status to give (2: no python / no pyarrow, said on stderr).
int write_parquet(const std::string& trace_path, const llmrr::safeio::OutputDir& dir) {
  namespace fs = std::filesystem;
  const std::string self = self_path();
  // build/<preset>/tools/llmrr: the build directory, and the checkout above it.
  const fs::path build = self.empty() ? fs::path() : fs::path(self).parent_path().parent_path();
  std::string py;
  if (const char* e = std::getenv("LLMRR_PYTHON"); e != nullptr && *e != '\0') {
    py = e;
  } else if (!build.empty()) {
    py = (build.parent_path() / "venv" / "bin" / "python").string();
  }
  if (py.empty() || ::access(py.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "llmrr export: error: --parquet needs a python with pyarrow: none at '%s' (run "
                 "tools/setup/python, or set $LLMRR_PYTHON)\n",
                 py.c_str());
    return 2;
  }
  const fs::path lib = build / "recorder" / "libllmrr_recorder_c.so";
  const fs::path package = build.parent_path().parent_path() / "python";
  std::error_code ec;
  const bool have_lib = !build.empty() && fs::is_regular_file(lib, ec);
  const bool have_package =
      !build.empty() && fs::is_regular_file(package / "llmrr" / "__init__.py", ec);
  llmrr::cli::Child child;
  child.argv = {py, "-m", "llmrr.core.parquet", trace_path, dir.write_path()};
  child.in_child = [&] {
    if (have_lib && std::getenv("LLMRR_RECORDER_LIB") == nullptr)
      ::setenv("LLMRR_RECORDER_LIB", lib.c_str(), 1);
    if (have_package) llmrr::cli::prepend_env("PYTHONPATH", package.string());
  };
  llmrr::Result<int> rc = llmrr::cli::run_child("export", std::move(child));
  if (!rc.ok()) return llmrr::cli::report("export", rc.status());
  if (*rc == 0) return 0;
  if (*rc != 2) {
    std::fprintf(stderr,
                 "llmrr export: error: --parquet: %s -m llmrr.core.parquet exited with %d\n",
                 py.c_str(), *rc);
  }
  return *rc == 2 ? 2 : 3;
}

}  // namespace

int run_export_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Export a trace to Perfetto / Chrome trace-event JSON or to .npy files.", "export"};
  std::string path, perfetto, npy, parquet;
  app.add_option("TRACE", path, "trace file (.trace) or a bundle of one trace")->required();
  app.add_option("--perfetto", perfetto,
                 "write Chrome trace-event JSON here (one track per request, steps as slices, "
                 "kernels when recorded, counters for batch size and margin)");
  app.add_option("--npy", npy,
                 "write .npy arrays into this directory (fingerprints, top-K logits, routing; "
                 "manifest.json describes them)");
  app.add_option("--parquet", parquet,
                 "write one Parquet file per table into this directory (<table>.parquet; "
                 "needs pyarrow: tools/setup/python, or $LLMRR_PYTHON)");
  app.footer(
      "Examples:\n"
      "  llmrr export run.trace --perfetto run.json     # open in ui.perfetto.dev\n"
      "  llmrr export run.trace --npy run-npy/\n"
      "  llmrr export run.trace --parquet run-pq/   # then duckdb: select * from "
      "'run-pq/*.parquet'\n"
      "  python3 -c \"import numpy as np; print(np.load('run-npy/logits.margin.npy'))\"\n"
      "\n"
      "Steps carry no wall-clock time: they sit on a logical clock, step N at N ms.\n"
      "Exit codes: 0 written, 2 bad input, 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (perfetto.empty() && npy.empty() && parquet.empty()) {
    return cli::report("export", make_error(ErrorCode::kInvalidArgument,
                                            "nothing to do: give --perfetto FILE, --npy DIR "
                                            "and/or --parquet DIR"));
  }
  // Before any work: no output is the input. Both outputs are written whole or not at all
  // (the JSON to a temporary file, the arrays into a staging directory), and neither lands
  // unless both were written.
  std::optional<safeio::OutputFile> perfetto_file;
  if (!perfetto.empty()) {
    if (Status st = safeio::check_output_file(perfetto, "--perfetto", {path}); !st.ok()) {
      return cli::report("export", st);
    }
  }
  std::optional<safeio::OutputDir> npy_dir;
  if (!npy.empty()) {
    Result<safeio::OutputDir> d = safeio::OutputDir::create(npy, "--npy", {path, perfetto});
    if (!d.ok()) return cli::report("export", d.status());
    npy_dir = std::move(*d);
  }
  std::optional<safeio::OutputDir> parquet_dir;
  if (!parquet.empty()) {
    if (!npy.empty() && std::filesystem::path(npy).lexically_normal() ==
                            std::filesystem::path(parquet).lexically_normal()) {
      return cli::report("export", make_error(ErrorCode::kInvalidArgument,
                                              "--parquet " + parquet + " is --npy's directory"));
    }
    Result<safeio::OutputDir> d =
        safeio::OutputDir::create(parquet, "--parquet", {path, perfetto, npy});
    if (!d.ok()) return cli::report("export", d.status());
    parquet_dir = std::move(*d);
  }
  if (!perfetto.empty()) {
    Result<safeio::OutputFile> f = safeio::OutputFile::create(perfetto, "--perfetto");
    if (!f.ok()) return cli::report("export", f.status());
    perfetto_file = std::move(*f);
  }
  Result<cli::TraceInput> input = cli::open_trace_input(path);
  if (!input.ok()) return cli::report("export", input.status());
  if (input->traces.size() != 1) {
    return cli::report(
        "export", make_error(ErrorCode::kInvalidArgument,
                             path + ": the bundle holds " + std::to_string(input->traces.size()) +
                                 " traces; extract it (llmrr unpack) and export one"));
  }
  auto reader = trace::TraceReader::open(input->traces[0]);
  if (!reader.ok()) return cli::report("export", reader.status());
  std::optional<replay::PerfettoSummary> ps;
  if (!perfetto.empty()) {
    Result<replay::PerfettoSummary> s =
        replay::export_perfetto(**reader, perfetto_file->write_path());
    if (!s.ok()) return cli::report("export", perfetto_file->in_final_terms(s.status()));
    ps = *s;
  }
  std::optional<replay::NpyExportSummary> ns;
  if (!npy.empty()) {
    Result<replay::NpyExportSummary> s = replay::export_npy(**reader, npy_dir->write_path());
    if (!s.ok()) return cli::report("export", npy_dir->in_final_terms(s.status()));
    ns = *s;
  }
  if (parquet_dir) {
    if (int rc = write_parquet(input->traces[0], *parquet_dir); rc != 0) return rc;
  }
  if (npy_dir) {
    if (Status st = npy_dir->commit(); !st.ok()) return cli::report("export", st);
  }
  if (parquet_dir) {
    if (Status st = parquet_dir->commit(); !st.ok()) return cli::report("export", st);
  }
  if (perfetto_file) {
    if (Status st = perfetto_file->commit(); !st.ok()) return cli::report("export", st);
  }
  if (ps) {
    std::fprintf(stderr,
                 "wrote %s: %lld events (%lld step slices, %lld request slices, %lld counters, "
                 "%lld kernels)\n",
                 perfetto.c_str(), static_cast<long long>(ps->events),
                 static_cast<long long>(ps->step_slices),
                 static_cast<long long>(ps->request_slices), static_cast<long long>(ps->counters),
                 static_cast<long long>(ps->kernels));
  }
  if (ns) {
    std::fprintf(stderr,
                 "wrote %zu files into %s: %lld fingerprints, %lld logits, %lld routing rows\n",
                 ns->files.size(), npy.c_str(), static_cast<long long>(ns->fingerprints),
                 static_cast<long long>(ns->logits), static_cast<long long>(ns->routing_rows));
  }
  if (parquet_dir)
    std::fprintf(stderr, "wrote one Parquet file per table into %s\n", parquet.c_str());
  return 0;
}
