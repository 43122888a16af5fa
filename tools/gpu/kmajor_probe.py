"""Does version 3 stream faster when the whole grid reads one window of memory at a time? (a diagnosis, not a result)

    python3 tools/gpu/kmajor_probe.py OUT.json [M ...]    # M = 1 and 16 by default; FP8LAB_PROBE_SHAPES=14336x4096,...
                                                          # a 300 s budget (FP8LAB_PROBE_BUDGET_S)

Version 3 packs a matrix group-major: the KU units of row group 0, then those of group 1, ... Every warp streams its
own contiguous range, so at any moment the grid's ~900 warps read ~900 places a group (or a range) apart. On the H200
(outputs/kernels/decode_gap.json) version 3 with all its arithmetic cut away is still slower than `_scaled_mm`
tensorwise at M = 1: the loads themselves reach memory more slowly than cuBLAS's. The 'kmajor' copy stores the same
chunks chunk-major -- chunk c of every group, then chunk c + 1 -- so warps walking their groups in step read one
contiguous window of G x 1 KiB x R per chunk, as a memcpy does. Same arithmetic, same summation order: it is
validated against the float64 reference, then timed beside the default (both as shipped and with their arithmetic
cut away, the decode gap run's loads_only patch), `_scaled_mm` tensorwise and bf16 cuBLAS, interleaved.
"""
import copy
import dataclasses
import os
import sys

import v3probe   # tools/gpu/v3probe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import gemm_decode as GD, gemv_v3 as V3

BUDGET_S = float(os.environ.get("FP8LAB_PROBE_BUDGET_S", 300))
SHAPES = [tuple(int(v) for v in s.split("x")) for s in
          os.environ.get("FP8LAB_PROBE_SHAPES", "14336x4096,28672x8192,4096x14336,18944x3584").split(",")]

# load_unit with chunk-major storage: chunk c of group g lives at (c G + g) R KiB (NVFP4 scale words: (c G + g) R 128 B)
KMAJOR = [
    ("        const u8* p = wbase + (size_t)u * UB;\n#pragma unroll\n"
     "        for (int j = 0; j < NW; ++j) dst[j] = ld_stream16(p + j * 512);",
     "        const long long ug = u / KU;\n"
     "        const int uk = (int)(u - ug * KU);\n"
     "        const size_t GG = (size_t)(U / KU);\n"
     "        const u8* p = wbase + ((size_t)uk * C * GG + ug) * (R * 1024);\n#pragma unroll\n"
     "        for (int j = 0; j < NW; ++j) dst[j] = ld_stream16(p + (size_t)(j / (2 * R)) * GG * (R * 1024) + (j % (2 * R)) * 512);"),
    ("            const u8* q = sbase + (size_t)u * (C * R * 128);\n#pragma unroll\n"
     "            for (int j = 0; j < NS; ++j) sdst[j] = ld_stream_u32(q + j * 128);",
     "            const u8* q = sbase + ((size_t)uk * C * GG + ug) * (R * 128);\n#pragma unroll\n"
     "            for (int j = 0; j < NS; ++j) sdst[j] = ld_stream_u32(q + (size_t)(j / R) * GG * (R * 128) + (j % R) * 128);"),
]


def kmajor_pack(p: V3.Packed) -> V3.Packed:
    """The same packed chunks stored chunk-major ([chunk][group] instead of [group][chunk]); NVFP4's scale words too."""
    G, CH = p.groups, p.Kp // V3.CHUNK_K[p.fmt]
    data = p.data.reshape(G, CH, -1).transpose(0, 1).contiguous().reshape(p.data.shape)
    scales = p.scales
    if p.fmt == "nvfp4":
        scales = p.scales.reshape(G, CH, -1).transpose(0, 1).contiguous().reshape(p.scales.shape)
    return dataclasses.replace(p, data=data, scales=scales)


def patches(fmt, Ms, variant, kmajor):
    p = GD.decode_gap_patches(variant, fmt, Ms)
    if kmajor:
        p["gemv_v3.cu"] = p["gemv_v3.cu"] + KMAJOR
    return p


def add_case(bench, c, x, shape, timers, meta, ref, Ms):
    for variant in ("full", "loads_only"):
        for kmajor in (0, 1):
            case = copy.copy(c)
            if kmajor:
                case.packs = [kmajor_pack(p) for p in c.packs]
            label = f"{c.label} {'kmajor' if kmajor else 'default'}{'' if variant == 'full' else ' loads_only'}"
            v3probe.add_config(bench, case, x, c.cfg, f"{label} {shape}", label, timers, meta, ref,
                               patches=patches(c.fmt, Ms, variant, kmajor), kmajor=kmajor, variant=variant,
                               trust=variant != "full" and "arithmetic cut away (loads_only): wrong numbers by design; "
                                                           "timed, not validated")


def main(out, Ms=(1, 16)):
    return v3probe.run("kmajor_probe.py", out, "kmajor", SHAPES, Ms,
                       lambda *a: add_case(*a, Ms=Ms), BUDGET_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(int(m) for m in sys.argv[2:]) or (1, 16)))
