// The library's public entry points never throw: guarded() runs one and turns an escaping
// exception into a Status naming the file (out of memory → kResourceLimit, anything else →
// kInternal). Private to llmrr_format.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "llmrr/format/status.h"

namespace llmrr::trace::detail {

template <typename F>
auto guarded(const std::string& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceLimit, path + ": out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, path + ": " + e.what());
  }
}

}  // namespace llmrr::trace::detail
