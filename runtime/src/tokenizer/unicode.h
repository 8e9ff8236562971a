// The Unicode pieces a byte-level BPE pre-tokenizer needs: UTF-8 decoding, the categories
// behind \p{L}, \p{N} and \s, and GPT-2's byte ↔ unicode character mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmrr::unicode {

struct CodepointRange {
  uint32_t first, last;
};
extern const CodepointRange kLetterRanges[];
extern const size_t kLetterRangesSize;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumberRangesSize;

bool is_letter(uint32_t cp);      // \p{L}
bool is_number(uint32_t cp);      // \p{N}
bool is_whitespace(uint32_t cp);  // \s (Unicode White_Space)

// One decoded code point and its byte length. Invalid UTF-8 decodes byte by byte as
// U+FFFD-like "invalid" code points (cp = 0xFFFFFFFF), length 1, so every byte is kept.
struct Decoded {
  uint32_t cp;
  uint32_t len;
};
std::vector<Decoded> decode_utf8(std::string_view s);
void append_utf8(uint32_t cp, std::string* out);

// GPT-2's bytes_to_unicode: each byte 0..255 ↔ a printable code point.
uint32_t byte_to_codepoint(uint8_t b);
// Inverse; returns -1 for code points that are not byte images.
int codepoint_to_byte(uint32_t cp);

}  // namespace llmrr::unicode
