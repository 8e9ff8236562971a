// llmrr run: generate the target request's text (stdout) with the engine, optionally under
// synthetic load; a one-line summary goes to stderr.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "engine_options.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/runtime/engine.h"

using namespace llmrr;

int run_run_command(int argc, char** argv) {
  CLI::App app{"llmrr run: generate text for one prompt (stdout), optionally under load"};
  app.name("run");
  cli::EngineOptions o;
  cli::add_engine_options(app, o);
  // One line on stderr and exit 2 for a usage error, --help on stdout.
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  Result<cli::EngineSetup> setup = cli::make_engine_setup(o);
  if (!setup.ok()) return cli::report("run", setup.status());
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(setup->model, setup->config, setup->policy);
  if (!engine.ok()) return cli::report("run", engine.status());
  Engine& e = **engine;
  for (const RequestSpec& r : setup->requests) {
    Status st = e.add_request(r);
    if (!st.ok()) return cli::report("run", st);
  }
  cli::TextStream stream(setup->model.tokenizer.get(), setup->target, e.model_config().eos);
  e.add_observer(&stream);
  Status st = e.run();
  std::printf("\n");
  std::fflush(stdout);
  if (!st.ok()) return cli::report("run", st);
  const RequestState* t = e.request(setup->target);
  const EngineStats& s = e.stats();
  const double secs = s.seconds > 0 ? s.seconds : 1e-9;
  std::fprintf(stderr,
               "llmrr run: %zu tokens (%s) | %lld steps, %lld rows (%lld prefill, %lld decode), "
               "%lld tokens generated with load %d | %.1f tokens/s, %.1f rows/s | %s, %d "
               "threads, isa %s\n",
               t->generated.size(), t->reason == FinishReason::kEos ? "eos" : "max tokens",
               static_cast<long long>(s.steps), static_cast<long long>(s.rows),
               static_cast<long long>(s.prefill_rows), static_cast<long long>(s.decode_rows),
               static_cast<long long>(s.generated), o.load, s.generated / secs, s.rows / secs,
               setup->policy_name.c_str(), setup->config.threads,
               kernels::isa_name(kernels::active_isa()));
  return 0;
}
