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

    // kStep stages at once: a role that owns every kStep-th stage (stage = its index mod kStep) and skips the others
    template <uint32_t kStep>
    __device__ __forceinline__ void advance_by() {
        static_assert(kStep >= 1 && kNumStages % kStep == 0, "the step must divide the stage count");
        stage += kStep;
        if (stage >= kNumStages) {
            stage -= kNumStages;
            phase ^= 1;
        }
    }
};

}  // namespace deep_gemm
