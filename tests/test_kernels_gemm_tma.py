"""Version C of the W8A8 GEMM (gemm_w8a8_tma.cu): TMA, warp specialization, persistent tiles, 2-CTA multicast.

CPU part: the tensor-map rules (strides, boxes, swizzle) the host checks before the driver sees them; the
configurations (shared memory, registers' limits, the compiled list); the tile order the kernel walks (a Python
mirror of its TileMap); the argument checks of the TMA kernels (N % 8, K % 16, partial blocks).
GPU part (@gpu): the tensor map arrives byte for byte and a TMA load returns the tile; every rung of the ladder and
every tuning variant against the float64 reference with poisoned outputs, on aligned and unaligned shapes, with
CTAs walking several tiles (small persistent grids), outlier-heavy inputs through seed 001's gate; and all of
them bit for bit equal to w8a8_wgmma_ws (the same wgmma k-steps and the same promotion order).
"""
import math

import pytest
import torch

from fp8lab.kernels import gemm_w8a8 as G
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import reference as REF
from fp8lab.kernels import tma, tolerances

TMA_NAMES = list(G.TMA_KERNELS)


# ---- CPU: tensor maps -------------------------------------------------------------------------------------------
def test_map_2d_layout_of_the_gemm_operands():
    a = tma.map_2d(4096, 7168, 1, 128, 128)           # A: M x K e4m3, 128 x 128-byte boxes
    assert a.global_dim == (7168, 4096) and a.global_strides == (7168,) and a.box_dim == (128, 128)
    assert a.box_bytes == 16384 and a.swizzle == 128
    b = tma.map_2d(18944, 3584, 1, 128, 128)          # B half-box of a 2-CTA cluster with 256-wide tiles
    assert b.global_dim == (3584, 18944) and b.box_bytes == 16384
    c = tma.map_2d(4096, 7168, 2, 64, 64)             # C: bf16, 64 x 64 boxes = 128-byte rows (the 128B swizzle)
    assert c.global_strides == (14336,) and c.box_bytes == 8192
    assert tma.map_2d(300, 264, 2, 128, 64).global_strides == (528,)  # N = 264: 528-byte rows, 16-byte aligned


@pytest.mark.parametrize("kw,msg", [
    (dict(rows=100, cols=200, elem_bytes=1, box_rows=128, box_cols=128), "multiple of 16"),  # 200-byte rows
    (dict(rows=100, cols=260, elem_bytes=2, box_rows=64, box_cols=64), "multiple of 16"),    # 520-byte rows
    (dict(rows=100, cols=256, elem_bytes=1, box_rows=257, box_cols=128), "1..256"),
    (dict(rows=100, cols=512, elem_bytes=1, box_rows=64, box_cols=144), "swizzle span"),     # 144-byte box row
    (dict(rows=100, cols=256, elem_bytes=2, box_rows=64, box_cols=128), "swizzle span"),      # 256-byte box row
    (dict(rows=100, cols=256, elem_bytes=1, box_rows=64, box_cols=24), "multiple of 16"),     # 24-byte box row
    (dict(rows=100, cols=256, elem_bytes=4, box_rows=64, box_cols=16), "element size"),
    (dict(rows=0, cols=256, elem_bytes=1, box_rows=64, box_cols=128), "1..2\\*\\*32"),
    (dict(rows=100, cols=256, elem_bytes=1, box_rows=64, box_cols=128, swizzle=96), "swizzle must be"),
])
def test_map_2d_rejects_what_the_copy_engine_cannot_take(kw, msg):
    with pytest.raises(tma.TmaError, match=msg):
        tma.map_2d(**kw)


def test_kernel_arg_is_128_raw_bytes():
    desc = bytes(range(128))
    arg = tma.kernel_arg(desc, "numpy")
    assert arg.shape == (1,) and arg.dtype.itemsize == 128 and arg.tobytes() == desc  # CuPy: size-1 array by value
    with pytest.raises(tma.TmaError, match="128 bytes"):
        tma.kernel_arg(desc[:64])


def test_encoder_enums_match_cuda_bindings():
    d = pytest.importorskip("cuda.bindings.driver")
    assert tma.DTYPE[1] == d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8.value
    assert tma.DTYPE[2] == d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16.value
    assert tma.SWIZZLE[128] == d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B.value
    assert tma.L2_PROMOTION[256] == d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B.value


# ---- CPU: configurations ------------------------------------------------------------------------------------------
def test_every_named_config_is_valid_and_compiled():
    for name, cfg in G.TMA_KERNELS.items():
        if cfg is None:
            continue
        cfg.check()
        assert cfg.compiled in G.TMA_COMPILED[cfg.family], name
        assert cfg.smem + G.STATIC_SMEM <= G.SMEM_LIMIT
    assert G.TmaConfig(256, 2, 4, 2).smem == 4 * (128 + 256) * 128 + 1024
    assert G.TmaConfig(128, 2, 6, 2, 1).smem == 6 * 256 * 128 + 2 * 64 * 128 * 2 + 1024  # + the C staging tiles
    assert G.TmaConfig(128, 2, 6, 2, scales=1).smem == 6 * 256 * 128 + 6 * 528 + 1024  # + the scale slots
    assert [G.TmaConfig(bn, 2, 4, 2, scales=1).acc_regs for bn in (128, 192, 224, 256)] == [64, 96, 128, 128]
    assert G.TmaConfig(128, 1, 6, 1).acc_regs == 128  # one warpgroup: both m64 halves
    defs = dict(x.split("=", 1) for x in G.tma_cuda_defines())
    assert set(defs) == {"FP8LAB_" + f for f in G.TMA_FAMILIES}
    for f in G.TMA_FAMILIES:
        assert defs["FP8LAB_" + f].count(f + "(") == len(G.TMA_COMPILED[f]) >= 1, f
    assert "W8A8_TMA(256,2,4,2,0)" in defs["FP8LAB_W8A8_TMA"] and "W8A8_TMA_P(128,2,6,2,0)" in defs["FP8LAB_W8A8_TMA_P"]
    assert G.TMA_KERNELS["wgmma_tma_p"].function == "w8a8_tma_n128_w2_s6_c2_e0_p2"
    assert G.TMA_KERNELS["wgmma_tma_pss"].function == "w8a8_tma_n128_w2_s6_c2_e0_ss_p2"
    assert G.TMA_KERNELS["wgmma_tma_ss"].family == "W8A8_TMA_S" and G.TMA_KERNELS["wgmma_tma_pss"].family == "W8A8_TMA_PS"


@pytest.mark.parametrize("cfg,msg", [
    (G.TmaConfig(256, 1, 4, 1), "256 accumulators"),     # one warpgroup would hold 2 x 2 sub-tiles
    (G.TmaConfig(256, 2, 5, 2), "shared memory"),        # 5 x 48 KB > 227 KB
    (G.TmaConfig(128, 2, 7, 2, 1), "shared memory"),     # 7 x 32 KB + 32 KB C tiles
    (G.TmaConfig(160, 2, 4, 2), "bn 128\\|192\\|224\\|256"),
    (G.TmaConfig(224, 2, 4, 2, 1, scales=1), "bn = 224 needs"),  # a 64-column C box would cross the tile's edge
    (G.TmaConfig(192, 2, 4, 2), "bn = 192 needs"),            # its scales are staged (two weight-scale blocks a tile)
    (G.TmaConfig(192, 1, 4, 1, scales=1), "bn = 192 needs"),  # one warpgroup: 2 x (96 + 96) registers
    (G.TmaConfig(128, 3, 4, 2), "nwg 1\\|2"),
    (G.TmaConfig(128, 2, 4, 4), "cluster 1\\|2"),
    (G.TmaConfig(256, 2, 4, 2, pipe=1), "pipe = 1 needs bn 128"),   # 128 + 2 x 128 registers
    (G.TmaConfig(128, 1, 6, 1, pipe=1), "pipe = 1 needs bn 128"),
    (G.TmaConfig(128, 2, 6, 2, 1, pipe=1, scales=1), "shared memory"),  # 6 x 32 KB + 32 KB C tiles + 6 slots
    (G.TmaConfig(128, 2, 6, 2, scales=2), "scales 0\\|1"),
])
def test_invalid_configs_are_refused(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        cfg.check()


def tile_order(mu: int, nb: int, group: int) -> list[tuple[int, int]]:
    """Python mirror of TileMap::at in gemm_w8a8_tma.cu."""
    out = []
    for t in range(mu * nb):
        per_group = group * nb
        grp, first = t // per_group, (t // per_group) * group
        gsize = min(group, mu - first)
        inn = t - grp * per_group
        out.append((first + inn % gsize, inn // gsize))
    return out


@pytest.mark.parametrize("mu,nb,group", [(5, 3, 2), (16, 28, 8), (1, 56, 1), (3, 7, 16), (7, 1, 4), (32, 4, 32)])
def test_tile_order_covers_every_tile_once_in_groups(mu, nb, group):
    order = tile_order(mu, nb, group)
    assert sorted(order) == [(m, n) for m in range(mu) for n in range(nb)]
    # consecutive tiles stay inside a group of `group` m-units
    for t, (m, n) in enumerate(order):
        assert m // group == t // (group * nb)
    assert tile_order(5, 3, 2)[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]  # the .cu's worked example


def test_split_plan():
    assert G.split_plan(224, 66, 56, 4) == (198, 2)   # 3 whole waves, the last 26 tiles in halves on 52 pairs
    assert G.split_plan(448, 66, 56, 4) == (448, 1)   # the last wave holds 52 of 66: left whole
    assert G.split_plan(32, 66, 112, 4) == (0, 2)     # one half-empty wave: every tile in two
    assert G.split_plan(32, 132, 80, 4) == (0, 4)     # at most `most` pieces
    assert G.split_plan(32, 132, 13, 4) == (32, 1)    # 3 pieces of 4 k-blocks: the fix-up (16 k-blocks) eats them
    assert G.split_plan(32, 132, 7, 4) == (32, 1)     # too short to cut
    assert G.split_plan(32, 66, 32, 4) == (32, 1)     # 1/2 + 16/32 of a wave: no gain
    assert G.split_plan(224, 66, 56, 0) == (224, 1)   # off
    for T, P, KB in [(1, 66, 100), (67, 66, 64), (130, 66, 9), (5, 3, 40)]:
        F, S = G.split_plan(T, P, KB, 4)
        assert F + (T - F) * S <= -(-T // P) * P     # never more work items than the unsplit waves hold
        assert S == 1 or (T - F) * S <= P and KB // S >= 4 and F % P == 0
    with pytest.raises(ValueError, match="split"):
        G.TmaConfig(128, 1, 6, 1, 0, split=4).check()
    with pytest.raises(ValueError, match="split"):
        G.TmaConfig(128, 2, 6, 1, 0, persistent=False, split=4).check()


@pytest.mark.parametrize("T, P, KB", [(112, 66, 148), (224, 66, 56), (32, 66, 112), (5, 3, 40), (130, 66, 9),
                                       (67, 66, 64), (1, 66, 7), (100, 7, 3)])
def test_streamk_tail_covers_every_k_block_once(T, P, KB):
    """The stream-K tail (streamk_segments mirrors the kernel's work_item): every k-block of every tail tile is in
    exactly one segment; a tile's segments are its pieces 0..np-1 in CTA order, np at most the workspace's slots;
    every CTA gets floor or ceil of TK / P k-blocks; the full waves run whole (F a multiple of P)."""
    F, S = G.streamk_tail(T, P, KB)
    if S > 0:  # nothing to balance: a full last wave, or ranges under 4 k-blocks
        assert (F, S) == (T, 1) and (T % P == 0 or (T - -(-T // P) * P + P) * KB < 4 * P)
        return
    assert F % P == 0 and 0 <= T - F <= P
    segs = G.streamk_segments(T, F, P, KB)
    TK = (T - F) * KB
    per_cta = {}
    for t in range(F, T):
        mine = sorted((c, kb0, kb1, piece, np) for c, tt, kb0, kb1, piece, np in segs if tt == t)
        assert [(kb0, kb1) for _, kb0, kb1, _, _ in mine][0][0] == 0 and mine[-1][2] == KB
        assert all(mine[j][2] == mine[j + 1][1] for j in range(len(mine) - 1))  # contiguous, no overlap
        assert [p for *_, p, _ in mine] == list(range(len(mine))) and {n for *_, n in mine} == {len(mine)}
        assert len(mine) <= -S
    for c, _, kb0, kb1, _, _ in segs:
        per_cta[c] = per_cta.get(c, 0) + kb1 - kb0
    assert set(per_cta.values()) <= {TK // P, -(-TK // P)} and sum(per_cta.values()) == TK


def test_streamk_tail_rule():
    assert G.streamk_tail(112, 66, 148) == (66, -3)   # 2048x3584x18944 on 66 pairs: 46 tail tiles over 66 ranges
    assert G.streamk_tail(132, 66, 56) == (132, 1)    # two full waves: nothing to balance
    assert G.streamk_tail(32, 66, 112) == (0, -3)     # one part-empty wave: every tile shared
    assert G.streamk_tail(67, 66, 64) == (67, 1)      # one tail tile, 64 k-blocks on 66 pairs: ranges under 4
    G.TmaConfig(256, 2, 3, 2, 1, scales=1, split=-1).check()
    with pytest.raises(ValueError, match="stream-K"):
        G.TmaConfig(256, 2, 3, 2, 1, scales=1, split=-2).check()


def test_group_size_and_default_rule():
    assert G.tile_counts(4096, 7168, G.TmaConfig()) == (16, 28)
    assert G.tile_counts(200, 264, G.TmaConfig(128, 2, 6, 2)) == (1, 3)
    assert G.group_size(4096, 7168, G.TmaConfig(), 66) == 8  # 8 x 256 rows of A + 9 x 256 columns of B in flight
    assert G.group_size(128, 7168, G.TmaConfig(128, 2, 6, 1), 56) == 1
    for M, N, K in [(128, 4096, 4096), (512, 7168, 7168), (4096, 7168, 7168), (8192, 18944, 3584)]:
        cfg = G.tma_default(M, N, K)
        assert cfg in G.TMA_KERNELS.values()
        assert cfg.cluster == 1 or M > 128
    # full grids take the 128 x 256 tiles; 128 x 128 where 256-wide tiles would idle half the SMs (32 tiles on 66
    # pairs against 64); one m-block: no cluster
    assert G.tma_default(4096, 7168, 7168) == G.TMA_KERNELS["wgmma_tma_e_ss_tmastore_split"]
    # 28 tiles of 128 x 256 on 66 pairs, cut in two (74 k-blocks a piece); the 128 x 128 tiles would fill 56 of 66 at
    # 0.82 the rate
    assert G.tma_default(512, 3584, 18944) == G.TMA_KERNELS["wgmma_tma_e_ss_tmastore_split"]
    # K = 4096: 16 k-blocks a piece, the fix-up eats the gain: 64 tiles of 128 x 128 instead
    assert G.tma_default(512, 4096, 4096) == G.TMA_KERNELS["wgmma_tma_p_tmastore_split"]
    assert G.tma_default(128, 3584, 18944) == G.TMA_KERNELS["wgmma_tma_c_split"]
    assert G.tma_default(128, 7168, 7168).cluster == 1
    # a device with fewer pairs changes the waves, not the rule's inputs: 28 x 16 tiles on 64 pairs fill 7 waves
    assert G.tma_default(4096, 7168, 7168, units={(256, 2): 64, (128, 2): 64}).bn == 256


def test_tma_kernels_check_arguments_before_any_cuda_call():
    a = torch.zeros(200, 1040, dtype=torch.uint8)
    b = torch.zeros(264, 1040, dtype=torch.uint8)
    sa, sb = torch.ones(200, 9), torch.ones(3, 9)  # ceil(1040 / 128) = 9 k-blocks, ceil(264 / 128) = 3 n-blocks
    for kernel in TMA_NAMES:
        with pytest.raises(TypeError, match="CUDA tensor"):  # every shape check passed: only then the device
            G.gemm_w8a8(a, sa, b, sb, kernel=kernel)
    with pytest.raises(ValueError, match="K = 1030 is not a multiple of 16"):
        G.gemm_w8a8(a[:, :1030], sa, b[:, :1030], sb, kernel="wgmma_tma")
    with pytest.raises(ValueError, match="N = 260 is not a multiple of 8"):
        G.gemm_w8a8(a, sa, b[:260], sb, kernel="wgmma_tma")
    with pytest.raises(ValueError, match="sb must have shape"):
        G.gemm_w8a8(a, sa, b, torch.ones(2, 9), kernel="wgmma_tma")
    with pytest.raises(ValueError, match="not a multiple of 128"):  # the cp.async kernels keep their rule
        G.gemm_w8a8(a, sa, b, sb, kernel="wgmma_ws")


# ---- GPU ----------------------------------------------------------------------------------------------------------
def _case(M, N, K, seed, layout="row"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, b = F8.random_codes(M, K, generator=g), F8.random_codes(N, K, generator=g)
    KB, NB = math.ceil(K / 128), math.ceil(N / 128)
    sa = torch.rand(M, KB, device="cuda", generator=g) * 1e-2 + 1e-3
    if layout == "col":
        sa = sa.t().contiguous().t()  # torch._scaled_mm's 'outer-dim-major' layout
    sb = torch.rand(NB, KB, device="cuda", generator=g) * 1e-2 + 1e-3
    ref = G.reference(a, sa, b, sb)
    ad = F8.decode_e4m3(a) * sa.double().repeat_interleave(128, 1)[:, :K]
    bd = F8.decode_e4m3(b) * sb.double().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return a, sa, b, sb, ref, ad.abs() @ bd.abs().T


def _live():
    """The TMA kernels a device run did not mark as failing (FP8LAB_SKIP_KERNELS): a hang must not stop the rest."""
    return [k for k in TMA_NAMES if k not in G.skipped_kernels()]


def _check(y, ref, terms, kernel, K):
    tol = tolerances.matmul(kernel, K)
    err = tol.worst(y, ref, terms)
    if not err <= 1.0:
        bad = ~((y.double() - ref).abs() <= tol.bound(ref, terms))
        idx = bad.nonzero()[:8].tolist()
        rows = sorted({i[0] for i in bad.nonzero().tolist()})
        cols = sorted({i[1] for i in bad.nonzero().tolist()})
        lines = [f"  at {tuple(i)}: yours {float(y[tuple(i)]):.6g}, spec {float(ref[tuple(i)]):.6g}" for i in idx]
        raise AssertionError(f"{kernel}: {int(bad.sum())} of {bad.numel()} outside tolerance (max err/tol {err:.3g}); "
                             f"rows {rows[:3]}..{rows[-3:]} ({len(rows)}), cols {cols[:3]}..{cols[-3:]} ({len(cols)})\n"
                             + "\n".join(lines))


@pytest.mark.gpu
def test_tensor_map_reaches_the_kernel_and_loads_the_tile():
    rep = tma.check_device(verbose=True)
    assert rep["copy_ok"] and rep["pass"] in ("numpy", "cpointer")
    if rep["bindings_equal"] is not None:
        assert rep["bindings_equal"], "ctypes and cuda.bindings encode the same map differently"


# (M, N, K): aligned; partial m-tile + odd m-blocks (a cluster's second CTA has no rows) + partial n-tile and
# a partial last k-block; K < 128; M < 64
SHAPES = [(256, 512, 1024), (300, 264, 1040), (129, 136, 48), (40, 256, 384)]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", TMA_NAMES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_tma_kernel_matches_reference(kernel, M, N, K):
    if kernel in G.skipped_kernels():
        pytest.skip(f"{kernel} failed its smoke test in this run")
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=M + N + K, layout="col" if M % 2 else "row")
    y = G.gemm_w8a8(a, sa, b, sb, kernel=kernel, out=torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda"))
    _check(y, ref, terms, kernel, K)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [k for k, c in G.TMA_KERNELS.items() if c is not None and c.persistent])
@pytest.mark.parametrize("grid", [1, 3])
def test_persistent_ctas_walk_several_tiles(kernel, grid):
    """A grid of 1 or 3 clusters for 4 x 5+ tiles: the stage/phase counters carry across tiles (K = 640: 5 k-blocks,
    not a multiple of any stage count), the C staging buffer is reused, and every tile is still written."""
    from dataclasses import replace

    if kernel in G.skipped_kernels():
        pytest.skip(f"{kernel} failed its smoke test in this run")
    M, N, K = 520, 1160, 640
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=grid)
    for group in (0, 1, 2):
        cfg = replace(G.TMA_KERNELS[kernel], grid=grid, group=group)
        y = G.gemm_w8a8(a, sa, b, sb, kernel=kernel, config=cfg,
                        out=torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda"))
        _check(y, ref, terms, kernel, K)


@pytest.mark.gpu
def test_all_versions_agree_bit_for_bit_with_wgmma_ws():
    """Same k32 wgmma steps, same fp32 promotion order, same bf16 rounding: every TMA configuration returns the
    exact bits of w8a8_wgmma_ws (and so of each other), whatever its tiling, cluster, grid or epilogue; those that
    cut tiles along K (split) sum partials in another order and are held to the float64 tolerance instead."""
    M, N, K = 384, 768, 1536
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=5)
    want = G.gemm_w8a8(a, sa, b, sb, kernel="wgmma_ws")
    _check(want, ref, terms, "wgmma_ws", K)
    exact = 0
    for kernel in _live():
        launch = G.prepare(a, sa, b, sb, kernel=kernel)
        launch()
        y = launch.out
        if launch.split[1] > 1:
            _check(y, ref, terms, kernel, K)
            continue
        exact += 1
        diff = int((y.view(torch.int16) != want.view(torch.int16)).sum())
        assert diff == 0, f"{kernel}: {diff} of {y.numel()} outputs differ from wgmma_ws"
    assert exact >= 5


@pytest.mark.gpu
def test_control_bit_edits_compute_the_same_bits():
    """The gap run's control-bit edits (gemm_prefill.CONTROL_EDITS, loaded through _cuda.edited_binary): each edited
    kernel returns the unedited kernel's bits on a poisoned output, over several persistent tiles; after the block
    the package's own kernel is loaded again."""
    from fp8lab.kernels import _cuda, gemm_prefill

    kernel = gemm_prefill.GAP_KERNELS[0]
    M, N, K = 520, 1160, 1536
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=9)
    want = G.gemm_w8a8(a, sa, b, sb, kernel=kernel)
    _check(want, ref, terms, kernel, K)
    fn = G.TMA_KERNELS[kernel].function
    for name, (what, fields) in gemm_prefill.CONTROL_EDITS.items():
        counts: dict = {}
        with _cuda.edited_binary("gemm_w8a8_tma.cu", gemm_prefill.control_edit(fn, fields, counts)):
            edited = _cuda.load_module("gemm_w8a8_tma.cu")
            launch = G.prepare(a, sa, b, sb, kernel=kernel,
                               out=torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda"))
            with pytest.raises(ValueError, match="one edit at a time"):
                with _cuda.edited_binary("gemm_w8a8_tma.cu", lambda c: c):
                    pass
        assert _cuda.load_module("gemm_w8a8_tma.cu") is not edited  # the package's own module again
        launch()
        assert counts["ffmas"] > 0 and (counts["changed"] > 0) == bool(fields), (name, counts)
        diff = int((launch.out.view(torch.int16) != want.view(torch.int16)).sum())
        assert diff == 0, f"{name}: {diff} of {want.numel()} outputs differ from the unedited kernel"
    assert not _cuda._BINARY_EDITS


def _three_poisoned_launches(launch, out, ref, terms, kernel, K):
    """Poison, launch, check against the reference, three times: the arrival counters must reset themselves (a stale
    one leaves tiles unwritten: NaN) and every launch must give the same bits (partials summed in piece order)."""
    first = None
    for _ in range(3):
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        _check(out, ref, terms, kernel, K)
        first = out.clone() if first is None else first
        assert torch.equal(out.view(torch.int16), first.view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [k for k, c in G.TMA_KERNELS.items() if c is not None and c.split])
@pytest.mark.parametrize("grid", [7, 10, 40])
def test_split_last_wave_matches_reference_and_repeats(kernel, grid):
    """The last wave cut along K (split_plan): pieces of one tile on different CTAs, the last to arrive sums them.
    Grids of 7 / 10 / 40 units leave 1..few tiles in the last wave (S = 4, 3, 2); every launch is poisoned and run
    three times: the arrival counters must reset themselves (a stale one leaves tiles unwritten: NaN), and the
    result must be the same bits every time (partials summed in piece order, whichever finishes last)."""
    from dataclasses import replace

    if kernel in G.skipped_kernels():
        pytest.skip(f"{kernel} failed its smoke test in this run")
    M, N, K = 520, 1160, 10128  # 5 m-blocks, a partial n-tile, 80 k-blocks (the last partial)
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=grid, layout="col")
    cfg = replace(G.TMA_KERNELS[kernel], grid=grid)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch = G.prepare(a, sa, b, sb, kernel=kernel, config=cfg, out=out)
    mu, nb = G.tile_counts(M, N, cfg)
    assert launch.split == G.split_plan(mu * nb, grid, 80, cfg.split)
    _three_poisoned_launches(launch, out, ref, terms, kernel, K)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [k for k, c in G.TMA_KERNELS.items() if c is not None and c.split])
@pytest.mark.parametrize("grid", [7, 8, 40])
def test_streamk_tail_matches_reference_and_repeats(kernel, grid):
    """The stream-K tail (split = -1): ranges of k-blocks that cross tile boundaries, each tile finished by the last
    of its pieces. Same checks as the split test: poisoned, three launches, reference tolerance, the same bits.
    Grids of 7 / 8 / 40 units leave a ragged tail for both tile widths (15 tiles of 128 x 256, 30 of 128 x 128)."""
    from dataclasses import replace

    if kernel in G.skipped_kernels():
        pytest.skip(f"{kernel} failed its smoke test in this run")
    M, N, K = 520, 1160, 10128
    a, sa, b, sb, ref, terms = _case(M, N, K, seed=grid + 100, layout="col")
    cfg = replace(G.TMA_KERNELS[kernel], grid=grid, split=-1)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch = G.prepare(a, sa, b, sb, kernel=kernel, config=cfg, out=out)
    mu, nb = G.tile_counts(M, N, cfg)
    assert launch.split == G.streamk_tail(mu * nb, grid, 80) and launch.split[1] < 0
    _three_poisoned_launches(launch, out, ref, terms, kernel, K)


@pytest.mark.gpu
def test_split_runs_where_the_plan_says():
    """The schedules the split tests cover do cut tiles (else they would test the unsplit path twice)."""
    from dataclasses import replace

    M, N, K = 520, 1160, 10128
    a, sa, b, sb, _, _ = _case(M, N, K, seed=1)
    seen = set()
    for kernel in [k for k, c in G.TMA_KERNELS.items() if c is not None and c.split]:
        for grid in (7, 10, 40):
            seen.add(G.prepare(a, sa, b, sb, kernel=kernel, config=replace(G.TMA_KERNELS[kernel], grid=grid)).split[1])
    assert {2, 4} <= seen, seen


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "outliers"])
def test_tma_kernels_accuracy_gate(kind):
    """Seed 001's gate (cos >= 0.999, rel RMS <= 2 % against W8A16): met on outlier-heavy activations; on Gaussian
    ones the W8A8 arithmetic itself misses the RMS half (~2.6 %, test_kernels_gemm._check_gate) and so must we."""
    x, w = G.test_inputs(256, 768, 1024, kind=kind, seed=9)
    a, sa = REF.quantize_group(x, 128)
    b, sb = REF.quantize_block(w, 128)
    ref16 = G.w8a16_reference(x, b, sb)
    math_gate = G.accuracy_gate(G.reference(a, sa, b, sb), ref16)
    for kernel in _live():
        gate = G.accuracy_gate(G.gemm_w8a8(a, sa, b, sb, kernel=kernel), ref16)
        assert gate["cosine"] >= 0.999, (kernel, gate)
        if kind == "outliers":
            assert gate["passed"], (kernel, gate)
        else:
            assert 0.02 < gate["rel_rms"] < 0.03, (kernel, gate)
        assert abs(gate["rel_rms"] - math_gate["rel_rms"]) < 1e-3, (kernel, gate, math_gate)


@pytest.mark.gpu
def test_tma_kernel_at_a_prefill_shape():
    """One realistic shape (many tiles per CTA, the default configuration) against float64."""
    for M, N, K in [(2048, 3584, 2048), (2048, 7168, 7168)]:  # the second: 224 pair tiles, the last wave split
        a, sa, b, sb, ref, terms = _case(M, N, K, seed=11)
        for kernel in [k for k in ("wgmma_tma", "wgmma_tma_e", "wgmma_tma_d", "wgmma_tma_e_ss_tmastore_split")
                       if k in _live()]:
            y = G.gemm_w8a8(a, sa, b, sb, kernel=kernel,
                            out=torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda"))
            _check(y, ref, terms, kernel, K)
        if N == 7168:
            assert G.prepare(a, sa, b, sb, kernel="wgmma_tma_e_ss_tmastore_split").split == (198, 2)


# ---- CPU: what notebook 07 reads (gemm_report's prefill functions) on a made-up record -------------------------------
def _fake_run():
    """A small record in the bench's schema: two shapes, our default, the previous best, the anchors, one rung."""
    res = []

    def add(kernel, M, N, K, tflops, **extra):
        us = 2 * M * N * K / (tflops * 1e6)
        res.append({"kernel": kernel, "shape": f"M={M} N={N} K={K}", "dtype": "e4m3 x e4m3" if "bf16" not in kernel
                    else "bf16 x bf16", "time_us": us, "tflops": tflops, "family": "prefill", "M": M, "N": N, "K": K,
                    **extra})
    for M in (512, 4096):
        add("bf16_cublas (torch matmul)", M, 7168, 7168, 700.0)
        add("scaled_mm_blockwise (torch._scaled_mm)", M, 7168, 7168, 1000.0, speedup=1000 / 700)
        add("scaled_mm_tensorwise (torch._scaled_mm)", M, 7168, 7168, 1200.0, speedup=1200 / 700)
        add("w8a8_wgmma_tma", M, 7168, 7168, 980.0 if M == 4096 else 650.0, speedup=(980.0 if M == 4096 else 650.0) / 700,
            speedup_vs_scaled_mm_blockwise=(980.0 if M == 4096 else 650.0) / 1000, bn=256, cluster=2, grid_units=66,
            persistent=True)
    add("w8a8_wgmma_ws", 4096, 7168, 7168, 720.0, speedup=720 / 700, speedup_vs_scaled_mm_blockwise=0.72)
    add("w8a8_wgmma_tma_a", 4096, 7168, 7168, 800.0, speedup=800 / 700, speedup_vs_scaled_mm_blockwise=0.8)
    add("w8a8_wgmma_tma_d", 4096, 7168, 7168, 900.0, speedup=900 / 700, speedup_vs_scaled_mm_blockwise=0.9)
    add("w8a8_wgmma_tma_p", 4096, 7168, 7168, 945.0, speedup=945 / 700, speedup_vs_scaled_mm_blockwise=0.945)
    return {"results": res, "ceilings": {"fp8_scaled_mm_tensorwise_tflops_8192": 1250.0},
            "prefill_sass": {"wgmma_tma_a": {"QGMMA": 8, "UTMALDG": 14, "registers": 232, "spill_stores": 0,
                                             "smem_dynamic": 197632, "smem_static": 1024}}}


def test_prefill_report_functions():
    from fp8lab.kernels import gemm_report as R

    data = _fake_run()
    climb = R.prefill_climb(data)
    assert [r["kernel"] for r in climb] == ["wgmma_ws", "wgmma_tma_a", "wgmma_tma_d", "wgmma_tma", "wgmma_tma_p"]
    assert climb[1]["x_prev_rung"] == pytest.approx(800 / 720) and climb[2]["x_prev_rung"] == pytest.approx(900 / 800)
    assert climb[3]["x_prev_rung"] == pytest.approx(980 / 900)
    assert climb[4]["x_prev_rung"] == pytest.approx(945 / 900)  # a side branch: against the rung it changes (_d)
    assert climb[1]["QGMMA"] == 8 and climb[1]["smem KB"] == pytest.approx(194.0)
    assert R.same_kernel_twice(data) is None  # the fake default has no rung with its configuration
    twin = {"kernel": "w8a8_wgmma_tma_e", "shape": "M=4096 N=7168 K=7168", "dtype": "e4m3 x e4m3", "tflops": 1000.0,
            "family": "prefill", "config": "cfgX", "grid_units": 66, "split": 1, "group": 8}
    data2 = {"results": data["results"] + [twin, {**twin, "kernel": "w8a8_wgmma_tma", "tflops": 950.0}]}
    data2["results"] = [r for r in data2["results"] if not (r["kernel"] == "w8a8_wgmma_tma" and "config" not in r)]
    t = R.same_kernel_twice(data2)
    assert t["kernel"] == "wgmma_tma_e" and t["apart"] == pytest.approx(1000 / 950 - 1)
    # every rung with the default's kernel counts: the spread is the widest among them
    third = {**twin, "kernel": "w8a8_wgmma_tma_e_ss_tmastore", "tflops": 1040.0}
    t = R.same_kernel_twice({"results": data2["results"] + [third]})
    assert t["kernels"] == ["wgmma_tma_e", "wgmma_tma_e_ss_tmastore"] and t["tflops"] == (1000.0, 1040.0, 950.0)
    assert t["apart"] == pytest.approx(1040 / 950 - 1)
    gap = R.prefill_gap(data)
    assert len(gap) == 1 and gap[0]["best_fp8_in_run"] == 1250.0 and gap[0]["of_best"] == pytest.approx(980 / 1250)
    assert gap[0]["spec_dense_fp8 (datasheet)"] == 1979
    assert gap[0]["wave_busy"] == pytest.approx(448 / 462)  # 16 x 28 pair tiles in 7 waves of 66 pairs
    assert R.wave_busy({"M": 2048, "N": 7168, "bn": 256, "cluster": 2, "grid_units": 66}) == pytest.approx(224 / 264)
    assert R.wave_busy({"M": 2048, "N": 7168, "bn": 256, "cluster": 2, "grid_units": 66, "persistent": False}) is None
    assert R.wave_busy({"M": 2048, "N": 7168}) is None
    assert R.wave_busy({"M": 2048, "N": 7168, "bn": 256, "cluster": 2, "grid_units": 66, "split": 2,
                        "split_whole_tiles": 198}) == pytest.approx(224 / 231)
    g = {x["goal"].split(" (")[0]: x for x in R.prefill_goals(data)}
    assert g["W8A8 4096x7168x7168 >= 0.95x torch._scaled_mm blockwise"]["measured"] == pytest.approx(0.98)
    assert g["W8A8 4096x7168x7168 >= 0.95x torch._scaled_mm blockwise"]["met"] is True
    assert g["W8A8 faster than bf16 cuBLAS at every shape with M >= 512"]["measured"] == pytest.approx(650 / 700)
    assert g["W8A8 faster than bf16 cuBLAS at every shape with M >= 512"]["met"] is False
    rows = R.prefill_table(data, kernels=("wgmma_tma",), min_m=2048)
    assert len(rows) == 1 and rows[0]["x_vs_blockwise"] == pytest.approx(0.98)
    assert any(x["goal"].startswith("W8A8 faster than bf16") for x in R.goals(data))
    R.format_rows(climb)


def test_leave_one_out_table_and_sentence():
    """gemm_report.leave_one_out / findings.gap_sentence on a gap run's records: the examined kernel (named by its
    variants' of_kernel) called k, each variant's share of its time, the ratios to _scaled_mm blockwise, what doing
    the promotion twice and the stagger say, and the cases with nothing to say."""
    from fp8lab.findings import gap_sentence
    from fp8lab.kernels import gemm_prefill
    from fp8lab.kernels import gemm_report as R

    kern = gemm_prefill.GAP_KERNELS[0]
    k = "w8a8_" + kern

    def rec(kernel, t, blk=None, shape="M=4096 N=7168 K=7168", **kw):
        r = {"family": "prefill", "subset": "gap", "shape": shape, "kernel": kernel, "time_us": t, "tflops": 400 / t, **kw}
        return {**r, "speedup_vs_scaled_mm_blockwise": blk / t} if blk else r

    res = [rec("scaled_mm_blockwise (torch._scaled_mm)", 360), rec(k, 400, 360),
           rec(k + "_sg1", 404, 360, bits_equal_to=kern), rec(k + "_sg2", 300, 360, bits_equal_to=None),  # bits differ
           rec(k + "-no_promote", 340, 360, of_kernel=kern), rec(k, 200, 190, "M=8192 N=4096 K=4096"),
           rec(k + "-no_promote", 180, 190, "M=8192 N=4096 K=4096", of_kernel=kern),
           {"family": "prefill", "subset": "grid", "shape": "M=4096 N=7168 K=7168", "kernel": k, "time_us": 1.0,
            "tflops": 400.0}]  # another subset: not read
    assert R.gap_kernel({"results": res}) == kern
    rows = R.leave_one_out({"results": res})
    assert [r["shape"] for r in rows] == ["M=4096 N=7168 K=7168", "M=8192 N=4096 K=4096"]
    assert rows[0]["k"] == pytest.approx(1.0) and rows[0]["k x blk"] == pytest.approx(0.9)
    assert rows[0]["no_promote share"] == pytest.approx(0.15) and rows[1]["no_promote share"] == pytest.approx(0.1)
    assert rows[0]["sg1 share"] == pytest.approx(-0.01) and rows[0]["k_sg1 x blk"] == pytest.approx(360 / 404)
    assert "sg2 share" not in rows[0] and "k_sg2" in rows[0]  # shown, but a kernel whose bits differed saves nothing
    s = gap_sentence({"results": res, "provenance": {"device": "GPU X"}})
    assert s.startswith("On the GPU X, at 2 shapes, the promotion takes 10–15 % of")
    assert "0.90–0.95x" in s and "left out 1.06x" in s
    assert "saved -1 % of the kernel's time: nothing beyond the noise, so the cost is not" in s
    assert "loaded two ways" not in s          # no as_compiled control in this run: no noise measured
    slower = [rec(k + "_sg1", 440, 360, bits_equal_to=kern) if r["kernel"] == k + "_sg1" else r for r in res]
    assert "lost time at some shapes" in gap_sentence({"results": slower})
    fast = [rec(k + "_sg1", 380, 360, bits_equal_to=kern) if r["kernel"] == k + "_sg1" else r for r in res]
    s = gap_sentence({"results": fast})
    assert "saved 5 % of the kernel's time, at best 5 % at M=4096 N=7168 K=7168, where the promotion costs 15 %" in s
    # a second promotion adding 55 us where leaving it out saved 60 us: a cost that grows with the FFMAs
    twice = res + [rec(k + "-promote_twice", 455, 360, of_kernel=kern)]
    assert R.leave_one_out({"results": twice})[0]["promote_twice share"] == pytest.approx(-55 / 400)
    s = gap_sentence({"results": twice})
    assert "added 14 % to the kernel's time, 0.9 times what leaving it out saved: its cost grows with the FFMAs" in s
    s = gap_sentence({"results": res + [rec(k + "-promote_twice", 410, 360, of_kernel=kern)]})
    assert "0.2 times what leaving it out saved: most of its cost is a fixed wait per k-block" in s
    # nothing to say: no left-out variant; a promotion too cheap to compare a second copy with
    assert "no timing" in gap_sentence({"results": res[:4]})
    cheap = [rec(k, 400, 360), rec(k + "-no_promote", 398, 360, of_kernel=kern),
             rec(k + "-promote_twice", 402, 360, of_kernel=kern)]
    assert "twice" not in gap_sentence({"results": cheap}) and "the the" not in gap_sentence({"results": cheap})
    # control-bit edits, read against the unedited binary loaded the same way (as_compiled at 404 us, 1 % from k:
    # the noise floor of 2 % applies)
    ed = res + [rec(k + "+as_compiled", 404, 360, bits_equal_to=kern, of_kernel=kern),
                rec(k + "+ffma_yield_all", 384, 360, bits_equal_to=kern, of_kernel=kern),
                rec(k + "+ffma_no_reuse", 405, 360, bits_equal_to=kern, of_kernel=kern),
                rec(k + "+ffma_yield_none", 300, 360, bits_equal_to=None, of_kernel=kern)]  # bits differ: not read
    row = R.leave_one_out({"results": ed})[0]
    assert row["as_compiled share"] == pytest.approx(-0.01)  # against k
    assert row["ffma_yield_all share"] == pytest.approx(1 - 384 / 404)  # against as_compiled
    assert "ffma_yield_none share" not in row
    s = gap_sentence({"results": ed})
    assert "the same machine code by up to 2 %" in s
    assert "loaded two ways, differed by up to 1 %: the promotion's share is beyond that at every shape." in s
    assert "yield (and dropping its reuse flag) saved 5 %; dropping every reuse flag changed the time by -0 % " \
           "(+: faster), within the noise." in s
    assert "letting none yield" not in s and "lost time" not in s and "No rewrite" not in s
    s = gap_sentence({"results": [r for r in ed if "yield_all" not in r["kernel"]]})
    assert s.endswith("within the noise. No rewrite won time beyond that noise.")
    slow = [rec(k + "+ffma_yield_all", 430, 360, bits_equal_to=kern, of_kernel=kern) if "yield_all" in r["kernel"] else r
            for r in ed if "no_reuse" not in r["kernel"]]
    assert gap_sentence({"results": slow}).endswith(
        "(and dropping its reuse flag) lost 6 %. Every rewrite lost time at every shape, beyond that noise: ptxas's own "
        "mix of hints was the fastest of those tried.")
    # a control 10 % off k widens the noise: a 6 % loss is then within it; mixed signs are said with their signs
    noisy = [rec(k + "+as_compiled", 360, 360, bits_equal_to=kern, of_kernel=kern) if "as_compiled" in r["kernel"] else
             rec(k + "+ffma_yield_all", 380, 360, bits_equal_to=kern, of_kernel=kern) if "yield_all" in r["kernel"] else
             r for r in slow]
    s = gap_sentence({"results": noisy})
    assert "by up to 10 %" in s and "changed the time by -6 % (+: faster), within the noise." in s
    assert "differed by up to 10 %: a share within that is not separated from the noise." in s
    mixed = ed + [rec(k + "+as_compiled", 200, 190, "M=8192 N=4096 K=4096", bits_equal_to=kern, of_kernel=kern),
                  rec(k + "+ffma_yield_all", 210, 190, "M=8192 N=4096 K=4096", bits_equal_to=kern, of_kernel=kern)]
    assert "changed the time by -5 to +5 % (+: faster)" in gap_sentence({"results": mixed})
    assert "control bits" not in gap_sentence({"results": [r for r in ed if "as_compiled" not in r["kernel"]]})
    from fp8lab import findings
    assert set(findings._EDIT_WORDS) == set(gemm_prefill.CONTROL_EDITS) - {"as_compiled"}
    # rates as whole numbers, not exponent form; ratios to 3 significant digits
    assert R.format_rows([{"x": 1124.3, "y": 0.9183}]).splitlines()[-1].split() == ["1124", "0.918"]


def test_order_effect_table_and_sentence():
    """gemm_report.order_effect / findings.order_sentence on an order run's records (gemm_prefill.bench_order): the
    same kernel's time after each neighbour, its spread, its ratio range to the first blockwise timing, the two
    blockwise timings' difference, the copies told apart by copy_of; the sentence compares settled with unsettled
    shape by shape, names a run that rotated by one timer, and says nothing of settling without both runs."""
    from fp8lab.findings import order_sentence
    from fp8lab.kernels import gemm_prefill
    from fp8lab.kernels import gemm_report as R

    kern = gemm_prefill.GAP_KERNELS[0]
    k = "w8a8_" + kern

    def run(settle, times, blk=(360.0, 380.0), shape="M=4096 N=7168 K=7168", rotation="pairs"):
        base = {"family": "prefill", "subset": "order", "shape": shape, "settle_ms": settle, "rotation": rotation}
        rs = [{**base, "kernel": "scaled_mm_blockwise (torch._scaled_mm)", "time_us": blk[0]},
              {**base, "kernel": f"scaled_mm_blockwise@after_{kern}", "time_us": blk[1], "after": kern}]
        rs += [{**base, "kernel": f"{k}@after_{n}", "time_us": t, "after": n, "copy_of": kern} for n, t in times.items()]
        return rs

    loud = run(0.0, {"scaled_mm_blockwise": 400.0, "bf16_cublas": 440.0, "w192": 380.0})
    quiet = run(60.0, {"scaled_mm_blockwise": 400.0, "bf16_cublas": 404.0, "w192": 396.0})
    other = [{"family": "prefill", "subset": "gap", "shape": "M=4096 N=7168 K=7168", "kernel": k, "time_us": 1.0}]
    # a neighbour of ours named like a copy ('w8a8_x@after_<kernel>'): not a copy, copy_of tells them apart
    ours = [{"family": "prefill", "subset": "order", "shape": "M=4096 N=7168 K=7168", "settle_ms": 0.0,
             "kernel": f"w8a8_x@after_{kern}", "time_us": 999.0, "after": kern}]
    rows = R.order_effect({"results": loud + quiet + other + ours})
    assert [r["settle_ms"] for r in rows] == [0.0, 60.0] and rows[0]["kernel"] == k and rows[0]["rotation"] == "pairs"
    assert rows[0]["after bf16_cublas"] == 440.0 and rows[0]["spread"] == pytest.approx(440 / 380 - 1)
    assert f"after {kern}" not in rows[0]
    assert rows[0]["x blk lo"] == pytest.approx(360 / 440) and rows[0]["x blk hi"] == pytest.approx(360 / 380)
    assert rows[1]["spread"] == pytest.approx(404 / 396 - 1) and rows[1]["blk twice"] == pytest.approx(1 - 360 / 380)
    s = order_sentence(rows)
    assert s.startswith("The same machine code, timed after different kernels in interleaved runs at 1 shape: "
                        "timed straight after it, its time spread by 16 % over the 3 neighbours (from 0.82x to 0.95x")
    assert "after running alone for 60 ms first, its time spread by 2 % over the 3 neighbours" in s
    assert "Settling narrowed the spread at every shape timed both ways" in s and "rotated by one timer" not in s
    # shape by shape: A 10 % -> 5 %, B 3 % -> 1 % narrowed at both, though B's unsettled is under A's settled
    two = (run(0.0, {"a": 400.0, "b": 440.0}) + run(60.0, {"a": 400.0, "b": 420.0}) +
           run(0.0, {"a": 400.0, "b": 412.0}, shape="M=8192 N=4096 K=4096") +
           run(60.0, {"a": 400.0, "b": 404.0}, shape="M=8192 N=4096 K=4096"))
    assert "narrowed the spread at every shape timed both ways" in order_sentence(R.order_effect({"results": two}))
    worse = R.order_effect({"results": loud + run(60.0, {"a": 400.0, "b": 480.0})})
    assert "narrowed the spread at 0 of the 1 shapes timed both ways: the order is not the whole" in order_sentence(worse)
    alone = order_sentence(R.order_effect({"results": loud}))  # unsettled only: nothing said of settling
    assert "Settling" not in alone and alone.endswith(".")
    one = order_sentence(R.order_effect({"results": run(0.0, {"a": 400.0}, rotation="timer")}))
    assert "over the 1 neighbour " in one and "rotated by one timer" in one
    old = [{k2: v for k2, v in r.items() if k2 not in ("copy_of", "rotation")} for r in loud]  # a run before both fields
    assert R.order_effect({"results": old})[0]["rotation"] == "timer" and len(
        [c for c in R.order_effect({"results": old})[0] if c.startswith("after ")]) == 3
    assert R.order_effect({"results": other}) == [] and order_sentence([]) == ""


def test_other_kernels_prefill_grid_sentences_and_goal_lines():
    """findings.other_kernels_sentence names a gap run's kernels of the same arithmetic that are not k's variants
    (nothing where there are none); findings.prefill_grid_sentence counts the shapes with M >= PREFILL_GOAL_MIN_M at
    PREFILL_GOAL; gemm_report.prefill_goal_lines prints one line per goal."""
    from fp8lab.findings import other_kernels_sentence, prefill_grid_sentence
    from fp8lab.kernels import gemm_report as R

    rows = [{"shape": "M=1", "k x blk": 0.95, "k_sg1 x blk": 0.9, "k+as_compiled x blk": 1.0, "k-no_promote x blk": 1.1,
             "scaled_mm_tensorwise x blk": 1.1, "wgmma_tma_w192 x blk": 0.82},
            {"shape": "M=2", "k x blk": 0.97, "wgmma_tma_w192 x blk": 0.86, "wgmma_tma_w224 x blk": 0.8}]
    assert other_kernels_sentence(rows) == ("The other kernels of the same arithmetic in this run, against "
                                            "`_scaled_mm` blockwise: `wgmma_tma_w192` 0.82–0.86x; `wgmma_tma_w224` "
                                            "0.80x (the examined kernel's own range is above).")
    assert other_kernels_sentence([{"shape": "M=1", "k x blk": 1.0, "k_sg2 x blk": 1.0}]) == ""

    def rec(M, x):
        return {"family": "prefill", "kernel": "w8a8_wgmma_tma", "shape": f"M={M} N=7168 K=7168", "M": M, "N": 7168,
                "K": 7168, "time_us": 1.0, "tflops": 1.0, "speedup_vs_scaled_mm_blockwise": x, "speedup": 1.5}

    data = {"provenance": {"device": "GPU X"}, "results": [rec(512, 0.5), rec(2048, 0.93), rec(4096, 0.96), rec(8192, 1.01)]}
    assert prefill_grid_sentence(data) == ("On the GPU X the default ran 0.93–1.01x `_scaled_mm` blockwise over the 3 "
                                           "shapes with M ≥ 2048, at least 0.95x at 2 of them.")
    assert prefill_grid_sentence({"results": []}) == ""
    lines = R.prefill_goal_lines(data)
    assert len(lines) == len(R.prefill_goals(data)) == 4
    assert lines[1].startswith("NOT met       0.930 (target 0.95) W8A8 >= 0.95x torch._scaled_mm blockwise at every")


def test_prefill_repeats_table_and_sentence():
    """gemm_report.prefill_repeats / findings.prefill_repeats_sentence on the same grid recorded three times: per
    shape the ratios in run order, their median and spread, whether every run launched the same configuration;
    the goal read on the medians, and the shapes where one run met it and another did not."""
    from fp8lab import findings
    from fp8lab.kernels import gemm_report as R

    def run(xs, cfg="c1"):
        return {"results": [{"family": "prefill", "kernel": "w8a8_wgmma_tma", "M": 2048, "N": n, "K": 4096,
                             "shape": f"M=2048 N={n} K=4096", "time_us": 1.0, "config": cfg, "split": 1,
                             "speedup_vs_scaled_mm_blockwise": x} for n, x in zip((4096, 8192), xs)]}

    rows = R.prefill_repeats([run((0.90, 1.00)), run((0.96, 1.02)), run((0.93, 1.01), cfg="c2")])
    a, b = rows
    assert a["x_runs"] == [0.90, 0.96, 0.93] and a["x_median"] == pytest.approx(0.93) and a["runs"] == 3
    assert a["spread"] == pytest.approx(0.96 / 0.90 - 1) and a["same_launch"] is False
    text = findings.prefill_repeats_sentence(rows, "H100")
    assert text.startswith("The same grid recorded 3 times on the H100 (not every shape launched the same")
    assert "at least 0.95x at 1 of the 2 shapes (worst 0.930 at 2048x4096x4096)" in text
    assert "At 1 shape one run met 0.95x and another did not" in text
    same = R.prefill_repeats([run((0.96, 1.0)), run((0.97, 1.01))])
    assert all(r["same_launch"] for r in same) and "not every shape" not in findings.prefill_repeats_sentence(same)
    assert "did not" not in findings.prefill_repeats_sentence(same)
    assert findings.prefill_repeats_sentence(R.prefill_repeats([run((0.9, 1.0))])) == ""
    table = R.repeats_table(rows)
    assert table[0] == {"shape": "M=2048 N=4096 K=4096", "x_runs": "0.900 0.960 0.930", "x_median": a["x_median"],
                        "median interval": "[0.900, 0.960] 75 %", "spread": a["spread"], "same_launch": False}
    # three runs: [min, max] covers a median with 75 % probability only -- too few to call a shape beyond the noise
    assert (a["median_lo"], a["median_hi"], a["median_coverage"]) == (0.90, 0.96, 0.75)
    assert "covers it with only 75 % probability: no shape can be called met or missed" in text
    six = R.prefill_repeats([run((x, y)) for x, y in ((0.96, 0.90), (0.97, 0.91), (0.98, 0.99), (0.99, 0.93),
                                                      (1.00, 0.94), (0.955, 0.92))])
    t6 = findings.prefill_repeats_sentence(six, "H200")
    assert "covering the median with at least 97 % probability): of the 2 shapes, 1 met the goal beyond the runs' " \
           "noise, 0 missed it beyond it, and at 1 the interval spans the goal" in t6
    seven = R.prefill_repeats([run((0.96, 0.90))] * 6 + [run((0.97, 0.93))])
    assert "1 missed it beyond it (2048x8192x4096)" in findings.prefill_repeats_sentence(seven)
    d = {"provenance": {"git_commit": "0123456789abcdef", "date": "2026-12-06T10:07:33+00:00", "dirty": False,
                        "device": "H100"}}
    assert R.run_line(d) == "run: 01234567 2026-12-06T10:07 dirty=False H100" and R.run_line({}).startswith("run: ?")
