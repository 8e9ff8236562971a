// Requests files: every field, defaults, and each kind of bad line reported with its line
// number and field.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "llmrr/recorder/requests_file.h"
#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

RequestsFileContext context() {
  RequestsFileContext ctx;
  ctx.model = &builtin("tiny-moe").config;
  ctx.tokenizer = builtin("tiny-moe").tokenizer.get();
  return ctx;
}

RequestDefaults defaults() {
  RequestDefaults d;
  d.max_tokens = 9;
  d.sampling.temperature = 0.5f;
  d.sampling.top_k = 3;
  d.sampling.top_p = 0.75f;
  d.sampling.seed = 99;
  return d;
}

TEST(RequestsFile, ParsesEveryFieldAndAppliesDefaults) {
  ASSERT_NE(context().tokenizer, nullptr);
  const std::string text =
      "# a comment, then a blank line\n"
      "\n"
      "{\"id\": 4, \"prompt\": \"Hi\", \"max_tokens\": 3, \"temperature\": 0, \"top_k\": 0,"
      " \"top_p\": 1, \"seed\": 18446744073709551615, \"arrival_step\": 2, \"label\": \"t\","
      " \"stop_at_eos\": false}\r\n"
      "  {\"prompt_ids\": [1, 2, 257]}\n"
      "{\"id\": 0, \"prompt\": \"x\"}";  // no final newline
  auto r = parse_requests_jsonl(text, "reqs.jsonl", defaults(), context());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  const RequestSpec& a = (*r)[0];
  EXPECT_EQ(a.id, 4u);
  EXPECT_EQ(a.prompt, builtin("tiny-moe").tokenizer->encode("Hi"));
  EXPECT_EQ(a.max_tokens, 3);
  EXPECT_EQ(a.sampling.temperature, 0.0f);
  EXPECT_EQ(a.sampling.top_k, 0);
  EXPECT_EQ(a.sampling.top_p, 1.0f);
  EXPECT_EQ(a.sampling.seed, 18446744073709551615ull);
  EXPECT_EQ(a.arrival_step, 2);
  EXPECT_EQ(a.label, "t");
  EXPECT_FALSE(a.stop_at_eos);
  const RequestSpec& b = (*r)[1];
  EXPECT_EQ(b.id, 1u) << "default id: the request's index in the file";
  EXPECT_EQ(b.prompt, (std::vector<int32_t>{1, 2, 257}));
  EXPECT_EQ(b.max_tokens, 9);
  EXPECT_EQ(b.sampling.temperature, 0.5f);
  EXPECT_EQ(b.sampling.top_k, 3);
  EXPECT_EQ(b.sampling.top_p, 0.75f);
  EXPECT_EQ(b.sampling.seed, 99u);
  EXPECT_EQ(b.arrival_step, 0);
  EXPECT_TRUE(b.stop_at_eos);
  EXPECT_EQ((*r)[2].id, 0u);
}

struct BadCase {
  const char* name;
  const char* text;
  const char* expected;  // a substring of the message
};

class RequestsFileErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(RequestsFileErrors, ReportLineAndField) {
  const BadCase& c = GetParam();
  auto r = parse_requests_jsonl(c.text, "f.jsonl", defaults(), context());
  ASSERT_FALSE(r.ok()) << c.text;
  EXPECT_EQ(r.status().code(), ErrorCode::kBadRequest);
  EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << c.expected;
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
}

const char kOk[] = "{\"id\": 1, \"prompt\": \"a\"}\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, RequestsFileErrors,
    ::testing::Values(
        BadCase{"bad_json", "{\"id\": 1, \"prompt\": \"a\"}\n{\"id\": 2, \"prompt\": }\n",
                "f.jsonl:2: not valid JSON at column"},
        BadCase{"truncated_json", "{\"id\": 1, \"prompt\": \"a\"", "f.jsonl:1: not valid JSON"},
        BadCase{"not_an_object", "[1, 2]\n", "f.jsonl:1: expected a JSON object"},
        BadCase{"missing_prompt", "{\"id\": 1, \"prompt\": \"a\"}\n\n{\"id\": 2}\n",
                "f.jsonl:3: missing field 'prompt'"},
        BadCase{"both_prompts", "{\"prompt\": \"a\", \"prompt_ids\": [1]}\n",
                "f.jsonl:1: fields 'prompt' and 'prompt_ids': give only one"},
        BadCase{"unknown_field", "{\"prompt\": \"a\", \"max_token\": 3}\n",
                "f.jsonl:1: unknown field 'max_token'"},
        BadCase{"reused_id", "{\"id\": 5, \"prompt\": \"a\"}\n{\"id\": 5, \"prompt\": \"b\"}\n",
                "f.jsonl:2: field 'id': id 5 is already used on line 1"},
        BadCase{"default_id_collides", "{\"id\": 1, \"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n",
                "f.jsonl:2: field 'id': id 1 is already used on line 1"},
        BadCase{"negative_id", "{\"id\": -1, \"prompt\": \"a\"}\n",
                "f.jsonl:1: field 'id': expected an unsigned integer, found -1"},
        BadCase{"string_id", "{\"id\": \"3\", \"prompt\": \"a\"}\n",
                "field 'id': expected an unsigned integer, found \"3\""},
        BadCase{"prompt_not_string", "{\"prompt\": 12}\n",
                "f.jsonl:1: field 'prompt': expected a string, found 12"},
        BadCase{"empty_prompt", "{\"prompt\": \"\"}\n", "field 'prompt': expected a non-empty"},
        BadCase{"ids_not_array", "{\"prompt_ids\": \"1,2\"}\n",
                "field 'prompt_ids': expected a non-empty array"},
        BadCase{"ids_out_of_vocab", "{\"prompt_ids\": [1, 258]}\n",
                "field 'prompt_ids': element 1: expected a token id in [0, 258), found 258"},
        BadCase{"ids_float", "{\"prompt_ids\": [1.5]}\n",
                "field 'prompt_ids': element 0: expected a token id"},
        BadCase{"max_tokens_string", "{\"prompt\": \"a\", \"max_tokens\": \"ten\"}\n",
                "f.jsonl:1: field 'max_tokens': expected an integer >= 1, found \"ten\""},
        BadCase{"max_tokens_zero", "{\"prompt\": \"a\", \"max_tokens\": 0}\n",
                "field 'max_tokens': expected an integer >= 1, found 0"},
        BadCase{"max_tokens_float", "{\"prompt\": \"a\", \"max_tokens\": 2.5}\n",
                "field 'max_tokens': expected an integer >= 1, found 2.5"},
        BadCase{"temperature_negative", "{\"prompt\": \"a\", \"temperature\": -1}\n",
                "field 'temperature': expected a number >= 0"},
        BadCase{"temperature_string", "{\"prompt\": \"a\", \"temperature\": \"hot\"}\n",
                "field 'temperature': expected a number, found \"hot\""},
        BadCase{"top_p_zero", "{\"prompt\": \"a\", \"top_p\": 0}\n",
                "field 'top_p': expected a number in (0, 1]"},
        BadCase{"top_k_negative", "{\"prompt\": \"a\", \"top_k\": -2}\n",
                "field 'top_k': expected an integer >= 0"},
        BadCase{"seed_negative", "{\"prompt\": \"a\", \"seed\": -3}\n",
                "field 'seed': expected an unsigned integer"},
        BadCase{"arrival_negative", "{\"prompt\": \"a\", \"arrival_step\": -1}\n",
                "field 'arrival_step': expected an integer >= 0"},
        BadCase{"label_number", "{\"prompt\": \"a\", \"label\": 3}\n",
                "field 'label': expected a string"},
        BadCase{"stop_not_bool", "{\"prompt\": \"a\", \"stop_at_eos\": 1}\n",
                "field 'stop_at_eos': expected true or false"},
        BadCase{"too_long", "{\"prompt\": \"a\", \"max_tokens\": 100000}\n",
                "f.jsonl:1: the prompt (1 tokens) plus max_tokens 100000 exceeds"},
        BadCase{"only_comments", "# nothing\n\n", "f.jsonl: no requests"},
        BadCase{"invalid_utf8_in_message", "{\"prompt\": 1, \"x\": \"\xff\"}\n",
                "f.jsonl:1: not valid JSON"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

TEST(RequestsFile, TextPromptWithoutTokenizerIsRefused) {
  RequestsFileContext ctx = context();
  ctx.tokenizer = nullptr;
  ctx.tokenizer_note = "no tokenizer.json";
  auto r = parse_requests_jsonl("{\"prompt_ids\": [1]}\n{\"prompt\": \"a\"}\n", "f.jsonl",
                                defaults(), ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("f.jsonl:2: field 'prompt': the model has no usable "
                                      "tokenizer (no tokenizer.json); use 'prompt_ids'"),
            std::string::npos)
      << r.status().message();
}

TEST(RequestsFile, FileErrors) {
  auto missing = read_requests_file(temp_path("absent.jsonl"), defaults(), context());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  auto dir = read_requests_file(::testing::TempDir(), defaults(), context());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), ErrorCode::kIsDirectory);
  const std::string path = temp_path("ok.jsonl");
  {
    std::ofstream out(path);
    out << kOk;
  }
  auto ok = read_requests_file(path, defaults(), context());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->size(), 1u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llmrr::rectest
