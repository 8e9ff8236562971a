#include "llmrr/recorder/requests_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "llmrr/safeio/input.h"
#include "llmrr/safeio/json.h"

namespace llmrr {
namespace {

using nlohmann::json;

// What a JSON value is, for messages: the value itself when short, else its type.
std::string found(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

class LineParser {
 public:
  LineParser(std::string_view name, int64_t line) : name_(name), line_(line) {}

  Status error(const std::string& what) const {
    return make_error(ErrorCode::kBadRequest,
                      std::string(name_) + ":" + std::to_string(line_) + ": " + what);
  }
  Status field_error(const char* field, const std::string& expected, const json& v) const {
    return error(std::string("field '") + field + "': expected " + expected + ", found " +
                 found(v));
  }

  // Integers: JSON integers only (1.5 and "3" are refused; 2.0 too, to keep ids exact).
  Status get_int(const json& obj, const char* field, int64_t lo, int64_t hi, int64_t* out,
                 const std::string& expected) const {
    auto it = obj.find(field);
    if (it == obj.end()) return Status::Ok();
    const json& v = *it;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
        return field_error(field, expected, v);
      }
      *out = static_cast<int64_t>(u);
      return Status::Ok();
    }
    if (!v.is_number_integer()) return field_error(field, expected, v);
    int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return field_error(field, expected, v);
    *out = i;
    return Status::Ok();
  }

  Status get_uint64(const json& obj, const char* field, uint64_t* out) const {
    auto it = obj.find(field);
    if (it == obj.end()) return Status::Ok();
    const json& v = *it;
    if (v.is_number_unsigned()) {
      *out = v.get<uint64_t>();
      return Status::Ok();
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(v.get<int64_t>());
      return Status::Ok();
    }
    return field_error(field, "an unsigned integer", v);
  }

  Status get_number(const json& obj, const char* field, double* out) const {
    auto it = obj.find(field);
    if (it == obj.end()) return Status::Ok();
    if (!it->is_number()) return field_error(field, "a number", *it);
    *out = it->get<double>();
    return Status::Ok();
  }

 private:
  std::string_view name_;
  int64_t line_;
};

const char* const kFields[] = {"id",           "prompt", "prompt_ids", "max_tokens",
                               "temperature",  "top_k",  "top_p",      "seed",
                               "arrival_step", "label",  "stop_at_eos"};

// One line at a time, so a file is parsed as it is read: no more than a line of text is held,
// and the request cap is hit after at most kMaxRequests + 1 requests, whatever the file size.
class RequestsParser {
 public:
  RequestsParser(std::string_view name, const RequestDefaults& defaults,
                 const RequestsFileContext& ctx)
      : name_(name), defaults_(defaults), ctx_(ctx) {}

  Status add_line(std::string_view line) {
    const int64_t line_no = ++line_no_;
    std::vector<RequestSpec>& out = out_;
    const RequestDefaults& defaults = defaults_;
    const RequestsFileContext& ctx = ctx_;
    std::string_view name = name_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') return Status::Ok();

    LineParser p(name, line_no);
    if (out.size() >= kMaxRequests) {  // before the line is parsed: refused within seconds
      return p.error("more than " + std::to_string(kMaxRequests) +
                     " requests, expected at most " + std::to_string(kMaxRequests) +
                     " in one requests file (record several traces instead)");
    }
    RETURN_IF_ERROR(safeio::check_json_depth(
        line, std::string(name) + ":" + std::to_string(line_no), ErrorCode::kBadRequest));
    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::parse_error& e) {
      // e.byte is 1-based within the line.
      std::string what = e.what();
      size_t colon = what.find("syntax error");
      json reason = colon == std::string::npos ? what : what.substr(colon);
      return p.error("not valid JSON at column " + std::to_string(e.byte) + ": " +
                     safeio::dump_short(reason, 200));
    } catch (const json::exception& e) {
      // A number too large for a double (1e999) is out_of_range 406, not a parse_error.
      std::string what = e.what();
      const size_t bracket = what.find("] ");
      json reason = bracket == std::string::npos ? what : what.substr(bracket + 2);
      return p.error("not valid JSON: " + safeio::dump_short(reason, 200));
    }
    if (!obj.is_object()) {
      return p.error("expected a JSON object ({\"prompt\": ...}), found " + found(obj));
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool known = false;
      for (const char* f : kFields) known = known || it.key() == f;
      if (!known) {
        return p.error("unknown field '" + it.key() +
                       "' (known: id, prompt, prompt_ids, max_tokens, temperature, top_k, "
                       "top_p, seed, arrival_step, label, stop_at_eos)");
      }
    }

    RequestSpec r;
    r.max_tokens = defaults.max_tokens;
    r.sampling = defaults.sampling;

    int64_t id = static_cast<int64_t>(out.size());
    RETURN_IF_ERROR(
        p.get_int(obj, "id", 0, std::numeric_limits<int64_t>::max(), &id, "an unsigned integer"));
    r.id = static_cast<RequestId>(id);
    if (auto prev = id_lines_.find(r.id); prev != id_lines_.end()) {
      return p.error("field 'id': id " + std::to_string(r.id) + " is already used on line " +
                     std::to_string(prev->second) + " (ids must be unique)");
    }

    const bool has_text = obj.contains("prompt");
    const bool has_ids = obj.contains("prompt_ids");
    if (has_text == has_ids) {
      return p.error(has_text ? "fields 'prompt' and 'prompt_ids': give only one of them"
                              : "missing field 'prompt' (or 'prompt_ids'): every request needs "
                                "a prompt");
    }
    const int32_t vocab = ctx.model ? ctx.model->vocab : std::numeric_limits<int32_t>::max();
    if (has_ids) {
      const json& ids = obj["prompt_ids"];
      if (!ids.is_array() || ids.empty()) {
        return p.field_error("prompt_ids", "a non-empty array of token ids", ids);
      }
      r.prompt.reserve(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        const json& t = ids[i];
        bool ok = (t.is_number_integer() || t.is_number_unsigned());
        int64_t v = ok ? (t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                       t.get<uint64_t>(), uint64_t{1} << 62))
                                                 : t.get<int64_t>())
                       : -1;
        if (!ok || v < 0 || v >= vocab) {
          return p.error("field 'prompt_ids': element " + std::to_string(i) +
                         ": expected a token id in [0, " + std::to_string(vocab) + "), found " +
                         found(t));
        }
        r.prompt.push_back(static_cast<int32_t>(v));
      }
    } else {
      const json& t = obj["prompt"];
      if (!t.is_string()) return p.field_error("prompt", "a string", t);
      const std::string s = t.get<std::string>();
      if (s.empty()) return p.field_error("prompt", "a non-empty string", t);
      if (ctx.tokenizer == nullptr) {
        return p.error(
            "field 'prompt': the model has no usable tokenizer" +
            (ctx.tokenizer_note.empty() ? std::string() : " (" + ctx.tokenizer_note + ")") +
            "; use 'prompt_ids'");
      }
      r.prompt = ctx.tokenizer->encode(ctx.chat ? ctx.tokenizer->chat_prompt(s) : s);
      if (r.prompt.empty()) return p.error("field 'prompt': encodes to no tokens");
    }

    int64_t v = r.max_tokens;
    RETURN_IF_ERROR(p.get_int(obj, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &v,
                              "an integer >= 1"));
    r.max_tokens = static_cast<int32_t>(v);

    double d = r.sampling.temperature;
    RETURN_IF_ERROR(p.get_number(obj, "temperature", &d));
    if (!(std::isfinite(d) && d >= 0)) {
      return p.field_error("temperature", "a number >= 0", obj["temperature"]);
    }
    r.sampling.temperature = static_cast<float>(d);

    v = r.sampling.top_k;
    RETURN_IF_ERROR(
        p.get_int(obj, "top_k", 0, std::numeric_limits<int32_t>::max(), &v, "an integer >= 0"));
    r.sampling.top_k = static_cast<int32_t>(v);

    d = r.sampling.top_p;
    RETURN_IF_ERROR(p.get_number(obj, "top_p", &d));
    if (!(d > 0 && d <= 1)) return p.field_error("top_p", "a number in (0, 1]", obj["top_p"]);
    r.sampling.top_p = static_cast<float>(d);

    RETURN_IF_ERROR(p.get_uint64(obj, "seed", &r.sampling.seed));

    v = 0;
    RETURN_IF_ERROR(p.get_int(obj, "arrival_step", 0, int64_t{1} << 40, &v, "an integer >= 0"));
    r.arrival_step = v;

    if (auto it = obj.find("label"); it != obj.end()) {
      if (!it->is_string()) return p.field_error("label", "a string", *it);
      r.label = it->get<std::string>();
    }
    if (auto it = obj.find("stop_at_eos"); it != obj.end()) {
      if (!it->is_boolean()) return p.field_error("stop_at_eos", "true or false", *it);
      r.stop_at_eos = it->get<bool>();
    }

    if (ctx.model) {
      const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens - 1;
      if (need > ctx.model->max_positions) {
        return p.error("the prompt (" + std::to_string(r.prompt.size()) +
                       " tokens) plus max_tokens " + std::to_string(r.max_tokens) +
                       " exceeds the model's " + std::to_string(ctx.model->max_positions) +
                       " positions");
      }
    }
    id_lines_[r.id] = line_no;
    out.push_back(std::move(r));
    return Status::Ok();
  }

  Result<std::vector<RequestSpec>> finish() {
    if (out_.empty()) {
      return make_error(ErrorCode::kBadRequest,
                        std::string(name_) + ": no requests (every line is blank or a comment)");
    }
    return std::move(out_);
  }

 private:
  std::string_view name_;
  const RequestDefaults& defaults_;
  const RequestsFileContext& ctx_;
  std::vector<RequestSpec> out_;
  std::map<RequestId, int64_t> id_lines_;  // id → line that used it
  int64_t line_no_ = 0;
};

}  // namespace

Result<std::vector<RequestSpec>> parse_requests_jsonl(std::string_view text, std::string_view name,
                                                      const RequestDefaults& defaults,
                                                      const RequestsFileContext& ctx) {
  RequestsParser parser(name, defaults, ctx);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    RETURN_IF_ERROR(parser.add_line(text.substr(pos, end - pos)));
    pos = end + 1;
  }
  return parser.finish();
}

Result<std::vector<RequestSpec>> read_requests_file(const std::string& path,
                                                    const RequestDefaults& defaults,
                                                    const RequestsFileContext& context) {
  // Refused unless a regular file (a FIFO would block, /dev/zero never ends), then read as a
  // stream: parsed a line at a time (the text of one line held, not the file's), the size
  // capped before and while reading, the request count by the parser.
  ASSIGN_OR_RETURN(int fd, safeio::open_regular(path, "requests file"));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  auto too_big = [&](uint64_t n) {
    return make_error(ErrorCode::kResourceLimit,
                      path + ": the requests file is " + std::to_string(n) +
                          " bytes or more, expected at most " +
                          std::to_string(kMaxRequestsFileBytes));
  };
  struct stat st;
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > kMaxRequestsFileBytes) {
    return too_big(static_cast<uint64_t>(st.st_size));
  }
  RequestsParser parser(path, defaults, context);
  std::string pending;  // the line being read, up to its '\n'
  uint64_t total = 0;
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kIo,
                        path + ": cannot read the requests file: " + std::strerror(errno));
    }
    if (got == 0) break;
    total += static_cast<uint64_t>(got);
    if (total > kMaxRequestsFileBytes) return too_big(total);
    std::string_view chunk(buf, static_cast<size_t>(got));
    for (size_t nl; (nl = chunk.find('\n')) != std::string_view::npos;) {
      if (pending.empty()) {
        RETURN_IF_ERROR(parser.add_line(chunk.substr(0, nl)));
      } else {
        pending.append(chunk.substr(0, nl));
        RETURN_IF_ERROR(parser.add_line(pending));
        pending.clear();
      }
      chunk.remove_prefix(nl + 1);
    }
    pending.append(chunk);
  }
  if (!pending.empty()) RETURN_IF_ERROR(parser.add_line(pending));
  return parser.finish();
}

}  // namespace llmrr
