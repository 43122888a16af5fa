"""The GB10 serving numbers in the seeds, against the bandwidth ceiling.

Decoding one token reads every active weight once (for an MoE: the k routed experts of each layer, plus
everything shared), the KV cache of the full-attention layers and the fixed-size state of the linear-attention
layers. On a GB10 (273 GB/s, spec, not measured) that bounds tokens/s at batch 1:

    ceiling = 273e9 / bytes per decode token          (one token per weight read)

A claim above that line cannot come from plain decoding. Speculative decoding (MTP: the model's own
multi-token-prediction head drafts n tokens, one forward pass verifies them) produces on average
``tau = (1 - a**(n+1)) / (1 - a)`` tokens per weight read when each draft is accepted with probability ``a``;
but verifying n+1 tokens of an MoE reads the experts of n+1 tokens, so the step itself costs more bytes. For
each claim this module gives the tokens per weight read it needs and the acceptance rate ``a`` that would
deliver them with 1, 2 or 3 drafted tokens.

Example (the seeds' Qwen3.5-35B NVFP4 figure)::

    >>> rows = {r["id"]: r for r in claims_table()}
    >>> r = rows["seed002-qwen3.5-35b-131"]
    >>> round(r["ceiling_tok_s"]), r["verdict"]
    (110, 'exceeds it: needs >= 1.19 tokens per weight read')

Conventions, chosen to make the ceiling generous (so "exceeds" is robust): every Linear of the decoder blocks
(attention, linear attention, experts, shared experts) in the claimed format, the embedding row gathered, the
lm_head, routers and norms in BF16; the verdict uses an empty KV cache (the shortest context), and the table
also gives the ceiling at ``context`` tokens. Not counted: the MTP head's own weights (it is read once per
drafted token -- counting it would only raise the requirement), writes of new K/V and state, and any
kernel or launch overhead (real kernels reach a fraction of the bandwidth). Expert reads assume uniform
routing.

Configs: only published ``config.json`` files, committed under ``fp8lab/model_configs/`` with the address each
was read from (``CONFIGS``). Where the seed names a model whose config the lab could not find, the closest
public relative is used and the row says so; where the seed names no model, the row is "untestable".
"""
from __future__ import annotations

from pathlib import Path

from fp8lab import bandwidth as bw
from fp8lab.gpus import get_gpu

CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"

#: committed configs: file -> where it was read (a verbatim copy of the model's Hugging Face config.json)
CONFIGS = {
    "qwen3.5-35b-a3b.json": {
        "model": "Qwen/Qwen3.5-35B-A3B",
        "source": "https://github.com/alibaba/InferSim/blob/7ed3db765e3ef224cb4910c624e1a848eb649625/"
                  "hf_configs/qwen3.5-35B-A3B_config.json",
        "upstream": "https://huggingface.co/Qwen/Qwen3.5-35B-A3B/blob/main/config.json",
        "published_total_params": 35e9,
    },
    "qwen3-next-80b-a3b-instruct.json": {
        "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "source": "https://github.com/aliyun/SimAI/blob/83294b3ed91c803256762fc0bbe17b80c93ee6c0/"
                  "vidur-alibabacloud/data/hf_configs/qwen3-next-80B-A3B_config.json",
        "upstream": "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
        "published_total_params": 80e9,
    },
}

#: the claims, quoted from the seeds (what they say, not what the lab measured)
CLAIMS = [
    {"id": "seed000-qwen3.6-35b-a3b-90", "seed": "000", "tokens_per_s": 90.0,
     "quote": "Qwen3.6-35B-A3B serves at ~90 tok/s on GB10 with full FP8 coherence",
     "model_named": "Qwen3.6-35B-A3B (FP8-native: weights, KV, MTP head)",
     "config": "qwen3.5-35b-a3b.json",
     "relation": "closest public relative: Qwen3.5-35B-A3B (the lab found no copy of Qwen3.6-35B-A3B's config.json "
                 "it could read; third-party inventories of the Qwen3.6 checkpoint report the same text_config "
                 "sizes, which the lab has not checked itself)",
     "weights": "fp8_block128", "kv_dtype": "fp8"},
    {"id": "seed002-qwen3.5-35b-131", "seed": "002", "tokens_per_s": 131.0,
     "quote": "Atlas's 131 tok/s on Qwen3.5-35B ... through software E2M1, Marlin-style dequant-to-BF16, and MTP "
              "speculative decoding",
     "model_named": "Qwen3.5-35B (NVFP4)", "config": "qwen3.5-35b-a3b.json",
     "relation": "the named model, read as Qwen3.5-35B-A3B (the only public 35B Qwen3.5)",
     "weights": "nvfp4", "kv_dtype": "nvfp4"},
    {"id": "seed002-qwen3-next-80b-104", "seed": "002", "tokens_per_s": 104.0,
     "quote": "104 tok/s on Qwen3-Next-80B ... through software E2M1, Marlin-style dequant-to-BF16, and MTP "
              "speculative decoding",
     "model_named": "Qwen3-Next-80B (NVFP4)", "config": "qwen3-next-80b-a3b-instruct.json",
     "relation": "the named model (Qwen3-Next-80B-A3B-Instruct config)", "weights": "nvfp4", "kv_dtype": "nvfp4"},
    {"id": "seed002-marlin-mtp-59.9", "seed": "002", "tokens_per_s": 59.9,
     "quote": "59.9 tok/s (Marlin + MTP) on the same hardware", "model_named": None, "config": None,
     "relation": "the seed says 'on the same model' without naming it", "weights": "nvfp4", "kv_dtype": "nvfp4"},
    {"id": "seed002-cutlass-moe-36.4", "seed": "002", "tokens_per_s": 36.4,
     "quote": "36.4 tok/s (CUTLASS MoE)", "model_named": None, "config": None,
     "relation": "the seed says 'on the same model' without naming it", "weights": "nvfp4", "kv_dtype": "nvfp4"},
    {"id": "seed002-trtllm-ceiling-29.6", "seed": "002", "tokens_per_s": 29.6,
     "quote": "established 29.6 tok/s as the TRT-LLM ceiling on the same model", "model_named": None,
     "config": None, "relation": "the seed says 'on the same model' without naming it", "weights": "nvfp4",
     "kv_dtype": "nvfp4"},
]


def config_path(name: str) -> Path:
    return CONFIG_DIR / name


def verify_step_bytes(model, fmt: str, kv_dtype: str, n_tokens: int, context: int) -> float:
    """Bytes one forward pass reads to decode (n_tokens = 1) or verify ``n_tokens`` tokens of ONE sequence:
    the weights those tokens touch (an MoE's routed experts grow with the tokens), the KV cache and the
    linear-attention state once."""
    s = bw.model_shape(model) if not isinstance(model, bw.ModelShape) else model
    weights = bw.bytes_per_decode_step(s, fmt, kv_dtype, n_tokens, 0) - n_tokens * s.state_bytes_per_seq
    return weights + s.state_bytes_per_seq + bw.kv_cache_bytes(s, kv_dtype, 1, context)


def tokens_per_step(acceptance: float, n_draft: int) -> float:
    """Expected tokens one verify step yields: ``(1 - a**(n+1)) / (1 - a)`` (i.i.d. acceptance ``a``).

    >>> tokens_per_step(0.0, 3), tokens_per_step(0.5, 1), tokens_per_step(1.0, 2)
    (1.0, 1.5, 3.0)
    """
    if acceptance >= 1.0:
        return float(n_draft + 1)
    return (1.0 - acceptance ** (n_draft + 1)) / (1.0 - acceptance)


def acceptance_needed(tau: float, n_draft: int) -> float | None:
    """The acceptance rate at which ``n_draft`` drafted tokens give ``tau`` tokens per step; None if even
    accepting every draft (tau = n_draft + 1) is not enough. 0.0 when one token per step already suffices."""
    if tau <= 1.0:
        return 0.0
    if tau > n_draft + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # tokens_per_step is increasing in the acceptance rate
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tokens_per_step(mid, n_draft) < tau else (lo, mid)
    return hi


def evaluate_claim(claim: dict, gpu="GB10", context: int = 8192, drafts=(1, 2, 3), model=None) -> dict:
    """One row: the claim, its model's bytes per token, the ceiling and the verdict.

    ``model`` overrides the claim's committed config (a dict, path or ModelShape; used by the tests)."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    row = {k: claim.get(k) for k in ("id", "seed", "quote", "tokens_per_s", "model_named", "relation", "weights",
                                     "kv_dtype")}
    row.update(gpu=g.name, gpu_label=g.label, bandwidth_GBps=g.bandwidth_TBps * 1e3, context=context)
    cfg = model if model is not None else (config_path(claim["config"]) if claim.get("config") else None)
    if cfg is None:
        row.update(config=None, config_source=None, verdict="untestable: no public config",
                   note="the seed does not say which model; no bytes per token can be computed")
        return row
    meta = CONFIGS.get(claim.get("config") or "", {})
    s = bw.model_shape(cfg)
    bw_Bps = g.bandwidth_TBps * 1e12
    b1 = verify_step_bytes(s, claim["weights"], claim["kv_dtype"], 1, 0)
    b1_ctx = verify_step_bytes(s, claim["weights"], claim["kv_dtype"], 1, context)
    ceiling, ceiling_ctx = bw_Bps / b1, bw_Bps / b1_ctx
    claimed = float(claim["tokens_per_s"])
    params = bw.param_counts(s)
    row.update(config=claim.get("config"), config_source=meta.get("source"), config_upstream=meta.get("upstream"),
               total_params=params["total"], active_params=params["active_per_token"],
               bytes_per_token=b1, bytes_per_token_ctx=b1_ctx, ceiling_tok_s=ceiling, ceiling_tok_s_ctx=ceiling_ctx,
               fraction_of_ceiling=claimed / ceiling)
    need = claimed / ceiling
    row["tokens_per_weight_read_needed"] = max(need, 1.0)
    row["verdict"] = ("consistent with the ceiling" if need <= 1.0
                      else f"exceeds it: needs >= {need:.2f} tokens per weight read")
    # with MTP on, a step verifies n+1 tokens and an MoE reads the experts of all of them: the step costs more
    # bytes than a plain decode step, so even a claim under the ceiling needs some acceptance then
    acc = {}
    for n in drafts:
        tau = claimed * verify_step_bytes(s, claim["weights"], claim["kv_dtype"], n + 1, 0) / bw_Bps
        acc[n] = {"tokens_per_step": tau, "acceptance": acceptance_needed(tau, n)}
    row["acceptance_needed"] = acc
    if need <= 1.0 and need > 0.8:
        row["note"] = (f"at {100 * need:.0f} % of the bound, plain decoding would need nearly the full "
                       f"{g.bandwidth_TBps * 1e3:.0f} GB/s; the claim is possible but not evidence of a faster path")
    return row


def claims_table(gpu="GB10", context: int = 8192, claims=CLAIMS) -> list:
    """Every claim of :data:`CLAIMS` evaluated (a list of dicts, JSON-ready)."""
    return [evaluate_claim(c, gpu, context) for c in claims]


def format_claims(rows) -> str:
    """A plain-text table of :func:`claims_table` rows, then one line per row on configs and drafts."""
    lines = [f"{'claim':<30}{'tok/s':>7}{'weights':>14}{'GB/token':>10}{'ceiling':>9}{'@ctx':>7}  verdict"]
    for r in rows:
        if r.get("ceiling_tok_s") is None:
            lines.append(f"{r['id']:<30}{r['tokens_per_s']:>7.1f}{r['weights']:>14}{'-':>10}{'-':>9}{'-':>7}  "
                         f"{r['verdict']} ({r['relation']})")
            continue
        lines.append(f"{r['id']:<30}{r['tokens_per_s']:>7.1f}{r['weights']:>14}{r['bytes_per_token'] / 1e9:>10.2f}"
                     f"{r['ceiling_tok_s']:>9.1f}{r['ceiling_tok_s_ctx']:>7.1f}  {r['verdict']} "
                     f"({100 * r['fraction_of_ceiling']:.0f} % of the ceiling)")
    lines.append("")
    for r in rows:
        if r.get("ceiling_tok_s") is None:
            continue
        lines.append(f"{r['id']}: {r['relation']}; config {r['config']} from {r['config_source']}")
        if r.get("note"):
            lines.append(f"    note: {r['note']}")
        for n, a in (r.get("acceptance_needed") or {}).items():
            acc = "impossible (every draft accepted is not enough)" if a["acceptance"] is None \
                else f"acceptance >= {a['acceptance']:.2f}"
            lines.append(f"    MTP with {n} drafted token(s): needs {a['tokens_per_step']:.2f} tokens per verify step "
                         f"-> {acc}")
    r0 = rows[0] if rows else {}
    lines.append(f"ceiling = {r0.get('gpu', 'GB10')} bandwidth ({r0.get('bandwidth_GBps', 273):.0f} GB/s, "
                 f"{r0.get('gpu_label', 'spec, not measured')}) / bytes per decode token at batch 1; verdict at an "
                 f"empty KV cache, '@ctx' at {r0.get('context', 8192)} tokens; MTP head reads not counted")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m fp8lab.serving_claims``: the table of :func:`claims_table`; exit 2 with one line on bad input."""
    from fp8lab.cli import OneLineParser, emit, parse

    ap = OneLineParser(prog="python -m fp8lab.serving_claims",
                       description="The GB10 serving numbers in the seeds against the bandwidth ceiling "
                                   "(tokens per weight read and MTP acceptance each claim needs). Takes no arguments.")
    args, status = parse(ap, argv)
    if args is None:
        return status
    emit(format_claims(claims_table()))
    return 0


if __name__ == "__main__":  # python -m fp8lab.serving_claims
    from fp8lab.cli import run
    run(main)
