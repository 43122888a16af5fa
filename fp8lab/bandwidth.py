"""Bandwidth math for any decoder LLM: what FP8 (or NVFP4, MX, INT8) buys in decode, and where it stops.

Decode reads every weight once per step and the whole KV cache of every sequence in the batch, and
does ~2 FLOPs per weight per sequence. So a decode step is memory-bound until the batch is large,
and its ceiling is ``tokens/s per sequence = bandwidth / bytes read per step``.

Every config field is read strictly (integers in range, JSON booleans, lists that hold what they claim);
anything else is a ConfigError naming the field, and the CLI turns it into one line and exit status 2.

Llama-3-8B (tests/data/llama3_8b_config.json), batch 32, 8k context, GB = 1e9 bytes, under seed 003's
conventions (every parameter counted as read, ``policy="all", embedding_read="table"``)::

    params                    8,030,261,248   # 32 layers x 218.1M + 2 x 525.3M embedding/lm_head
    weights  bf16             16.06 GB
    KV cache bf16             34.36 GB        # 32 layers x 2 (K,V) x 8 heads x 128 x 2 B x 8192 x 32
    read per step bf16        50.42 GB        # seed 003 says 50.5: it added its rounded 16.1 + 34.4
    tokens/s/seq on H200 spec 95.2            # 4.8e12 / 50.42e9

Conventions (and why):

* ``policy`` -- which tensors a format converts. ``"linear"`` (default): the Linear layers inside the
  decoder blocks; embedding, lm_head, norms, biases and routers stay BF16 -- what FP8 checkpoints
  ship (``ignore: ["lm_head"]``). ``"experts"``: only expert MLPs (gpt-oss's MXFP4 layout).
  ``"all"``: every parameter in the format -- the napkin convention seed 003 used (8.0 GB FP8).
* ``embedding_read`` -- ``"rows"`` (default): decode gathers one embedding row per sequence; the
  lm_head (or the tied table) is read in full. ``"table"``: the whole input table is counted as read
  every step, as seed 003 did.
* The KV cache is counted at full ``context`` for every sequence: the last step of a ``context``-long
  generation (an upper bound on the average step). Writing the new token's K/V is ignored.
* MoE: routed experts are read with the expected number of *distinct* experts a batch touches under
  uniform routing, ``E * (1 - (1 - k/E)**B)`` per layer; FLOPs use the k active experts per token.

Counted: embeddings, lm_head (unless tied), q/k/v/o (and MLA's low-rank q/kv projections), MLP or
experts + shared experts + router, RMSNorm weights (incl. Gemma-2/3 pre/post norms and Qwen3/Gemma-3
q/k norms), q/k/v(/o) biases (Qwen2, ``attention_bias``) and gpt-oss expert/router biases.
gpt-oss attention sinks; hybrid models (Qwen3-Next, Qwen3.5: Gated DeltaNet linear-attention layers beside
gated full attention) with their fixed-size recurrent state read once per step instead of a KV cache.
Counts agree with transformers' own models parameter for parameter (tests/test_bandwidth.py, and for the
full-size published configs tests/test_serving_claims.py). Not counted: MTP / next-n layers, vision towers,
rotary buffers; sliding-window
attention is *not* modelled (KV counted for every token in every layer: an upper bound for
Mistral-v0.1 / Gemma-2/3 / gpt-oss); activations and their quantization scales.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from fp8lab.gpus import GPU, NAMES, get_gpu

GB = 1e9  # seed 003's "GB" matches 1e9 bytes (16.06e9 -> "16.1 GB"); GiB would give 14.96


class ConfigError(ValueError):
    """A model config that cannot be read or lacks what the bandwidth math needs."""


# --------------------------------------------------------------------------------------------------
# Storage formats: bytes of one [rows, cols] weight matrix, including its scales.
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WeightFormat:
    """How a weight matrix is stored: element width plus scale layout.

    ``scale`` is "none", "tensor" (one scale), "channel" (one per output row) or "block" with
    ``block=(rows, cols)`` (a group of 16 along K is block (1, 16)).

    >>> FORMATS["nvfp4"].matrix_bytes(4096, 4096)   # 4096*4096/2 + 4096*4096/16 E4M3 + one f32
    9437188
    """

    name: str
    element_bits: int
    scale: str = "none"
    scale_bits: int = 0
    block: tuple | None = None
    global_scale_bytes: int = 0
    compute: tuple = ("bf16",)  # tensor-core dtypes that can run it natively, preferred first
    description: str = ""
    element: str | None = None       # the fp8lab.formats name of the element type ("e4m3", "e2m1", "int8")
    scale_format: str | None = None  # the scale's storage: "f32" or an fp8lab.formats name ("e4m3", "e8m0")

    def n_scales(self, rows: int, cols: int) -> int:
        if self.scale == "none":
            return 0
        if self.scale == "tensor":
            return 1
        if self.scale == "channel":
            return rows
        br, bc = self.block
        return math.ceil(rows / br) * math.ceil(cols / bc)

    def matrix_bytes(self, rows: int, cols: int) -> int:
        data = math.ceil(rows * cols * self.element_bits / 8)
        scales = math.ceil(self.n_scales(rows, cols) * self.scale_bits / 8)
        return data + scales + self.global_scale_bytes

    @property
    def bytes_per_param(self) -> float:
        """Large-matrix limit: element bytes + scale bytes per element (per-tensor scales -> 0)."""
        per = self.element_bits / 8
        if self.scale == "block":
            per += self.scale_bits / 8 / (self.block[0] * self.block[1])
        return per


# Storage layouts: bits per element, bits per scale and the block each scale covers. Why a small table here
# and not fp8lab.formats itself: formats imports torch (about a second), and this module (and its CLI) must
# stay instant and torch-free for pure arithmetic. The table names the fp8lab.formats element and scale type
# of every row, and tests/test_bandwidth.py checks bits and block sizes against fp8lab.formats and
# fp8lab.scaling, so the two cannot drift apart.
FORMATS: dict[str, WeightFormat] = {f.name: f for f in [
    WeightFormat("bf16", 16, description="BF16, no scales"),
    WeightFormat("fp8_tensor", 8, "tensor", 32, compute=("fp8",),
                 description="FP8 E4M3 + one F32 weight_scale per tensor", element="e4m3", scale_format="f32"),
    WeightFormat("fp8_block128", 8, "block", 32, (128, 128), compute=("fp8_block", "fp8"),
                 description="FP8 E4M3 + F32 weight_scale_inv per 128x128 block (DeepSeek-V3)",
                 element="e4m3", scale_format="f32"),
    WeightFormat("int8_channel", 8, "channel", 32, compute=("int8",),
                 description="INT8 + one scale per output channel (assumed F32)", element="int8", scale_format="f32"),
    WeightFormat("mxfp8", 8, "block", 8, (1, 32), compute=("fp8",),
                 description="MXFP8: E4M3 + E8M0 scale per 32 along K", element="e4m3", scale_format="e8m0"),
    WeightFormat("nvfp4", 4, "block", 8, (1, 16), global_scale_bytes=4, compute=("fp4",),
                 description="NVFP4: E2M1 packed 2/byte + E4M3 scale per 16 + F32 global scale",
                 element="e2m1", scale_format="e4m3"),
    WeightFormat("mxfp4", 4, "block", 8, (1, 32), compute=("fp4",),
                 description="MXFP4: E2M1 packed 2/byte + E8M0 scale per 32", element="e2m1", scale_format="e8m0"),
]}

# KV-cache element bytes. fp8: per-layer k/v scales are a constant 8 B/layer (not per token) and are
# ignored; nvfp4: E2M1 + an E4M3 scale per 16 values along head_dim (per-layer global ignored).
KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}

POLICIES = ("linear", "experts", "all")
_QUANTIZED_ROLES = {
    "linear": {"attention", "mlp", "expert", "shared_expert"},
    "experts": {"expert", "shared_expert"},
}

# Defaults transformers uses when tie_word_embeddings is absent (PretrainedConfig says True; these
# model classes override it). Unknown model types fall back to False with a note.
_TIE_DEFAULT = {"llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen2_moe": False,
                "qwen3": False, "qwen3_moe": False, "gemma": True, "gemma2": True, "gemma3_text": True,
                "gemma3": True, "deepseek_v2": False, "deepseek_v3": False, "phi3": False,
                "gpt_oss": False}


# --------------------------------------------------------------------------------------------------
# Config -> list of weight tensors
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    role: str        # embedding, lm_head, attention, mlp, expert, shared_expert, router, norm, bias
    rows: int        # output features (1 for vectors)
    cols: int        # input features (length for vectors)
    count: int       # how many such tensors in the model
    routed: bool = False  # a routed-expert tensor: a token touches k of E of them

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count

    @property
    def is_matrix(self) -> bool:
        return self.rows > 1


@dataclass
class ModelShape:
    name: str
    model_type: str
    hidden_size: int
    n_layers: int
    vocab_size: int
    tied: bool
    tensors: list
    kv_elems_per_token: int         # K+V (or MLA latent) elements per token, all layers
    attn_flops_per_pos: int         # decode attention FLOPs per token per cached position, all layers
    n_experts: int | None = None
    top_k: int | None = None
    attention: str = "gqa"
    notes: list | None = None
    max_position_embeddings: int | None = None
    state_bytes_per_seq: int = 0    # linear-attention (Gated DeltaNet) recurrent + conv state, all layers
    state_flops_per_token: int = 0  # FLOPs to update and read that state for one token


#: a config.json is kilobytes; anything this large is not one (and is not read into memory)
MAX_CONFIG_BYTES = 16 * 2**20
#: every size field (hidden_size, layers, heads, vocabulary, experts, ...) must fit the int32 range the
#: frameworks store them in; larger values are corrupt input, and refusing them keeps every product finite
MAX_SIZE = 2**31 - 1


def _read_config_file(p: Path) -> dict:
    """A regular file's JSON object; never opens a FIFO or device for reading (which could block for ever)."""
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{p}: not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{p}: {st.st_size:,} bytes is not a model config (limit {MAX_CONFIG_BYTES:,})")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(st.st_size + 1)  # read(n) allocates n bytes up front: ask for what is there
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{p}: grew past {MAX_CONFIG_BYTES:,} bytes while being read")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, >4300-digit integers
        kind = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:160]
        raise ConfigError(f"{p}: not valid JSON ({kind})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    return cfg


def load_config(src) -> dict:
    """A config dict from a dict, a config.json path, a folder holding one, or a hub id.

    The hub is only tried (through transformers.AutoConfig, imported here) when ``src`` is neither an
    existing path nor something that looks like a file (``*.json``).
    """
    if isinstance(src, dict):
        return dict(src)
    s = str(src)
    if "\x00" in s:
        raise ConfigError(f"{s[:60]!r}: not a file name (holds a NUL byte)")
    p = Path(s)
    if p.is_dir():
        p = p / "config.json"
        if not p.exists():
            raise ConfigError(f"{src}: folder has no config.json")
    if p.exists() or p.is_symlink():
        return _read_config_file(p)
    if s.endswith(".json") or not re.fullmatch(r"[\w.\-]+/[\w.\-]+", s):
        raise ConfigError(f"{s[:200]}: file not found")
    try:  # a hub id such as "meta-llama/Meta-Llama-3-8B" -- only where a hub is reachable
        from transformers import AutoConfig
        return AutoConfig.from_pretrained(s).to_dict()
    except Exception as e:  # noqa: BLE001 -- any failure here means "could not load"
        raise ConfigError(f"{s}: not a local file or folder, and loading it as a hub id failed "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None


def _show(v) -> str:
    """A config value for an error message: short, with its JSON type."""
    r = repr(v)
    return (r[:40] + "...") if len(r) > 43 else r


def _get_int(cfg: dict, key: str, default=None, *, allow_zero=False):
    """An integer size field: absent or null -> ``default``; anything but an integer in range -> ConfigError."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(f"config field {key!r} must be a {'non-negative' if allow_zero else 'positive'} "
                          f"integer, got {_show(v)} ({type(v).__name__})")
    if v > MAX_SIZE:
        raise ConfigError(f"config field {key!r} = {v if v < 10**30 else f'~2**{v.bit_length() - 1}'} is beyond "
                          f"any model (limit {MAX_SIZE:,}): a corrupt config")
    return v


def _get_bool(cfg: dict, key: str, default=None):
    """A boolean field, parsed strictly: true/false only. The string "false" is an error, never True."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(f"config field {key!r} must be true or false (a JSON boolean), got {_show(v)} "
                          f"({type(v).__name__})")
    return v


def _get_str(cfg: dict, key: str, default=None):
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise ConfigError(f"config field {key!r} must be a string, got {_show(v)} ({type(v).__name__})")
    return v


def _layer_list(cfg: dict, key: str, L: int) -> set:
    """A list of layer indices (``mlp_only_layers``), each in 0..L-1."""
    v = cfg.get(key)
    if v is None:
        return set()
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L
                                          for i in v):
        raise ConfigError(f"config field {key!r} must be a list of layer indices 0..{L - 1}, got {_show(v)}")
    return set(v)


def count_moe_layers(n_layers: int, first_dense: int = 0, freq: int = 1, step: int = 1, mlp_only=()) -> int:
    """How many layers ``i`` in ``[first_dense, n_layers)`` are MoE: ``i % freq == 0``, ``(i + 1) % step == 0``
    (DeepSeek's ``moe_layer_freq``, Qwen's ``decoder_sparse_step``) and ``i`` not in ``mlp_only``.

    Counted by arithmetic (the two conditions are one residue modulo lcm(freq, step), by the Chinese
    remainder theorem), never by walking ``range(n_layers)``: a corrupt config with 10**9 layers costs
    nothing.

    >>> count_moe_layers(61, first_dense=3), count_moe_layers(48, step=2), count_moe_layers(10, 0, 2, 2)
    (58, 24, 0)
    """
    g = math.gcd(freq, step)
    if (step - 1) % g:  # i = 0 (mod freq) and i = -1 (mod step) cannot both hold
        return 0
    m, n = freq // g, step // g
    t = ((step - 1) // g * pow(m, -1, n)) % n if n > 1 else 0
    x0, M = freq * t, freq * n  # the solutions are x0 + k * M, M = lcm(freq, step)

    def upto(hi):  # solutions in [0, hi)
        return 0 if hi <= x0 else (hi - x0 - 1) // M + 1

    lo = min(first_dense, n_layers)
    count = upto(n_layers) - upto(lo)
    return count - sum(1 for i in set(mlp_only) if lo <= i < n_layers and i % freq == 0 and (i + 1) % step == 0)


_HYBRID_TYPES = ("qwen3_next", "qwen3_5_moe_text", "qwen3_5_text", "qwen3_5_moe", "qwen3_5")
_LAYER_TYPES = ("full_attention", "linear_attention", "sliding_attention")
_STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _layer_kinds(cfg: dict, L: int, mt: str):
    """(full-attention layers, linear-attention layers) from ``layer_types`` or ``full_attention_interval``."""
    lt = cfg.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != L or not all(isinstance(x, str) and x in _LAYER_TYPES
                                                                for x in lt):
            raise ConfigError(f"config field 'layer_types' must list one of {', '.join(_LAYER_TYPES)} for each of "
                              f"the {L} layers, got {_show(lt)}")
        n_lin = sum(x == "linear_attention" for x in lt)
        return L - n_lin, n_lin
    if mt in _HYBRID_TYPES:
        interval = _get_int(cfg, "full_attention_interval", 4)
        return L // interval, L - L // interval  # layer i is full attention when (i + 1) % interval == 0
    return L, 0


def model_shape(config) -> ModelShape:
    """Turn an HF config (dict, path or hub id) into the list of weight tensors it implies.

    Every field is validated: sizes must be integers in range, booleans must be JSON booleans, lists must
    hold what they claim; anything else raises ConfigError naming the field. Nothing here loops over a
    count the config chooses (layers are counted by arithmetic).

    >>> s = model_shape("tests/data/llama3_8b_config.json")
    >>> sum(t.params for t in s.tensors), s.kv_elems_per_token
    (8030261248, 65536)
    """
    cfg = load_config(config)
    notes = []
    if cfg.get("hidden_size") is None and cfg.get("text_config") is not None:
        tc = cfg["text_config"]
        if not isinstance(tc, dict):
            raise ConfigError(f"config field 'text_config' must be an object, got {_show(tc)}")
        outer = {k: cfg[k] for k in ("tie_word_embeddings", "architectures", "_name_or_path") if k in cfg}
        cfg = {**outer, **tc, "model_type": tc.get("model_type", cfg.get("model_type"))}
        notes.append("read the nested text_config (multimodal wrapper); vision weights not counted")
    arch = cfg.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise ConfigError(f"config field 'architectures' must be a list of strings, got {_show(arch)}")
    mt = _get_str(cfg, "model_type", "unknown")
    required = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
    expert_key = next((k for k in ("num_local_experts", "n_routed_experts", "num_experts") if cfg.get(k)), None)
    if not (expert_key and cfg.get("moe_intermediate_size")):
        required.append("intermediate_size")
    missing = [k for k in required if cfg.get(k) is None]
    if missing:
        raise ConfigError(f"config missing required field(s): {', '.join(missing)} "
                          "(expected a llama/mistral/qwen2/gemma-style decoder config)")
    H = _get_int(cfg, "hidden_size")
    L = _get_int(cfg, "num_hidden_layers")
    nh = _get_int(cfg, "num_attention_heads")
    nkv = _get_int(cfg, "num_key_value_heads", nh)  # null or absent: MHA, as transformers reads it
    V = _get_int(cfg, "vocab_size")
    I = _get_int(cfg, "intermediate_size")
    hd = _get_int(cfg, "head_dim")
    if hd is None:
        if H % nh:
            raise ConfigError(f"hidden_size {H} is not divisible by num_attention_heads {nh}; "
                              "give head_dim")
        hd = H // nh
    if nh % nkv:
        raise ConfigError(f"num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
    tied = _get_bool(cfg, "tie_word_embeddings")
    if tied is None:
        tied = _TIE_DEFAULT.get(mt, False)
        notes.append(f"tie_word_embeddings absent: assumed {tied} for model_type {mt!r}")
    sw = _get_int(cfg, "sliding_window", allow_zero=True)
    if sw and _get_bool(cfg, "use_sliding_window", True) is not False:
        notes.append(f"sliding_window={sw} not modelled: KV counted for every "
                     "token in every layer (upper bound)")
    attention_bias = _get_bool(cfg, "attention_bias")
    max_pos = _get_int(cfg, "max_position_embeddings")
    n_full, n_lin = _layer_kinds(cfg, L, mt)
    hybrid = n_lin > 0 or mt in _HYBRID_TYPES
    mtp = _get_int(cfg, "mtp_num_hidden_layers", 0, allow_zero=True) or \
        _get_int(cfg, "num_nextn_predict_layers", 0, allow_zero=True)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not counted")

    T: list[Tensor] = []

    def add(role, rows, cols, count, routed=False):
        if count > 0 and rows > 0 and cols > 0:
            T.append(Tensor(role, rows, cols, count, routed))

    add("embedding", V, H, 1)
    if not tied:
        add("lm_head", V, H, 1)
    add("norm", 1, H, 1)  # final norm

    # --- attention (same in every full-attention layer) ---
    mla = cfg.get("kv_lora_rank") is not None
    state_bytes, state_flops = 0, 0
    if mla:
        r_kv = _get_int(cfg, "kv_lora_rank")
        r_q = _get_int(cfg, "q_lora_rank")
        d_nope = _get_int(cfg, "qk_nope_head_dim")
        d_rope = _get_int(cfg, "qk_rope_head_dim")
        d_v = _get_int(cfg, "v_head_dim", hd)
        if d_nope is None or d_rope is None:
            raise ConfigError("MLA config (kv_lora_rank set) needs qk_nope_head_dim and qk_rope_head_dim")
        d_qk = d_nope + d_rope
        if r_q:
            add("attention", r_q, H, L)                # q_a_proj
            add("norm", 1, r_q, L)                     # q_a_layernorm
            add("attention", nh * d_qk, r_q, L)        # q_b_proj
        else:
            add("attention", nh * d_qk, H, L)          # q_proj
        add("attention", r_kv + d_rope, H, L)          # kv_a_proj_with_mqa
        add("norm", 1, r_kv, L)                        # kv_a_layernorm
        add("attention", nh * (d_nope + d_v), r_kv, L)  # kv_b_proj
        add("attention", H, nh * d_v, L)               # o_proj
        kv_per_layer = r_kv + d_rope                    # the cached latent + shared rope key
        # absorbed decode: scores over (r_kv + d_rope), output over r_kv, per head
        attn_flops = 2 * nh * (r_kv + d_rope) + 2 * nh * r_kv
        attention = "mla"
        n_full = L
    else:
        gated = hybrid and _get_bool(cfg, "attn_output_gate", True)  # Qwen3-Next / 3.5: q_proj also makes a gate
        add("attention", nh * hd * (2 if gated else 1), H, n_full)  # q_proj
        add("attention", nkv * hd, H, 2 * n_full)  # k_proj, v_proj
        add("attention", H, nh * hd, n_full)   # o_proj
        kv_per_layer = 2 * nkv * hd
        attn_flops = 4 * nh * hd          # q.k and p.v: 2 FLOPs per multiply-add each
        attention = "mha" if nkv == nh else ("mqa" if nkv == 1 else "gqa")
        if attention_bias is True:
            add("bias", 1, nh * hd + 2 * nkv * hd + H, n_full)
        elif attention_bias is None and mt in ("qwen2", "qwen2_moe"):
            add("bias", 1, nh * hd + 2 * nkv * hd, n_full)  # Qwen2: q/k/v biases, no o bias
        if mt == "gpt_oss":
            add("attention", 1, nh, n_full)  # attention sinks: one learned logit per head
        if hybrid:
            add("norm", 1, hd, 2 * n_full)  # q_norm, k_norm
    if n_lin:  # Gated DeltaNet layers (Qwen3-Next, Qwen3.5): fixed-size recurrent state instead of a KV cache
        nk = _get_int(cfg, "linear_num_key_heads")
        nv = _get_int(cfg, "linear_num_value_heads")
        dk = _get_int(cfg, "linear_key_head_dim")
        dv = _get_int(cfg, "linear_value_head_dim")
        kern = _get_int(cfg, "linear_conv_kernel_dim", 4)
        if None in (nk, nv, dk, dv):
            raise ConfigError("linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
                              "linear_key_head_dim and linear_value_head_dim")
        key_dim, value_dim = nk * dk, nv * dv
        conv_dim = 2 * key_dim + value_dim
        add("attention", 2 * key_dim + 2 * value_dim, H, n_lin)  # in_proj_qkvz (or qkv + z)
        add("attention", 2 * nv, H, n_lin)                       # in_proj_ba (or b + a)
        add("attention", H, value_dim, n_lin)                    # out_proj
        add("ssm", conv_dim, kern, n_lin)                        # depthwise conv1d (not a Linear)
        add("ssm", 1, 2 * nv, n_lin)                             # A_log, dt_bias
        add("norm", 1, dv, n_lin)                                # gated RMSNorm over the value head
        sdt = _get_str(cfg, "mamba_ssm_dtype")
        if sdt is not None and sdt not in _STATE_DTYPE_BYTES:
            raise ConfigError(f"config field 'mamba_ssm_dtype' must be one of {', '.join(_STATE_DTYPE_BYTES)}, "
                              f"got {_show(sdt)}")
        sb = _STATE_DTYPE_BYTES[sdt] if sdt else 2
        if sdt is None:
            notes.append("mamba_ssm_dtype absent: recurrent state assumed bf16 (2 bytes)")
        state_bytes = n_lin * (nv * dk * dv * sb + conv_dim * (kern - 1) * 2)
        state_flops = n_lin * 4 * nv * dk * dv  # read-update-read of a dk x dv state per value head
        attention = f"hybrid ({n_full} {attention} + {n_lin} linear-attention layers)"
    norms_per_layer = 4 if mt in ("gemma2", "gemma3", "gemma3_text") else 2
    add("norm", 1, H, norms_per_layer * L)
    if mt in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        add("norm", 1, hd, 2 * L)  # q_norm, k_norm

    # --- MLP / MoE ---
    E, k_top = None, None
    if expert_key:
        E = _get_int(cfg, expert_key)
        k_top = _get_int(cfg, "num_experts_per_tok") or _get_int(cfg, "experts_per_token")
        if k_top is None:
            raise ConfigError("MoE config needs num_experts_per_tok (top-k)")
        if k_top > E:
            raise ConfigError(f"num_experts_per_tok {k_top} > number of experts {E}")
        Ie = _get_int(cfg, "moe_intermediate_size") or I
        first_dense = _get_int(cfg, "first_k_dense_replace", 0, allow_zero=True)
        freq = _get_int(cfg, "moe_layer_freq", 1)
        step = _get_int(cfg, "decoder_sparse_step", 1)
        mlp_only = _layer_list(cfg, "mlp_only_layers", L)
        n_moe = count_moe_layers(L, first_dense, freq, step, mlp_only)
        n_dense = L - n_moe
        for _ in range(3):  # gate, up, down (gpt-oss fuses gate+up: same count)
            add("expert", Ie, H, n_moe * E, routed=True)
        add("router", E, H, n_moe)
        if mt == "gpt_oss":
            add("bias", 1, E, n_moe)                         # router bias
            add("expert", 1, 2 * Ie + H, n_moe * E, routed=True)  # gate_up and down biases
        n_shared = _get_int(cfg, "n_shared_experts", 0, allow_zero=True)
        Is_cfg = _get_int(cfg, "shared_expert_intermediate_size", 0, allow_zero=True)
        Is = n_shared * Ie or Is_cfg
        if Is:
            for _ in range(3):
                add("shared_expert", Is, H, n_moe)
            if Is_cfg:
                add("router", 1, H, n_moe)  # Qwen2-MoE / Qwen3-Next shared_expert_gate
        if n_dense:
            if I is None:
                raise ConfigError("config has dense layers but no intermediate_size")
            for _ in range(3):
                add("mlp", I, H, n_dense)
        notes.append(f"MoE: {E} experts, top-{k_top}, {n_moe} MoE layers, {n_dense} dense layers; "
                     "expert reads assume uniform routing")
    else:
        for _ in range(3):
            add("mlp", I, H, L)
    if n_lin:
        notes.append(f"linear-attention state: {state_bytes:,} bytes per sequence, read once per decode step "
                     "(its write-back is not counted, as for K/V writes)")

    name = cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) else None
    return ModelShape(
        name=name or ((arch or [None])[0] or mt),
        model_type=mt, hidden_size=H, n_layers=L, vocab_size=V, tied=tied, tensors=T,
        kv_elems_per_token=kv_per_layer * n_full, attn_flops_per_pos=attn_flops * n_full,
        n_experts=E, top_k=k_top, attention=attention, notes=notes,
        max_position_embeddings=max_pos, state_bytes_per_seq=state_bytes, state_flops_per_token=state_flops,
    )


def _shape(model) -> ModelShape:
    return model if isinstance(model, ModelShape) else model_shape(model)


# --------------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------------

def param_counts(model) -> dict:
    """Parameters by role, the total, and the number one token uses (k of E experts)."""
    s = _shape(model)
    by_role: dict = {}
    for t in s.tensors:
        by_role[t.role] = by_role.get(t.role, 0) + t.params
    total = sum(by_role.values())
    routed = sum(t.params for t in s.tensors if t.routed)
    active = total - routed + (routed * s.top_k // s.n_experts if s.n_experts else 0)
    return {"total": total, "active_per_token": active, "by_role": by_role}


def _quantized(t: Tensor, policy: str) -> bool:
    if policy == "all":
        return True
    if policy not in _QUANTIZED_ROLES:
        raise ValueError(f"unknown policy {policy!r}; choose from {POLICIES}")
    return t.is_matrix and t.role in _QUANTIZED_ROLES[policy]


def _fmt(fmt) -> WeightFormat:
    if isinstance(fmt, WeightFormat):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown weight format {fmt!r}; valid: {', '.join(FORMATS)}")
    return FORMATS[fmt]


def _tensor_bytes(t: Tensor, fmt: WeightFormat, policy: str) -> int:
    f = fmt if _quantized(t, policy) else FORMATS["bf16"]
    return f.matrix_bytes(t.rows, t.cols) * t.count


def weight_bytes(model, fmt="bf16", policy="linear") -> int:
    """Bytes of all weights stored in ``fmt`` under ``policy`` (others BF16), scales included."""
    s, f = _shape(model), _fmt(fmt)
    return sum(_tensor_bytes(t, f, policy) for t in s.tensors)


def _kv(kv_dtype: str) -> float:
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV-cache dtype {kv_dtype!r}; valid: {', '.join(KV_DTYPES)}")
    return KV_DTYPES[kv_dtype]


def kv_bytes_per_token(model, kv_dtype="bf16") -> float:
    """Bytes one token adds to the KV cache, all layers (Llama-3-8B bf16: 131072 = 128 KiB)."""
    return _shape(model).kv_elems_per_token * _kv(kv_dtype)


def kv_cache_bytes(model, kv_dtype="bf16", batch=1, context=8192) -> float:
    return kv_bytes_per_token(model, kv_dtype) * batch * context


def distinct_expert_fraction(n_experts: int, top_k: int, batch: int) -> float:
    """Expected share of a layer's experts that ``batch`` tokens touch, uniform routing.

    >>> round(distinct_expert_fraction(8, 2, 1), 3), round(distinct_expert_fraction(8, 2, 32), 3)
    (0.25, 1.0)
    """
    return 1.0 - (1.0 - top_k / n_experts) ** batch


def bytes_per_decode_step(model, fmt="bf16", kv_dtype="bf16", batch=1, context=8192,
                          policy="linear", embedding_read="rows") -> float:
    """Bytes read from memory by one decode step of ``batch`` sequences at ``context`` tokens.

    Weights (routed experts: the expected distinct share a batch touches), the KV cache of the
    full-attention layers at ``context`` for every sequence, and the fixed-size linear-attention state
    (Qwen3-Next / Qwen3.5 Gated DeltaNet) of every sequence."""
    s, f = _shape(model), _fmt(fmt)
    if embedding_read not in ("rows", "table"):
        raise ValueError(f"embedding_read must be 'rows' or 'table', got {embedding_read!r}")
    total = 0.0
    for t in s.tensors:
        b = _tensor_bytes(t, f, policy)
        if t.role == "embedding" and not s.tied and embedding_read == "rows":
            b *= min(batch, t.rows) / t.rows  # one row gathered per sequence
        if t.routed:
            b *= distinct_expert_fraction(s.n_experts, s.top_k, batch)
        total += b
    return total + kv_cache_bytes(s, kv_dtype, batch, context) + batch * s.state_bytes_per_seq


def _matmul_params_per_token(s: ModelShape) -> float:
    """Weights a token multiplies by: everything but the input gather, norms, biases; k/E experts."""
    n = 0.0
    for t in s.tensors:
        if not t.is_matrix or (t.role == "embedding" and not s.tied):
            continue
        n += t.params * (s.top_k / s.n_experts if t.routed else 1.0)
    return n


def decode_flops(model, batch=1, context=8192) -> float:
    """FLOPs of one decode step: 2 per weight per sequence + attention over ``context`` positions."""
    s = _shape(model)
    return batch * (2 * _matmul_params_per_token(s) + s.attn_flops_per_pos * context + s.state_flops_per_token)


def compute_dtype(gpu: GPU, fmt) -> tuple:
    """(dtype, dense TFLOP/s or None) that does the math for ``fmt`` on ``gpu``.

    A format the GPU has no tensor cores for is dequantized to BF16 in the kernel (weight-only), so
    it computes at the BF16 rate: NVFP4 on an H200 -> ("bf16", 989.5).
    """
    f = _fmt(fmt)
    if f.name in gpu.native_formats:
        for d in f.compute:
            if gpu.rate(d) is not None:
                return d, gpu.rate(d)
        return f.compute[-1], None
    return "bf16", gpu.rate("bf16")


def compute_bound_from_batch(model, fmt, gpu, kv_dtype="bf16", context=8192, policy="linear",
                             embedding_read="rows", max_batch=2 ** 20):
    """Smallest batch whose decode intensity reaches the GPU's ridge, or None (never / rate unknown).

    With a long context the KV cache grows with the batch as fast as the FLOPs do, so decode can stay
    memory-bound at every batch: that is the answer None with a known rate.
    """
    s = _shape(model)
    _, rate = compute_dtype(gpu, fmt)
    if rate is None:
        return None
    ridge = rate * 1e12 / (gpu.bandwidth_TBps * 1e12)

    def intensity(b):
        return decode_flops(s, b, context) / bytes_per_decode_step(s, fmt, kv_dtype, b, context,
                                                                   policy, embedding_read)
    if intensity(max_batch) < ridge:
        return None
    lo, hi = 0, max_batch  # intensity is non-decreasing in batch (see module notes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if intensity(mid) >= ridge else (mid, hi)
    return hi


def _lm_head_params(s: ModelShape) -> int:
    return sum(t.params for t in s.tensors if t.role == ("embedding" if s.tied else "lm_head"))


def prefill_point(model, fmt="bf16", tokens=8192, gpu="H200", policy="linear", kv_dtype="bf16") -> dict:
    """One prompt of ``tokens`` tokens: FLOPs, bytes (weights once + KV written), intensity, bound.

    Logits are computed for the last token only (what engines do). Linear layers run at the rate of
    the dtype that does ``fmt``'s math; causal attention (T^2/2 positions) at the BF16 rate -- FP8
    attention is not modelled. MLA attention is costed in its absorbed (decode) form."""
    s, g = _shape(model), get_gpu(gpu) if isinstance(gpu, str) else gpu
    head = _lm_head_params(s)
    lin = 2 * (_matmul_params_per_token(s) - head) * tokens + 2 * head
    attn = s.attn_flops_per_pos * tokens * (tokens + 1) / 2
    nbytes = (bytes_per_decode_step(s, fmt, kv_dtype, tokens, 0, policy, "rows")
              + kv_cache_bytes(s, kv_dtype, 1, tokens))
    dtype, rate = compute_dtype(g, fmt)
    bf16_rate = g.rate("bf16")
    ridge = None if rate is None else rate / g.bandwidth_TBps
    inten = (lin + attn) / nbytes
    t_compute = None if (rate is None or bf16_rate is None) else (lin / rate + attn / bf16_rate) / 1e12
    return {"tokens": tokens, "flops": lin + attn, "linear_flops": lin, "attention_flops": attn,
            "bytes": nbytes, "intensity": inten, "compute_dtype": dtype, "ridge": ridge,
            "compute_bound": None if ridge is None else inten >= ridge,
            "time_compute_s": t_compute, "time_memory_s": nbytes / (g.bandwidth_TBps * 1e12)}


def class_size_bytes(n_params: float, formats=("bf16", "fp8_tensor", "fp8_block128", "mxfp8",
                                                 "nvfp4", "mxfp4")) -> dict:
    """Weight bytes of an ``n_params`` model with *every* parameter in each format (large-matrix limit).

    >>> {k: v / 1e9 for k, v in class_size_bytes(122e9, ("fp8_tensor", "nvfp4")).items()}
    {'fp8_tensor': 122.0, 'nvfp4': 68.625}
    """
    return {f: n_params * _fmt(f).bytes_per_param for f in formats}


def implied_bf16_params(n_params: float, total_bytes: float, fmt="nvfp4") -> float:
    """How many parameters must stay BF16 for an ``n_params`` model in ``fmt`` to weigh ``total_bytes``."""
    b = _fmt(fmt).bytes_per_param
    return (total_bytes - n_params * b) / (2.0 - b)


# --------------------------------------------------------------------------------------------------
# Report, table, seed check
# --------------------------------------------------------------------------------------------------

#: a decode batch of more sequences than this, or a context longer than this, is a typo, not a workload
MAX_BATCH = 2**20
MAX_CONTEXT = 2**31 - 1


def check_batch_context(batch, context) -> None:
    """ValueError unless 1 <= batch <= MAX_BATCH and 0 <= context <= MAX_CONTEXT (integers, not bools)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be an integer from 1 to {MAX_BATCH:,}, got {_show(batch)}")
    if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context <= MAX_CONTEXT:
        raise ValueError(f"context must be an integer from 0 to {MAX_CONTEXT:,}, got {_show(context)}")


def analyze(config, batch=1, context=8192, gpu="H200", kv_dtype="bf16", policy="linear",
            embedding_read="rows", formats=None) -> dict:
    """Everything above for one model, batch, context and GPU, as a JSON-ready dict."""
    check_batch_context(batch, context)
    s = _shape(config)
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    _kv(kv_dtype)
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {POLICIES}")
    fmts = list(formats or FORMATS)
    for f in fmts:
        _fmt(f)
    step = {kv: {f: bytes_per_decode_step(s, f, kv, batch, context, policy, embedding_read) for f in fmts}
            for kv in KV_DTYPES}
    flops = decode_flops(s, batch, context)
    bw = g.bandwidth_TBps * 1e12
    out = {
        "model": {"name": s.name, "model_type": s.model_type, "n_layers": s.n_layers,
                  "hidden_size": s.hidden_size, "vocab_size": s.vocab_size, "tied_embeddings": s.tied,
                  "attention": s.attention, "n_experts": s.n_experts, "top_k": s.top_k},
        "assumptions": {"batch": batch, "context": context, "kv_dtype": kv_dtype, "policy": policy,
                        "embedding_read": embedding_read, "GB": GB,
                        "kv_counted_at": "full context for every sequence (last decode step)"},
        "params": param_counts(s),
        "weight_bytes": {f: weight_bytes(s, f, policy) for f in fmts},
        "kv_bytes_per_token": {kv: kv_bytes_per_token(s, kv) for kv in KV_DTYPES},
        "kv_cache_bytes": {kv: kv_cache_bytes(s, kv, batch, context) for kv in KV_DTYPES},
        "state_bytes_per_seq": s.state_bytes_per_seq,
        "bytes_per_decode_step": step[kv_dtype],
        "bytes_per_decode_step_by_kv": step,
        "flops_per_decode_step": flops,
        "arithmetic_intensity": {f: flops / step[kv_dtype][f] for f in fmts},
        "gpu": {"name": g.name, "source": g.source, "label": g.label, "bandwidth_TBps": g.bandwidth_TBps,
                "tflops_dense": g.tflops, "citation": g.citation},
        "tokens_per_s_ceiling": {f: bw / step[kv_dtype][f] for f in fmts},
        "aggregate_tokens_per_s_ceiling": {f: batch * bw / step[kv_dtype][f] for f in fmts},
        "compute_dtype": {f: compute_dtype(g, f)[0] for f in fmts},
        "ridge_flops_per_byte": {f: (None if compute_dtype(g, f)[1] is None
                                     else compute_dtype(g, f)[1] / g.bandwidth_TBps) for f in fmts},
        "compute_bound_from_batch": {
            f: {"at_context": compute_bound_from_batch(s, f, g, kv_dtype, context, policy, embedding_read),
                "weights_only": compute_bound_from_batch(s, f, g, kv_dtype, 0, policy, embedding_read)}
            for f in fmts},
        "notes": list(s.notes or []),
    }
    return out


def _gb(x):
    return f"{x / GB:,.2f}"


def format_table(report: dict) -> str:
    """Plain-text tables for a report from :func:`analyze`."""
    a, m, g = report["assumptions"], report["model"], report["gpu"]
    p = report["params"]
    lines = [f"{m['name']} ({m['model_type']}, {m['attention']}, {m['n_layers']} layers)  "
             f"batch {a['batch']}, context {a['context']}, KV {a['kv_dtype']}, policy {a['policy']}, "
             f"embedding read: {a['embedding_read']}  (GB = 1e9 B)",
             f"params: {p['total']:,} total, {p['active_per_token']:,} per token",
             "  " + ", ".join(f"{r} {n / 1e9:.3f}B" for r, n in p["by_role"].items()), ""]
    lines.append("KV cache        per token   for batch x context")
    for kv, v in report["kv_cache_bytes"].items():
        lines.append(f"  {kv:<12} {report['kv_bytes_per_token'][kv]:>10,.0f} B  {_gb(v):>10} GB")
    if report.get("state_bytes_per_seq"):
        lines.append(f"  {'lin. state':<12} {'':>12}  {_gb(report['state_bytes_per_seq'] * a['batch']):>10} GB"
                     "  (linear-attention state, fixed size)")
    lines += ["", f"GPU {g['name']} ({g.get('label', g['source'])}): {g['bandwidth_TBps']:.3f} TB/s", ""]
    hdr = (f"{'format':<14}{'weights GB':>11}{'step GB':>10}{'FLOP/B':>9}{'tok/s/seq':>11}"
           f"{'tok/s total':>13}  {'math':<10}{'compute-bound from batch (ctx / no ctx)':>12}")
    lines.append(hdr)
    for f in report["weight_bytes"]:
        cb = report["compute_bound_from_batch"][f]
        cbs = " / ".join("never" if v is None else str(v) for v in (cb["at_context"], cb["weights_only"]))
        if report["ridge_flops_per_byte"][f] is None:
            cbs = "rate unknown"
        lines.append(f"{f:<14}{_gb(report['weight_bytes'][f]):>11}{_gb(report['bytes_per_decode_step'][f]):>10}"
                     f"{report['arithmetic_intensity'][f]:>9.1f}{report['tokens_per_s_ceiling'][f]:>11.1f}"
                     f"{report['aggregate_tokens_per_s_ceiling'][f]:>13.0f}  {report['compute_dtype'][f]:<10}{cbs}")
    for n in report["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


# Seed 003 §3, quoted (claims under test, not results): Llama-3-8B at 8k context, batch 32.
SEED_003 = {"weights": (16.1, 8.0), "kv_cache": (34.4, 17.2), "read_per_step": (50.5, 25.2)}


def seed003_check(config, batch=32, context=8192) -> list:
    """Seed 003's table recomputed under its own conventions: everything in the format (policy
    "all"), the whole embedding table read each step, KV in the same dtype as the weights."""
    s = _shape(config)
    ours = {
        "weights": (weight_bytes(s, "bf16", "all"), weight_bytes(s, "fp8_tensor", "all")),
        "kv_cache": (kv_cache_bytes(s, "bf16", batch, context), kv_cache_bytes(s, "fp8", batch, context)),
        "read_per_step": (bytes_per_decode_step(s, "bf16", "bf16", batch, context, "all", "table"),
                          bytes_per_decode_step(s, "fp8_tensor", "fp8", batch, context, "all", "table")),
    }
    rows = []
    for q, (sb, sf) in SEED_003.items():
        ob, of = ours[q]
        rows.append({"quantity": q, "seed_bf16_GB": sb, "ours_bf16_GB": ob / GB, "seed_fp8_GB": sf,
                     "ours_fp8_GB": of / GB,
                     "match": round(ob / GB, 1) == sb and round(of / GB, 1) == sf})
    return rows


def format_seed003(rows) -> str:
    lines = [f"{'quantity':<15}{'seed bf16':>10}{'ours bf16':>10}{'seed fp8':>10}{'ours fp8':>10}  match (1 decimal)"]
    for r in rows:
        lines.append(f"{r['quantity']:<15}{r['seed_bf16_GB']:>10.1f}{r['ours_bf16_GB']:>10.2f}"
                     f"{r['seed_fp8_GB']:>10.1f}{r['ours_fp8_GB']:>10.2f}  {'yes' if r['match'] else 'NO'}")
    return "\n".join(lines)


def seed000_check(n_params=122e9, claimed_nvfp4=76e9, claimed_fp8=152e9) -> dict:
    """Seed 000: "122B-class: 76 GB NVFP4 weights ... 152 GB FP8". Every parameter in the format gives
    68.6 / 122.0 GB; 76 GB NVFP4 needs ~5.1B parameters left in BF16, and that split in FP8 is ~127 GB."""
    b = class_size_bytes(n_params, ("bf16", "fp8_tensor", "nvfp4"))
    x = implied_bf16_params(n_params, claimed_nvfp4, "nvfp4")
    return {"n_params": n_params, "all_nvfp4_bytes": b["nvfp4"], "all_fp8_bytes": b["fp8_tensor"],
            "fp8_over_nvfp4": b["fp8_tensor"] / b["nvfp4"], "claimed_nvfp4_bytes": claimed_nvfp4,
            "claimed_fp8_bytes": claimed_fp8, "bf16_params_implied_by_claim": x,
            "fp8_bytes_same_bf16_split": 2 * x + (n_params - x) * 1.0}


def gain_table(config, gpus=("H200", "H200-measured", "B200"), formats=("fp8_tensor", "fp8_block128", "mxfp8",
               "nvfp4"), batch=1, context=8192, prefill_tokens=8192, policy="linear") -> list:
    """What each format buys against BF16 on each GPU: the decode ceiling (bytes) and prefill (FLOP rate).

    decode: ratio of memory-bound tokens/s ceilings (BF16 KV for both). prefill: ratio of compute-bound
    times, i.e. the rate of the dtype that does the math over the BF16 rate -- 1.0 for a format the GPU
    has no tensor cores for (dequantized to BF16: the dequant cost itself is not modelled)."""
    s = _shape(config)
    rows = []
    for gname in gpus:
        g = get_gpu(gname) if isinstance(gname, str) else gname
        base_step = bytes_per_decode_step(s, "bf16", "bf16", batch, context, policy)
        base_pf = prefill_point(s, "bf16", prefill_tokens, g, policy)
        for f in formats:
            dtype, rate = compute_dtype(g, f)
            pf = prefill_point(s, f, prefill_tokens, g, policy)
            t0, t1 = base_pf["time_compute_s"], pf["time_compute_s"]
            rows.append({"gpu": g.name, "source": g.source, "format": f, "compute_dtype": dtype,
                         "decode_gain": base_step / bytes_per_decode_step(s, f, "bf16", batch, context, policy),
                         "prefill_compute_bound": pf["compute_bound"],
                         "prefill_gain": None if (t0 is None or t1 is None) else t0 / t1})
    return rows


def format_gain_table(rows) -> str:
    lines = [f"{'gpu':<15}{'format':<14}{'math in':<11}{'decode x':>9}{'prefill x':>10}"]
    for r in rows:
        pg = "-" if r["prefill_gain"] is None else f"{r['prefill_gain']:.2f}"
        lines.append(f"{r['gpu']:<15}{r['format']:<14}{r['compute_dtype']:<11}{r['decode_gain']:>9.2f}{pg:>10}")
    return "\n".join(lines)


def overhead_budget(config, gpu="H200", formats=("bf16", "fp8_tensor"), batch=1, context=0,
                    kernels_per_layer=7, policy="linear") -> dict:
    """Time one decode step takes at the bandwidth ceiling, per layer and per kernel.

    ``kernels_per_layer`` = 7 is an assumption (norm, qkv, attention, o, norm, gate/up, down: what an
    unfused llama layer launches); it is not measured here. When the per-kernel budget is a few
    microseconds, launch and sync overhead -- not bytes -- set the pace, and halving the bytes halves a
    number that no longer matters."""
    s, g = _shape(config), get_gpu(gpu) if isinstance(gpu, str) else gpu
    out = {}
    for f in formats:
        t = bytes_per_decode_step(s, f, "bf16", batch, context, policy) / (g.bandwidth_TBps * 1e12)
        out[f] = {"step_us": t * 1e6, "per_layer_us": t * 1e6 / s.n_layers,
                  "per_kernel_us": t * 1e6 / (s.n_layers * kernels_per_layer)}
    return out


# --------------------------------------------------------------------------------------------------
# Roofline figure
# --------------------------------------------------------------------------------------------------

def roofline_points(config, gpu="H200", formats=("bf16", "fp8_tensor"), batches=(1, 8, 32, 128, 512),
                    context=8192, prefill_tokens=8192, policy="linear", kv_dtype="bf16") -> list:
    """Model points for a roofline: decode at each batch (at ``context`` and with no context) and
    one prefill. ``tflops`` is the attainable rate min(peak, bandwidth x intensity) -- a ceiling."""
    s, g = _shape(config), get_gpu(gpu) if isinstance(gpu, str) else gpu
    pts = []
    for f in formats:
        dtype, rate = compute_dtype(g, f)
        for ctx in (context, 0):
            for b in batches:
                i = decode_flops(s, b, ctx) / bytes_per_decode_step(s, f, kv_dtype, b, ctx, policy)
                att = g.bandwidth_TBps * i if rate is None else min(rate, g.bandwidth_TBps * i)
                pts.append({"name": f"decode {f} B={b} ctx={ctx}", "kind": "decode", "format": f,
                            "batch": b, "context": ctx, "intensity": i, "tflops": att,
                            "compute_dtype": dtype})
        pp = prefill_point(s, f, prefill_tokens, g, policy, kv_dtype)
        att = g.bandwidth_TBps * pp["intensity"] if rate is None else min(rate, g.bandwidth_TBps * pp["intensity"])
        pts.append({"name": f"prefill {f} T={prefill_tokens}", "kind": "prefill", "format": f,
                    "tokens": prefill_tokens, "intensity": pp["intensity"], "tflops": att, "compute_dtype": dtype})
    return pts


def _check_measured(points):
    out = []
    for i, p in enumerate(points or []):
        if not isinstance(p, dict) or not {"name", "intensity", "tflops"} <= set(p):
            raise ValueError(f"measured point {i} must be a dict with name, intensity, tflops; got {p!r}")
        if not (float(p["intensity"]) > 0 and float(p["tflops"]) > 0):
            raise ValueError(f"measured point {p['name']!r}: intensity and tflops must be > 0")
        out.append(dict(p))
    return out


#: the committed results this module's writer must not overwrite unless asked (``overwrite=True``)
COMMITTED_OUTPUTS = Path(__file__).resolve().parents[1] / "outputs"


def _check_targets(paths, overwrite: bool) -> None:
    """Refuse to replace an existing file under the repository's outputs/ unless ``overwrite`` (a notebook
    re-run must not silently replace a committed result; pass a runs/ path, or overwrite=True on purpose)."""
    for p in paths:
        if p is None:
            continue
        p = Path(p).resolve()
        if p.exists() and not p.is_file():
            raise ValueError(f"{p} exists and is not a file")
        if not overwrite and p.exists() and p.is_relative_to(COMMITTED_OUTPUTS.resolve()):
            raise ValueError(f"{p} is a committed result under outputs/; pass overwrite=True (CLI: --overwrite) "
                             "to replace it, or write to another folder")


def roofline_figure(config, gpus=("H200", "H200-measured"), formats=("bf16", "fp8_tensor"),
                    batches=(1, 8, 32, 128, 512), context=8192, prefill_tokens=8192, policy="linear",
                    kv_dtype="bf16", measured_points=None, out_png=None, out_json=None,
                    table_batch=32, command="fp8lab.bandwidth.roofline_figure", overwrite=False):
    """Draw the roofline of ``gpus`` with the model's decode/prefill points; optionally save PNG+JSON.

    ``measured_points``: kernels measured by the lab, ``[{"name", "intensity", "tflops"}, ...]``,
    drawn as filled stars (the model points are hollow: they are ceilings, not measurements).
    Returns ``(figure, data)``; ``data`` is what ``out_json`` holds. Nothing is written unless a path is
    given; both files go through the atomic writers of fp8lab.store with fp8lab.provenance's record, and an
    existing file under the repository's outputs/ is replaced only with ``overwrite=True``.
    """
    _check_targets((out_png, out_json), overwrite)
    import matplotlib
    if out_png is not None and "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = _check_measured(measured_points)
    s = _shape(config)
    gs = [get_gpu(n) if isinstance(n, str) else n for n in gpus]
    pts = roofline_points(s, gs[0], formats, batches, context, prefill_tokens, policy, kv_dtype)
    fig, ax = plt.subplots(figsize=(11, 5.5))
    xs = [10 ** (k / 20) for k in range(-20, 101)]  # 0.1 .. 1e5 FLOP/byte
    styles = ["-", "--", ":"]
    roofs = {}
    for gi, g in enumerate(gs):
        # only the roofs the plotted formats use (BF16 always: attention runs there)
        used = {"bf16"} | {compute_dtype(g, f)[0] for f in formats}
        roofs[g.name] = {"source": g.source, "bandwidth_TBps": g.bandwidth_TBps,
                         "tflops": {k: v for k, v in g.tflops.items() if v is not None and k in used}}
        top = max(roofs[g.name]["tflops"].values(), default=None)
        ax.plot(xs, [g.bandwidth_TBps * x if top is None else min(top, g.bandwidth_TBps * x) for x in xs],
                styles[gi % 3], color="k", lw=1, label=f"{g.name} ({g.source}) {g.bandwidth_TBps:.2f} TB/s")
        for d, r in roofs[g.name]["tflops"].items():
            ax.hlines(r, r / g.bandwidth_TBps, xs[-1], colors="grey", linestyles=styles[gi % 3], lw=0.8)
            ax.text(xs[-1], r, f"{g.name} {d} {r:.0f} ", va="bottom", ha="right", fontsize=7)
    colors = {"bf16": "tab:blue", "fp8_tensor": "tab:orange", "fp8_block128": "tab:red", "nvfp4": "tab:green",
              "mxfp4": "tab:olive", "mxfp8": "tab:purple", "int8_channel": "tab:brown"}
    for f in formats:
        for ctx, mk in ((context, "o"), (0, "s")):
            ps = [p for p in pts if p["format"] == f and p["kind"] == "decode" and p["context"] == ctx]
            ax.plot([p["intensity"] for p in ps], [p["tflops"] for p in ps], mk, mfc="none",
                    color=colors.get(f, "k"), label=f"decode {f}, ctx {ctx}, B={batches[0]}..{batches[-1]}")
            if ctx == 0:
                for p in ps:
                    ax.annotate(f"B={p['batch']}", (p["intensity"], p["tflops"]), fontsize=6,
                                xytext=(3, -8), textcoords="offset points")
        pp = next(p for p in pts if p["format"] == f and p["kind"] == "prefill")
        ax.plot([pp["intensity"]], [pp["tflops"]], "^", mfc="none", color=colors.get(f, "k"),
                label=f"prefill {f}, {prefill_tokens} tokens")
    for p in measured:
        ax.plot([p["intensity"]], [p["tflops"]], "*", ms=11, label=f"measured: {p['name']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.1, 1e5)
    ax.set_xlabel("arithmetic intensity (FLOP / byte read)")
    ax.set_ylabel("TFLOP/s (dense)")
    ax.set_title(f"{s.name}: decode and prefill on the {gs[0].name} roofline\n"
                 f"(hollow = napkin ceilings from fp8lab.bandwidth, policy {policy}, KV {kv_dtype})", fontsize=9)
    # beside the axes (covers no point); in two columns once one column would be taller than the figure
    n_entries = len(ax.get_legend_handles_labels()[0])
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, ncol=1 if n_entries <= 24 else 2)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    from fp8lab.provenance import provenance
    from fp8lab.store import atomic_write_json, save_figure

    data = {"provenance": provenance(command, cuda=False,
                                     computed_on="arithmetic from the config and fp8lab.gpus; no device timed"),
            "table": analyze(s, batch=table_batch, context=context, gpu=gs[0], kv_dtype=kv_dtype, policy=policy),
            "roofline": {"gpus": roofs, "points": pts, "measured_points": measured}}
    if out_png is not None:
        save_figure(fig, out_png, dpi=120)
    if out_json is not None:
        atomic_write_json(out_json, data)
    return fig, data


# --------------------------------------------------------------------------------------------------
# Decode ceilings on several GPUs side by side (the GB10 next to the H200)
# --------------------------------------------------------------------------------------------------

def decode_ceilings(config, gpus=("H200", "H200-measured", "GB10"), formats=("bf16", "fp8_block128", "nvfp4"),
                    batch=1, context=8192, kv_dtype="bf16", policy="linear", embedding_read="rows") -> list:
    """Memory-bound decode ceilings of one model on several GPUs: one row per (gpu, format).

    The bytes per step depend only on the model and the format; the GPU sets the bandwidth, so on a
    273 GB/s GB10 every ceiling is 4.8 / 0.273 = 17.6x lower than on a datasheet H200 -- bytes per token
    matter even more there. Each row says where its bandwidth comes from ("spec, not measured" or
    "measured <date> on <device>").

    >>> rows = decode_ceilings("tests/data/llama3_8b_config.json", gpus=("GB10",), formats=("bf16",), context=0)
    >>> round(rows[0]["tokens_per_s"], 1)          # 0.273e12 / 15.01e9 bytes (BF16, no KV cache)
    18.2
    """
    check_batch_context(batch, context)
    s = _shape(config)
    rows = []
    for name in gpus:
        g = get_gpu(name) if isinstance(name, str) else name
        for f in formats:
            step = bytes_per_decode_step(s, f, kv_dtype, batch, context, policy, embedding_read)
            tps = g.bandwidth_TBps * 1e12 / step
            rows.append({"gpu": g.name, "source": g.source, "label": g.label, "bandwidth_TBps": g.bandwidth_TBps,
                         "format": f, "batch": batch, "context": context, "kv_dtype": kv_dtype,
                         "bytes_per_step": step, "tokens_per_s": tps, "aggregate_tokens_per_s": batch * tps})
    return rows


def format_decode_ceilings(rows) -> str:
    """The rows of :func:`decode_ceilings` as a table (GB = 1e9 bytes)."""
    lines = [f"{'gpu':<15}{'TB/s':>7}  {'format':<14}{'step GB':>9}{'tok/s/seq':>11}{'tok/s total':>13}  source"]
    for r in rows:
        lines.append(f"{r['gpu']:<15}{r['bandwidth_TBps']:>7.3f}  {r['format']:<14}{_gb(r['bytes_per_step']):>9}"
                     f"{r['tokens_per_s']:>11.1f}{r['aggregate_tokens_per_s']:>13.0f}  {r['label']}")
    if rows:
        r = rows[0]
        lines.append(f"batch {r['batch']}, context {r['context']}, KV {r['kv_dtype']}; ceilings = bandwidth / "
                     "bytes read per decode step (one token per weight read, no speculation)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    """``python -m fp8lab.bandwidth CONFIG [...]``: exit 0 with the table (or JSON), 2 with one error line."""
    from fp8lab.cli import OneLineParser, UsageError, emit, fail, parse, split_list

    ap = OneLineParser(prog="python -m fp8lab.bandwidth",
                       description="Weight, KV-cache and decode-bandwidth math for an HF config.")
    ap.add_argument("config", help="config.json path, a folder holding one, or a hub id")
    ap.add_argument("--batch", type=int, default=1, help="sequences decoded together (default 1)")
    ap.add_argument("--context", type=int, default=8192,
                    help="tokens in each sequence's KV cache (default 8192)")
    ap.add_argument("--gpu", default="H200", help=f"one of {', '.join(NAMES)} (default H200)")
    ap.add_argument("--kv-dtype", default="bf16", help=f"KV cache dtype for the step: {', '.join(KV_DTYPES)}")
    ap.add_argument("--policy", default="linear", help=f"which tensors a format converts: {', '.join(POLICIES)}")
    ap.add_argument("--embedding-read", default="rows", choices=("rows", "table"),
                    help="rows: one embedding row per sequence (default); table: the whole table (seed 003)")
    ap.add_argument("--compare-gpus", default=None, metavar="GPU,GPU,...",
                    help="also print the decode ceilings on these GPUs side by side, e.g. H200,H200-measured,GB10")
    ap.add_argument("--roofline", default=None, metavar="DIR",
                    help="also write roofline.png and roofline.json (with provenance) into DIR")
    ap.add_argument("--overwrite", action="store_true",
                    help="let --roofline replace files already committed under outputs/")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args, status = parse(ap, argv)
    if args is None:
        return status
    try:
        report = analyze(args.config, batch=args.batch, context=args.context, gpu=args.gpu,
                         kv_dtype=args.kv_dtype, policy=args.policy, embedding_read=args.embedding_read)
        ceilings = None
        if args.compare_gpus is not None:
            names = split_list(args.compare_gpus, "--compare-gpus")
            ceilings = decode_ceilings(args.config, names, batch=args.batch, context=args.context,
                                       kv_dtype=args.kv_dtype, policy=args.policy,
                                       embedding_read=args.embedding_read)
        written = []
        if args.roofline is not None:
            if not args.roofline.strip() or "\x00" in args.roofline:
                raise ValueError(f"--roofline needs a folder name, got {args.roofline[:40]!r}")
            out = Path(args.roofline)
            if out.exists() and not out.is_dir():
                raise ValueError(f"--roofline {out}: exists and is not a folder")
            png, js = out / "roofline.png", out / "roofline.json"
            cmd = "python -m fp8lab.bandwidth " + " ".join(sys.argv[1:] if argv is None else map(str, argv))
            fig, _ = roofline_figure(args.config, gpus=(args.gpu,), context=args.context, policy=args.policy,
                                     kv_dtype=args.kv_dtype, out_png=png, out_json=js, table_batch=args.batch,
                                     command=cmd, overwrite=args.overwrite)
            import matplotlib.pyplot as plt
            plt.close(fig)
            written = [png, js]
    except (ValueError, OSError, UsageError) as e:  # ConfigError included
        return fail(str(e))
    if args.json:
        if ceilings is not None:
            report["decode_ceilings"] = ceilings
        emit(json.dumps(report, indent=1))
    else:
        emit(format_table(report))
        if ceilings is not None:
            emit("\n" + format_decode_ceilings(ceilings))
    for p in written:
        emit(f"wrote {p}")
    return 0


if __name__ == "__main__":
    from fp8lab.cli import run
    run(main)
