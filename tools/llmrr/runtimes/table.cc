// The runtime table: one row per adapter folder (each defines its Adapter there).
#include <cctype>
#include <cstdio>
#include <vector>

#include "runtimes/adapter.h"

namespace llmrr::runtimes {

namespace cuda { extern const Adapter kAdapter; }
namespace llamacpp { extern const Adapter kAdapter; }
namespace vllm { extern const Adapter kAdapter; }

namespace {

const Adapter* const kTable[] = {
    &vllm::kAdapter,
    &llamacpp::kAdapter,
    &cuda::kAdapter,
};

// `--runtime X` / `--runtime=X` among argv[1..]: true with X in *name and the other
// arguments (argv[0] first) in *rest; false when the option is absent.
bool take_runtime(int argc, char** argv, std::string* name, std::vector<char*>* rest) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    int used = 0;
    if (a == "--runtime" && i + 1 < argc) {
      *name = argv[i + 1];
      used = 2;
    } else if (a.rfind("--runtime=", 0) == 0) {
      *name = a.substr(10);
      used = 1;
    } else {
      continue;
    }
    rest->clear();
    for (int k = 0; k < argc; ++k) {
      if (k < i || k >= i + used) rest->push_back(argv[k]);
    }
    rest->push_back(nullptr);
    return true;
  }
  return false;
}

Verb verb_of(const Adapter& a, std::string_view verb) {
  if (verb == "replay") return a.replay;
  if (verb == "bisect") return a.bisect;
  if (verb == "fuzz") return a.fuzz;
  return nullptr;
}

}  // namespace

std::span<const Adapter* const> adapters() { return kTable; }

const Adapter* find(std::string_view name) {
  for (const Adapter* a : kTable) {
    if (name == a->name) return a;
  }
  return nullptr;
}

std::string trace_env(const Adapter& a) {
  std::string s = "LLMRR_";
  for (const char* p = a.name; *p; ++p)
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  return s + "_TRACE";
}

bool dispatch(const char* verb, int argc, char** argv, int* rc) {
  std::string name;
  std::vector<char*> rest;
  if (!take_runtime(argc, argv, &name, &rest)) return false;
  const Adapter* a = find(name);
  Verb v = a != nullptr ? verb_of(*a, verb) : nullptr;
  if (v == nullptr) {
    std::string have;
    for (const Adapter* x : kTable) {
      if (verb_of(*x, verb) != nullptr) have += std::string(have.empty() ? "" : " or ") + x->name;
    }
    std::fprintf(stderr,
                 "llmrr %s: error: --runtime: expected %s (llmrr's own engine is the default), "
                 "found '%s'%s (see llmrr %s --help)\n",
                 verb, have.c_str(), name.c_str(),
                 a != nullptr ? (std::string(": ") + a->name + " has no " + verb).c_str() : "",
                 verb);
    *rc = 2;
    return true;
  }
  *rc = v(verb, static_cast<int>(rest.size()) - 1, rest.data());
  return true;
}

}  // namespace llmrr::runtimes
