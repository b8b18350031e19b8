"""Models for the ahead-of-time builds: a model's sizes (the fields of its Hugging Face config.json) and the
parallelism (TP / EP degrees) -> the deep_gemm call sites of one rank.

What a DeepSeek-V3-style model calls, per rank (tp: tensor-parallel degree, ep: expert-parallel degree):
- fp8_gemm_nt (recipe (1, 128, 128), BF16 out), N x K: the fused q_a / kv_a projection (q_lora_rank +
  kv_lora_rank + qk_rope_head_dim) x hidden, replicated; q_b (heads x (qk_nope + qk_rope) / tp) x q_lora_rank; kv_b
  (heads x (qk_nope + v) / tp) x kv_lora_rank; o_proj hidden x (heads x v / tp); the dense MLP's gate_up
  (2 x intermediate / tp) x hidden and down hidden x (intermediate / tp) when first_k_dense_replace > 0; the shared
  experts' gate_up and down the same with n_shared_experts x moe_intermediate_size.
- the routed experts, n_routed_experts / ep of them per rank, each expert's intermediate split over tp / ep ranks
  when ep < tp: gate_up (2 x moe_intermediate / (tp / ep)) x hidden and down hidden x (moe_intermediate / (tp / ep)),
  as m_grouped_fp8_gemm_nt_contiguous (prefill) and m_grouped_fp8_gemm_nt_masked (decode).
- with index_n_heads (DeepSeek-V3.2's lightning indexer): fp8_gemm_nt of its wq_b (index heads x index_head_dim) x
  q_lora_rank and wk index_head_dim x hidden, fp8_mqa_logits (clean_logits true and false) and fp8_paged_mqa_logits
  (next_n 1 and 2: with and without one multi-token-prediction draft) up to max_position_embeddings keys.
Left out: the lm_head and the indexer's weights_proj (BF16 layers in the reference model), the weight-gradient
(k-grouped) GEMMs of training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deep_gemm import _C
from deep_gemm.precompile.shapes import (
    GemmShape,
    MqaLogitsShape,
    PagedMqaLogitsShape,
    Shape,
    parse_shape_text,
    shape_from_fields,
)

DEEPSEEK_V3 = {
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
}
MODELS = {
    "deepseek-v3": DEEPSEEK_V3,
    "deepseek-v3.2": {**DEEPSEEK_V3, "index_n_heads": 64, "index_head_dim": 128},
}

# Fields read from a model's config.json (any other field is ignored): required ones, then optional ones with what
# they default to (None: the layer is left out).
REQUIRED_FIELDS = ("hidden_size", "num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                   "kv_lora_rank")
OPTIONAL_FIELDS = {
    "q_lora_rank": None,  # None: q is one projection, heads x (qk_nope + qk_rope) / tp from hidden
    "intermediate_size": None,
    "first_k_dense_replace": 0,
    "moe_intermediate_size": None,  # None: no routed experts
    "n_routed_experts": 0,
    "num_experts_per_tok": 0,
    "n_shared_experts": 0,
    "index_n_heads": None,
    "index_head_dim": None,
    "max_position_embeddings": 65536,
    "tp": 1,
    "ep": 1,
}


def _config_fields(data: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields model_shapes reads, checked (errors name `where` and the field), optional ones defaulted."""
    config: dict[str, Any] = {}
    for name in REQUIRED_FIELDS:
        if name not in data:
            raise ValueError(f"{where}: field {name!r} is missing (a positive integer)")
    for name in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS):
        value = data.get(name, OPTIONAL_FIELDS.get(name))
        optional_zero = name in OPTIONAL_FIELDS and OPTIONAL_FIELDS[name] == 0
        if value is None and name in OPTIONAL_FIELDS and OPTIONAL_FIELDS[name] is None:
            config[name] = None
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (value == 0 and not optional_zero):
            kind = "a non-negative integer" if optional_zero else "a positive integer"
            raise ValueError(f"{where}: field {name!r} must be {kind}, got {value!r}")
        config[name] = value
    return config


def load_model(spec: str) -> tuple[dict[str, Any], list[Shape]]:
    """A model by name ('deepseek-v3', 'deepseek-v3.2') or from a JSON file: (its sizes, the extra shapes it lists).

    The JSON holds a model's config.json fields (REQUIRED_FIELDS, OPTIONAL_FIELDS; others are ignored), optionally
    "tp" and "ep", and optionally "shapes": a list of objects {"api": ..., field: value} (GemmShape,
    MqaLogitsShape, PagedMqaLogitsShape fields) or strings in the --shapes form. Raises ValueError naming the file
    and the field that is missing or malformed.
    """
    if spec in MODELS:
        return _config_fields(MODELS[spec], spec), []
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"--model {spec!r}: neither a known model ({', '.join(MODELS)}) nor a JSON file")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{spec}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{spec}: expected a JSON object of model fields, got {type(data).__name__}")
    config = _config_fields(data, spec)
    shapes: list[Shape] = []
    listed = data.get("shapes", [])
    if not isinstance(listed, list):
        raise ValueError(f"{spec}: field 'shapes' must be a list, got {type(listed).__name__}")
    for i, item in enumerate(listed):
        where = f"{spec}: shapes[{i}]"
        if isinstance(item, str):
            shapes.append(parse_shape_text(item))
        elif isinstance(item, dict) and isinstance(item.get("api"), str):
            fields = {key: value for key, value in item.items() if key != "api"}
            shapes.append(shape_from_fields(item["api"], fields, where))
        else:
            raise ValueError(f"{where}: expected an object with an 'api' string, or a --shapes string, got {item!r}")
    return config, shapes


def _split(name: str, value: int, degree: int, degree_name: str) -> int:
    if value % degree:
        raise ValueError(f"model field {name!r} ({value}) is not divisible by {degree_name} = {degree}")
    return value // degree


def model_shapes(config: dict[str, Any], *, tp: int, ep: int, max_tokens: int, moe_layouts: tuple[str, ...],
                 masked_max_m: int | None = None) -> list[Shape]:
    """The call sites of one rank (see the module docstring), for up to max_tokens tokens per call.

    moe_layouts: "contiguous" and / or "masked". Contiguous grouped GEMMs see up to max_tokens x min(top-k, local
    experts) rows plus each expert's alignment padding; masked ones an expected_m up to max_tokens, with
    masked_max_m rows per group (None: max_tokens rounded up to 128).
    """
    for name, value in (("tp", tp), ("ep", ep), ("max_tokens", max_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for layout in moe_layouts:
        if layout not in ("contiguous", "masked"):
            raise ValueError(f"moe_layouts: expected 'contiguous' or 'masked', got {layout!r}")
    c = config
    hidden, heads = c["hidden_size"], _split("num_attention_heads", c["num_attention_heads"], tp, "tp")
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    dense: list[tuple[int, int]] = []
    if c["q_lora_rank"] is not None:
        dense += [(c["q_lora_rank"] + c["kv_lora_rank"] + rope, hidden), (heads * (nope + rope), c["q_lora_rank"])]
    else:
        dense += [(c["kv_lora_rank"] + rope, hidden), (heads * (nope + rope), hidden)]
    dense += [(heads * (nope + v), c["kv_lora_rank"]), (hidden, heads * v)]
    if c["first_k_dense_replace"] > 0:
        if c["intermediate_size"] is None:
            raise ValueError("model field 'intermediate_size' is missing (first_k_dense_replace > 0: dense MLP layers)")
        inter = _split("intermediate_size", c["intermediate_size"], tp, "tp")
        dense += [(2 * inter, hidden), (hidden, inter)]
    moe_inter = c["moe_intermediate_size"]
    if c["n_shared_experts"] > 0:
        if moe_inter is None:
            raise ValueError("model field 'moe_intermediate_size' is missing (n_shared_experts > 0)")
        shared = _split("n_shared_experts x moe_intermediate_size", c["n_shared_experts"] * moe_inter, tp, "tp")
        dense += [(2 * shared, hidden), (hidden, shared)]
    if c["index_n_heads"] is not None:
        if c["index_head_dim"] is None or c["q_lora_rank"] is None:
            raise ValueError("model fields 'index_head_dim' and 'q_lora_rank' are needed with 'index_n_heads'")
        dense += [(c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"]), (c["index_head_dim"], hidden)]

    shapes: list[Shape] = []
    for n, k in dict.fromkeys(dense):  # (distinct, in order)
        shapes.append(GemmShape("fp8_gemm_nt", n, k))

    if moe_inter is not None and c["n_routed_experts"] > 0:
        groups = _split("n_routed_experts", c["n_routed_experts"], ep, "ep")
        moe_tp = tp // ep if ep < tp else 1
        if ep < tp and tp % ep:
            raise ValueError(f"tp = {tp} must be a multiple of ep = {ep} (each expert split over tp / ep ranks)")
        inter = _split("moe_intermediate_size", moe_inter, moe_tp, "tp / ep")
        topk = c["num_experts_per_tok"]
        if topk <= 0:
            raise ValueError("model field 'num_experts_per_tok' must be positive with routed experts")
        alignment = _C.get_mk_alignment_for_contiguous_layout()
        rows = max_tokens * min(topk, groups) + groups * (alignment - 1)
        max_m = masked_max_m if masked_max_m is not None else (max_tokens + 127) // 128 * 128
        for n, k in ((2 * inter, hidden), (hidden, inter)):
            if "contiguous" in moe_layouts:
                shapes.append(GemmShape("m_grouped_fp8_gemm_nt_contiguous", n, k, num_groups=groups, max_rows=rows))
            if "masked" in moe_layouts:
                shapes.append(GemmShape("m_grouped_fp8_gemm_nt_masked", n, k, num_groups=groups, max_m=max_m,
                                        max_rows=min(max_tokens, max_m)))

    if c["index_n_heads"] is not None:
        index_heads, index_dim = c["index_n_heads"], c["index_head_dim"]
        for clean in (True, False):
            shapes.append(MqaLogitsShape(index_heads, index_dim, clean_logits=clean))
        for next_n in (1, 2):
            shapes.append(PagedMqaLogitsShape(next_n, index_heads, index_dim,
                                              max_context_len=c["max_position_embeddings"]))
    return shapes
