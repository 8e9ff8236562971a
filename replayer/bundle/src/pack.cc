// The bundle container of `llmrr pack` / `llmrr unpack` (layout in pack.h).
#include "llmrr/replayer/pack.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <set>

#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/safeio/input.h"
#include "llmrr/safeio/json.h"
#include "llmrr/safeio/output.h"

namespace llmrr::replay {
namespace {

constexpr unsigned char kEntryMagic[4] = {'L', 'R', 'P', 'E'};
constexpr unsigned char kEndMagic[4] = {'L', 'R', 'P', 'Z'};
constexpr size_t kEntryHeaderBytes = 24;
constexpr size_t kCopyChunk = 1 << 20;

void put_u16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint16_t get_u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

Status io_error(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kIo, path + ": " + what + ": " + std::strerror(errno));
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// A zstd stream written to a file.
class ZWriter {
 public:
  ZWriter(std::FILE* f, std::string path, int level) : f_(f), path_(std::move(path)) {
    ctx_ = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(ctx_, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(ctx_, ZSTD_c_checksumFlag, 1);
    out_.resize(ZSTD_CStreamOutSize());
  }
  ~ZWriter() { ZSTD_freeCCtx(ctx_); }
  ZWriter(const ZWriter&) = delete;
  ZWriter& operator=(const ZWriter&) = delete;

  Status write(const void* data, size_t n) { return pump(data, n, ZSTD_e_continue); }
  Status finish() { return pump(nullptr, 0, ZSTD_e_end); }

 private:
  Status pump(const void* data, size_t n, ZSTD_EndDirective mode) {
    ZSTD_inBuffer in{data, n, 0};
    for (;;) {
      ZSTD_outBuffer out{out_.data(), out_.size(), 0};
      size_t left = ZSTD_compressStream2(ctx_, &out, &in, mode);
      if (ZSTD_isError(left)) {
        return make_error(ErrorCode::kInternal,
                          path_ + ": zstd: " + std::string(ZSTD_getErrorName(left)));
      }
      if (out.pos > 0 && std::fwrite(out_.data(), 1, out.pos, f_) != out.pos) {
        return io_error(path_, "write failed");
      }
      const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
      if (done) return Status::Ok();
    }
  }
  std::FILE* f_;
  std::string path_;
  ZSTD_CCtx* ctx_;
  std::vector<char> out_;
};

// A zstd stream read from a file, exactly n bytes at a time.
class ZReader {
 public:
  ZReader(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {
    ctx_ = ZSTD_createDCtx();
    in_buf_.resize(ZSTD_DStreamInSize());
    out_buf_.resize(ZSTD_DStreamOutSize());
  }
  ~ZReader() { ZSTD_freeDCtx(ctx_); }
  ZReader(const ZReader&) = delete;
  ZReader& operator=(const ZReader&) = delete;

  // Reads exactly n bytes; kTruncated when the stream ends first.
  Status read(void* data, size_t n, const std::string& what) {
    unsigned char* dst = static_cast<unsigned char*>(data);
    while (n > 0) {
      if (out_pos_ == out_end_) {
        Result<bool> more = fill();
        if (!more.ok()) return more.status().with_context(what + ": ");
        if (!*more) {
          return make_error(ErrorCode::kTruncated,
                            path_ + ": " + what + ": the bundle ends early (truncated)");
        }
        continue;
      }
      size_t k = std::min(n, out_end_ - out_pos_);
      std::memcpy(dst, out_buf_.data() + out_pos_, k);
      out_pos_ += k;
      dst += k;
      n -= k;
    }
    return Status::Ok();
  }

  // True when the stream holds no byte after what was read.
  Result<bool> at_end() {
    while (out_pos_ == out_end_) {
      ASSIGN_OR_RETURN(bool more, fill());
      if (!more) return true;
    }
    return false;
  }

 private:
  // Decodes more output; false at the end of a well-formed stream.
  Result<bool> fill() {
    out_pos_ = out_end_ = 0;
    for (;;) {
      if (in_.pos == in_.size) {
        size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        if (got == 0) {
          if (std::ferror(f_)) return io_error(path_, "read failed");
          if (!frame_done_) {
            return make_error(ErrorCode::kTruncated,
                              path_ + ": the compressed body ends inside a zstd frame (truncated)");
          }
          return false;
        }
        in_ = ZSTD_inBuffer{in_buf_.data(), got, 0};
      }
      ZSTD_outBuffer out{out_buf_.data(), out_buf_.size(), 0};
      size_t r = ZSTD_decompressStream(ctx_, &out, &in_);
      if (ZSTD_isError(r)) {
        return make_error(ErrorCode::kCorruptPayload,
                          path_ + ": the compressed body is corrupt (zstd: " +
                              std::string(ZSTD_getErrorName(r)) + ")");
      }
      frame_done_ = r == 0;
      if (out.pos > 0) {
        out_end_ = out.pos;
        return true;
      }
    }
  }

  std::FILE* f_;
  std::string path_;
  ZSTD_DCtx* ctx_;
  std::vector<char> in_buf_, out_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  size_t out_pos_ = 0, out_end_ = 0;
  bool frame_done_ = true;
};

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 1024 || name.front() == '/' || name.back() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == '+';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

// A name part made of the allowed characters.
std::string clean_part(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '+';
    out += ok ? c : '_';
  }
  while (!out.empty() && out.front() == '.') out.erase(out.begin());
  return out.empty() ? "file" : out;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

Status mkdirs(const std::string& dir) {
  if (dir.empty()) return Status::Ok();
  std::string cur;
  size_t start = 0;
  while (start < dir.size()) {
    size_t end = dir.find('/', start);
    if (end == std::string::npos) end = dir.size();
    cur = dir.substr(0, end);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) {
      return io_error(cur, "cannot create the directory");
    }
    start = end + 1;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::kIo, dir + ": not a directory");
  }
  return Status::Ok();
}

struct Source {
  std::string name;  // in the bundle
  std::string path;  // on disk ("" = `data`)
  std::string data;
};

class BundleWriter {
 public:
  BundleWriter(std::FILE* f, const std::string& path, int level)
      : f_(f), path_(path), z_(f, path, level), hasher_(XXH3_createState()) {
    XXH3_64bits_reset(hasher_);
  }
  ~BundleWriter() { XXH3_freeState(hasher_); }

  Status header() {
    unsigned char h[16] = {};
    std::memcpy(h, kPackMagic, 8);
    put_u16(h + 8, kPackMajor);
    put_u16(h + 10, kPackMinor);
    if (std::fwrite(h, 1, 16, f_) != 16) return io_error(path_, "write failed");
    return Status::Ok();
  }

  Status entry(const Source& s, PackEntry* out) {
    out->name = s.name;
    uint64_t size = 0, hash = 0;
    if (s.path.empty()) {
      size = s.data.size();
      hash = XXH3_64bits(s.data.data(), s.data.size());
    } else {
      RETURN_IF_ERROR(hash_file(s.path, &size, &hash));
    }
    out->size = size;
    out->hash = hash;
    unsigned char h[kEntryHeaderBytes] = {};
    std::memcpy(h, kEntryMagic, 4);
    put_u16(h + 4, static_cast<uint16_t>(s.name.size()));
    put_u64(h + 8, size);
    put_u64(h + 16, hash);
    XXH3_64bits_update(hasher_, h, sizeof h);
    XXH3_64bits_update(hasher_, s.name.data(), s.name.size());
    RETURN_IF_ERROR(z_.write(h, sizeof h));
    RETURN_IF_ERROR(z_.write(s.name.data(), s.name.size()));
    ++count_;
    if (s.path.empty()) return z_.write(s.data.data(), s.data.size());
    File in(std::fopen(s.path.c_str(), "rb"));
    if (!in) return io_error(s.path, "cannot open");
    std::vector<char> buf(kCopyChunk);
    uint64_t done = 0;
    for (;;) {
      size_t got = std::fread(buf.data(), 1, buf.size(), in.get());
      if (got == 0) break;
      done += got;
      RETURN_IF_ERROR(z_.write(buf.data(), got));
    }
    if (std::ferror(in.get())) return io_error(s.path, "read failed");
    if (done != size) {
      return make_error(ErrorCode::kIo, s.path + ": the file changed while it was packed");
    }
    return Status::Ok();
  }

  Status end() {
    unsigned char e[16] = {};
    std::memcpy(e, kEndMagic, 4);
    put_u32(e + 4, count_);
    put_u64(e + 8, XXH3_64bits_digest(hasher_));
    RETURN_IF_ERROR(z_.write(e, sizeof e));
    return z_.finish();
  }

 private:
  static Status hash_file(const std::string& path, uint64_t* size, uint64_t* hash) {
    File in(std::fopen(path.c_str(), "rb"));
    if (!in) return io_error(path, "cannot open");
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    std::vector<char> buf(kCopyChunk);
    uint64_t n = 0;
    for (;;) {
      size_t got = std::fread(buf.data(), 1, buf.size(), in.get());
      if (got == 0) break;
      n += got;
      XXH3_64bits_update(st, buf.data(), got);
    }
    *hash = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (std::ferror(in.get())) return io_error(path, "read failed");
    *size = n;
    return Status::Ok();
  }

  std::FILE* f_;
  std::string path_;
  ZWriter z_;
  XXH3_state_t* hasher_;
  uint32_t count_ = 0;
};

// Temporary files next to the bundle, removed whatever happens.
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const std::string& p : paths) ::unlink(p.c_str());
  }
};

nlohmann::json redaction_json(const RedactReport& r) {
  return {{"kept", r.kept},
          {"redacted_requests", r.redacted},
          {"removed",
           {{"prompt_token_ids", r.prompt_tokens_removed},
            {"labels", r.labels_removed},
            {"row_fingerprints", r.row_fingerprints_removed},
            {"logits", r.logits_removed},
            {"tokens", r.tokens_removed},
            {"blobs", r.blobs_removed},
            {"routing_rows_blanked", r.routing_rows_blanked},
            {"command_line", r.command_line_removed}}}};
}

// The model files for --with-model: a builtin needs none; a file or a directory's regular
// files otherwise.
Status model_sources(const std::string& spec, uint64_t limit, nlohmann::json* manifest_model,
                     std::vector<Source>* out) {
  (*manifest_model)["spec"] = spec;
  if (spec.rfind("builtin:", 0) == 0) {
    (*manifest_model)["bundled"] = false;
    (*manifest_model)["note"] = "builtin models are generated from a fixed seed: nothing to bundle";
    return Status::Ok();
  }
  // A FIFO or a device is refused before anything opens it.
  RETURN_IF_ERROR(safeio::require_file_or_directory(spec, "model"));
  struct stat st;
  if (::stat(spec.c_str(), &st) != 0) return io_error(spec, "cannot read the model");
  uint64_t total = 0;
  std::vector<Source> files;
  std::string entry;
  if (S_ISDIR(st.st_mode)) {
    const std::string dir_name = clean_part(base_name(spec));
    entry = "model/" + dir_name;
    DIR* d = ::opendir(spec.c_str());
    if (!d) return io_error(spec, "cannot list the model directory");
    std::set<std::string> names;
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
    for (const std::string& n : names) {
      const std::string p = spec + "/" + n;
      struct stat fs;
      if (n[0] == '.' || ::stat(p.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
      total += static_cast<uint64_t>(fs.st_size);
      files.push_back(Source{entry + "/" + clean_part(n), p, {}});
    }
  } else {
    entry = "model/" + clean_part(base_name(spec));
    total = static_cast<uint64_t>(st.st_size);
    files.push_back(Source{entry, spec, {}});
  }
  if (total > limit) {
    return make_error(ErrorCode::kResourceLimit,
                      "--with-model: " + spec + " is " + std::to_string(total >> 20) +
                          " MiB, over the " + std::to_string(limit >> 20) +
                          " MiB a bundle takes; share the model separately");
  }
  (*manifest_model)["bundled"] = true;
  (*manifest_model)["entry"] = entry;
  (*manifest_model)["bytes"] = total;
  out->insert(out->end(), files.begin(), files.end());
  return Status::Ok();
}

}  // namespace

Result<PackSummary> write_pack(const std::string& out, const PackOptions& o) {
  if (o.traces.empty()) return make_error(ErrorCode::kInvalidArgument, "pack: no trace given");
  if (o.redact && o.keep.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--redact needs --keep R: the request(s) that stay whole");
  }
  if (!o.redact && !o.keep.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--keep is only meaningful with --redact");
  }
  // Before any work: the bundle is none of the inputs, and its directory exists.
  std::vector<std::string> inputs = o.traces;
  if (!o.model.empty()) inputs.push_back(o.model);
  RETURN_IF_ERROR(safeio::check_output_file(out, "-o", inputs));
  PackSummary sum;
  sum.path = out;
  TempFiles temps;
  nlohmann::json manifest;
  manifest["format"] = "llmrr-pack";
  manifest["version"] = std::to_string(kPackMajor) + "." + std::to_string(kPackMinor);
  manifest["tool_version"] = base_run_header().tool_version;
  manifest["created_unix"] = static_cast<int64_t>(std::time(nullptr));
  manifest["redacted"] = o.redact;
  manifest["traces"] = nlohmann::json::array();
  std::vector<Source> sources;
  std::set<std::string> names;
  trace::RunHeader first_header;
  for (size_t i = 0; i < o.traces.size(); ++i) {
    const std::string& in = o.traces[i];
    RETURN_IF_ERROR(safeio::require_regular_file(in, "trace"));
    Result<std::unique_ptr<trace::TraceReader>> rd = trace::TraceReader::open(in);
    if (!rd.ok()) return rd.status();
    const trace::TraceReader& r = **rd;
    // Every frame's checksum and the records' semantics: a damaged trace is not bundled.
    RETURN_IF_ERROR(r.verify());
    if (i == 0) first_header = r.run_header();
    std::string name = clean_part(base_name(in));
    if (name.size() < 6 || name.substr(name.size() - 6) != ".trace") name += ".trace";
    for (int k = 2; names.count("traces/" + name); ++k) {
      name = clean_part(base_name(in)) + "-" + std::to_string(k) + ".trace";
    }
    name = "traces/" + name;
    names.insert(name);
    const trace::RunHeader& h = r.run_header();
    nlohmann::json t = {{"entry", name},
                        {"source", base_name(in)},
                        {"run_id", h.run_id},
                        {"tool_version", h.tool_version},
                        {"complete", r.complete()},
                        {"steps", r.step_count()},
                        {"requests", r.requests().size()},
                        {"tokens", r.token_count()},
                        {"policy", h.engine.policy},
                        {"model",
                         {{"name", h.model.name},
                          {"path", h.model.path},
                          {"architecture", h.model.architecture},
                          {"weight_hash", h.model.weight_hash},
                          {"compute_dtype", h.model.compute_dtype}}}};
    Source s{name, in, {}};
    if (o.redact) {
      const std::string tmp = out + ".redact" + std::to_string(i) + ".tmp";
      temps.paths.push_back(tmp);
      Result<RedactReport> rep = redact_trace(in, tmp, o.keep);
      if (!rep.ok()) return rep.status();
      t["redaction"] = redaction_json(*rep);
      t["command_line"] = nullptr;  // removed: it may hold other requests' prompts
      sum.redactions.push_back(*rep);
      s.path = tmp;
    } else {
      t["command_line"] = h.command_line;
    }
    struct stat ts;
    if (::stat(s.path.c_str(), &ts) != 0) return io_error(s.path, "cannot read");
    t["bytes"] = static_cast<uint64_t>(ts.st_size);
    manifest["traces"].push_back(t);
    sources.push_back(s);
  }
  if (o.redact) manifest["kept"] = o.keep;
  manifest["model"] = nullptr;
  if (o.with_model) {
    ASSIGN_OR_RETURN(std::string spec, resolve_model_spec(first_header, o.model));
    nlohmann::json mm;
    RETURN_IF_ERROR(model_sources(spec, o.max_model_bytes, &mm, &sources));
    mm["weight_hash"] = first_header.model.weight_hash;
    manifest["model"] = mm;
  }
  sum.manifest_json = manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  sources.insert(sources.begin(), Source{"manifest.json", "", sum.manifest_json + "\n"});

  // Written under a temporary name next to `out`, renamed over it only when whole.
  ASSIGN_OR_RETURN(safeio::OutputFile f, safeio::OutputFile::create(out, "-o"));
  {
    BundleWriter w(f.file(), f.temp_path(), o.zstd_level);
    RETURN_IF_ERROR(w.header());
    for (const Source& s : sources) {
      PackEntry e;
      RETURN_IF_ERROR(w.entry(s, &e));
      sum.entries.push_back(e);
    }
    RETURN_IF_ERROR(w.end());
  }
  RETURN_IF_ERROR(f.commit());
  struct stat st;
  if (::stat(out.c_str(), &st) == 0) sum.file_bytes = static_cast<uint64_t>(st.st_size);
  return sum;
}

bool is_pack_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return false;
  unsigned char m[8];
  return std::fread(m, 1, 8, f.get()) == 8 && std::memcmp(m, kPackMagic, 8) == 0;
}

namespace {

// Decoded bytes a bundle may hold: 64 MiB plus 64 times its compressed size. Traces are
// compressed already and models barely compress, so a real bundle stays far below; a
// decompression bomb (a small file declaring gigabytes of zeros) is refused at the entry
// header, before a byte of it is written.
constexpr uint64_t kExpansionSlack = uint64_t{64} << 20;
constexpr uint64_t kMaxExpansion = 64;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}

// The staging directory of an extraction, removed with everything in it; and the output
// directory itself when this extraction created it and it failed.
struct Staging {
  std::string dir;
  std::string created;  // cleared on success
  ~Staging() {
    if (!dir.empty()) ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (!created.empty()) ::rmdir(created.c_str());  // only when empty
  }
};

// What manifest.json declares, against which every later entry is checked.
struct Declared {
  std::map<std::string, std::optional<uint64_t>> traces;  // entry → bytes (when declared)
  bool model_bundled = false;
  std::string model_entry;
  std::optional<uint64_t> model_bytes;
  uint64_t model_seen = 0;
};

Status parse_manifest(const std::string& pack, const std::string& dir, PackContents* c,
                      Declared* d) {
  const std::string where = pack + ": manifest.json";
  ASSIGN_OR_RETURN(nlohmann::json m,
                   safeio::parse_json(c->manifest_json, where, ErrorCode::kSemantic));
  ASSIGN_OR_RETURN(std::string format, safeio::string_field(m, "format", where, ""));
  if (!m.is_object() || format != "llmrr-pack") {
    return make_error(ErrorCode::kSemantic,
                      where + ": not an llmrr-pack manifest (expected a JSON object with "
                              "\"format\": \"llmrr-pack\")");
  }
  ASSIGN_OR_RETURN(c->redacted, safeio::bool_field(m, "redacted", where, false));
  if (m.contains("kept") && !m["kept"].is_null()) {
    if (!m["kept"].is_array()) {
      return make_error(ErrorCode::kSemantic, where + ": field \"kept\" is " +
                                                  safeio::type_name(m["kept"]) +
                                                  ", expected a list of request ids");
    }
    for (const nlohmann::json& k : m["kept"]) {
      if (!k.is_number_unsigned()) {
        return make_error(ErrorCode::kSemantic, where + ": \"kept\" holds " +
                                                    safeio::dump_short(k, 40) +
                                                    ", expected request ids (integers >= 0)");
      }
      c->kept.push_back(k.get<RequestId>());
    }
  }
  if (c->redacted && c->kept.empty()) {
    return make_error(ErrorCode::kSemantic,
                      where + ": \"redacted\" is true but \"kept\" lists no request, expected "
                              "the ids of the requests the bundle keeps whole");
  }
  if (m.contains("traces") && !m["traces"].is_null()) {
    if (!m["traces"].is_array()) {
      return make_error(ErrorCode::kSemantic, where + ": field \"traces\" is " +
                                                  safeio::type_name(m["traces"]) +
                                                  ", expected a list of objects");
    }
    for (size_t i = 0; i < m["traces"].size(); ++i) {
      const nlohmann::json& t = m["traces"][i];
      const std::string tw = where + ": traces[" + std::to_string(i) + "]";
      if (!t.is_object()) {
        return make_error(ErrorCode::kSemantic,
                          tw + " is " + safeio::type_name(t) + ", expected an object");
      }
      ASSIGN_OR_RETURN(std::string entry, safeio::string_field(t, "entry", tw, ""));
      if (!valid_name(entry) || entry.rfind("traces/", 0) != 0) {
        return make_error(ErrorCode::kSemantic, tw + ": \"entry\" is '" + entry.substr(0, 80) +
                                                    "', expected traces/<name>");
      }
      std::optional<uint64_t> bytes;
      if (t.contains("bytes")) {
        ASSIGN_OR_RETURN(uint64_t b, safeio::uint_field(t, "bytes", tw, 0));
        bytes = b;
      }
      d->traces[entry] = bytes;
    }
  }
  if (m.contains("model") && !m["model"].is_null()) {
    const nlohmann::json& mm = m["model"];
    const std::string mw = where + ": model";
    if (!mm.is_object()) {
      return make_error(ErrorCode::kSemantic,
                        mw + " is " + safeio::type_name(mm) + ", expected an object or null");
    }
    ASSIGN_OR_RETURN(d->model_bundled, safeio::bool_field(mm, "bundled", mw, false));
    ASSIGN_OR_RETURN(std::string spec, safeio::string_field(mm, "spec", mw, ""));
    if (d->model_bundled) {
      ASSIGN_OR_RETURN(d->model_entry, safeio::string_field(mm, "entry", mw, ""));
      if (!valid_name(d->model_entry) || d->model_entry.rfind("model/", 0) != 0) {
        return make_error(ErrorCode::kSemantic, mw + ": \"entry\" is '" +
                                                    d->model_entry.substr(0, 80) +
                                                    "', expected model/<name>");
      }
      if (mm.contains("bytes")) {
        ASSIGN_OR_RETURN(uint64_t b, safeio::uint_field(mm, "bytes", mw, 0));
        d->model_bytes = b;
      }
      if (!dir.empty()) c->model = dir + "/" + d->model_entry;
    } else if (spec.rfind("builtin:", 0) == 0 && !dir.empty()) {
      c->model = spec;
    }
  }
  return Status::Ok();
}

// Ok when manifest.json accounts for entry `name` of `size` bytes.
Status check_declared(const std::string& where, const std::string& name, uint64_t size,
                      Declared* d) {
  if (name.rfind("traces/", 0) == 0) {
    auto it = d->traces.find(name);
    if (it == d->traces.end()) {
      return make_error(ErrorCode::kSemantic,
                        where + ": not listed in manifest.json's traces (expected one of its "
                                "entries)");
    }
    if (it->second && *it->second != size) {
      return make_error(ErrorCode::kSemantic,
                        where + ": declares " + std::to_string(size) +
                            " bytes, manifest.json says " + std::to_string(*it->second));
    }
    return Status::Ok();
  }
  const bool in_model = d->model_bundled &&
                        (name == d->model_entry || name.rfind(d->model_entry + "/", 0) == 0);
  if (!in_model) {
    return make_error(ErrorCode::kSemantic,
                      where + ": not listed in manifest.json (expected traces/<name> or the "
                              "bundled model's files)");
  }
  d->model_seen += size;
  if (d->model_bytes && d->model_seen > *d->model_bytes) {
    return make_error(ErrorCode::kSemantic,
                      where + ": the model's entries reach " + std::to_string(d->model_seen) +
                          " bytes, manifest.json says " + std::to_string(*d->model_bytes));
  }
  return Status::Ok();
}

}  // namespace

Result<PackContents> unpack(const std::string& pack, const std::string& dir) {
  // A FIFO or a device is refused before anything opens it.
  RETURN_IF_ERROR(safeio::require_regular_file(pack, "bundle"));
  File f(std::fopen(pack.c_str(), "rb"));
  if (!f) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                      pack + ": cannot open: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument, pack + ": expected a regular bundle file");
  }
  const uint64_t cap = kExpansionSlack + kMaxExpansion * static_cast<uint64_t>(st.st_size);
  unsigned char h[16];
  size_t got = std::fread(h, 1, 16, f.get());
  if (got < 8 || std::memcmp(h, kPackMagic, 8) != 0) {
    return make_error(
        ErrorCode::kBadMagic,
        pack + ": not an llmrr bundle (expected the magic \\x89LLMRRB\\n at offset 0)");
  }
  if (got < 16) {
    return make_error(ErrorCode::kTruncated, pack + ": the bundle header is cut short (" +
                                                 std::to_string(got) + " of 16 bytes)");
  }
  const uint16_t major = get_u16(h + 8);
  if (major > kPackMajor) {
    return make_error(ErrorCode::kVersionTooNew, pack + ": bundle format " + std::to_string(major) +
                                                     "." + std::to_string(get_u16(h + 10)) +
                                                     " is newer than this llmrr reads (" +
                                                     std::to_string(kPackMajor) + ".x)");
  }
  // Entries are written into a staging directory inside `dir` and moved into place only
  // when the whole bundle has checked out: a damaged bundle leaves nothing behind.
  Staging staging;
  if (!dir.empty()) {
    struct stat ds;
    if (::stat(dir.c_str(), &ds) != 0) staging.created = dir;
    RETURN_IF_ERROR(safeio::make_output_dir(dir, "-o"));
    std::string templ = dir + "/.llmrr-unpack-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return io_error(dir, "cannot create a directory in");
    staging.dir = templ;
  }

  PackContents c;
  Declared declared;
  uint64_t total = 0;
  ZReader z(f.get(), pack);
  XXH3_state_t* hasher = XXH3_createState();
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hasher_owner(hasher,
                                                                               XXH3_freeState);
  XXH3_64bits_reset(hasher);
  std::set<std::string> seen;
  std::vector<char> buf(kCopyChunk);
  for (uint32_t index = 0;; ++index) {
    const std::string where = "entry " + std::to_string(index);
    unsigned char eh[kEntryHeaderBytes];
    RETURN_IF_ERROR(z.read(eh, 4, where));
    if (std::memcmp(eh, kEndMagic, 4) == 0) {
      unsigned char e[12];
      RETURN_IF_ERROR(z.read(e, 12, "end record"));
      if (get_u32(e) != index) {
        return make_error(ErrorCode::kSemantic,
                          pack + ": the end record counts " + std::to_string(get_u32(e)) +
                              " entries, the bundle holds " + std::to_string(index));
      }
      if (get_u64(e + 4) != XXH3_64bits_digest(hasher)) {
        return make_error(ErrorCode::kChecksumMismatch,
                          pack + ": the end record's hash of the entry headers does not match");
      }
      ASSIGN_OR_RETURN(bool end, z.at_end());
      if (!end) {
        return make_error(ErrorCode::kSemantic, pack + ": bytes follow the end record");
      }
      break;
    }
    if (std::memcmp(eh, kEntryMagic, 4) != 0) {
      return make_error(ErrorCode::kBadMagic,
                        pack + ": " + where + ": expected an entry (LRPE) or the end (LRPZ)");
    }
    RETURN_IF_ERROR(z.read(eh + 4, kEntryHeaderBytes - 4, where));
    const uint16_t name_len = get_u16(eh + 4);
    const uint64_t size = get_u64(eh + 8), hash = get_u64(eh + 16);
    std::string name(name_len, '\0');
    RETURN_IF_ERROR(z.read(name.data(), name_len, where + " name"));
    if (!valid_name(name) || seen.count(name)) {
      return make_error(ErrorCode::kSemantic,
                        pack + ": " + where + ": bad or repeated entry name " +
                            safeio::dump_short(nlohmann::json(name.substr(0, 80)), 90) +
                            " (expected a relative path of [A-Za-z0-9._+-] parts without '..')");
    }
    if (index == 0 && name != "manifest.json") {
      return make_error(ErrorCode::kSemantic,
                        pack + ": the first entry is '" + name + "', expected manifest.json");
    }
    seen.insert(name);
    XXH3_64bits_update(hasher, eh, sizeof eh);
    XXH3_64bits_update(hasher, name.data(), name.size());
    const std::string ewhere = pack + ": " + where + " (" + name + ")";
    const bool is_manifest = index == 0;
    if (is_manifest && size > (16u << 20)) {
      return make_error(ErrorCode::kSemantic, pack + ": manifest.json of " + std::to_string(size) +
                                                  " bytes: expected at most 16 MiB");
    }
    if (!is_manifest) RETURN_IF_ERROR(check_declared(ewhere, name, size, &declared));
    if (size > cap - std::min(total, cap)) {
      return make_error(ErrorCode::kResourceLimit,
                        ewhere + ": declares " + std::to_string(size) + " bytes, " +
                            std::to_string(total) + " already read: over the " +
                            std::to_string(cap) + " bytes a bundle of " +
                            std::to_string(st.st_size) +
                            " bytes may hold (64 MiB + 64 times its size)");
    }
    total += size;
    File out;
    const std::string target = staging.dir.empty() ? "" : staging.dir + "/" + name;
    if (!target.empty()) {
      RETURN_IF_ERROR(mkdirs(target.substr(0, target.rfind('/'))));
      out.reset(std::fopen(target.c_str(), "wb"));
      if (!out) return io_error(target, "cannot create");
    }
    XXH3_state_t* eh_state = XXH3_createState();
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> eh_owner(eh_state,
                                                                             XXH3_freeState);
    XXH3_64bits_reset(eh_state);
    for (uint64_t left = size; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      RETURN_IF_ERROR(z.read(buf.data(), n, where + " (" + name + ")"));
      XXH3_64bits_update(eh_state, buf.data(), n);
      if (is_manifest) c.manifest_json.append(buf.data(), n);
      if (out && std::fwrite(buf.data(), 1, n, out.get()) != n) {
        return io_error(target, "write failed");
      }
      left -= n;
    }
    if (out && std::fclose(out.release()) != 0) return io_error(target, "write failed");
    if (XXH3_64bits_digest(eh_state) != hash) {
      return make_error(ErrorCode::kChecksumMismatch,
                        ewhere + ": content hash mismatch (the bundle is damaged)");
    }
    c.entries.push_back(PackEntry{name, size, hash});
    if (is_manifest) RETURN_IF_ERROR(parse_manifest(pack, dir, &c, &declared));
  }
  if (c.entries.empty()) {
    return make_error(ErrorCode::kSemantic, pack + ": the bundle holds no manifest.json");
  }
  for (const auto& [name, bytes] : declared.traces) {
    if (!seen.count(name)) {
      return make_error(ErrorCode::kSemantic, pack + ": manifest.json lists " + name +
                                                  ", which the bundle does not hold");
    }
  }
  if (dir.empty()) return c;
  // Everything checked: move the entries into place.
  for (const PackEntry& e : c.entries) {
    const std::string target = dir + "/" + e.name;
    RETURN_IF_ERROR(mkdirs(target.substr(0, target.rfind('/'))));
    RETURN_IF_ERROR(safeio::check_output_file(target, "-o", {pack}));
    if (::rename((staging.dir + "/" + e.name).c_str(), target.c_str()) != 0) {
      return io_error(target, "cannot write");
    }
    if (e.name.rfind("traces/", 0) == 0) c.traces.push_back(target);
  }
  staging.created.clear();
  return c;
}

}  // namespace llmrr::replay
