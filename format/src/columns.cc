#include "columns.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "llmrr/format/container.h"
#include "llmrr/format/llmrr_generated.h"

namespace llmrr::trace::detail {
namespace {

static_assert(sizeof(fb::Fingerprint) == 16, "Fingerprint: u64 hash, f32 l2, f32 max_abs");
constexpr size_t kFp = 16;

// Byte offsets (from the buffer's start) of the values a chunk column-codes, in walk order.
struct Sink {
  virtual ~Sink() = default;
  // n × 16 bytes: hash, l2, max_abs; `site_rows`: a SiteRows' rows (else a Logits.full)
  virtual void fingerprints(size_t at, size_t n, bool site_rows) = 0;
  virtual void ids(size_t at, size_t n) = 0;   // n × int32
  virtual void vals(size_t at, size_t n) = 0;  // n × float
  virtual bool done() const = 0;               // stop walking
};

// Walks the chunk at `base`. False when it visits more than `max_visits` tables: a chunk
// whose tables share offsets could otherwise make the walk quadratic in its size.
bool walk(const uint8_t* base, size_t max_visits, Sink& s) {
  const fb::StepChunk* c = flatbuffers::GetRoot<fb::StepChunk>(base);
  size_t visits = 0;
  auto at = [&](const void* p) {
    return static_cast<size_t>(static_cast<const uint8_t*>(p) - base);
  };
  for (const fb::Step* st : *c->steps()) {
    if (++visits > max_visits) return false;
    if (const auto* rows = st->rows()) {
      for (const fb::SiteRows* sr : *rows) {
        if (++visits > max_visits) return false;
        const auto* v = sr->rows();
        if (v->size()) s.fingerprints(at(v->Data()), v->size(), true);
        if (s.done()) return true;
      }
    }
    if (const auto* logits = st->logits()) {
      for (const fb::Logits* l : *logits) {
        if (++visits > max_visits) return false;
        if (const fb::Fingerprint* f = l->full()) s.fingerprints(at(f), 1, false);
        if (const auto* v = l->top_ids(); v && v->size()) s.ids(at(v->Data()), v->size());
        if (const auto* v = l->top_values(); v && v->size()) s.vals(at(v->Data()), v->size());
        if (s.done()) return true;
      }
    }
  }
  return true;
}

// What a walk found: where each value lives, in walk order. Collected before anything is
// moved: in a hostile chunk a value's bytes may overlap the offsets the walk follows, so
// nothing is written until the walk is over (the reader verifies the result again).
struct Targets : Sink {
  std::vector<size_t> fps;
  std::vector<size_t> site_fps;  // writer: the SiteRows entries of fps (offsets)
  bool want_site_fps = false;
  std::vector<std::pair<size_t, size_t>> id_runs, val_runs;
  uint64_t ids_n = 0, vals_n = 0;
  uint64_t limit = UINT64_MAX;  // column bytes available (reader)
  bool over = false;
  uint64_t bytes() const { return kFp * fps.size() + 4 * ids_n + 4 * vals_n; }
  // Takes n values of `size` bytes unless they would pass the limit (nothing is taken then).
  bool fits(size_t n, size_t size) {
    over = over || n > (limit - bytes()) / size;
    return !over;
  }
  void fingerprints(size_t at, size_t n, bool site_rows) override {
    if (!fits(n, kFp)) return;
    for (size_t i = 0; i < n; ++i) fps.push_back(at + i * kFp);
    if (site_rows && want_site_fps)
      for (size_t i = 0; i < n; ++i) site_fps.push_back(at + i * kFp);
  }
  void ids(size_t at, size_t n) override {
    if (!fits(n, 4)) return;
    id_runs.emplace_back(at, n);
    ids_n += n;
  }
  void vals(size_t at, size_t n) override {
    if (!fits(n, 4)) return;
    val_runs.emplace_back(at, n);
    vals_n += n;
  }
  bool done() const override { return over; }
};

// Where each column starts in the payload, for F fingerprints, I ids and V values.
struct Layout {
  size_t hashes, l2, max, ids, vals, end;
  Layout(size_t fb, uint64_t f, uint64_t i, uint64_t v) {
    hashes = fb;
    l2 = hashes + 8 * f;
    max = l2 + 4 * f;
    ids = max + 4 * f;
    vals = ids + 4 * i;
    end = vals + 4 * v;
  }
};

inline void put_planes(uint8_t* planes, size_t n, size_t j, uint32_t v) {
  planes[j] = static_cast<uint8_t>(v);
  planes[n + j] = static_cast<uint8_t>(v >> 8);
  planes[2 * n + j] = static_cast<uint8_t>(v >> 16);
  planes[3 * n + j] = static_cast<uint8_t>(v >> 24);
}

inline uint32_t get_planes(const uint8_t* planes, size_t n, size_t j) {
  return uint32_t{planes[j]} | uint32_t{planes[n + j]} << 8 | uint32_t{planes[2 * n + j]} << 16 |
         uint32_t{planes[3 * n + j]} << 24;
}

// Moves the values at `t` out of the FlatBuffer into the columns laid out as `L` (split),
// or back (join).
template <bool kSplit>
void move(uint8_t* p, const Targets& t, const Layout& L) {
  const size_t F = t.fps.size(), I = t.ids_n, V = t.vals_n;
  for (size_t f = 0; f < F; ++f) {
    uint8_t* s = p + t.fps[f];
    if constexpr (kSplit) {
      std::memcpy(p + L.hashes + 8 * f, s, 8);
      put_planes(p + L.l2, F, f, load_u32(s + 8));
      put_planes(p + L.max, F, f, load_u32(s + 12));
      std::memset(s, 0, kFp);
    } else {
      std::memcpy(s, p + L.hashes + 8 * f, 8);
      store_u32(s + 8, get_planes(p + L.l2, F, f));
      store_u32(s + 12, get_planes(p + L.max, F, f));
    }
  }
  size_t i = 0;
  for (const auto& [at, n] : t.id_runs) {
    uint8_t* s = p + at;
    for (size_t k = 0; k < n; ++k, ++i) {
      if constexpr (kSplit) {
        put_planes(p + L.ids, I, i, load_u32(s + 4 * k));
        store_u32(s + 4 * k, 0);
      } else {
        store_u32(s + 4 * k, get_planes(p + L.ids, I, i));
      }
    }
  }
  size_t v = 0;
  for (const auto& [at, n] : t.val_runs) {
    uint8_t* s = p + at;
    uint32_t prev = 0;  // top values descend: neighbours' bits differ in their low bytes
    for (size_t k = 0; k < n; ++k, ++v) {
      if constexpr (kSplit) {
        const uint32_t bits = load_u32(s + 4 * k);
        put_planes(p + L.vals, V, v, bits - prev);
        prev = bits;
        store_u32(s + 4 * k, 0);
      } else {
        prev += get_planes(p + L.vals, V, v);
        store_u32(s + 4 * k, prev);
      }
    }
  }
}

void add_planes(const uint8_t* payload, size_t at, size_t n, size_t planes,
                std::vector<NoisySpan>* out) {
  if (n == 0) return;
  for (NoisySpan s : noisy_planes(payload + at, n, planes)) {
    s.begin += at;
    s.end += at;
    if (!out->empty() && out->back().end == s.begin) {
      out->back().end = s.end;
    } else {
      out->push_back(s);
    }
  }
}

}  // namespace

uint32_t round_mantissa(uint32_t bits, int keep) {
  if (keep >= 23 || (bits & 0x7f800000u) == 0x7f800000u) return bits;  // exact, inf, NaN
  const int drop = 23 - std::max(keep, 0);
  const uint32_t mask = (uint32_t{1} << drop) - 1;
  // To nearest, ties to even; a carry may raise the exponent (that is the nearest value)
  // but never to inf: the largest finite values are truncated instead.
  uint32_t r = (bits + (mask >> 1) + ((bits >> drop) & 1)) & ~mask;
  if ((r & 0x7f800000u) == 0x7f800000u) r = bits & ~mask;
  return r;
}

bool split_columns(const uint8_t* fb, size_t n, Buffer* out, std::vector<NoisySpan>* noisy,
                   int summary_bits) {
  Targets t;
  t.want_site_fps = summary_bits < 23;
  walk(fb, SIZE_MAX, t);
  const Layout L(n, t.fps.size(), t.ids_n, t.vals_n);
  const size_t total = L.end + kColumnTrailerBytes;
  if (total > kMaxFrameRawBytes) return false;
  out->resize(total);
  std::memcpy(out->data(), fb, n);
  for (size_t at : t.site_fps) {
    uint8_t* f = out->data() + at;
    store_u32(f + 8, round_mantissa(load_u32(f + 8), summary_bits));
    store_u32(f + 12, round_mantissa(load_u32(f + 12), summary_bits));
  }
  move<true>(out->data(), t, L);
  store_u32(out->data() + L.end, static_cast<uint32_t>(n));
  store_u32(out->data() + L.end + 4, kColumnLayoutVersion);
  noisy->clear();
  if (!t.fps.empty()) noisy->push_back({L.hashes, L.l2});  // xxh3 / mixsum64: random bytes
  add_planes(out->data(), L.l2, t.fps.size(), 8, noisy);   // l2 and max_abs planes
  add_planes(out->data(), L.ids, t.ids_n, 4, noisy);
  add_planes(out->data(), L.vals, t.vals_n, 4, noisy);
  return true;
}

bool column_fb_size(const uint8_t* p, size_t n, size_t* fb_size, std::string* why) {
  if (n < kColumnTrailerBytes) {
    *why =
        "column-coded payload: expected an 8-byte trailer, found " + std::to_string(n) + " bytes";
    return false;
  }
  const uint32_t size = load_u32(p + n - 8), version = load_u32(p + n - 4);
  if (version != kColumnLayoutVersion) {
    *why = "column-coded payload: expected column layout version " +
           std::to_string(kColumnLayoutVersion) + ", found " + std::to_string(version);
    return false;
  }
  if (size > n - kColumnTrailerBytes) {
    *why = "column-coded payload: expected a FlatBuffer of at most " +
           std::to_string(n - kColumnTrailerBytes) + " bytes, found a trailer that says " +
           std::to_string(size);
    return false;
  }
  *fb_size = size;
  return true;
}

std::string join_columns(Buffer* raw, size_t fb_size) {
  const size_t columns = raw->size() - kColumnTrailerBytes - fb_size;
  // Every record the walk visits takes at least 4 bytes of the FlatBuffer unless offsets are
  // shared; a chunk that would visit more is refused rather than walked.
  const size_t max_visits = fb_size / 4 + 1;
  Targets t;
  t.limit = columns;
  if (!walk(raw->data(), max_visits, t))
    return "column-coded payload: expected a chunk whose records take their own bytes, found "
           "shared offsets that make it visit more than " +
           std::to_string(max_visits) + " records";
  if (t.over || t.bytes() != columns)
    return "column-coded payload: expected " + std::to_string(columns) +
           " column bytes to hold the chunk's fingerprints, top-K ids and top-K values, found " +
           (t.over ? std::string("more") : std::to_string(t.bytes())) + " bytes' worth (" +
           std::to_string(t.fps.size()) + " fingerprints, " + std::to_string(t.ids_n) + " ids, " +
           std::to_string(t.vals_n) + " values" + (t.over ? " so far" : "") + ")";
  const Layout L(fb_size, t.fps.size(), t.ids_n, t.vals_n);
  move<false>(raw->data(), t, L);
  raw->resize(fb_size);
  return "";
}

}  // namespace llmrr::trace::detail
