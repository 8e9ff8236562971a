#include "cli/trace_input.h"

#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "llmrr/safeio/input.h"

namespace llmrr::cli {
namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}

void remove_tree(const std::string& dir) {
  if (!dir.empty()) ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace

TraceInput::TraceInput(TraceInput&& o) noexcept
    : traces(std::move(o.traces)),
      from_pack(o.from_pack),
      model(std::move(o.model)),
      redacted(o.redacted),
      kept(std::move(o.kept)),
      temp_dir(std::exchange(o.temp_dir, std::string())) {}

TraceInput& TraceInput::operator=(TraceInput&& o) noexcept {
  if (this != &o) {
    remove_tree(temp_dir);
    traces = std::move(o.traces);
    from_pack = o.from_pack;
    model = std::move(o.model);
    redacted = o.redacted;
    kept = std::move(o.kept);
    temp_dir = std::exchange(o.temp_dir, std::string());
  }
  return *this;
}

TraceInput::~TraceInput() {
  remove_tree(temp_dir);
}

Result<TraceInput> open_trace_input(const std::string& path) {
  TraceInput in;
  // A FIFO or a device is refused before anything opens it (the bundle check included).
  RETURN_IF_ERROR(safeio::require_regular_file(path, "trace or bundle"));
  if (!replay::is_pack_file(path)) {
    in.traces.push_back(path);
    return in;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/llmrr-pack-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return make_error(ErrorCode::kIo,
                      templ + ": cannot create a temporary directory: " + std::strerror(errno));
  }
  in.temp_dir = templ;
  in.from_pack = true;
  ASSIGN_OR_RETURN(replay::PackContents c, replay::unpack(path, templ));
  if (c.traces.empty()) {
    return make_error(ErrorCode::kSemantic, path + ": the bundle holds no trace");
  }
  in.traces = std::move(c.traces);
  in.model = std::move(c.model);
  in.redacted = c.redacted;
  in.kept = std::move(c.kept);
  return in;
}

Status use_bundle_for_replay(const TraceInput& input, std::string* path, std::string* model,
                             std::optional<RequestId>* request) {
  if (!input.from_pack) return Status::Ok();
  if (input.traces.size() != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      *path + ": the bundle holds " + std::to_string(input.traces.size()) +
                          " traces; extract it (llmrr unpack) and replay one");
  }
  *path = input.traces[0];
  if (model->empty()) *model = input.model;
  if (!input.redacted) return Status::Ok();
  std::string kept;
  for (size_t i = 0; i < input.kept.size(); ++i) {
    kept += (i ? ", " : "") + std::to_string(input.kept[i]);
  }
  if (!request->has_value()) {
    if (input.kept.size() != 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        "the bundle is redacted and keeps requests " + kept +
                            ": choose one with --request (each replays alone)");
    }
    *request = input.kept[0];
    return Status::Ok();
  }
  for (RequestId k : input.kept) {
    if (k == **request) return Status::Ok();
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "--request " + std::to_string(**request) +
                        ": the bundle is redacted, that request's data was removed (kept: " + kept +
                        ")");
}

}  // namespace llmrr::cli
