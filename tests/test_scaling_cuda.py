"""formats and scaling on any device: the CUDA result equals the CPU result bit for bit.

Parametrized over devices:
  "cuda" (@pytest.mark.gpu, the lent H200): every format's encode / encode_fast / round / decode over every bf16 and
         fp16 pattern plus random floats and the ties, and quantize / dequantize / fake_quant for EVERY granularity
         (none, tensor, channel, token, group, block, nvfp4 and its three rules, mx and its four rules, delayed) and
         every element format, on eight input distributions (partial blocks included), with nonfinite="raise" and
         "propagate" (NaN blocks, Inf-only blocks): codes, scales, scale codes, global scales and dequantized values
         compared as raw bits (NaN positions compared as NaN). Also: the public helpers, what CUDA torch does when it
         divides by a CPU scalar (why the lab never does), and the cuda_defines() compiled by NVRTC.
  "cpu"  (CI): the same calls, once per granularity and format, under a device-hygiene guard -- the default device
         is set to "meta", so any constant created without `device=x.device` breaks the call, and every division is
         checked to be tensor / tensor on x's device (a Python-number or CPU-scalar divisor is what CUDA turns into a
         multiply by the reciprocal). Results must equal the unguarded CPU run.
Run on the GPU machine:  python -m pytest -q -s -m gpu tests/test_scaling_cuda.py   (prints a summary line last)
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fp8lab import formats, scaling
from fp8lab.formats import E2M1, E4M3, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0, INT8
from fp8lab.scaling import MX_RULES, NVFP4_RULES, DelayedScaling, QuantSpec, dequantize, fake_quant, quantize

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
FLOAT_FMTS = [E4M3, E5M2, E2M1, E8M0, E4M3FNUZ, E5M2FNUZ]
ELEM_FMTS = ["e4m3", "e5m2", "e2m1", "int8", "e4m3fnuz", "e5m2fnuz"]
INF, NAN = float("inf"), float("nan")
SUMMARY = {"compared": 0}


# ---- the hygiene guard (CPU) ------------------------------------------------------------------------------
class DivisionGuard(TorchDispatchMode):
    """Fails on a division whose divisor is a Python number or a tensor on another device, and on reciprocal."""

    DIVS = ("aten.div.", "aten.div_.", "aten.true_divide", "aten.floor_divide", "aten.remainder")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith(self.DIVS) and "floor_divide" not in name and "remainder" not in name:
            num, den = args[0], args[1]
            if not isinstance(den, torch.Tensor):
                raise AssertionError(f"{name}: divides by a Python number ({den!r}): CUDA would multiply by 1/{den!r}")
            if isinstance(num, torch.Tensor) and den.device != num.device:
                raise AssertionError(f"{name}: divisor on {den.device}, dividend on {num.device}")
        if name.startswith("aten.reciprocal"):
            raise AssertionError(f"{name}: reciprocal (the lab divides, it never multiplies by 1/x)")
        return func(*args, **(kwargs or {}))


def on_device(device: str, fn, *args):
    """Run fn(*args moved to device). On "cpu" the run is guarded (meta default device + DivisionGuard)."""
    moved = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    if device != "cpu":
        return fn(*moved)
    with torch.device("meta"), DivisionGuard():
        return fn(*moved)


def same_bits(a, b, what: str) -> None:
    """Raw-bit equality; NaN only needs to be NaN in both (CUDA may produce another NaN payload or sign)."""
    if a is None or b is None:
        assert a is None and b is None, what
        return
    a, b = a.detach().cpu(), b.detach().cpu()
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    if a.is_floating_point():
        na, nb = torch.isnan(a), torch.isnan(b)
        assert torch.equal(na, nb), f"{what}: NaN at different places ({int((na != nb).sum())})"
        wide = torch.float64 if a.dtype == torch.float64 else torch.float32      # bf16/fp16 widen exactly
        ia = a.to(wide).masked_fill(na, 0).view(torch.int64 if wide == torch.float64 else torch.int32)
        ib = b.to(wide).masked_fill(nb, 0).view(torch.int64 if wide == torch.float64 else torch.int32)
        bad = ia != ib
    else:
        bad = a != b
    if bool(bad.any()):
        idx = bad.nonzero()[:5].tolist()
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.numel()} differ; first at {idx}: "
                             f"yours {a[bad][:5].tolist()} spec(CPU) {b[bad][:5].tolist()}")
    SUMMARY["compared"] += a.numel()


def compare(device, fn, *args, what=""):
    """fn on the device (guarded on "cpu") against fn on the CPU, every returned tensor bit for bit."""
    ref = fn(*args)
    got = on_device(device, fn, *args)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    for i, (g, r) in enumerate(zip(got, ref)):
        if isinstance(r, torch.Tensor) or r is None:
            same_bits(g, r, f"{what} [{i}]")


# ---- inputs ----------------------------------------------------------------------------------------------
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def dist(name: str, shape=(3, 5, 200), seed=0) -> torch.Tensor:
    """Eight input distributions; K = 200 leaves partial 16-, 32- and 128-blocks."""
    g = _gen(seed)
    x = torch.randn(shape, generator=g)
    if name == "tiny":                       # under E4M3's and E2M1's windows
        x = x * 3e-4
    elif name == "subnormal":                # float32 subnormals: the scale itself underflows
        x = x * 1e-39
    elif name == "huge":                     # near float32's max: scales near 2**127
        x = x * 1e37
    elif name == "outliers":                 # 1 % of values x 300 (the LLM activation pattern)
        x = x * torch.where(torch.rand(shape, generator=g) < 0.01, 300.0, 1.0)
    elif name == "zero_rows":                # all-zero groups and blocks
        x[..., ::3, :] = 0
    elif name == "ties":                     # exact midpoints of E4M3/E2M1 after a per-tensor scale of 1
        mids = torch.tensor([m for m, _ in formats.e2m1_midpoints()] + [464.0, 3 * 2 ** -10, 0.3125, -2.5])
        x = mids[torch.randint(0, len(mids), shape, generator=g)] * torch.where(torch.rand(shape, generator=g) < .5, -1, 1)
        x.view(-1)[0] = 448.0                # amax 448: scale exactly 1, so the ties stay ties
    elif name == "bf16":
        x = x.to(torch.bfloat16)
    return x


DISTS = ["normal", "tiny", "subnormal", "huge", "outliers", "zero_rows", "ties", "bf16"]


def with_specials(x: torch.Tensor) -> torch.Tensor:
    """NaN in one block, an Inf-only block (16 and 32 wide), scattered +-Inf: for nonfinite='propagate'."""
    x = x.clone().float()
    f = x.view(-1, x.shape[-1])
    f[0, 3] = NAN
    f[1, 0:32] = INF
    f[1, 8:16] = -INF
    f[2, 40] = -INF
    f[-1, -1] = INF                          # in the partial last block
    return x


def all_inputs(fmt) -> torch.Tensor:
    b = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    r = torch.randn(100_000, generator=_gen(1)) * torch.exp2(torch.empty(100_000).uniform_(-30, 30, generator=_gen(2)))
    t = fmt.table().double()
    v = torch.unique(t[torch.isfinite(t) & (t >= 0)])
    mids = ((v[:-1] + v[1:]) / 2).float()
    return torch.cat([b.view(torch.bfloat16).float(), b.view(torch.float16).float(), r, mids, -mids,
                      torch.nextafter(mids, torch.full_like(mids, INF))])


# ---- formats ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FLOAT_FMTS, ids=lambda f: f.name)
def test_formats_on_device(device, fmt):
    x = all_inputs(fmt) if device != "cpu" else all_inputs(fmt)[::97]
    for sat in (True, False):
        compare(device, lambda v: fmt.encode(v, saturate=sat), x, what=f"{fmt.name}.encode sat={sat}")
        compare(device, lambda v: fmt.round(v, saturate=sat), x, what=f"{fmt.name}.round sat={sat}")
    compare(device, fmt.encode_fast, x, what=f"{fmt.name}.encode_fast")
    codes = torch.arange(1 << fmt.bits, dtype=torch.int32).to(torch.uint8)
    compare(device, fmt.decode, codes, what=f"{fmt.name}.decode")


@pytest.mark.parametrize("device", DEVICES)
def test_int8_and_bf16_on_device(device):
    x = all_inputs(E4M3)
    x = x[torch.isfinite(x)]
    compare(device, INT8.encode, x.clamp(-1e6, 1e6), what="int8.encode")
    compare(device, INT8.round, x, what="int8.round")
    compare(device, formats.bf16_round, x, what="bf16_round")


# ---- scaling, every granularity -------------------------------------------------------------------------
GRAN_CASES = {
    "none": lambda f, nf: QuantSpec(f, "none", nonfinite=nf),
    "tensor": lambda f, nf: QuantSpec(f, "tensor", nonfinite=nf),
    "channel0": lambda f, nf: QuantSpec(f, "channel", axis=0, nonfinite=nf),
    "channel-1": lambda f, nf: QuantSpec(f, "channel", axis=-1, nonfinite=nf),
    "token": lambda f, nf: QuantSpec(f, "token", nonfinite=nf),
    "group128": lambda f, nf: QuantSpec(f, "group", group_size=128, nonfinite=nf),
    "group7": lambda f, nf: QuantSpec(f, "group", group_size=7, nonfinite=nf),
    "group_huge": lambda f, nf: QuantSpec(f, "group", group_size=2**40, nonfinite=nf),
    "block128": lambda f, nf: QuantSpec(f, "block", block=(128, 128), nonfinite=nf),
    "block3x5": lambda f, nf: QuantSpec(f, "block", block=(3, 5), nonfinite=nf),
}
GRAN_CASES.update({f"nvfp4-{r}": (lambda r: lambda f, nf: QuantSpec("e2m1", "nvfp4", scale_rule=r, nonfinite=nf))(r)
                   for r in NVFP4_RULES})
GRAN_CASES.update({f"mx-{r}": (lambda r: lambda f, nf: QuantSpec(f, "mx", scale_rule=r, nonfinite=nf))(r)
                   for r in MX_RULES})


def _fmts_for(case: str):
    if case.startswith("nvfp4"):
        return ["e2m1"]
    if case.startswith("mx"):
        return ["e2m1", "e4m3", "e5m2"]
    return ELEM_FMTS


def _run(spec):
    def fn(x):
        q = quantize(x, spec)
        return q.codes, q.scale, q.scale_codes, q.global_scale, dequantize(q), fake_quant(x, spec)
    return fn


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(GRAN_CASES))
def test_quantize_on_device(device, case):
    dists = DISTS if device != "cpu" else ["outliers"]
    for fmt in _fmts_for(case):
        for nf in ("raise", "propagate"):
            spec = GRAN_CASES[case](fmt, nf)
            for d in dists:
                big = device != "cpu" and d in ("normal", "zero_rows")     # partial 128-blocks in both dims
                shapes = [(3, 5, 200), (130, 257)] if big else [(3, 5, 200)]
                for shape in shapes:
                    x = dist(d, shape, seed=len(case))
                    if nf == "propagate":
                        x = with_specials(x)
                    compare(device, _run(spec), x, what=f"{case} {fmt} {nf} {d} {shape}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_input_dtypes_on_device(device, dtype):
    x = dist("outliers", (4, 300)).to(dtype)
    for spec in (QuantSpec("e4m3", "group"), QuantSpec("e2m1", "nvfp4"), QuantSpec("e4m3", "mx"),
                 QuantSpec("e5m2", "token")):
        compare(device, _run(spec), x, what=f"{spec.granularity} {dtype}")


@pytest.mark.parametrize("device", DEVICES)
def test_delayed_scaling_on_device(device):
    steps = [dist(d, (8, 64), seed=i) for i, d in enumerate(["normal", "outliers", "tiny", "normal", "huge"])]

    def fn(*xs):
        out = []
        for margin in (0, 3):
            ds = DelayedScaling("e4m3", history_len=2, margin=margin)
            for x in xs:
                q = ds.quantize(x)
                out += [q.codes, q.scale, dequantize(q)]
        return out
    compare(device, fn, *steps, what="delayed")


@pytest.mark.parametrize("device", DEVICES)
def test_helpers_on_device(device):
    w = dist("outliers", (256, 384) if device != "cpu" else (130, 160)) * 0.02
    kv = dist("normal", (2, 4, 33, 64))
    compare(device, scaling.quantize_weight_channel, w, what="quantize_weight_channel")
    compare(device, scaling.quantize_group, w, what="quantize_group")
    compare(device, scaling.quantize_block, w, what="quantize_block")
    compare(device, scaling.quantize_nvfp4, w, what="quantize_nvfp4")
    for rule in NVFP4_RULES:
        compare(device, lambda v: scaling.quantize_nvfp4(v, global_amax=3.0, scale_rule=rule), w, what=f"nvfp4 {rule}")
    for rule in MX_RULES:
        compare(device, lambda v: scaling.quantize_mx(v, "e2m1", rule), w, what=f"quantize_mx {rule}")
    for gran in scaling.KV_GRANULARITIES:
        compare(device, lambda v: scaling.quantize_kv(v, gran), kv, what=f"quantize_kv {gran}")
    compare(device, lambda a: scaling.scale_from_amax(a, E4M3), w.abs().amax(1), what="scale_from_amax")
    compare(device, lambda a: scaling.mx_scale_exponent(a, E4M3, "rceil"), w.abs().amax(1), what="mx_scale_exponent")


def test_guard_catches_what_cuda_would_get_wrong():
    """The CPU guard is not vacuous: the old habits it exists for fail under it."""
    x = torch.randn(8)
    with pytest.raises(AssertionError, match="Python number"):
        on_device("cpu", lambda v: v / 448.0, x)
    with pytest.raises(AssertionError, match="reciprocal"):
        on_device("cpu", lambda v: v * v.reciprocal(), x)
    with pytest.raises((AssertionError, RuntimeError), match="meta"):   # a constant made without device=
        on_device("cpu", lambda v: v / torch.tensor(448.0), x)
    with pytest.raises((AssertionError, RuntimeError), match="meta"):
        on_device("cpu", lambda v: torch.where(v > 0, v, torch.zeros(8)), x)
    on_device("cpu", lambda v: v / torch.tensor(448.0, device=v.device), x)


# ---- what CUDA does, and the constants compiled on the device --------------------------------------------
@pytest.mark.gpu
def test_cuda_division_semantics():
    """x / (CPU scalar or Python number) on CUDA is x * (1/s): not IEEE. x / (CUDA 0-d tensor) is IEEE."""
    g = _gen(0)
    x = torch.randn(1 << 20, generator=g) * torch.exp2(torch.empty(1 << 20).uniform_(-20, 20, generator=g))
    s = torch.tensor(448.0 * 6.0 / 7.0)                  # a divisor whose reciprocal is inexact
    ref = x / s                                          # CPU: IEEE division
    ieee = (x.cuda() / s.cuda()).cpu()
    recip = (x.cuda() / s).cpu()                         # CPU 0-d tensor divisor
    pyfloat = (x.cuda() / float(s)).cpu()
    same_bits(ieee, ref, "CUDA tensor / CUDA 0-d tensor")
    n_recip = int((recip != ref).sum())
    n_py = int((pyfloat != ref).sum())
    print(f"CUDA x / CPU-scalar differs from IEEE x / s on {n_recip} of {x.numel()} values; "
          f"x / python float on {n_py} (the reason scaling divides tensor by tensor on x's device)")


@pytest.mark.gpu
def test_cuda_defines_compile_with_nvrtc():
    """formats.cuda_defines() as NVRTC -D options: the device reads back exactly FloatFormat's numbers."""
    cp = pytest.importorskip("cupy")
    src = r"""
    extern "C" __global__ void read_defines(float* f, unsigned* u) {
        const float e2m1[16] = FP8LAB_E2M1_VALUES;
        for (int i = 0; i < 16; ++i) f[i] = e2m1[i];
        f[16] = FP8LAB_E4M3_MAX; f[17] = FP8LAB_E5M2_MAX; f[18] = FP8LAB_E4M3FNUZ_MAX; f[19] = FP8LAB_NVFP4_GLOBAL_DIV;
        f[20] = FP8LAB_E4M3_MIN_SUBNORMAL; f[21] = FP8LAB_E8M0_MIN_SUBNORMAL; f[22] = FP8LAB_E2M1_MID4;
        u[0] = FP8LAB_E4M3_MAX_BITS; u[1] = FP8LAB_E4M3_NAN_CODE; u[2] = FP8LAB_E5M2_NAN_CODE; u[3] = FP8LAB_E4M3FNUZ_NAN_CODE;
        u[4] = FP8LAB_E2M1_MID4_BITS; u[5] = FP8LAB_E2M1_MID4_STRICT; u[6] = FP8LAB_MX_BLOCK; u[7] = FP8LAB_E4M3_EMAX;
    }"""
    mod = cp.RawModule(code=src, options=tuple(f"-D{d}" for d in formats.cuda_define_options()), backend="nvrtc")
    f, u = cp.zeros(23, dtype=cp.float32), cp.zeros(8, dtype=cp.uint32)
    mod.get_function("read_defines")((1,), (1,), (f, u))
    f, u = f.get().tolist(), u.get().tolist()
    assert f[:16] == E2M1.table().tolist()
    assert f[16:22] == [448.0, 57344.0, 240.0, 2688.0, 2.0 ** -9, 2.0 ** -127] and f[22] == 2.5
    assert u == [0x43E00000, 0x7F, 0x7E, 0x80, 0x40200000, 1, 32, 8]


@pytest.mark.gpu
def test_summary_last():
    """Prints how much was compared (run last: the file's tests run in order)."""
    print(f"\nSUMMARY test_scaling_cuda: {SUMMARY['compared']:,} values compared bit for bit, CUDA vs CPU, 0 mismatches")
    assert SUMMARY["compared"] > 0
