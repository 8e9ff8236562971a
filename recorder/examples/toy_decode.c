/*
 * toy_decode: a tiny C "runtime" that records its decoding loop through the llmrr C ABI.
 *
 *   toy_decode OUT.trace [--splits N] [--capture none|layers|all] [--logits topk|full] [--sync]
 *
 * The model: vocabulary 64, hidden 32, two layers, each x += down(relu(up(x))); a head
 * matrix gives the logits. A row's input is its token's embedding plus the mean of the
 * embeddings before it (a stand-in for attention). Two requests share the batches: request
 * 0 from step 0, request 1 from step 2; prompts are prefilled in one segment, then one decode
 * row per step, greedy, 8 tokens each.
 *
 * --splits N reduces the down projection in N split-K ranges (combined in order), as a GPU
 * library might at small batch: the logits change in their last bits, and the trace records
 * the plan that did it, so `llmrr diff` of two such traces names the op.
 *
 * --sync sets sync_on_close: the trace is fsynced at close, and a device error reported only
 * then (EIO at write-back) fails close and marks the trace lossy.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmrr/recorder.h"

enum { V = 64, D = 32, F = 64, L = 2, MAX_TOKENS = 8, MAX_POS = 64, NREQ = 2 };

static float emb[V][D];
static float up[L][F][D];
static float down[L][D][F];
static float head[V][D];

/* A fixed LCG, so every run has the same weights on every machine. */
static uint32_t lcg_state = 12345u;
static float rnd(void) {
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return (float)((int32_t)(lcg_state >> 8) - (1 << 23)) / (float)(1 << 23); /* [-1, 1) */
}

static void init_weights(void) {
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d) emb[v][d] = rnd();
  for (int l = 0; l < L; ++l) {
    for (int f = 0; f < F; ++f)
      for (int d = 0; d < D; ++d) up[l][f][d] = rnd() * 0.25f;
    for (int d = 0; d < D; ++d)
      for (int f = 0; f < F; ++f) down[l][d][f] = rnd() * 0.25f;
  }
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d) head[v][d] = rnd();
}

/* y = W x over k, the reduction cut into `splits` ranges whose partials add in order. */
static float dot_split(const float* w, const float* x, int k, int splits) {
  int chunk = (k + splits - 1) / splits;
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    float part = 0.0f;
    for (int i = s * chunk; i < k && i < (s + 1) * chunk; ++i) part += w[i] * x[i];
    total = s == 0 ? part : total + part;
  }
  return total;
}

typedef struct {
  uint64_t id;
  int32_t tokens[MAX_POS]; /* prompt, then generated */
  int prompt_len, len, generated;
  int64_t arrival;
  int added, done;
} Seq;

static int check(int rc, const char* what) {
  if (rc != LLMRR_OK) {
    /* The message starts with the code's name and number ("io (200): ..."). */
    fprintf(stderr, "toy_decode: %s: %s\n", what, llmrr_recorder_last_error());
    exit(1);
  }
  return rc;
}

int main(int argc, char** argv) {
  const char* out = NULL;
  int splits = 1;
  int capture = LLMRR_CAPTURE_ALL, logits_mode = LLMRR_LOGITS_TOPK, sync = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--splits") == 0 && i + 1 < argc) {
      splits = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--capture") == 0 && i + 1 < argc) {
      const char* c = argv[++i];
      capture = strcmp(c, "none") == 0     ? LLMRR_CAPTURE_NONE
                : strcmp(c, "layers") == 0 ? LLMRR_CAPTURE_LAYERS
                                           : LLMRR_CAPTURE_ALL;
    } else if (strcmp(argv[i], "--logits") == 0 && i + 1 < argc) {
      logits_mode = strcmp(argv[++i], "full") == 0 ? LLMRR_LOGITS_FULL : LLMRR_LOGITS_TOPK;
    } else if (strcmp(argv[i], "--sync") == 0) {
      sync = 1;
    } else if (!out) {
      out = argv[i];
    } else {
      out = NULL;
      break;
    }
  }
  if (!out || splits < 1 || splits > F) {
    fprintf(stderr,
            "usage: toy_decode OUT.trace [--splits N] [--capture none|layers|all] "
            "[--logits topk|full] [--sync]\n");
    return 2;
  }
  if (llmrr_recorder_abi_version() != LLMRR_RECORDER_ABI_VERSION) {
    fprintf(stderr, "toy_decode: library ABI %d, header %d\n", llmrr_recorder_abi_version(),
            LLMRR_RECORDER_ABI_VERSION);
    return 1;
  }
  init_weights();

  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.tool_version = "toy_decode 1.0";
  cfg.model_name = "toy-c-mlp";
  cfg.architecture = "toy-mlp";
  cfg.weight_hash = "lcg:12345";
  cfg.weight_dtype = "f32";
  cfg.compute_dtype = "f32";
  cfg.layers = L;
  cfg.hidden = D;
  cfg.vocab = V;
  cfg.policy = splits > 1 ? "split-k" : "no-split";
  cfg.threads = 1;
  cfg.capture = capture;
  cfg.logits_mode = logits_mode;
  cfg.top_k = 8;
  cfg.sync_on_close = sync;
  cfg.extra_config_json = "{\"example\": \"recorder/examples/toy_decode.c\"}";
  cfg.command_line = "toy_decode";
  llmrr_recorder* rec = NULL;
  check(llmrr_recorder_open(out, &cfg, &rec), "open");

  Seq seqs[NREQ] = {{.id = 0, .tokens = {1, 2, 3, 4, 5}, .prompt_len = 5, .arrival = 0},
                    {.id = 1, .tokens = {9, 8, 7}, .prompt_len = 3, .arrival = 2}};
  for (int r = 0; r < NREQ; ++r) seqs[r].len = seqs[r].prompt_len;

  static float x[MAX_POS * NREQ][D], u[MAX_POS * NREQ][F], dn[MAX_POS * NREQ][D];
  float logits[V];
  char site[32];
  for (int64_t step = 0;; ++step) {
    int running = 0;
    for (int r = 0; r < NREQ; ++r) running += !seqs[r].done;
    if (!running) break;

    /* The batch: decodes first, then new prompts (their whole prompt in one segment). */
    llmrr_segment segs[NREQ];
    int owner[NREQ], nseg = 0, rows = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int r = 0; r < NREQ; ++r) {
        Seq* s = &seqs[r];
        if (s->done || s->arrival > step) continue;
        int decode = s->generated > 0;
        if ((pass == 0) != decode) continue;
        if (!s->added) {
          llmrr_request q = {.id = s->id,
                             .prompt = s->tokens,
                             .prompt_len = (size_t)s->prompt_len,
                             .top_p = 1.0f,
                             .max_tokens = MAX_TOKENS,
                             .arrival_step = s->arrival,
                             .stop_at_eos = 0,
                             .label = r == 0 ? "target" : "other"};
          check(llmrr_recorder_add_request(rec, &q), "add_request");
          s->added = 1;
        }
        llmrr_segment g;
        g.request = s->id;
        g.start = decode ? s->len - 1 : 0;
        g.count = decode ? 1 : s->prompt_len;
        g.cached = g.start;
        g.kind = decode ? LLMRR_SEGMENT_DECODE : LLMRR_SEGMENT_PREFILL;
        g.sample = 1;
        owner[nseg] = r;
        segs[nseg++] = g;
        rows += g.count;
      }
    }
    if (nseg == 0) continue; /* nothing has arrived yet */
    check(llmrr_recorder_begin_step(rec, step, segs, (size_t)nseg), "begin_step");

    /* Inputs: token embedding + mean of the embeddings before it. */
    int row = 0;
    for (int g = 0; g < nseg; ++g) {
      Seq* s = &seqs[owner[g]];
      for (int p = segs[g].start; p < segs[g].start + segs[g].count; ++p, ++row) {
        for (int d = 0; d < D; ++d) {
          float mean = 0.0f;
          for (int q = 0; q < p; ++q) mean += emb[s->tokens[q]][d];
          x[row][d] = emb[s->tokens[p]][d] + (p > 0 ? mean / (float)p : 0.0f);
        }
      }
    }
    check(llmrr_recorder_record_rows(rec, "embed", x, LLMRR_DTYPE_F32, rows, D, D, NULL),
          "rows embed");

    for (int l = 0; l < L; ++l) {
      llmrr_plan up_plan = {.op = LLMRR_OP_GEMM, .splits = 1};
      llmrr_plan down_plan = {.op = LLMRR_OP_GEMM, .splits = (uint32_t)splits};
      snprintf(site, sizeof site, "L%d.mlp.up", l);
      check(llmrr_recorder_record_plan(rec, site, &up_plan), "plan up");
      for (int i = 0; i < rows; ++i)
        for (int f = 0; f < F; ++f) {
          float v = dot_split(up[l][f], x[i], D, 1);
          u[i][f] = v > 0.0f ? v : 0.0f;
        }
      if (llmrr_recorder_wants_rows(rec, site) == 1) {
        check(llmrr_recorder_record_rows(rec, site, u, LLMRR_DTYPE_F32, rows, F, F, NULL),
              "rows up");
      }
      snprintf(site, sizeof site, "L%d.mlp.down", l);
      check(llmrr_recorder_record_plan(rec, site, &down_plan), "plan down");
      for (int i = 0; i < rows; ++i)
        for (int d = 0; d < D; ++d) dn[i][d] = dot_split(down[l][d], u[i], F, splits);
      check(llmrr_recorder_record_rows(rec, site, dn, LLMRR_DTYPE_F32, rows, D, D, NULL),
            "rows down");
      for (int i = 0; i < rows; ++i)
        for (int d = 0; d < D; ++d) x[i][d] += dn[i][d];
      snprintf(site, sizeof site, "L%d.out", l);
      check(llmrr_recorder_record_rows(rec, site, x, LLMRR_DTYPE_F32, rows, D, D, NULL),
            "rows out");
    }

    /* Logits of each segment's last row, greedy token, finish. */
    llmrr_plan head_plan = {.op = LLMRR_OP_GEMM, .splits = 1};
    check(llmrr_recorder_record_plan(rec, "logits", &head_plan), "plan logits");
    row = 0;
    for (int g = 0; g < nseg; ++g) {
      Seq* s = &seqs[owner[g]];
      int last = row + segs[g].count - 1;
      int pos = segs[g].start + segs[g].count - 1;
      int best = 0;
      for (int v = 0; v < V; ++v) {
        logits[v] = dot_split(head[v], x[last], D, 1);
        if (logits[v] > logits[best]) best = v;
      }
      check(llmrr_recorder_record_logits(rec, s->id, pos, last, logits, LLMRR_DTYPE_F32, V),
            "logits");
      check(llmrr_recorder_record_token(rec, s->id, pos + 1, best, -1.0), "token");
      s->tokens[s->len++] = best;
      s->generated++;
      row += segs[g].count;
    }
    for (int g = 0; g < nseg; ++g) {
      Seq* s = &seqs[owner[g]];
      if (s->generated >= MAX_TOKENS) {
        check(llmrr_recorder_record_finish(rec, s->id, LLMRR_FINISH_MAX_TOKENS, s->generated),
              "finish");
        s->done = 1;
      }
    }
    check(llmrr_recorder_end_step(rec), "end_step");
  }
  check(llmrr_recorder_close(rec), "close");

  for (int r = 0; r < NREQ; ++r) {
    printf("request %llu:", (unsigned long long)seqs[r].id);
    for (int i = seqs[r].prompt_len; i < seqs[r].len; ++i) printf(" %d", seqs[r].tokens[i]);
    printf("\n");
  }
  fprintf(stderr, "toy_decode: wrote %s\n", out);
  return 0;
}
