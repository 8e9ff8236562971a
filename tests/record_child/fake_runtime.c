/* A stand-in for a served runtime under `llmrr record-<runtime>` (tests/record_child): it
 * switches its recorder on from $LLMRR_<NAME>_TRACE (NAME = argv[1], e.g. VLLM), reads the
 * shared LLMRR_CAPTURE / LLMRR_TOP_K, and records one request's decode steps every 5 ms until
 * SIGINT, SIGTERM or SIGHUP, or until it has recorded argv[2] steps ($FAKE_RUNTIME_STEP_US apart); then it closes the trace and
 * exits 0. After the first step it creates the file argv[3] (the test waits for it). With
 * argv[4] = "hang" it ignores them (a runtime that will not stop); with "second" it stops
 * only at the second one (as llama-server, which waits on its open streams at a first). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmrr/recorder.h"

static volatile sig_atomic_t stop = 0;
static volatile sig_atomic_t signals_seen = 0;
static int signals_to_stop = 1;
static void on_signal(int sig) {
  if (++signals_seen >= signals_to_stop) stop = sig;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: fake_runtime NAME MAX_STEPS READY_FILE [hang]\n");
    return 2;
  }
  char var[64];
  snprintf(var, sizeof var, "LLMRR_%s_TRACE", argv[1]);
  const char* path = getenv(var);
  if (path == NULL || *path == '\0') {
    fprintf(stderr, "fake_runtime: %s not set: nothing recorded\n", var);
    return 0;
  }
  const int hang = argc > 4 && strcmp(argv[4], "hang") == 0;
  if (argc > 4 && strcmp(argv[4], "second") == 0) signals_to_stop = 2;
  signal(SIGINT, hang ? SIG_IGN : on_signal);
  signal(SIGTERM, hang ? SIG_IGN : on_signal);
  signal(SIGHUP, hang ? SIG_IGN : on_signal);
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.tool_version = "fake_runtime";
  cfg.vocab = 8;
  cfg.layers = 1;
  const char* capture = getenv("LLMRR_CAPTURE");
  if (capture != NULL && strcmp(capture, "all") == 0) cfg.capture = LLMRR_CAPTURE_ALL;
  if (capture != NULL && strcmp(capture, "none") == 0) cfg.capture = LLMRR_CAPTURE_NONE;
  const char* top_k = getenv("LLMRR_TOP_K");
  if (top_k != NULL) cfg.top_k = atoi(top_k);
  llmrr_recorder* rec = NULL;
  if (llmrr_recorder_open(path, &cfg, &rec) != LLMRR_OK) {
    fprintf(stderr, "fake_runtime: %s\n", llmrr_recorder_last_error());
    return 3;
  }
  const int32_t prompt[] = {1, 2, 3};
  llmrr_request q;
  memset(&q, 0, sizeof q);
  q.id = 1;
  q.prompt = prompt;
  q.prompt_len = 3;
  q.top_p = 1.0f;
  q.max_tokens = 1 << 20;
  llmrr_recorder_add_request(rec, &q);
  const long max_steps = atol(argv[2]);
  /* $FAKE_RUNTIME_STEP_US: the pause between steps (default 5000 us). */
  const char* step_us = getenv("FAKE_RUNTIME_STEP_US");
  const long step_ns = (step_us != NULL ? atol(step_us) : 5000) * 1000;
  float logits[8];
  for (long step = 0; !stop && step < max_steps; ++step) {
    llmrr_segment g;
    memset(&g, 0, sizeof g);
    g.request = 1;
    g.start = step == 0 ? 0 : (int32_t)(2 + step);
    g.count = step == 0 ? 3 : 1;
    g.cached = step == 0 ? 0 : g.start;
    g.kind = step == 0 ? LLMRR_SEGMENT_PREFILL : LLMRR_SEGMENT_DECODE;
    g.sample = 1;
    llmrr_recorder_begin_step(rec, step, &g, 1);
    for (int i = 0; i < 8; ++i) logits[i] = (float)((step * 7 + i * 3) % 11);
    llmrr_recorder_record_logits(rec, 1, g.start + g.count - 1, g.count - 1, logits,
                                 LLMRR_DTYPE_F32, 8);
    llmrr_recorder_record_token(rec, 1, g.start + g.count, (int32_t)(step % 8), -1.0);
    llmrr_recorder_end_step(rec);
    if (step == 0) {
      FILE* f = fopen(argv[3], "w");
      if (f != NULL) fclose(f);
    }
    struct timespec ts = {0, step_ns};
    nanosleep(&ts, NULL);
  }
  const int rc = llmrr_recorder_close(rec);
  if (stop)
    fprintf(stderr, "fake_runtime: stopped by signal %d (%d seen)\n", (int)stop, (int)signals_seen);
  return rc == LLMRR_OK ? 0 : 3;
}
