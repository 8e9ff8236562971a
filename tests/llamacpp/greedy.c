/* greedy MODEL N PROMPT_TOKEN...: a minimal program that links libllama and decodes with the
 * classic llama_batch API (llama_decode) on two sequences: sequence 0 gets the prompt, then
 * sequence 1 the same prompt reversed, each generating N tokens greedily (argmax of
 * llama_get_logits_ith, fed back one per batch, both sequences in one batch). Prints, per
 * sequence, "seq S: t1 t2 ..." (the generated token ids). Used by the llamacpp tests to show that
 * a program other than llama-server records under `llmrr record-llamacpp`. */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

static void quiet(enum ggml_log_level level, const char* text, void* ud) {
  (void)ud;
  if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: greedy MODEL N TOKEN...\n");
    return 2;
  }
  const int n_gen = atoi(argv[2]);
  const int n_prompt = argc - 3;
  llama_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = 2;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  cp.kv_unified = true;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  struct llama_batch b = llama_batch_init(512, 0, 1);
  /* the program's sampler: the token is chosen here (argmax) and accepted, as a program with
   * a sampler chain does */
  struct llama_sampler* smpl = llama_sampler_init_greedy();
  int* gen = calloc((size_t)(2 * (n_gen + 1)), sizeof(int));
  /* both prompts in one batch: seq 0 forward, seq 1 reversed */
  b.n_tokens = 0;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < n_prompt; ++i) {
      const int k = b.n_tokens++;
      b.token[k] = atoi(argv[3 + (s == 0 ? i : n_prompt - 1 - i)]);
      b.pos[k] = i;
      b.n_seq_id[k] = 1;
      b.seq_id[k][0] = s;
      b.logits[k] = i == n_prompt - 1;
    }
  if (llama_decode(ctx, b) != 0) return 1;
  int rows[2] = {n_prompt - 1, 2 * n_prompt - 1};
  for (int step = 0; step < n_gen; ++step) {
    for (int s = 0; s < 2; ++s) {
      const int t = argmax(llama_get_logits_ith(ctx, rows[s]), n_vocab);
      llama_sampler_accept(smpl, t);
      gen[s * (n_gen + 1) + step] = t;
    }
    if (step + 1 == n_gen) break;
    b.n_tokens = 0;
    for (int s = 0; s < 2; ++s) {
      const int k = b.n_tokens++;
      b.token[k] = gen[s * (n_gen + 1) + step];
      b.pos[k] = n_prompt + step;
      b.n_seq_id[k] = 1;
      b.seq_id[k][0] = s;
      b.logits[k] = 1;
      rows[s] = k;
    }
    if (llama_decode(ctx, b) != 0) return 1;
  }
  for (int s = 0; s < 2; ++s) {
    printf("seq %d:", s);
    for (int i = 0; i < n_gen; ++i) printf(" %d", gen[s * (n_gen + 1) + i]);
    printf("\n");
  }
  free(gen);
  llama_sampler_free(smpl);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
