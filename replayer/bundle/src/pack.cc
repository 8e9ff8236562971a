// Writing bundles: `llmrr pack` (layout in pack.h); unpack.cc reads them, container.h holds
// what both share.
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

#include "container.h"

namespace llmrr::replay {

using namespace bundle_internal;

namespace {

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
  // The redacted copies: each under a unique name beside `out` (O_EXCL, never a fixed name
  // a link could be planted at, never shared by two packs), removed whatever happens,
  // a signal included.
  std::vector<safeio::OutputFile> temps;
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
      ASSIGN_OR_RETURN(safeio::OutputFile temp, safeio::OutputFile::create(out, "-o"));
      const std::string tmp = temp.temp_path();
      temps.push_back(std::move(temp));
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
    // Errors name the bundle being written, not its temporary name.
    BundleWriter w(f.file(), f.path(), o.zstd_level);
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

}  // namespace llmrr::replay
