// llmrr: one binary, git-style subcommands (DESIGN, "The command line").
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "runtimes/adapter.h"

#define LLMRR_COMMAND(name, cli_name) int run_##name##_command(int argc, char** argv);
#include "commands.inc"
#undef LLMRR_COMMAND

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
};

constexpr Command kCommands[] = {
#define LLMRR_COMMAND(name, cli_name) {cli_name, &run_##name##_command},
#include "commands.inc"
#undef LLMRR_COMMAND
};

// One line per subcommand for `llmrr --help`; a command without a line is still listed.
const char* describe(std::string_view name) {
  static constexpr std::pair<std::string_view, const char*> kLines[] = {
      {"run", "generate text with the engine (production or invariant policy, --load N)"},
      {"record", "run the engine and record every step into a trace"},
      {"replay", "re-execute a trace bit for bit and check everything it recorded"},
      {"diff", "find where two runs split: first token, first layer and op, and why"},
      {"mismatch", "a rollout against a trainer's forward: per-token log-probs, KL, first site"},
      {"inspect", "summarize a trace: header, requests, steps, sizes per record kind"},
      {"dump", "print a trace's records as text or JSON lines"},
      {"verify", "check a trace's checksums, schema and semantics"},
      {"bisect", "find the smallest set of B's factors that reproduces B's split when replaying A"},
      {"fuzz", "run a prompt under many batch compositions and report what splits it"},
      {"report", "write a self-contained HTML report of one trace or of two runs' split"},
      {"pack", "bundle traces (optionally redacted to one request) into a shareable file"},
      {"unpack", "extract a bundle written by llmrr pack"},
      {"cut", "cut one request's life out of a trace (a served run) into a slice"},
      {"join", "join a flight recorder's segments (parts of one run) into one trace"},
      {"export", "export a trace to Perfetto / Chrome trace JSON or to .npy files"},
  };
  for (const auto& [n, line] : kLines) {
    if (n == name) return line;
  }
  return "";
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "llmrr: record LLM inference, replay it bit for bit, and find where two runs split\n"
               "\n"
               "usage: llmrr <command> [options]   (llmrr <command> --help for each)\n"
               "\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-15s %s\n", c.name, describe(c.name));
  // record-<runtime>: one per adapter of tools/llmrr/runtimes/ that records.
  for (const llmrr::runtimes::Adapter* a : llmrr::runtimes::adapters()) {
    if (a->record == nullptr) continue;
    const std::string name = std::string("record-") + a->name;
    std::fprintf(out, "  %-15s %s\n", name.c_str(), a->record_help);
  }
  std::fprintf(out,
               "\n"
               "exit codes: 0 ok / same, 1 runs differ, 2 bad input or usage, 3 internal error\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("llmrr " LLMRR_VERSION "\n");
    return 0;
  }
  // LLMRR_ISA forces the kernels' instruction set; a value the kernels do not know would
  // silently mean "the best this CPU has", so it is refused.
  if (const char* isa = std::getenv("LLMRR_ISA"); isa != nullptr && *isa != '\0' &&
                                                  std::strcmp(isa, "scalar") != 0 &&
                                                  std::strcmp(isa, "avx2") != 0 &&
                                                  std::strcmp(isa, "avx512") != 0) {
    std::fprintf(stderr, "llmrr: LLMRR_ISA=%s: expected scalar, avx2 or avx512 (or unset)\n", isa);
    return 2;
  }
  for (const Command& c : kCommands) {
    if (cmd == c.name) return c.run(argc - 1, argv + 1);
  }
  if (cmd.starts_with("record-")) {
    const llmrr::runtimes::Adapter* a = llmrr::runtimes::find(cmd.substr(7));
    if (a != nullptr && a->record != nullptr) return a->record(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "llmrr: unknown command '%s' (see llmrr --help)\n", argv[1]);
  return 2;
}
