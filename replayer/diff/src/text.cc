// Token text around a visible split: ids decoded by the model's tokenizer, control bytes and
// invalid UTF-8 escaped; ids as numbers when there is no tokenizer.
#include <cstdio>

#include "internal.h"

namespace llmrr::replay::diff_internal {
namespace {

// Printable form of decoded text: control bytes and invalid UTF-8 escaped.
std::string printable(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int j = 1; ok && j < len; ++j) ok = (static_cast<unsigned char>(s[i + j]) >> 6) == 2;
    if (!ok) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
      ++i;
      continue;
    }
    if (len == 1) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\\') {
        out += "\\\\";
      } else if (c < 0x20 || c == 0x7f) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02x", c);
        out += b;
      } else {
        out += static_cast<char>(c);
      }
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out;
}

// Built by appends, as TextDecoder::token builds "#id": "'" + printable(s) trips g++ 12's
// -Wrestrict false positive once this is inlined into TextDecoder::token.
std::string quoted(const std::string& s) {
  std::string q = "'";
  q += printable(s);
  q += '\'';
  return q;
}

}  // namespace

std::string TextDecoder::text(const std::vector<int32_t>& ids) const {
  if (!tok_) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) s += ' ';
      s += std::to_string(ids[i]);
    }
    return s;
  }
  return printable(tok_->decode(ids));
}

std::string TextDecoder::token(int32_t id) const {
  if (id < 0) return "-";
  if (!tok_) return std::string("#").append(std::to_string(id));
  return quoted(tok_->decode(std::vector<int32_t>{id}));
}

void fill_text(const TextDecoder& dec, RequestDiff* d) {
  if (d->visible_position < 0) return;
  d->context_text = dec.text(d->context);
  d->text_a = dec.text(d->continuation_a);
  d->text_b = dec.text(d->continuation_b);
  d->token_a_text = dec.token(d->continuation_a.empty() ? -1 : d->continuation_a[0]);
  d->token_b_text = dec.token(d->continuation_b.empty() ? -1 : d->continuation_b[0]);
  d->top1_a_text = dec.token(d->top1_a);
  d->top2_a_text = dec.token(d->top2_a);
  d->top1_b_text = dec.token(d->top1_b);
  d->top2_b_text = dec.token(d->top2_b);
}

}  // namespace llmrr::replay::diff_internal
