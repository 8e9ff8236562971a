// Reading bundles: `llmrr unpack`, --list and every command that opens a bundle (layout in
// pack.h); pack.cc writes them, container.h holds what both share.
#include "llmrr/replayer/pack.h"

#include <fcntl.h>
#include <climits>
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

}  // namespace

namespace {

// Decoded bytes a bundle may hold: 64 MiB plus 64 times its compressed size. Traces are
// compressed already and models barely compress, so a real bundle stays far below; a
// decompression bomb (a small file declaring gigabytes of zeros) is refused at the entry
// header, before a byte of it is written.
constexpr uint64_t kExpansionSlack = uint64_t{64} << 20;
constexpr uint64_t kMaxExpansion = 64;

// Ok when entry `name` can sit beside those already seen: no part longer than a file name
// may be (NAME_MAX), no entry both a file and a directory ("traces/a" and "traces/a/b").
// --list runs this as unpack does, so a bundle --list passes is one unpack can write.
Status check_tree(const std::string& where, const std::string& name,
                  const std::set<std::string>& files, std::set<std::string>* dirs) {
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    const size_t end = slash == std::string::npos ? name.size() : slash;
    if (end - start > NAME_MAX) {
      return make_error(ErrorCode::kSemantic,
                        where + ": a part of the name is " + std::to_string(end - start) +
                            " bytes, expected at most " + std::to_string(NAME_MAX));
    }
    if (slash == std::string::npos) break;
    const std::string parent = name.substr(0, slash);
    if (files.count(parent)) {
      return make_error(ErrorCode::kSemantic,
                        where + ": " + parent +
                            " is an entry (a file) and a directory of this one, expected one "
                            "or the other");
    }
    start = slash + 1;
  }
  if (dirs->count(name)) {
    return make_error(ErrorCode::kSemantic,
                      where + ": an earlier entry makes it a directory, expected one or the "
                              "other");
  }
  for (size_t slash = name.find('/'); slash != std::string::npos;
       slash = name.find('/', slash + 1)) {
    dirs->insert(name.substr(0, slash));
  }
  return Status::Ok();
}

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
  // Entries are written into a fresh staging directory (beside `dir`, or inside it when it
  // exists) through directory descriptors, and moved into place only when the whole bundle
  // has checked out: a damaged bundle leaves nothing behind, and no link found in `dir` or
  // planted in the staging directory is followed (safeio::OutputDir).
  std::optional<safeio::OutputDir> staging;
  if (!dir.empty()) {
    ASSIGN_OR_RETURN(safeio::OutputDir d, safeio::OutputDir::create(dir, "-o", {pack}));
    staging = std::move(d);
  }

  PackContents c;
  Declared declared;
  uint64_t total = 0;
  ZReader z(f.get(), pack);
  XXH3_state_t* hasher = XXH3_createState();
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hasher_owner(hasher,
                                                                               XXH3_freeState);
  XXH3_64bits_reset(hasher);
  std::set<std::string> seen, dirs;
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
    RETURN_IF_ERROR(check_tree(pack + ": " + where + " (" + name.substr(0, 80) + ")", name,
                               seen, &dirs));
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
    const std::string target = dir + "/" + name;
    if (staging) {
      ASSIGN_OR_RETURN(int fd, staging->create_file(name));
      out.reset(::fdopen(fd, "wb"));
      if (!out) {
        ::close(fd);
        return io_error(target, "cannot open");
      }
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
  // Everything checked: move the entries into place (OutputDir::commit checks every target
  // before the first rename, and moves manifest.json last).
  RETURN_IF_ERROR(staging->commit());
  for (const PackEntry& e : c.entries) {
    if (e.name.rfind("traces/", 0) == 0) c.traces.push_back(dir + "/" + e.name);
  }
  return c;
}

}  // namespace llmrr::replay
