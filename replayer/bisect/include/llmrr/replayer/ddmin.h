// Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing
// Input", 2002): the ddmin algorithm over an ordered list of elements, with the partition
// cuts snapped to group boundaries so that the first rounds test whole groups (bisect's
// steps, then the kinds of factor within a step).
//
//   std::vector<int> minimal = ddmin(keys, [&](const std::vector<std::vector<int>>& sets) {
//     for (size_t i = 0; i < sets.size(); ++i) if (reproduces(sets[i])) return int(i);
//     return -1;
//   });
//
// The caller guarantees that the whole list reproduces (and the empty set does not); the
// result is 1-minimal: it reproduces, and removing any single element of it does not (as
// far as the tests asked say; ddmin asks exactly those). The test callback receives the
// candidates of one round in ddmin's order and returns the index of the first that
// reproduces, or -1: it may test them one after the other and stop at the first success, or
// test several at once (bisect's --jobs) — the answer is the same either way.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace llmrr::replay {

// Group key of an element: elements with the same `coarse` value form a group (a step),
// and within it those with the same `fine` value (a kind of factor). Keys must be
// non-decreasing along the list.
struct DdminKey {
  int64_t coarse = 0;
  int64_t fine = 0;
};

using DdminTest = std::function<int(const std::vector<std::vector<int>>& candidates)>;

// Elements are 0..keys.size()-1. Returns the 1-minimal subset, sorted.
std::vector<int> ddmin(const std::vector<DdminKey>& keys, const DdminTest& first_reproducing);

// The cut points ddmin uses to split `set` (sorted element indices) into `parts` pieces:
// part boundaries at the ideal even split, moved by up to |set|/16 elements to the coarsest
// group boundary near it. Returned as `parts` non-empty subsets in order. For tests.
std::vector<std::vector<int>> ddmin_partition(const std::vector<DdminKey>& keys,
                                              const std::vector<int>& set, int parts);

}  // namespace llmrr::replay
