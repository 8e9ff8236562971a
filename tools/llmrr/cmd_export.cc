// llmrr export TRACE --perfetto out.json | --npy DIR: the trace for the viewers and tools
// people already use (layouts in replayer/export/include/llmrr/replayer/export.h): Chrome trace-event JSON for
// ui.perfetto.dev / chrome://tracing, and NumPy arrays of fingerprints, top-K logits and
// routing.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "llmrr/replayer/export.h"
#include "llmrr/safeio/output.h"

int run_export_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Export a trace to Perfetto / Chrome trace-event JSON or to .npy files.", "export"};
  std::string path, perfetto, npy;
  app.add_option("TRACE", path, "trace file (.trace) or a bundle of one trace")->required();
  app.add_option("--perfetto", perfetto,
                 "write Chrome trace-event JSON here (one track per request, steps as slices, "
                 "kernels when recorded, counters for batch size and margin)");
  app.add_option("--npy", npy,
                 "write .npy arrays into this directory (fingerprints, top-K logits, routing; "
                 "manifest.json describes them)");
  app.footer(
      "Examples:\n"
      "  llmrr export run.trace --perfetto run.json     # open in ui.perfetto.dev\n"
      "  llmrr export run.trace --npy run-npy/\n"
      "  python3 -c \"import numpy as np; print(np.load('run-npy/logits.margin.npy'))\"\n"
      "\n"
      "Steps carry no wall-clock time: they sit on a logical clock, step N at N ms.\n"
      "Exit codes: 0 written, 2 bad input, 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (perfetto.empty() && npy.empty()) {
    return cli::report("export",
                       make_error(ErrorCode::kInvalidArgument,
                                  "nothing to do: give --perfetto FILE and/or --npy DIR"));
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
  if (npy_dir) {
    if (Status st = npy_dir->commit(); !st.ok()) return cli::report("export", st);
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
  return 0;
}
