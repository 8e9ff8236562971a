#include "tokenizer/unicode.h"

#include <algorithm>

namespace llmrr::unicode {
namespace {

bool in_ranges(uint32_t cp, const CodepointRange* r, size_t n) {
  const CodepointRange* end = r + n;
  const CodepointRange* it =
      std::upper_bound(r, end, cp, [](uint32_t c, const CodepointRange& x) { return c < x.first; });
  return it != r && cp <= (it - 1)->last;
}

struct ByteMap {
  uint32_t to_cp[256];
  ByteMap() {
    // bytes_to_unicode(): printable Latin-1 bytes map to themselves, the rest to 256 + n.
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
      to_cp[b] = keep ? b : 256 + n++;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

bool is_letter(uint32_t cp) { return in_ranges(cp, kLetterRanges, kLetterRangesSize); }
bool is_number(uint32_t cp) { return in_ranges(cp, kNumberRanges, kNumberRangesSize); }

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0x20: case 0x85: case 0xa0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

std::vector<Decoded> decode_utf8(std::string_view s) {
  std::vector<Decoded> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    uint32_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (uint32_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (!ok) {
      out.push_back({0xFFFFFFFFu, 1});
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (uint32_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3f);
    out.push_back({cp, len});
    i += len;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

uint32_t byte_to_codepoint(uint8_t b) { return byte_map().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) {
  if (cp < 256) {
    const bool keep = (cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae);
    return keep ? static_cast<int>(cp) : -1;
  }
  for (int b = 0; b < 256; ++b)
    if (byte_map().to_cp[b] == cp) return b;
  return -1;
}

}  // namespace llmrr::unicode
