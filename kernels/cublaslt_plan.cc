#include "llmrr/kernels/cublaslt_plan.h"

#include <string>

namespace llmrr::cublaslt {
namespace {

std::string u(uint64_t v) {
  return std::to_string(v);
}
std::string i(int64_t v) {
  return std::to_string(v);
}

bool known_data_type(int32_t t) {
  return t == kR32F || t == kR16F || t == kR16BF;
}

std::string compute_name(int32_t c) {
  switch (c) {
    case 64:
      return "16F";
    case 68:
      return "32F";
    case 69:
      return "32F pedantic";
    case 74:
      return "32F fast 16F";
    case 75:
      return "32F fast 16BF";
    case 77:
      return "32F fast TF32";
    default:
      return "type " + i(c);
  }
}

}  // namespace

CublasLtAlgo matmul_types(kernels::WeightType weight_type) {
  CublasLtAlgo a;
  a.scale_type = kR32F;
  a.c_type = kR32F;
  if (weight_type == kernels::WeightType::kBF16) {
    a.compute_type = kCompute32F;
    a.a_type = kR16BF;
    a.b_type = kR16BF;
  } else {
    a.compute_type = kCompute32FFastTF32;
    a.a_type = kR32F;
    a.b_type = kR32F;
  }
  return a;
}

std::string data_type_name(int32_t t) {
  switch (t) {
    case kR32F:
      return "f32";
    case kR16F:
      return "f16";
    case kR16BF:
      return "bf16";
    default:
      return "type " + i(t);
  }
}

std::string reduction_name(uint32_t s) {
  switch (s) {
    case kReductionNone:
      return "none";
    case kReductionInplace:
      return "in place";
    case kReductionComputeType:
      return "compute type";
    case kReductionOutputType:
      return "output type";
    default:
      return "scheme " + u(s);
  }
}

std::string check(const CublasLtAlgo& a) {
  if (a.algo_id < 0) return "algo id: expected >= 0, found " + i(a.algo_id);
  if (a.splitk < 1 || a.splitk > kMaxSplitK)
    return "split-K: expected 1.." + i(kMaxSplitK) + ", found " + i(a.splitk);
  if (a.reduction != kReductionNone && a.reduction != kReductionInplace &&
      a.reduction != kReductionComputeType && a.reduction != kReductionOutputType)
    return "reduction scheme: expected 0 (none), 1 (in place), 2 (compute type) or 4 (output "
           "type), found " +
           u(a.reduction);
  if (a.splitk == 1 && a.reduction != kReductionNone)
    return "reduction scheme: expected none with split-K 1, found " + reduction_name(a.reduction);
  if (a.swizzle > 1) return "CTA swizzling: expected 0 or 1, found " + u(a.swizzle);
  if (a.workspace > kMaxWorkspace)
    return "workspace: expected at most " + u(kMaxWorkspace) + " bytes, found " + u(a.workspace);
  if (a.compute_type != 64 && (a.compute_type < 68 || a.compute_type > 77))
    return "compute type: expected a cublasComputeType_t (64..77), found " + i(a.compute_type);
  if (a.scale_type != kR32F)
    return "scale type: expected f32 (" + i(kR32F) + "), found " + data_type_name(a.scale_type);
  if (!known_data_type(a.a_type)) return "A type: expected f32, f16 or bf16, found " + i(a.a_type);
  if (!known_data_type(a.b_type)) return "B type: expected f32, f16 or bf16, found " + i(a.b_type);
  if (!known_data_type(a.c_type)) return "C type: expected f32, f16 or bf16, found " + i(a.c_type);
  return "";
}

Plan to_plan(const CublasLtAlgo& a) {
  Plan p;
  p.op = OpKind::kGemm;
  p.splits = a.splitk >= 1 ? static_cast<uint32_t>(a.splitk) : 1u;
  p.cublaslt = a;
  return p;
}

std::string from_plan(const Plan& p, CublasLtAlgo* out) {
  if (!p.cublaslt) return "the plan (" + plan_to_string(p) + ") is not a cuBLASLt plan";
  if (p.op != OpKind::kGemm) return "a cuBLASLt algorithm on a non-GEMM plan";
  if (p.order != CombineOrder::kFixed || !p.arrival.empty())
    return "a cuBLASLt plan has no arrival order";
  if (p.k_tile != 0) return "a cuBLASLt plan has no k-tile (found " + u(p.k_tile) + ")";
  const CublasLtAlgo& a = *p.cublaslt;
  if (std::string why = check(a); !why.empty()) return "cuBLASLt algorithm: " + why;
  if (p.splits != static_cast<uint32_t>(a.splitk))
    return "splits " + u(p.splits) + " differ from the algorithm's split-K " + i(a.splitk);
  *out = a;
  return "";
}

std::string describe(const CublasLtAlgo& a) {
  return "cuBLASLt algo " + i(a.algo_id) + ", tile " + u(a.tile) + ", stages " + u(a.stages) +
         ", split-K " + i(a.splitk) + ", reduction " + reduction_name(a.reduction) + ", swizzle " +
         u(a.swizzle) + ", custom " + u(a.custom) + ", inner shape " + u(a.inner_shape) +
         ", cluster shape " + u(a.cluster_shape) + ", workspace " + u(a.workspace) + " B, " +
         data_type_name(a.a_type) + " x " + data_type_name(a.b_type) + " -> " +
         data_type_name(a.c_type) + " (compute " + compute_name(a.compute_type) + ")";
}

}  // namespace llmrr::cublaslt
