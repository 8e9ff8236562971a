// Writes every bad input of bad_inputs.h as NAME.trace with NAME.expected (exit code, error
// code name, message substring). Run by hand when the set changes:
//   build/<dir>/tests/golden-errors/make_golden_errors tests/golden-errors
#include <cstdio>
#include <string>

#include "bad_inputs.h"

int main(int argc, char** argv) {
  using namespace llmrr::trace;
  const std::string dir = argc > 1 ? argv[1] : LLMRR_GOLDEN_ERRORS_DIR;
  for (const golden_errors::BadInput& b : golden_errors::bad_inputs()) {
    if (!testing::write_file(dir + "/" + b.name + ".trace", b.bytes)) return 1;
    const std::string expected =
        "# " + b.what + "\nexit 2\ncode " + b.code + "\nmessage " + b.substring + "\n";
    if (!testing::write_file(dir + "/" + b.name + ".expected", {expected.begin(), expected.end()}))
      return 1;
    std::printf("wrote %s/%s.trace (%zu bytes)\n", dir.c_str(), b.name.c_str(), b.bytes.size());
  }
  return 0;
}
