// Replays fuzz corpora through a target without libFuzzer (ctest label fuzz-regression):
//   <target>_regression DIR_OR_FILE...
// A path that does not exist, a directory without a file in it, or no path at all fails
// (exit 1): a corpus that went missing must not pass as a clean run of nothing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  if (argc < 2) {
    std::fprintf(stderr, "regression: no corpus given (usage: %s DIR_OR_FILE...)\n", argv[0]);
    return 1;
  }
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      const size_t before = inputs.size();
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
      if (inputs.size() == before) {
        std::fprintf(stderr, "regression: the corpus directory %s holds no file\n", p.c_str());
        return 1;
      }
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "regression: %s does not exist (or is not a file or directory)\n",
                   p.c_str());
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "regression: cannot read %s\n", p.c_str());
      return 1;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("regression: %zu inputs ran clean\n", inputs.size());
  return 0;
}
