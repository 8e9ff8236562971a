// llmrr unpack bug.llmrr -o DIR: extract a bundle written by `llmrr pack` (manifest.json,
// traces/, model/), checking every entry's hash; --list checks and lists without writing.
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "llmrr/replayer/pack.h"
#include "llmrr/safeio/output.h"

int run_unpack_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Extract (or --list) a bundle written by llmrr pack.", "unpack"};
  std::string pack, dir;
  bool list = false, manifest = false;
  app.add_option("BUNDLE", pack, "the bundle (.llmrr)")->required();
  app.add_option("-o,--output", dir, "directory to extract into (created if absent)");
  app.add_flag("--list", list, "check the bundle and list its entries; write nothing");
  app.add_flag("--manifest", manifest, "print manifest.json");
  app.footer(
      "Examples:\n"
      "  llmrr unpack bug.llmrr -o bug/\n"
      "  llmrr unpack bug.llmrr --list --manifest\n"
      "\n"
      "Exit codes: 0 ok, 2 bad input (not a bundle, truncated, damaged), 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  // Before anything is read: -o names a directory (existing, or new in one that exists),
  // never the bundle itself.
  if (app.count("--output") > 0 && !list) {
    if (Status st = safeio::check_output_dir(dir, "-o", {pack}); !st.ok()) {
      return cli::report("unpack", st);
    }
  }
  if (dir.empty() && !list && !manifest) {
    return cli::report("unpack", make_error(ErrorCode::kInvalidArgument,
                                            "give -o DIR to extract, or --list / --manifest"));
  }
  Result<replay::PackContents> c = replay::unpack(pack, list ? "" : dir);
  if (!c.ok()) return cli::report("unpack", c.status());
  if (manifest) std::fputs(c->manifest_json.c_str(), stdout);
  if (list || !dir.empty()) {
    for (const replay::PackEntry& e : c->entries) {
      std::printf("  %-40s %s\n", e.name.c_str(), cli::human_bytes(e.size).c_str());
    }
  }
  if (!list && !dir.empty()) {
    std::printf("extracted %zu entries into %s\n", c->entries.size(), dir.c_str());
  }
  return 0;
}
