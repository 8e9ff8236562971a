#include "llmrr/kernels/plan.h"

#include "llmrr/kernels/cublaslt_plan.h"

#include <string>
#include <vector>

namespace llmrr {
namespace {

std::string join(const uint16_t* v, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

bool is_permutation_of_iota(const uint16_t* v, size_t n) {
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (v[i] >= n || seen[v[i]]) return false;
    seen[v[i]] = true;
  }
  return true;
}

}  // namespace

std::string plan_to_string(const Plan& p) {
  if (p.cublaslt && p.op == OpKind::kGemm) return cublaslt::describe(*p.cublaslt);
  std::string s;
  switch (p.op) {
    case OpKind::kGemm:
      s = "split-K " + std::to_string(p.splits);
      if (p.k_tile) s += ", k-tile " + std::to_string(p.k_tile);
      break;
    case OpKind::kRmsNorm:
      s = "norm chunks " + std::to_string(p.splits);
      break;
    case OpKind::kAttention:
      if (p.mode == SplitMode::kCount) {
        s = "split-KV " + std::to_string(p.splits) + (p.splits == 1 ? " part" : " parts");
      } else {
        s = "split-KV " + std::to_string(p.split_size) + " positions";
      }
      if (p.separate_new_kv) s += ", new KV separate";
      break;
    case OpKind::kCombine:
      s = "combine";
      break;
  }
  if (p.order == CombineOrder::kArrival) {
    if (p.op == OpKind::kCombine || p.arrival.size() > 16) {
      s += " arrival order (" + std::to_string(p.arrival.size()) + " entries)";
    } else {
      s += ", arrival order " + join(p.arrival.data(), p.arrival.size());
    }
  } else if (p.op == OpKind::kCombine) {
    s += " rank order";
  }
  return s;
}

std::string plan_check(const Plan& p, int64_t rows_for_combine, int k_for_combine) {
  if (p.cublaslt) {
    CublasLtAlgo unused;
    return cublaslt::from_plan(p, &unused);
  }
  switch (p.op) {
    case OpKind::kGemm:
    case OpKind::kRmsNorm:
      if (p.splits < 1) return "splits must be >= 1";
      if (p.op == OpKind::kGemm && p.k_tile % 16 != 0) return "k_tile must be a multiple of 16";
      break;
    case OpKind::kAttention:
      if (p.mode == SplitMode::kCount && p.splits < 1) return "splits must be >= 1";
      if (p.mode == SplitMode::kSize && p.split_size < 1) return "split_size must be >= 1";
      if (p.order == CombineOrder::kArrival) return "attention has no arrival order";
      break;
    case OpKind::kCombine:
      break;
    default:
      return "unknown op kind " + std::to_string(static_cast<int>(p.op));
  }
  if (p.order == CombineOrder::kArrival) {
    if (p.op == OpKind::kRmsNorm) return "rmsnorm has no arrival order";
    if (p.op == OpKind::kGemm) {
      if (p.arrival.size() != p.splits) return "arrival must have one entry per split";
      if (!is_permutation_of_iota(p.arrival.data(), p.arrival.size())) {
        return "arrival is not a permutation of 0..splits-1";
      }
    } else if (p.op == OpKind::kCombine) {
      if (k_for_combine <= 0) return "";
      size_t want = static_cast<size_t>(rows_for_combine) * static_cast<size_t>(k_for_combine);
      if (p.arrival.size() != want) return "arrival must have rows x k entries";
      for (size_t r = 0; r < want; r += k_for_combine) {
        if (!is_permutation_of_iota(p.arrival.data() + r, k_for_combine)) {
          return "arrival row " + std::to_string(r / k_for_combine) +
                 " is not a permutation of 0..k-1";
        }
      }
    }
  } else if (!p.arrival.empty()) {
    return "arrival given without arrival order";
  }
  return "";
}

}  // namespace llmrr
