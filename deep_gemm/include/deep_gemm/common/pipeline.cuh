// PipelineState: where a role stands in a ring of kNumStages shared-memory stages, and the parity of
// the mbarrier phase it waits for there. One instance per role; both roles advance in lockstep.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <uint32_t kNumStages>
struct PipelineState {
    uint32_t stage = 0;
    uint32_t phase = 0;

    __device__ __forceinline__ void advance() {
        if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

}  // namespace deep_gemm
