#include "llmrr/replayer/ddmin.h"

#include <algorithm>
#include <cstdlib>

namespace llmrr::replay {
namespace {

// How coarse the boundary between elements a and b (a before b) is: 2 between groups, 1
// between kinds of one group, 0 inside a kind.
int cut_level(const std::vector<DdminKey>& keys, int a, int b) {
  if (keys[a].coarse != keys[b].coarse) return 2;
  if (keys[a].fine != keys[b].fine) return 1;
  return 0;
}

}  // namespace

std::vector<std::vector<int>> ddmin_partition(const std::vector<DdminKey>& keys,
                                              const std::vector<int>& set, int parts) {
  const int n = static_cast<int>(set.size());
  parts = std::max(1, std::min(parts, n));
  std::vector<int> cuts;  // cut before set[c]
  const int slack = n / 16;
  int prev = 0;
  for (int j = 1; j < parts; ++j) {
    const int ideal = static_cast<int>(static_cast<int64_t>(j) * n / parts);
    // Each part keeps at least one element: the cut stays in (prev, n - (parts - j)].
    const int lo = std::max(prev + 1, ideal - slack);
    const int hi = std::min(n - (parts - j), ideal + slack);
    int best = std::clamp(ideal, prev + 1, n - (parts - j));
    int best_level = cut_level(keys, set[best - 1], set[best]);
    for (int c = lo; c <= hi; ++c) {
      const int level = cut_level(keys, set[c - 1], set[c]);
      if (level > best_level ||
          (level == best_level && std::abs(c - ideal) < std::abs(best - ideal))) {
        best = c;
        best_level = level;
      }
    }
    cuts.push_back(best);
    prev = best;
  }
  std::vector<std::vector<int>> out;
  int from = 0;
  for (size_t j = 0; j <= cuts.size(); ++j) {
    const int to = j < cuts.size() ? cuts[j] : n;
    out.emplace_back(set.begin() + from, set.begin() + to);
    from = to;
  }
  return out;
}

std::vector<int> ddmin(const std::vector<DdminKey>& keys, const DdminTest& first_reproducing) {
  std::vector<int> c(keys.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int>(i);
  int n = 2;
  while (c.size() > 1) {
    std::vector<std::vector<int>> subsets = ddmin_partition(keys, c, n);
    n = static_cast<int>(subsets.size());
    // Reduce to a subset.
    int hit = first_reproducing(subsets);
    if (hit >= 0) {
      c = subsets[static_cast<size_t>(hit)];
      n = 2;
      continue;
    }
    // Reduce to a complement (for n == 2 the complements are the subsets again).
    if (n > 2) {
      std::vector<std::vector<int>> complements;
      for (int i = 0; i < n; ++i) {
        std::vector<int> rest;
        for (int j = 0; j < n; ++j) {
          if (j != i) rest.insert(rest.end(), subsets[j].begin(), subsets[j].end());
        }
        complements.push_back(std::move(rest));
      }
      hit = first_reproducing(complements);
      if (hit >= 0) {
        c = complements[static_cast<size_t>(hit)];
        n = std::max(n - 1, 2);
        continue;
      }
    }
    // Increase granularity.
    if (n >= static_cast<int>(c.size())) break;
    n = std::min(static_cast<int>(c.size()), 2 * n);
  }
  return c;
}

}  // namespace llmrr::replay
