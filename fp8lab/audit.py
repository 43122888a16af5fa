"""What does an "FP8" checkpoint really hold? Read the safetensors headers and say.

A safetensors file is ``u64 little-endian header length | JSON header | payload``; the header lists
every tensor's dtype, shape and byte range. Reading it costs kilobytes, never the payload, and is
enough to tell which tensors were converted, with which scale layout, and whether K/V cache scales
ship. Seed 004's three lessons, all visible in headers:

* a DeepSeek "FP8" cast stores E4M3 experts + F32 ``weight_scale_inv`` per 128x128 block;
* MiniMax's MXFP8 is E4M3 too, but with a U8 (E8M0) scale per 32 values ([rows, cols/32]) -- a
  different format, and on Hopper a different (weight-only W8A16) kernel;
* gpt-oss "FP8" kept its fused 3-D experts (``mlp.experts.gate_up_proj`` [E, K, 2N]) in BF16, because
  the recipe targeted Linear layers; only attention became FP8.

Example (the gpt-oss-style fixture from fp8lab.audit_fixtures)::

    >>> r = audit(make_fixture("gptoss_fp8_bf16_experts", tmp))   # fp8lab.audit_fixtures
    >>> r["verdict"]
    'labelled FP8 (compressed-tensors, float-quantized 8-bit, strategy channel); 95 % of parameter bytes
     are BF16: the experts were not converted (fused 3-D expert tensors, which a recipe that targets
     Linear layers passes over); FP8 covers only attention (5 % of parameter bytes).'

Bad files raise :class:`AuditError` (a ValueError naming the file and the problem) in bounded memory:
the header is read only after its length is checked against a 100 MB cap and the file size.
CLI: ``python -m fp8lab.audit PATH [--json]`` (exit 2 with ``error: ...`` on bad input).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own cap
INDEX_NAME = "model.safetensors.index.json"

# Storage dtypes the safetensors format defines, in bits per element.
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
              "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
              "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}

ROLES = ("expert", "attention", "mlp", "embedding", "norm", "scale", "other")


class AuditError(ValueError):
    """A checkpoint that cannot be audited; the message names the file and the problem."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


# --------------------------------------------------------------------------------------------------
# Header parsing
# --------------------------------------------------------------------------------------------------

def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _n(x: int) -> str:
    """A byte count for a message; absurd ones (from corrupt headers) as a power of two, because
    Python refuses to print integers of more than 4300 digits."""
    return f"{x:,}" if x < 10 ** 30 else f"~2**{x.bit_length() - 1}"


def _check_length(n: int, file_size: int, source: str) -> None:
    if n > MAX_HEADER_BYTES:
        raise AuditError(f"{source}: header length {n:,} bytes exceeds the {MAX_HEADER_BYTES:,}-byte limit "
                         "(not a safetensors file, or corrupt)")
    if 8 + n > file_size:
        raise AuditError(f"{source}: header length {n:,} bytes runs beyond the file size ({file_size:,} bytes): "
                         "truncated or not a safetensors file")


def _parse_header_json(raw: bytes, payload_size: int, source: str):
    """Validate a header; return (tensors, metadata, warnings). Never touches the payload."""
    try:
        text = raw.decode("utf-8")
        hdr = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise AuditError(f"{source}: header is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(hdr, dict):
        raise AuditError(f"{source}: header must be a JSON object, got {type(hdr).__name__}")
    tensors, spans, metadata, warnings = [], [], {}, []
    for name, t in hdr.items():
        if name == "__metadata__":
            if not isinstance(t, dict) or not all(isinstance(v, str) for v in t.values()):
                raise AuditError(f"{source}: __metadata__ must map strings to strings")
            metadata = t
            continue
        if not isinstance(t, dict):
            raise AuditError(f"{source}: entry for tensor {name!r} is not an object")
        dtype, shape, offs = t.get("dtype"), t.get("shape"), t.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise AuditError(f"{source}: tensor {name!r} has unknown dtype {dtype!r} "
                             f"(known: {', '.join(DTYPE_BITS)})")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise AuditError(f"{source}: tensor {name!r} has an invalid shape {str(shape)[:80]} "
                             "(a list of non-negative integers)")
        if len(shape) > 64:
            raise AuditError(f"{source}: tensor {name!r} has {len(shape)} dimensions")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise AuditError(f"{source}: tensor {name!r} has invalid data_offsets {str(offs)[:80]} "
                             "(expected [begin, end] with 0 <= begin <= end)")
        bits = math.prod(shape) * DTYPE_BITS[dtype]
        if bits % 8:
            raise AuditError(f"{source}: tensor {name!r}: {dtype} {shape} is not a whole number of bytes")
        if offs[1] - offs[0] != bits // 8:
            raise AuditError(f"{source}: tensor {name!r}: data_offsets {offs} span {_n(offs[1] - offs[0])} bytes "
                             f"but {dtype} {shape} needs {_n(bits // 8)}")
        if offs[1] > payload_size:
            raise AuditError(f"{source}: tensor {name!r}: data_offsets {offs} out of range "
                             f"(payload is {_n(payload_size)} bytes)")
        tensors.append(TensorInfo(name, dtype, tuple(shape), bits // 8, source))
        spans.append(((offs[0], offs[1]), name))
    spans.sort()
    end, prev = 0, None
    for (b, e), name in spans:
        if b == e:
            continue  # empty tensors take no bytes and cannot overlap
        if b < end:
            raise AuditError(f"{source}: tensors {prev!r} and {name!r} overlap (bytes {_n(b)}..{_n(end)})")
        if b > end:
            warnings.append(f"{source}: {_n(b - end)} unused payload bytes before tensor {name!r}")
        end, prev = e, name
    return tensors, metadata, warnings


def parse_bytes(data: bytes, source: str = "<bytes>"):
    """Parse a whole safetensors file held in memory: (tensors, metadata, warnings) or AuditError."""
    if len(data) < 8:
        raise AuditError(f"{source}: truncated: {len(data)} bytes, a safetensors file needs at least 8")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    _check_length(n, len(data), source)
    return _parse_header_json(bytes(data[8:8 + n]), len(data) - 8 - n, source)


def read_header(path):
    """Read one file's header (8 + n bytes, n checked before reading): (tensors, metadata, warnings)."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise AuditError(f"{source}: truncated: {size} bytes, a safetensors file needs at least 8")
            (n,) = struct.unpack("<Q", head)
            _check_length(n, size, source)
            raw = fh.read(n)
    except OSError as e:
        raise AuditError(f"{source}: cannot read ({e.strerror or e})") from None
    if len(raw) != n:
        raise AuditError(f"{source}: truncated while reading the header")
    return _parse_header_json(raw, size - 8 - n, source)


# --------------------------------------------------------------------------------------------------
# Roles and scale layouts
# --------------------------------------------------------------------------------------------------

_ATTN = {"self_attn", "attn", "attention", "self_attention", "q_proj", "k_proj", "v_proj", "o_proj",
         "qkv_proj", "query_key_value", "wq", "wk", "wv", "wo", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
         "kv_b_proj", "c_attn"}
_MLP = {"mlp", "feed_forward", "ffn", "block_sparse_moe", "shared_experts", "shared_expert", "gate_proj",
        "up_proj", "down_proj", "w1", "w2", "w3", "fc1", "fc2", "c_fc", "dense_h_to_4h", "dense_4h_to_h"}
_EMBED = {"embed_tokens", "wte", "wpe", "word_embeddings", "embed_in", "tok_embeddings", "lm_head",
          "embed_out", "embeddings"}
_SCALE_LEAVES = {"weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale", "input_scale",
                 "input_global_scale", "output_scale", "k_scale", "v_scale", "kv_scale", "q_scale",
                 "prob_scale", "weight_zero_point", "scales"}
_SUFFIXES = ("_scale_inv", "_scale_2", "_global_scale", "_zero_point", "_scales", "_scale", "_blocks",
             "_packed")


def is_scale(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf in _SCALE_LEAVES or leaf.endswith(("_scale", "_scale_inv", "_scale_2", "_scales"))


def role_of(name: str) -> str:
    """Role of a tensor from its name (first match wins: scale, norm, embedding, expert, router, ...).

    >>> role_of("model.layers.3.mlp.experts.7.gate_proj.weight"), role_of("model.layers.3.mlp.gate.weight")
    ('expert', 'other')
    """
    if is_scale(name):
        return "scale"
    parts = name.lower().split(".")
    mods = parts[:-1] if len(parts) > 1 else parts
    if any("norm" in p or re.fullmatch(r"ln(_\w+|\d*)", p) for p in mods):
        return "norm"
    if any(p in _EMBED for p in mods):
        return "embedding"
    if "experts" in mods or (parts[-2:-1] == ["experts"]):
        return "expert"
    if mods and mods[-1] in ("gate", "router", "shared_expert_gate") or parts[-1] == "e_score_correction_bias":
        return "other"  # MoE router: small, always BF16/F32
    if any(p in _ATTN for p in mods) or parts[-1] == "sinks":
        return "attention"
    if any(p in _MLP for p in mods):
        return "mlp"
    return "other"


def _split(name: str):
    """(module, base, leaf): 'm.experts.gate_up_proj_blocks' -> ('m.experts', 'gate_up_proj', '..._blocks')."""
    module, _, leaf = name.rpartition(".")
    base = leaf
    if leaf in ("input_scale", "input_global_scale", "k_scale", "v_scale", "kv_scale", "q_scale",
                "prob_scale", "output_scale"):
        return module, leaf, leaf
    for suf in _SUFFIXES:
        if leaf.endswith(suf) and leaf != suf.lstrip("_"):
            base = leaf[: -len(suf)]
            break
    return module, base, leaf


def _pow2_block(n: int, s: int, hint: int | None):
    """Block edge b with ceil(n / b) == s: the label's hint if it fits, else the smallest power of 2."""
    if s <= 0:
        return None
    if hint and math.ceil(n / hint) == s:
        return hint
    for k in range(0, 21):
        if math.ceil(n / 2 ** k) == s:
            return 2 ** k
    return None


def _layout(data: TensorInfo, scale: TensorInfo | None, glob: TensorInfo | None, leaf: str, hint):
    """(format family, short layout name or None, logical parameter count) of one weight tensor."""
    d, shp = data.dtype, data.shape
    if d in ("BF16", "F16", "F32", "F64"):
        return d, None, data.numel
    if d == "U8" and leaf.endswith("_blocks") and scale is not None and len(shp) >= 2 and shp[-1] == 16 \
            and scale.shape == shp[:-1]:
        return "MXFP4", "mxfp4", data.numel * 2  # 16 bytes = 32 E2M1 values per E8M0 scale
    if scale is None:
        return {"F8_E4M3": "FP8", "F8_E5M2": "FP8", "I8": "INT8"}.get(d, d), \
            ({"F8_E4M3": "fp8-unscaled", "F8_E5M2": "fp8-unscaled"}.get(d)), data.numel
    sshape = scale.shape
    if d == "U8" and len(shp) >= 1:  # packed 4-bit: two values per byte
        k = shp[-1] * 2
        if scale.dtype == "F8_E4M3" and sshape[:-1] == shp[:-1] and sshape and sshape[-1] * 16 == k:
            naming = "modelopt" if (glob is not None and glob.name.endswith("weight_scale_2")) or leaf == "weight" \
                else "compressed-tensors"
            return "NVFP4", f"nvfp4/{naming}", data.numel * 2
        if scale.dtype in ("U8", "F8_E8M0") and sshape[:-1] == shp[:-1] and sshape and sshape[-1] * 32 == k:
            return "MXFP4", "mxfp4", data.numel * 2
        return "U8", "u8-with-scale", data.numel * 2
    fam = {"F8_E4M3": "FP8", "F8_E5M2": "FP8", "I8": "INT8"}.get(d)
    if fam is None:
        return d, None, data.numel
    pre = fam.lower()
    n_s = math.prod(sshape)
    if n_s == 1:
        return fam, f"{pre}-per-tensor", data.numel
    if len(shp) >= 2 and sshape in (shp[:-1] + (1,), shp[:-1]):
        return fam, f"{pre}-per-channel", data.numel
    if len(shp) >= 2 and len(sshape) == len(shp) and sshape[:-2] == shp[:-2]:
        if scale.dtype in ("U8", "F8_E8M0") and sshape[-2] == shp[-2] and sshape[-1] * 32 == shp[-1] and fam == "FP8":
            return "MXFP8", "mxfp8", data.numel
        if sshape[-2] == shp[-2] and sshape[-1] and shp[-1] % sshape[-1] == 0:
            return fam, f"{pre}-group-{shp[-1] // sshape[-1]}", data.numel
        b0 = _pow2_block(shp[-2], sshape[-2], hint[0] if hint else None)
        b1 = _pow2_block(shp[-1], sshape[-1], hint[1] if hint else None)
        if b0 and b1:
            return fam, f"{pre}-block-{b0}x{b1}", data.numel
    return fam, f"{pre}-scale-{'x'.join(map(str, sshape))}", data.numel


_KV_RE = re.compile(r"(^|\.)(k_scale|v_scale|kv_scale)$|(^|\.)(k_proj|v_proj)\.output_scale$")
_ATTN_SCALE_RE = re.compile(r"(^|\.)(q_scale|prob_scale)$")


# --------------------------------------------------------------------------------------------------
# Label (quantization_config / hf_quant_config.json)
# --------------------------------------------------------------------------------------------------

def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise AuditError(f"{path}: not valid JSON ({str(e)[:200]})") from None
    except OSError as e:
        raise AuditError(f"{path}: cannot read ({e.strerror or e})") from None


def read_label(folder: Path) -> dict:
    """What config.json's quantization_config and hf_quant_config.json say the checkpoint is."""
    q, src = None, None
    cfg_path, hf_path = folder / "config.json", folder / "hf_quant_config.json"
    model_type = None
    if cfg_path.is_file():
        cfg = _read_json(cfg_path)
        if isinstance(cfg, dict):
            model_type = cfg.get("model_type")
            tc = cfg.get("text_config")
            q = cfg.get("quantization_config") or (tc.get("quantization_config") if isinstance(tc, dict) else None)
            src = "config.json quantization_config" if q else None
    hf = _read_json(hf_path) if hf_path.is_file() else None
    if isinstance(hf, dict) and isinstance(hf.get("quantization"), dict) and not q:
        q, src = {"quant_method": "modelopt", **hf["quantization"]}, "hf_quant_config.json"
    label = {"source": src, "model_type": model_type, "family": None, "summary": None,
             "hf_quant_config": hf.get("quantization") if isinstance(hf, dict) else None}
    if not isinstance(q, dict):
        return label
    method = str(q.get("quant_method", "")).lower()
    fam, detail = None, []
    block = q.get("weight_block_size")
    ignore = q.get("ignored_layers") or q.get("modules_to_not_convert") or q.get("ignore") \
        or q.get("exclude_modules") or []
    if method == "fp8":
        fam = "FP8"
        if block == [1, 32]:  # one scale per 32 along K: the MX layout, not 128x128 blocks
            fam = "MXFP8"
        detail = [f"fmt={q['fmt']}" if q.get("fmt") else None,
                  f"block {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2 else "per-tensor",
                  f"activations {q['activation_scheme']}" if q.get("activation_scheme") else None]
    elif method in ("mxfp8", "mxfp4", "nvfp4"):
        fam = method.upper()
    elif method == "compressed-tensors":
        fmt = str(q.get("format", ""))
        w = {}
        groups = q.get("config_groups")
        for g in (groups.values() if isinstance(groups, dict) else []):
            if isinstance(g, dict) and isinstance(g.get("weights"), dict):
                w = g["weights"]
                break
        bits, typ = w.get("num_bits"), w.get("type")
        if "nvfp4" in fmt or (bits == 4 and typ == "float" and w.get("group_size") == 16):
            fam = "NVFP4"
        elif "mxfp4" in fmt or (bits == 4 and typ == "float"):
            fam = "MXFP4"
        elif bits == 8 and typ == "float":
            fam = "FP8"
        elif bits == 8 and typ == "int":
            fam = "INT8"
        elif bits:
            fam = f"{typ or ''}{bits}".upper()
        detail = ["compressed-tensors", f"{fmt} {bits}-bit" if fmt else None,
                  f"strategy {w['strategy']}" if w.get("strategy") else None]
    elif method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        fam = {"FP8": "FP8", "NVFP4": "NVFP4", "W4A8_AWQ": "INT4", "MXFP8": "MXFP8"}.get(algo, algo or None)
        detail = ["modelopt", f"quant_algo {algo}" if algo else None]
    else:
        fam = method.upper() or None
    label.update({
        "family": fam, "quant_method": method, "fmt": q.get("fmt"), "weight_block_size": block,
        "ignore": ignore, "kv_cache": q.get("kv_cache_quant_algo") or q.get("kv_cache_scheme"),
        "summary": f"{fam} ({', '.join(x for x in detail if x)})" if any(detail) else fam,
    })
    return label


# --------------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------------

def _files(path: Path):
    """(folder, [shard files], index weight_map or None)."""
    if not path.exists():
        raise AuditError(f"{path}: no such file or folder")
    if path.is_file():
        if path.name == INDEX_NAME:
            path = path.parent
        else:
            return path.parent, [path], None
    idx = path / INDEX_NAME
    if idx.is_file():
        data = _read_json(idx)
        wm = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise AuditError(f"{idx}: expected an object with a 'weight_map' of tensor name -> file name")
        files = []
        for fname in sorted(set(wm.values())):
            if Path(fname).name != fname or fname in ("", ".", ".."):
                raise AuditError(f"{idx}: shard name {fname!r} is not a plain file name in the folder")
            if not (path / fname).is_file():
                raise AuditError(f"{idx}: names shard {fname!r}, which is missing")
            files.append(path / fname)
        return path, files, wm
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise AuditError(f"{path}: no .safetensors files and no {INDEX_NAME}")
    return path, files, None


def audit(path) -> dict:
    """Audit a .safetensors file, a folder, or a sharded checkpoint (index.json); a JSON-ready dict."""
    path = Path(path)
    folder, files, weight_map = _files(path)
    label = read_label(folder)
    tensors, warnings, metadata = [], [], {}
    seen = {}
    for f in files:
        ts, md, w = read_header(f)
        warnings += w
        metadata.update(md)
        for t in ts:
            if t.name in seen:
                warnings.append(f"tensor {t.name!r} appears in both {seen[t.name]} and {f.name}")
            seen[t.name] = f.name
            if weight_map is not None and weight_map.get(t.name) not in (None, f.name):
                warnings.append(f"index puts {t.name!r} in {weight_map[t.name]}, found in {f.name}")
        tensors += ts
    if weight_map is not None:
        missing = [n for n in weight_map if n not in seen]
        if missing:
            warnings.append(f"{len(missing)} tensor(s) listed in the index are in no shard header, "
                            f"e.g. {missing[0]!r}")
        extra = [n for n in seen if n not in weight_map]
        if extra:
            warnings.append(f"{len(extra)} tensor(s) in shard headers are not in the index, e.g. {extra[0]!r}")

    by_name = {t.name: t for t in tensors}
    groups: dict = {}
    for t in tensors:
        m, base, leaf = _split(t.name)
        groups.setdefault((m, base), {})[leaf] = t
    hint = label.get("weight_block_size")
    hint = tuple(hint) if isinstance(hint, list) and len(hint) == 2 and all(_is_int(x) and x > 0 for x in hint) \
        else None

    by_dtype, by_role, params_by_role = {}, {r: {} for r in ROLES}, {r: {} for r in ROLES}
    by_format, role_format, layouts = {}, {}, {}
    fused_bf16_experts = 0
    for (m, base), members in groups.items():
        for leaf, t in members.items():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
            r = role_of(t.name)
            by_role[r][t.dtype] = by_role[r].get(t.dtype, 0) + t.nbytes
        data_leaf = next((lf for lf in (base, f"{base}_packed", f"{base}_blocks") if lf in members
                          and not is_scale(members[lf].name)), None)
        if data_leaf is None:
            for leaf, t in members.items():  # scales without a weight (k_scale, input_scale, ...)
                params_by_role["scale"][t.dtype] = params_by_role["scale"].get(t.dtype, 0) + t.numel
            continue
        data = members[data_leaf]
        scale = next((members[x] for x in (f"{base}_scale", f"{base}_scale_inv", f"{base}_scales")
                      if x in members), None)
        glob = next((members[x] for x in (f"{base}_scale_2", f"{base}_global_scale") if x in members), None)
        fam, lay, n_params = _layout(data, scale, glob, data_leaf, hint)
        r = role_of(data.name)
        params_by_role[r][data.dtype] = params_by_role[r].get(data.dtype, 0) + n_params
        wbytes = sum(t.nbytes for lf, t in members.items() if lf == data_leaf)
        by_format[fam] = by_format.get(fam, 0) + wbytes
        role_format.setdefault(r, {})
        role_format[r][fam] = role_format[r].get(fam, 0) + wbytes
        if lay:
            layouts[lay] = layouts.get(lay, 0) + 1
        if r == "expert" and fam in ("BF16", "F16", "F32") and len(data.shape) == 3:
            fused_bf16_experts += data.nbytes
        for leaf, t in members.items():
            if leaf != data_leaf:
                params_by_role["scale"][t.dtype] = params_by_role["scale"].get(t.dtype, 0) + t.numel
    for t in tensors:
        if t.name.endswith(("input_scale", "input_global_scale")):
            layouts["input_scale"] = layouts.get("input_scale", 0) + 1
    kv_names = sorted(n for n in by_name if _KV_RE.search(n))
    if kv_names:
        layouts["kv_scale"] = len(kv_names)
    other_attn = sorted(n for n in by_name if _ATTN_SCALE_RE.search(n))
    if label.get("weight_block_size") and hint:
        seen_blocks = {k for k in layouts if "-block-" in k}
        want = f"block-{hint[0]}x{hint[1]}"
        if seen_blocks and not any(k.endswith(want) for k in seen_blocks):
            warnings.append(f"label says weight_block_size {list(hint)}, scale shapes imply "
                            f"{', '.join(sorted(seen_blocks))}")

    report = {
        "path": str(path), "files": [str(f) for f in files], "n_tensors": len(tensors),
        "total_bytes": sum(t.nbytes for t in tensors),
        "file_bytes": sum(f.stat().st_size for f in files),
        "by_dtype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "by_role": {r: d for r, d in by_role.items() if d},
        "params_by_role": {r: d for r, d in params_by_role.items() if d},
        "param_bytes_by_format": dict(sorted(by_format.items(), key=lambda kv: -kv[1])),
        "param_bytes_by_role_format": role_format,
        "scale_layouts": sorted(layouts),
        "scale_layout_counts": layouts,
        "has_kv_scales": bool(kv_names),
        "kv_scale_tensors": kv_names[:8],
        "other_attention_scales": other_attn[:8],
        "label": label,
        "metadata": metadata,
        "warnings": warnings,
    }
    report["verdict"], report["consistent"] = _verdict(report, fused_bf16_experts)
    return report


_DESCRIBE = {"FP8": "FP8", "MXFP8": "MXFP8 (E4M3 elements, an E8M0 scale per 32)",
             "NVFP4": "NVFP4 (E2M1, an E4M3 scale per 16, a global scale)",
             "MXFP4": "MXFP4 (E2M1, an E8M0 scale per 32)", "INT8": "INT8", "BF16": "BF16", "F16": "FP16",
             "F32": "FP32"}
_UNQUANTIZED = ("BF16", "F16", "F32", "F64")
_BLOCK_ROLES = ("attention", "mlp", "expert")  # the decoder-block weights a recipe converts


def _pct(x: float) -> str:
    """'97 %'; never rounds a partial share up to 100 or down to 0."""
    p = 100 * x
    if 0 < p < 1:
        return "<1 %"
    if 99 < p < 100:
        return ">99 %"
    return f"{p:.0f} %"


def _short(fam: str) -> str:
    return _DESCRIBE.get(fam, fam).split(" (")[0]


def _verdict(rep: dict, fused_bf16_experts: int):
    """(sentence, consistent): the label against the bytes of the decoder-block weights.

    Judged on attention / MLP / expert weights (what recipes convert), because embeddings, norms and
    routers stay BF16 in every recipe; the all-bytes split is quoted too."""
    fmt = rep["param_bytes_by_format"]
    total = sum(fmt.values())
    if not total:
        return "no parameter tensors found.", False
    rf = rep["param_bytes_by_role_format"]
    block = {}
    for r in _BLOCK_ROLES:
        for k, v in rf.get(r, {}).items():
            block[k] = block.get(k, 0) + v
    if not block:
        block = dict(fmt)
    btotal = sum(block.values())
    dom = max(block, key=block.get)
    share_b, share_all = block[dom] / btotal, fmt.get(dom, 0) / total
    fam = rep["label"].get("family")
    name = rep["label"].get("summary") or fam
    lays = sorted(k for k in rep["scale_layouts"] if k.startswith(("fp8-", "int8-")))
    what = _DESCRIBE.get(dom, dom)
    if dom in ("FP8", "INT8") and lays:
        what = f"{dom} with {' / '.join(k.split('-', 1)[1] for k in lays)} scales"
    split = ", ".join(f"{_short(k)} {_pct(v / total)}" for k, v in fmt.items())
    roles_in = sorted(r for r in _BLOCK_ROLES if rf.get(r, {}).get(dom))
    roles_out = sorted(r for r in _BLOCK_ROLES if rf.get(r) and not rf[r].get(dom))
    if fam is None:
        if dom in _UNQUANTIZED:
            tail = f": a plain {_short(dom)} checkpoint" if share_all > 0.99 else ""
            return f"no quantization label; {_pct(share_all)} of parameter bytes are {what}{tail}.", True
        return (f"no quantization label, but {_pct(share_b)} of the decoder-block weights are {what} "
                f"(all parameter bytes: {split}): the label is missing."), False
    if dom == fam:
        out = ""
        if roles_out:
            kept = "/".join(sorted({_short(k) for r in roles_out for k in rf[r]}))
            out = f" ({', '.join(roles_out)} {'stays' if len(roles_out) == 1 else 'stay'} {kept})"
        note = ""
        if dom == "MXFP8":
            note = "; Hopper has no MX tensor cores: expect a weight-only W8A16 path there, not FP8 GEMMs"
        return (f"labelled {name}; {_pct(share_b)} of the decoder-block weights ({', '.join(roles_in)}) are "
                f"{what}{out}; all parameter bytes: {split}: consistent{note}."), True
    if dom in _UNQUANTIZED:
        skipped = max((r for r in _BLOCK_ROLES if r in rf), key=lambda r: rf[r].get(dom, 0))
        why = (" (fused 3-D expert tensors, which a recipe that targets Linear layers passes over)"
               if skipped == "expert" and fused_bf16_experts else "")
        q_roles = sorted(r for r in _BLOCK_ROLES if any(k not in _UNQUANTIZED for k in rf.get(r, {})))
        q_bytes = sum(v for k, v in fmt.items() if k not in _UNQUANTIZED)
        q_name = fam if fam in fmt else "quantized formats"
        covered = (f"; {q_name} covers only {', '.join(q_roles)} ({_pct(q_bytes / total)} of parameter bytes)"
                   if q_roles else "; nothing is quantized")
        who = {"expert": "the experts were", "attention": "attention was", "mlp": "the MLPs were"}[skipped]
        return (f"labelled {name}; {_pct(share_all)} of parameter bytes are {what}: {who} not converted"
                f"{why}{covered}."), False
    if fam == "FP8" and dom == "MXFP8":
        return (f"labelled {name}, but {_pct(share_b)} of the decoder-block weights are {what}: the same "
                "element type as block FP8 with a different scale layout (on Hopper: weight-only W8A16, "
                "not FP8 tensor cores)."), False
    return (f"labelled {name}; {_pct(share_b)} of the decoder-block weights are {what} (all parameter bytes: "
            f"{split}): the label does not describe the bytes."), False


# --------------------------------------------------------------------------------------------------
# Table and CLI
# --------------------------------------------------------------------------------------------------

def _mb(b):
    return f"{b / 1e6:,.3f}"


def format_table(rep: dict) -> str:
    lab = rep["label"]
    lines = [f"{rep['path']}: {len(rep['files'])} file(s), {rep['n_tensors']} tensors, "
             f"{_mb(rep['total_bytes'])} MB of tensor data",
             f"label: {lab.get('summary') or 'none'}" + (f"  [{lab['source']}]" if lab.get("source") else "")
             + (f"; ignore: {lab['ignore']}" if lab.get("ignore") else ""), "",
             f"{'role':<11}{'dtype':<9}{'MB':>12}{'params':>14}{'share':>8}"]
    total = rep["total_bytes"] or 1
    for role, d in rep["by_role"].items():
        for dt, b in sorted(d.items(), key=lambda kv: -kv[1]):
            n = rep["params_by_role"].get(role, {}).get(dt, 0)
            lines.append(f"{role:<11}{dt:<9}{_mb(b):>12}{n:>14,}{100 * b / total:>7.1f}%")
    lines.append("")
    lines.append("by dtype: " + ", ".join(f"{k} {_mb(v)} MB" for k, v in rep["by_dtype"].items()))
    lines.append("scale layouts: " + (", ".join(f"{k} ({rep['scale_layout_counts'][k]})"
                                                for k in rep["scale_layouts"]) or "none"))
    kv = rep["kv_scale_tensors"]
    lines.append("K/V cache scales: " + (f"yes, e.g. {kv[0]}" if kv else
                                         "none (no k_scale / v_scale / kv_scale tensors)"))
    if rep["other_attention_scales"]:
        lines.append(f"other attention scales (not K/V): {rep['other_attention_scales'][0]} ...")
    lines.append(f"verdict: {rep['verdict']}")
    for w in rep["warnings"][:10]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


# What each layout can run on, per seed 004's record of vLLM during its campaign (an engine's choice,
# not a property of the file): the audit can only say what to look for in the engine log.
HOPPER_PATH = {
    "fp8-per-tensor": "FP8 tensor cores (W8A8) possible",
    "fp8-per-channel": "FP8 tensor cores (W8A8) possible",
    "fp8-block-128x128": "FP8 tensor cores with 128x128 block scales (W8A8, FP32 epilogue) possible",
    "mxfp8": "no MX tensor cores: weight-only W8A16 (vLLM picked Marlin)",
    "nvfp4/compressed-tensors": "no FP4 tensor cores: weight-only W4A16",
    "nvfp4/modelopt": "no FP4 tensor cores: weight-only W4A16",
    "mxfp4": "no FP4 tensor cores: weight-only W4A16 (vLLM picked Marlin for gpt-oss/DeepSeek-V4)",
}


def format_summary(reports: dict) -> str:
    """One line per audited checkpoint: label, decoder-block format, layouts, K/V scales, verdict flag."""
    lines = [f"{'checkpoint':<26}{'label':<8}{'block weights':<16}{'scale layouts':<40}{'K/V sc.':<8}consistent"]
    for name, r in reports.items():
        rf = r["param_bytes_by_role_format"]
        block = {}
        for role in _BLOCK_ROLES:
            for k, v in rf.get(role, {}).items():
                block[k] = block.get(k, 0) + v
        tot = sum(block.values()) or 1
        dom = max(block, key=block.get) if block else "-"
        lines.append(f"{name:<26}{str(r['label'].get('family') or '-'):<8}"
                     f"{dom + ' ' + _pct(block.get(dom, 0) / tot):<16}{', '.join(r['scale_layouts']) or '-':<40}"
                     f"{'yes' if r['has_kv_scales'] else 'no':<8}{'yes' if r['consistent'] else 'NO'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab.audit",
                                 description="Read safetensors headers (never the payload) and say what a "
                                             "checkpoint holds.")
    ap.add_argument("path", help="a .safetensors file, a checkpoint folder, or its model.safetensors.index.json")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    try:
        rep = audit(args.path)
    except AuditError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rep, indent=1) if args.json else format_table(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
