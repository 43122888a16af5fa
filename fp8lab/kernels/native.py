"""Which kernel variant runs where: the chip's own low-precision instructions where they exist, the portable
kernels everywhere else. One table, read by every wrapper's `"auto"` choice, by the tests and by notebook 09.

    choose("nvfp4_quant", 121)   -> "cvt"        # cvt.rn.satfinite.e2m1x2.f32 (F2FP...E2M1) on the GB10
    choose("nvfp4_quant", 90)    -> "bits"       # the software E2M1 conversion on an H200
    choose("gemm_w4a4", 121)     -> "omma"       # mma.sync kind::mxf4nvf4 block_scale (OMMA.SF) on sm_120a/121a
    choose("gemm_w8a8", 90)      -> "wgmma_ws"   # Hopper's FP8 tensor cores are wgmma (QGMMA)

Why by arch and not by trying: the native instructions exist only in the arch-specific targets (sm_100a,
sm_120a, sm_121a); ptxas refuses them for sm_89, sm_90a and the plain sm_120 / sm_121 targets, so a binary
built without the `a` suffix cannot contain them at all (tests/test_kernels_sass.py proves each refusal). The
lab's loader compiles every source for the running device's own target (sources.py), so on a GB10 the variants
below are the ones that exist; on an H200 the portable ones run and are the ones the H200 tests check.

What was verified where (no GB10 was available): every variant below compiles for its archs and its SASS holds
the instruction it is named after (CPU CI); the portable variants run and are checked bit for bit on an H200;
the native ones are checked against CPU references of their arithmetic (fp8lab.kernels.mma_reference), and
their GPU tests skip unless the device is an sm_120 / sm_121 part. No GB10 timing exists in this lab.
"""
from __future__ import annotations

from . import sources

#: family -> (native variant, the archs that have it, the portable variant, what the native one uses)
FAMILIES = {
    "nvfp4_quant": ("cvt", sources.E2M1_CVT_ARCHS, "bits",
                    "cvt.rn.satfinite.e2m1x2.f32 (F2FP.SATFINITE.E2M1.F32): two fp32 -> two E2M1 codes"),
    "gemv_nvfp4": ("hw", sources.E2M1_CVT_ARCHS, "v2",
                   "cvt.rn.f16x2.e2m1x2 (F2FP.F16.E2M1.UNPACK_B): two E2M1 codes -> two exact f16"),
    "gemm_w4a4": ("omma", sources.MMA_NVF4_ARCHS, "emu",
                  "mma.sync m16n8k64 kind::mxf4nvf4 block_scale scale_vec::4X ue4m3 (OMMA.SF.16864...UE4M3.4X)"),
}


def _cc(cc):
    if cc is None:
        from ._cuda import device_cc

        return device_cc()
    return int(cc)


def choose(family: str, cc: int | None = None, smem_optin: int | None = None) -> str:
    """The variant of `family` to run on compute capability `cc` (None: the running device's).

    gemm_w8a8: wgmma_ws on sm_90; elsewhere the mma.sync e4m3 kernel (QMMA on sm_89 / sm_120 / sm_121), with 3
    pipeline stages where the device allows at most 99 KB of shared memory per block (`smem_optin` bytes; sm_89
    and the sm_12x parts), 4 where it allows more.
    """
    if family == "gemm_w8a8":
        c = _cc(cc)
        if c == 90:
            return "wgmma_ws"
        if smem_optin is None and cc is None:
            from ._cuda import _cupy

            smem_optin = int(_cupy().cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])
        return "mma_fp8" if smem_optin is not None and smem_optin >= 4 * 32768 + 1024 else "mma_fp8_s3"
    try:
        native, archs, portable, _ = FAMILIES[family]
    except KeyError:
        raise KeyError(f"unknown kernel family {family!r}; known: {', '.join(list(FAMILIES) + ['gemm_w8a8'])}") from None
    return native if _cc(cc) in archs else portable


def table(archs=sources.SUMMARY_ARCHS) -> list[dict]:
    """One row per (family, arch): the variant `choose` picks there (gemm_w8a8 at each arch's 99 KB / 227 KB limit)."""
    optin = {89: 101376, 90: 232448, 100: 232448, 120: 101376, 121: 101376}
    rows = []
    for fam in list(FAMILIES) + ["gemm_w8a8"]:
        for cc in archs:
            rows.append({"family": fam, "arch": f"sm_{cc}", "variant": choose(fam, cc, optin.get(cc))})
    return rows
