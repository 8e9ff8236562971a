// Attention over a paged KV cache following a kAttention plan (plan.h). Threads split
// (row, head) pairs; each pair is computed entirely by one thread in the plan's order.
#include <span>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"

namespace llmrr::kernels {

void attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan,
               ThreadPool& pool) {
  pool.parallel_for(static_cast<int64_t>(rows.size()),
                    [&](int64_t i) { ref::attention(rows.subspan(i, 1), shape, plan); });
}

}  // namespace llmrr::kernels
