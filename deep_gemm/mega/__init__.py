"""Mega MoE (``deep_gemm.mega``, also at the top level): one MoE layer (dispatch, linear 1, SwiGLU, linear 2,
combine) over the ranks of a group that share their buffers through PyTorch symmetric memory.

The reference's names (``SymmBuffer``, ``get_symm_buffer_for_mega_moe``, ``transform_weights_for_mega_moe``,
``fp8_fp4_mega_moe``, ``bf16_mega_moe``) and the SGLang fork's SM90 FP8 x FP8 form
(``get_symm_buffer_for_sm90_mega_moe``, ``transform_weights_for_mega_moe_sm90``, ``fp8_mega_moe``,
``mega_moe_pre_dispatch_sm90``). Stage 1: separate kernels around deep_gemm's m-grouped GEMMs (docs/design.md,
"Mega MoE"); ``fp8_fp4_mega_moe`` runs its FP4 expert weights through the FP8 x FP4 grouped GEMM.
"""

from deep_gemm.mega.buffer import SymmBuffer, get_symm_buffer_for_mega_moe, get_symm_buffer_for_sm90_mega_moe

# (the public functions: torch.library ops under torch.compile, the eager implementations in moe.py otherwise)
from deep_gemm.mega.ops import bf16_mega_moe, fp8_fp4_mega_moe, fp8_mega_moe, mega_moe_pre_dispatch_sm90
from deep_gemm.mega.weights import transform_weights_for_mega_moe, transform_weights_for_mega_moe_sm90

__all__ = [
    "SymmBuffer",
    "bf16_mega_moe",
    "fp8_fp4_mega_moe",
    "fp8_mega_moe",
    "get_symm_buffer_for_mega_moe",
    "get_symm_buffer_for_sm90_mega_moe",
    "mega_moe_pre_dispatch_sm90",
    "transform_weights_for_mega_moe",
    "transform_weights_for_mega_moe_sm90",
]
