// llmrr mismatch ROLLOUT.trace TRAINER.trace: RL's training-inference mismatch, token by token.
// Requests are paired by tokens (prompt + completion, diff --align tokens); for each token of
// the common sequence both runs predicted, the two log-probs of it, |Δlogp|, and the first site
// where the rows that produced them differ; over all of them the metrics RL frameworks report
// (mean and max |Δlogp| and |Δp|, k3-KL, χ², Pearson, the share past a threshold), the
// histogram of first differing sites, and MoE routing agreement per layer (mismatch.h).
// Exit 0 every compared token's logits bit-identical, 1 they differ, 2 bad input or nothing
// paired, 3 internal error.
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "llmrr/replayer/mismatch.h"
#include "llmrr/safeio/input.h"

int run_mismatch_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Compare a rollout's log-probs with a trainer's recompute of the same tokens.",
               "mismatch"};
  std::string a, b;
  replay::MismatchOptions o;
  bool json = false;
  int top = 10;
  app.add_option("ROLLOUT", a, "the inference run that sampled the tokens (A)")->required();
  app.add_option("TRAINER", b,
                 "the trainer's forward over the same tokens (B; llmrr.runtimes.torch.score)")
      ->required();
  app.add_option("--threshold", o.threshold,
                 "count tokens whose |Δlogp| exceeds this (default 0.01)");
  app.add_option("--top", top, "tokens of each request listed, worst |Δlogp| first (default 10)")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("--json", json, "print the report as one JSON object, every token in it");
  app.footer(
      "Examples:\n"
      "  llmrr mismatch rollout.trace trainer.trace\n"
      "  llmrr mismatch rollout.trace trainer.trace --json --threshold 0.1\n"
      "\n"
      "A is the sampling side: log_ratio = logp_B - logp_A, k3-KL = mean(e^r - 1 - r),\n"
      "chi2 = mean((e^r - 1)^2). A token's log-prob is its logit minus the row's logsumexp\n"
      "(traces of format 1.5 on); one outside a run's recorded top-K is counted as unknown.\n"
      "\n"
      "Exit codes: 0 every compared token's logits are bit-identical, 1 they differ, 2 bad\n"
      "input or no request in common, 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  for (const std::string* p : {&a, &b}) {
    Status st = safeio::require_regular_file(*p, "trace");
    if (!st.ok()) return cli::report("mismatch", st);
  }
  Result<replay::MismatchReport> rep = replay::mismatch_traces(a, b, o);
  if (!rep.ok()) return cli::report("mismatch", rep.status());
  std::fputs(replay::render_mismatch(*rep, json, top).c_str(), stdout);
  return rep->identical() ? 0 : 1;
}
