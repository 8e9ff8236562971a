// GPT-2-style byte-level BPE, as llama.cpp (llm_tokenizer_bpe) and Hugging Face tokenizers
// run it:
//   1. special tokens (GGUF token types control / user-defined; tokenizer.json added tokens)
//      are cut out of the text whole, leftmost-longest first;
//   2. the remaining text is pre-tokenized: "smollm" (and the starcoder family) first splits
//      off every \p{N} code point on its own (HF Digits(individual_digits=true)), then every
//      piece is split with the GPT-2 pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (llama.cpp: unicode_regex_split_custom_gpt2; HF: ByteLevel(use_regex=true));
//   3. each piece's bytes are mapped to GPT-2's printable alphabet and merged pair by pair,
//      lowest merge rank first (leftmost on ties), until no listed merge applies.
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "llmrr/runtime/tokenizers.h"
#include "llmrr/safeio/json.h"
#include "loaders/loader_util.h"
#include "tokenizer/unicode.h"

namespace llmrr {
namespace {

using unicode::Decoded;

enum class Pre { kGpt2, kDigitsThenGpt2 };

Result<Pre> pre_kind(const std::string& name) {
  // llama.cpp llama-vocab.cpp: these share the GPT-2 pattern, some after a \p{N} split.
  for (const char* n : {"gpt2", "gpt-2", "mpt", "olmo", "jais", "trillion", "granite-docling"})
    if (name == n) return Pre::kGpt2;
  for (const char* n :
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"})
    if (name == n) return Pre::kDigitsThenGpt2;
  return make_error(ErrorCode::kUnsupported,
                    "pre-tokenizer " + name +
                        " is not supported (gpt2-pattern family: gpt2, smollm, starcoder, ...)");
}

// Splits `cps` [begin, end) with the GPT-2 pattern; appends [start, end) code point spans.
void split_gpt2(const std::vector<Decoded>& cps, size_t begin, size_t end,
                std::vector<std::pair<size_t, size_t>>* out) {
  auto cp = [&](size_t i) -> uint32_t { return i < end ? cps[i].cp : 0xFFFFFFFEu; };
  auto letter = [&](size_t i) { return i < end && unicode::is_letter(cps[i].cp); };
  auto number = [&](size_t i) { return i < end && unicode::is_number(cps[i].cp); };
  auto space = [&](size_t i) { return i < end && unicode::is_whitespace(cps[i].cp); };
  auto other = [&](size_t i) { return i < end && !letter(i) && !number(i) && !space(i); };
  size_t pos = begin;
  while (pos < end) {
    const size_t start = pos;
    // 's 't 're 've 'm 'll 'd (case-sensitive, as the pattern is).
    if (cp(pos) == '\'' && pos + 1 < end) {
      const uint32_t a = cp(pos + 1), b = cp(pos + 2);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        out->emplace_back(start, pos + 2);
        pos += 2;
        continue;
      }
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        out->emplace_back(start, pos + 3);
        pos += 3;
        continue;
      }
    }
    const size_t q = cp(pos) == ' ' ? pos + 1 : pos;  // the optional leading space
    if (letter(q)) {
      pos = q;
      while (letter(pos)) ++pos;
      out->emplace_back(start, pos);
      continue;
    }
    if (number(q)) {
      pos = q;
      while (number(pos)) ++pos;
      out->emplace_back(start, pos);
      continue;
    }
    if (other(q)) {
      pos = q;
      while (other(pos)) ++pos;
      out->emplace_back(start, pos);
      continue;
    }
    // \s+(?!\S) then \s+: a whitespace run followed by a non-space keeps its last space for
    // the next piece (" word"), unless the run is a single character.
    size_t run = pos;
    while (space(run)) ++run;
    if (run > pos) {
      if (run - pos > 1 && run < end) --run;
      out->emplace_back(start, run);
      pos = run;
      continue;
    }
    out->emplace_back(start, pos + 1);  // not reachable with a well-formed pattern
    ++pos;
  }
}

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::shared_ptr<const Tokenizer>> create(BpeSpec spec) {
    auto t = std::shared_ptr<BpeTokenizer>(new BpeTokenizer());
    RETURN_IF_ERROR(t->init(std::move(spec)));
    return std::shared_ptr<const Tokenizer>(std::move(t));
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (spec_.add_bos && spec_.bos >= 0) ids.push_back(spec_.bos);
    size_t pos = 0;
    while (pos < text.size()) {
      // Next special token occurrence (leftmost, then longest).
      size_t best_at = std::string_view::npos, best_len = 0;
      int32_t best_id = -1;
      for (const auto& [s, id] : specials_) {
        const size_t at = text.find(s, pos);
        if (at == std::string_view::npos) continue;
        if (at < best_at || (at == best_at && s.size() > best_len)) {
          best_at = at;
          best_len = s.size();
          best_id = id;
        }
      }
      const size_t stop = best_at == std::string_view::npos ? text.size() : best_at;
      encode_plain(text.substr(pos, stop - pos), &ids);
      if (best_id < 0) break;
      ids.push_back(best_id);
      pos = best_at + best_len;
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= static_cast<int32_t>(spec_.tokens.size())) continue;
      if (is_special_[id]) {
        out += spec_.tokens[id];
        continue;
      }
      for (const Decoded& d : unicode::decode_utf8(spec_.tokens[id])) {
        const int b = unicode::codepoint_to_byte(d.cp);
        if (b >= 0)
          out.push_back(static_cast<char>(b));
        else if (d.cp != 0xFFFFFFFFu)
          unicode::append_utf8(d.cp, &out);
      }
    }
    return out;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(spec_.tokens.size()); }
  int32_t bos() const override { return spec_.bos; }
  int32_t eos() const override { return spec_.eos; }
  bool has_chat_template() const override { return chatml_; }

  // ChatML, as the Jinja templates of SmolLM2 / Qwen render one user message with
  // add_generation_prompt=True: the template's default system turn (when it writes one for
  // conversations without a system message), the user turn, and the assistant header.
  std::string chat_prompt(std::string_view text) const override {
    if (!chatml_) return std::string(text);
    std::string p;
    if (!default_system_.empty())
      p += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    p += "<|im_start|>user\n";
    p += text;
    p += "<|im_end|>\n<|im_start|>assistant\n";
    return p;
  }

 private:
  BpeTokenizer() = default;

  Status init(BpeSpec spec) {
    spec_ = std::move(spec);
    const size_t n = spec_.tokens.size();
    if (n == 0 || n > (1u << 24))
      return make_error(ErrorCode::kBadModel, "BPE vocabulary of " + std::to_string(n) + " tokens");
    if (!spec_.token_types.empty() && spec_.token_types.size() != n)
      return make_error(ErrorCode::kBadModel, "token types do not match the vocabulary size");
    if (spec_.bos >= static_cast<int32_t>(n) || spec_.eos >= static_cast<int32_t>(n))
      return make_error(ErrorCode::kBadModel, "bos/eos id outside the vocabulary");
    ASSIGN_OR_RETURN(pre_, pre_kind(spec_.pre));
    vocab_.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) vocab_.emplace(spec_.tokens[i], static_cast<int32_t>(i));
    for (int b = 0; b < 256; ++b) {
      std::string s;
      unicode::append_utf8(unicode::byte_to_codepoint(static_cast<uint8_t>(b)), &s);
      // Some vocabularies (SmolLM2's) lack a few control bytes; such bytes are dropped from
      // the input, as Hugging Face tokenizers (no unk token) and llama.cpp do.
      auto it = vocab_.find(s);
      byte_token_[b] = it == vocab_.end() ? -1 : it->second;
    }
    merges_.reserve(spec_.merges.size() * 2);
    for (size_t r = 0; r < spec_.merges.size(); ++r) {
      const std::string& m = spec_.merges[r];
      const size_t sp = m.find(' ');
      if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos)
        return make_error(ErrorCode::kBadModel,
                          "merge " + std::to_string(r) + " \"" + m + "\" is not \"left right\"");
      auto l = vocab_.find(m.substr(0, sp)), rt = vocab_.find(m.substr(sp + 1));
      auto mg = vocab_.find(m.substr(0, sp) + m.substr(sp + 1));
      if (l == vocab_.end() || rt == vocab_.end() || mg == vocab_.end())
        return make_error(ErrorCode::kBadModel, "merge " + std::to_string(r) + " \"" + m +
                                                    "\" names a token not in the vocabulary");
      merges_.emplace(key(l->second, rt->second),
                      std::make_pair(static_cast<int32_t>(r), mg->second));
    }
    is_special_.assign(n, false);
    for (const std::string& s : spec_.special_tokens) {
      auto it = vocab_.find(s);
      if (it == vocab_.end())
        return make_error(ErrorCode::kBadModel, "special token " + s + " is not in the vocabulary");
      if (s.empty()) continue;
      is_special_[it->second] = true;
      specials_.emplace_back(s, it->second);
    }
    // Chat format: ChatML when the template speaks it.
    const std::string& t = spec_.chat_template;
    chatml_ = t.find("<|im_start|>") != std::string::npos;
    const std::string sys = "<|im_start|>system\n";
    if (size_t at = t.find(sys); chatml_ && at != std::string::npos) {
      const size_t from = at + sys.size();
      const size_t to = t.find("<|im_end|>", from);
      // Only a literal default (the template's own text), not "' + message['content'] + '".
      if (to != std::string::npos && t.substr(from, to - from).find('\'') == std::string::npos)
        default_system_ = t.substr(from, to - from);
    }
    return Status::Ok();
  }

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void encode_plain(std::string_view text, std::vector<int32_t>* ids) const {
    if (text.empty()) return;
    const std::vector<Decoded> cps = unicode::decode_utf8(text);
    std::vector<size_t> byte_at(cps.size() + 1, 0);
    for (size_t i = 0; i < cps.size(); ++i) byte_at[i + 1] = byte_at[i] + cps[i].len;
    std::vector<std::pair<size_t, size_t>> pieces;
    if (pre_ == Pre::kDigitsThenGpt2) {
      size_t seg = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        const bool digit = i < cps.size() && unicode::is_number(cps[i].cp);
        if (i == cps.size() || digit) {
          split_gpt2(cps, seg, i, &pieces);
          if (digit) pieces.emplace_back(i, i + 1);
          seg = i + 1;
        }
      }
    } else {
      split_gpt2(cps, 0, cps.size(), &pieces);
    }
    for (const auto& [a, b] : pieces)
      bpe(text.substr(byte_at[a], byte_at[b] - byte_at[a]), ids);
  }

  // Merges one piece; symbols form a linked list, candidate pairs wait in a heap ordered by
  // (rank, position) and are checked for staleness when popped.
  void bpe(std::string_view piece, std::vector<int32_t>* ids) const {
    std::vector<int32_t> tok;
    tok.reserve(piece.size());
    for (char ch : piece)
      if (int32_t t = byte_token_[static_cast<uint8_t>(ch)]; t >= 0) tok.push_back(t);
    const size_t n = tok.size();
    std::vector<int64_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int64_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
    }
    struct Cand {
      int32_t rank;
      int64_t left;
      int32_t ltok, rtok;
      bool operator>(const Cand& o) const {
        return rank != o.rank ? rank > o.rank : left > o.left;
      }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int64_t l) {
      if (l < 0 || next[l] < 0) return;
      auto it = merges_.find(key(tok[l], tok[next[l]]));
      if (it != merges_.end()) heap.push({it->second.first, l, tok[l], tok[next[l]]});
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      const int64_t r = next[c.left];
      if (tok[c.left] != c.ltok || r < 0 || tok[r] != c.rtok) continue;  // stale
      tok[c.left] = merges_.at(key(c.ltok, c.rtok)).second;
      tok[r] = -1;
      next[c.left] = next[r];
      if (next[r] >= 0) prev[next[r]] = c.left;
      push(prev[c.left]);
      push(c.left);
    }
    for (int64_t i = n ? 0 : -1; i >= 0; i = next[i]) ids->push_back(tok[i]);
  }

  BpeSpec spec_;
  Pre pre_ = Pre::kGpt2;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, PairHash> merges_;
  int32_t byte_token_[256] = {};
  std::vector<bool> is_special_;
  std::vector<std::pair<std::string, int32_t>> specials_;
  bool chatml_ = false;
  std::string default_system_;
};

}  // namespace

Result<std::shared_ptr<const Tokenizer>> make_bpe_tokenizer(BpeSpec spec) {
  return BpeTokenizer::create(std::move(spec));
}

// tokenizer.json (HF fast tokenizer): model BPE with a byte-level pre-tokenizer.
Result<std::shared_ptr<const Tokenizer>> load_tokenizer_json(const std::string& path) {
  using nlohmann::json;
  ASSIGN_OR_RETURN(std::string text, loaders::read_text_file(path, 64u << 20));
  ASSIGN_OR_RETURN(json j, safeio::parse_json(text, path, ErrorCode::kBadModel));
  auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kBadModel, path + ": " + what);
  };
  auto unsupported = [&](const std::string& what) {
    return make_error(ErrorCode::kUnsupported, path + ": " + what);
  };
  try {
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
      return bad("no model object");
    const json& model = j["model"];
    if (model.value("type", "") != "BPE")
      return unsupported("model type " + model.value("type", std::string("(none)")) +
                         " (BPE only)");
    if (!j["normalizer"].is_null())
      return unsupported("normalizers are not supported");
    BpeSpec spec;
    // Pre-tokenizer: ByteLevel (GPT-2 pattern) or Sequence[Digits(individual), ByteLevel].
    const json& pre = j["pre_tokenizer"];
    auto is_byte_level = [](const json& p) {
      return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) &&
             !p.value("add_prefix_space", false);
    };
    if (is_byte_level(pre)) {
      spec.pre = "gpt2";
    } else if (pre.is_object() && pre.value("type", "") == "Sequence" &&
               pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2 &&
               pre["pretokenizers"][0].value("type", "") == "Digits" &&
               pre["pretokenizers"][0].value("individual_digits", false) &&
               is_byte_level(pre["pretokenizers"][1])) {
      spec.pre = "smollm";
    } else {
      return unsupported("pre-tokenizer " + safeio::dump_short(pre, 200) +
                         " (ByteLevel, or Digits(individual) + ByteLevel)");
    }
    const json& vocab = model["vocab"];
    if (!vocab.is_object()) return bad("model.vocab is not an object");
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() >= (1 << 24))
        return bad("vocab id of " + it.key() + " is not a valid id");
      max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
    }
    std::vector<std::pair<int64_t, std::string>> added;
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const json& a : j["added_tokens"]) {
        if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
            a["id"].get<int64_t>() >= (1 << 24))
          return bad("malformed added_tokens entry " + safeio::dump_short(a, 100));
        added.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
        max_id = std::max<int64_t>(max_id, a["id"].get<int64_t>());
      }
    // Ids index a table: a sparse id far above the entry count would size it from a lie.
    const int64_t entries = static_cast<int64_t>(vocab.size() + added.size());
    if (max_id >= entries + 65536)
      return bad("token id " + std::to_string(max_id) + " is far above the " +
                 std::to_string(entries) + " entries (ids must be dense)");
    spec.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      spec.tokens[static_cast<size_t>(it.value().get<int64_t>())] = it.key();
    for (const auto& [id, content] : added) {
      spec.tokens[static_cast<size_t>(id)] = content;
      spec.special_tokens.push_back(content);
    }
    for (size_t i = 0; i < spec.tokens.size(); ++i)
      if (spec.tokens[i].empty()) spec.tokens[i] = "<unused" + std::to_string(i) + ">";
    const json& merges = model["merges"];
    if (!merges.is_array()) return bad("model.merges is not a list");
    for (const json& m : merges) {
      if (m.is_string()) {
        spec.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return bad("malformed merge " + safeio::dump_short(m, 100));
      }
    }
    // tokenizer_config.json next to it: chat template, BOS/EOS.
    const std::string dir = path.substr(0, path.find_last_of('/') + 1);
    auto cfg_text = loaders::read_text_file(dir + "tokenizer_config.json", 16u << 20);
    if (cfg_text.ok()) {
      Result<json> parsed = safeio::parse_json(*cfg_text, dir, ErrorCode::kBadModel);
      const json cfg = parsed.ok() ? std::move(*parsed) : json();
      if (cfg.is_object()) {
        if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
          spec.chat_template = cfg["chat_template"].get<std::string>();
        auto id_of = [&](const char* key) -> int32_t {
          if (!cfg.contains(key)) return -1;
          const json& v = cfg[key];
          std::string s = v.is_string() ? v.get<std::string>()
                          : v.is_object() && v.contains("content") && v["content"].is_string()
                              ? v["content"].get<std::string>()
                              : "";
          for (size_t i = 0; i < spec.tokens.size(); ++i)
            if (!s.empty() && spec.tokens[i] == s) return static_cast<int32_t>(i);
          return -1;
        };
        spec.bos = id_of("bos_token");
        spec.eos = id_of("eos_token");
        if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
          spec.add_bos = cfg["add_bos_token"].get<bool>();
      }
    }
    return make_bpe_tokenizer(std::move(spec));
  } catch (const json::exception& e) {
    return bad(std::string("unexpected structure: ") + e.what());
  }
}

}  // namespace llmrr
