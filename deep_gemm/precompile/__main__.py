"""`python -m deep_gemm.precompile`: the command line of the ahead-of-time builds (deep_gemm.precompile's module
docstring says what it builds and what must match the serving machines)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deep_gemm import _C
from deep_gemm.precompile import DEFAULT_NUM_SMS, model_shapes_for, precompile
from deep_gemm.precompile import __doc__ as PRECOMPILE_DOC
from deep_gemm.precompile.models import MODELS
from deep_gemm.precompile.shapes import Shape, parse_shape_text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deep_gemm.precompile", description=PRECOMPILE_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Shapes: API:field=value,... with the fields of deep_gemm.precompile.GemmShape (n, k, num_groups, "
               "max_m, out_dtype, has_c, compiled_dims, use_psum_layout, ensure_zero_padding, m_values as 1/64/128, "
               "max_rows), or fp8_mqa_logits:num_heads=64,head_dim=128 / fp8_paged_mqa_logits:next_n=2,num_heads=64,"
               "head_dim=128,max_context_len=65536 (MqaLogitsShape / PagedMqaLogitsShape fields).")
    parser.add_argument("--model", help=f"{' | '.join(MODELS)} | a JSON file of the model's config.json fields")
    parser.add_argument("--shapes", nargs="+", default=[], metavar="API:FIELD=VALUE,...", help="call sites to build")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default: the JSON's, else 1)")
    parser.add_argument("--ep", type=int, default=None, help="expert-parallel degree (default: the JSON's, else 1)")
    parser.add_argument("--max-tokens", type=int, default=16384, help="the largest M of a call (default 16384)")
    parser.add_argument("--moe-layouts", default="contiguous,masked",
                        help="grouped GEMM layouts of the model's experts (default contiguous,masked)")
    parser.add_argument("--masked-max-m", type=int, default=None,
                        help="rows per group of the masked layout (default: --max-tokens rounded up to 128)")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="parallel compiles (default: the CPU cores)")
    parser.add_argument("--arch", default="sm_90a", help="compile target (default sm_90a)")
    parser.add_argument("--num-sms", type=int, default=DEFAULT_NUM_SMS,
                        help="SMs the GEMMs get on the serving GPU (default 132: H100 / H200 SXM)")
    parser.add_argument("--cluster-ctas", default=None,
                        help="the 8 comma-separated CTA counts DG_PRINT_CONFIGS=1 prints on the serving GPU, or "
                             "'estimate' (default: the H200's with 132 SMs)")
    parser.add_argument("--cache-dir", default=None,
                        help="the cache to fill (default: $DG_JIT_CACHE_DIR or ~/.deep_gemm)")
    parser.add_argument("--nvrtc", action="store_true", default=None, help="compile with NVRTC (default: as "
                        "DG_JIT_USE_NVRTC says, as a launch does)")
    parser.add_argument("--ignore-compile-dims", action="store_true",
                        help="plan as under deep_gemm.set_ignore_compile_dims(True)")
    parser.add_argument("--mk-alignment", type=int, default=None,
                        help="plan as under deep_gemm.set_mk_alignment_for_contiguous_layout(N)")
    parser.add_argument("--dry-run", action="store_true", help="list the kernels and whether they are cached; compile "
                        "nothing")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar, the summary only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status: 0, 1 when a compile failed, 2 on bad arguments."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.model is None and not args.shapes:
            raise ValueError("give --model or --shapes (or both)")
        if args.ignore_compile_dims:
            _C.set_ignore_compile_dims(True)
        if args.mk_alignment is not None:
            _C.set_mk_alignment_for_contiguous_layout(args.mk_alignment)
        cluster_ctas = args.cluster_ctas
        if cluster_ctas not in (None, "estimate"):
            try:
                cluster_ctas = [int(v) for v in cluster_ctas.split(",")]
            except ValueError:
                raise ValueError(f"--cluster-ctas must be 8 comma-separated integers or 'estimate', got "
                                 f"{args.cluster_ctas!r}") from None
        shapes: list[Shape] = []
        if args.model is not None:
            layouts = tuple(filter(None, args.moe_layouts.split(",")))
            shapes += model_shapes_for(args.model, tp=args.tp, ep=args.ep, max_tokens=args.max_tokens,
                                       moe_layouts=layouts, masked_max_m=args.masked_max_m)
        shapes += [parse_shape_text(text) for text in args.shapes]
        result = precompile(shapes, args.jobs, max_tokens=args.max_tokens, arch=args.arch, num_sms=args.num_sms,
                            cluster_ctas=cluster_ctas, cache_dir=args.cache_dir, use_nvrtc=args.nvrtc,
                            progress=not args.no_progress, dry_run=args.dry_run)
    except ValueError as e:
        print(f"deep_gemm.precompile: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for build in result.builds:
            print(f"{build.status:8} {build.key}  <- {'; '.join(build.needed_by)}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
