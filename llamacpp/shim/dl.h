// libllama's and libggml's functions as the shim finds them at run time (it links neither).
#pragma once

#include <dlfcn.h>

namespace llmrr::llamacpp {

// The next definition of `name` after the shim's own (the real one the shim wraps).
template <class F>
F next_fn(F, const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
// Any definition of `name` in the process (nullptr when the library lacks it).
template <class F>
F any_fn(F, const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace llmrr::llamacpp
