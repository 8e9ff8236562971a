// Byte-level BPE: merges, the GPT-2 pre-tokenizer and the smollm digit split, special
// tokens, decoding, chat prompts, tokenizer.json — on a small hand-made vocabulary whose
// results can be worked out by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/cpu_time.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/tokenizers.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

// GPT-2's byte → printable code point map, spelled as UTF-8.
std::string byte_char(int b) {
  const bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
  int n = 0;
  uint32_t cp = 0;
  for (int x = 0; x <= 255; ++x) {
    const bool k = (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae);
    if (x == b) {
      cp = keep ? static_cast<uint32_t>(b) : 256u + n;
      break;
    }
    if (!k) ++n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return s;
}

// ids 0..255: bytes; then merged tokens; then specials.
BpeSpec small_spec(const std::string& pre = "smollm") {
  BpeSpec s;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_char(b));
  const std::string G = byte_char(' ');  // "Ġ"
  for (const std::string& t : {std::string("he"), std::string("ll"), std::string("hell"),
                               G + "w", G + "wo", std::string("20"), G + G, std::string("'s")})
    s.tokens.push_back(t);
  s.merges = {"h e", "l l", "he ll", G + " w", G + "w o", "2 0", G + " " + G, "' s"};
  s.tokens.push_back("<|im_start|>");  // 264
  s.tokens.push_back("<|im_end|>");    // 265
  s.tokens.push_back("<|im");          // 266: a special that prefixes others
  s.token_types.assign(s.tokens.size(), 1);
  for (int i = 264; i <= 266; ++i) s.token_types[i] = 3;
  s.special_tokens = {"<|im_start|>", "<|im_end|>", "<|im"};
  s.pre = pre;
  s.bos = 264;
  s.eos = 265;
  return s;
}

constexpr int kHe = 256, kLl = 257, kHell = 258, kGw = 259, kGwo = 260, k20 = 261, kGG = 262,
              kApS = 263, kStart = 264, kEnd = 265, kIm = 266;

std::shared_ptr<const Tokenizer> make(BpeSpec s) {
  auto t = make_bpe_tokenizer(std::move(s));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : nullptr;
}

TEST(Bpe, MergesByRank) {
  auto t = make(small_spec());
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{kHell, 'o', kGwo, 'r', 'l', 'd'}));
  EXPECT_EQ(t->encode("hehe"), (std::vector<int32_t>{kHe, kHe}));
  EXPECT_EQ(t->encode("a w"), (std::vector<int32_t>{'a', kGw}));  // "Ġw" waits for an "o"
  EXPECT_EQ(t->encode("lll"), (std::vector<int32_t>{kLl, 'l'}));  // leftmost first
  EXPECT_EQ(t->encode(""), (std::vector<int32_t>{}));
  EXPECT_EQ(t->vocab_size(), 267);
  EXPECT_EQ(t->bos(), kStart);
  EXPECT_EQ(t->eos(), kEnd);
}

TEST(Bpe, Gpt2Pretokenizer) {
  auto t = make(small_spec("gpt2"));
  // "'s" is its own piece; " he" is one piece (space + letters): Ġ h e → Ġ he.
  EXPECT_EQ(t->encode("it's"), (std::vector<int32_t>{'i', 't', kApS}));
  EXPECT_EQ(t->encode("x he"), (std::vector<int32_t>{'x', ' ', kHe}));
  // Three spaces before a word: the run keeps its last space for the word ("  " + " w").
  EXPECT_EQ(t->encode("a   wo"), (std::vector<int32_t>{'a', kGG, kGwo}));
  // Trailing spaces stay together.
  EXPECT_EQ(t->encode("a  "), (std::vector<int32_t>{'a', kGG}));
  // Newline before a word is its own piece.
  EXPECT_EQ(t->encode("\nhe"), (std::vector<int32_t>{'\n', kHe}));
  // Numbers: " 2024" is one piece under gpt2, so "2 0" merges.
  EXPECT_EQ(t->encode("y 2024"), (std::vector<int32_t>{'y', ' ', k20, '2', '4'}));
}

TEST(Bpe, SmollmSplitsDigitsFirst) {
  auto t = make(small_spec("smollm"));
  // Every digit is its own piece: no "20" merge, and the space stands alone.
  EXPECT_EQ(t->encode("y 2024"), (std::vector<int32_t>{'y', ' ', '2', '0', '2', '4'}));
  EXPECT_EQ(t->encode("a1b"), (std::vector<int32_t>{'a', '1', 'b'}));
}

TEST(Bpe, SpecialTokensMatchedWhole) {
  auto t = make(small_spec());
  EXPECT_EQ(t->encode("<|im_start|>he<|im_end|>"), (std::vector<int32_t>{kStart, kHe, kEnd}));
  // Longest special wins at the same position; "<|im" alone is its own special.
  EXPECT_EQ(t->encode("<|im<|im_end|>"), (std::vector<int32_t>{kIm, kEnd}));
  // Text between specials is pre-tokenized on its own.
  EXPECT_EQ(t->encode("he<|im_end|> wo"), (std::vector<int32_t>{kHe, kEnd, kGwo}));
}

TEST(Bpe, DecodeRoundTrip) {
  auto t = make(small_spec());
  for (std::string s : {std::string("hello world"), std::string("  multiple   spaces\n\n\ttab"),
                        std::string("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82"),
                        std::string("<|im_start|>user\nhi<|im_end|>\n"),
                        std::string("bytes \x01\x02\xff\xfe end")}) {
    EXPECT_EQ(t->decode(t->encode(s)), s) << s;
  }
  // Out-of-range ids decode to nothing.
  std::vector<int32_t> odd = {-1, 100000, 'a'};
  EXPECT_EQ(t->decode(odd), "a");
  // A prefix of a multi-byte character decodes to its bytes.
  std::vector<int32_t> half = {0xe6};
  EXPECT_EQ(t->decode(half), "\xe6");
}

TEST(Bpe, MissingByteTokensAreDropped) {
  BpeSpec s = small_spec();
  s.tokens[4] = "<unused>";  // byte 0x04 has no token (as in SmolLM2's vocabulary)
  auto t = make(s);
  EXPECT_EQ(t->encode(std::string("h\x04" "e", 3)), (std::vector<int32_t>{'h', 'e'}));
  EXPECT_EQ(t->encode(std::string("\x04")), (std::vector<int32_t>{}));
}

TEST(Bpe, ChatPrompt) {
  BpeSpec s = small_spec();
  s.chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  auto t = make(s);
  EXPECT_TRUE(t->has_chat_template());
  EXPECT_EQ(t->chat_prompt("Hi?"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n");
  // A ChatML template without a default system turn.
  s.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  auto u = make(s);
  EXPECT_EQ(u->chat_prompt("Hi"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  s.chat_template.clear();
  auto v = make(s);
  EXPECT_FALSE(v->has_chat_template());
  EXPECT_EQ(v->chat_prompt("Hi"), "Hi");
}

TEST(Bpe, Validation) {
  BpeSpec bad_merge = small_spec();
  bad_merge.merges.push_back("q z");  // "qz" is not a token
  auto a = make_bpe_tokenizer(bad_merge);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kBadModel);
  EXPECT_NE(a.status().message().find("q z"), std::string::npos);
  BpeSpec pre = small_spec("llama3");
  auto b = make_bpe_tokenizer(pre);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kUnsupported);
  BpeSpec bos = small_spec();
  bos.bos = 9999;
  EXPECT_EQ(make_bpe_tokenizer(bos).status().code(), ErrorCode::kBadModel);
  BpeSpec special = small_spec();
  special.special_tokens.push_back("<absent>");
  EXPECT_EQ(make_bpe_tokenizer(special).status().code(), ErrorCode::kBadModel);
}

TEST(Bpe, LongRunsStayFast) {
  auto t = make(small_spec());
  const std::string spaces(200000, ' ');
  const double cpu0 = test::process_cpu_seconds();
  auto ids = t->encode(spaces);
  const double cpu = test::process_cpu_seconds() - cpu0;  // CPU, not wall: the code, not the host
  EXPECT_EQ(ids.size(), 100000u);  // pairs of spaces merge to "ĠĠ"
  EXPECT_LT(cpu, 2.0);
}

TEST(TokenizerJson, LoadsLikeTheSpec) {
  const BpeSpec s = small_spec();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < 264; ++i) vocab[s.tokens[i]] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 264; i <= 266; ++i)
    added.push_back({{"id", i}, {"content", s.tokens[i]}, {"special", true}});
  nlohmann::json merges = nlohmann::json::array();
  for (size_t i = 0; i < s.merges.size(); ++i) {
    const size_t sp = s.merges[i].find(' ');
    if (i % 2) merges.push_back(s.merges[i]);  // both spellings of a merge occur in the wild
    else merges.push_back({s.merges[i].substr(0, sp), s.merges[i].substr(sp + 1)});
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"added_tokens", added},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  TempDir d;
  write_bytes(d.file("tokenizer.json"), j.dump());
  write_bytes(d.file("tokenizer_config.json"),
              nlohmann::json({{"bos_token", "<|im_start|>"},
                              {"eos_token", {{"content", "<|im_end|>"}}},
                              {"chat_template", "<|im_start|>{{ x }}"}})
                  .dump());
  auto t = load_tokenizer_json(d.file("tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ref = make(s);
  for (std::string text : {std::string("hello world 2024 it's"),
                           std::string("<|im_start|>he<|im_end|>")})
    EXPECT_EQ((*t)->encode(text), ref->encode(text)) << text;
  EXPECT_EQ((*t)->bos(), kStart);
  EXPECT_EQ((*t)->eos(), kEnd);
  EXPECT_TRUE((*t)->has_chat_template());

  j["model"]["type"] = "Unigram";
  write_bytes(d.file("tokenizer.json"), j.dump());
  EXPECT_EQ(load_tokenizer_json(d.file("tokenizer.json")).status().code(), ErrorCode::kUnsupported);
  j["model"]["type"] = "BPE";
  j["added_tokens"].push_back({{"id", 10000000}, {"content", "<far>"}});
  write_bytes(d.file("tokenizer.json"), j.dump());
  EXPECT_EQ(load_tokenizer_json(d.file("tokenizer.json")).status().code(), ErrorCode::kBadModel);
  write_bytes(d.file("tokenizer.json"), "{\"model\": 3");
  EXPECT_EQ(load_tokenizer_json(d.file("tokenizer.json")).status().code(), ErrorCode::kBadModel);
}

TEST(ModelCache, DirAndSmolLM2Lookup) {
  TempDir d;
  const char* old = std::getenv("LLMRR_MODEL_DIR");
  const std::string saved = old ? old : "";
  setenv("LLMRR_MODEL_DIR", d.path().c_str(), 1);
  EXPECT_EQ(model_cache_dir(), d.path());
  EXPECT_EQ(find_smollm2(), "");
  write_bytes(d.file(kSmolLM2FileName), "GGUF");
  EXPECT_EQ(find_smollm2(), d.file(kSmolLM2FileName));
  unsetenv("LLMRR_MODEL_DIR");
  const char* home = std::getenv("HOME");
  if (home) {
    EXPECT_EQ(model_cache_dir(), std::string(home) + "/.cache/llmrr/models");
  }
  if (old) setenv("LLMRR_MODEL_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace llmrr
