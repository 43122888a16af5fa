"""Every kernel compiles for every listed arch, and the instructions that make each hardware path real are there.

No GPU: NVRTC (PyPI nvidia-cuda-nvrtc) compiles each source with exactly the options the loader gives CuPy plus
what CuPy appends (_cuda.nvrtc_options), for the target each device would use (sm_89, sm_90 / sm_90a, sm_120,
sm_121); cuobjdump (PyPI nvidia-cuda-cuobjdump) disassembles. Compiled once per test session, in parallel.

What is asserted, per arch:
  * wgmma kernels: QGMMA (Hopper's FP8 tensor cores) on sm_90a; they build nowhere else (NOT_BUILDABLE);
  * the mma.sync ... e4m3 W8A8 kernel: QMMA (native FP8 MMA) on sm_89 / sm_120 / sm_121, with no F2FP.F16.E4M3
    unpack + HMMA emulation; on sm_90 the emulation (F2FP...E4M3...UNPACK + HMMA) and no QMMA;
  * the E2M1 hardware conversions only in the kernels that ask for them (HW_E2M1): F2FP.SATFINITE.E2M1.F32 (two fp32
    -> two codes) in the GB10-native quantizer, F2FP.F16.E2M1.UNPACK_B (two codes -> two f16) in the GB10-native
    GEMV, on sm_120a / sm_121a;
  * the W4A4 GEMM: OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X (the block-scaled FP4 tensor-core MMA) on sm_120a / sm_121a,
    and nothing on the CUDA cores touching an E2M1 nibble or an E4M3 scale (no F2FP but the epilogue's bf16 pack,
    no I2F, no HMMA); its portable emulation runs on the ordinary tensor cores everywhere and has no OMMA;
  * where a native source does not build (sm_89, sm_90, sm_90a, the plain sm_120 / sm_121 targets, sm_100a for the
    MMA), compiling it anyway fails in ptxas with "not supported on .target": the limit is the compiler's, proven.
"""
import os
import re

import pytest

from fp8lab.kernels import _cuda, gemv_nvfp4_hw, nvrtc, sass, sources

ARCHS = sources.ARCHS
E2M1_CVT_REFUSED = r"Instruction 'cvt with \.e2m1x2' not supported on \.target"
MMA_NVF4_REFUSED = r"Instruction 'mma with block scale' not supported on \.target"
# source -> what ptxas says where it does not build (NATIVE: the GB10-native sources)
NATIVE = {"nvfp4_hw.cu": E2M1_CVT_REFUSED, "gemv_nvfp4_hw.cu": E2M1_CVT_REFUSED, "gemm_w4a4.cu": MMA_NVF4_REFUSED}
# sm_89 has no clusters at all (the front end refuses __cluster_dims__); sm_120/121 have no wgmma/setmaxnreg, but for
# gemm_w8a8_tma.cu ptxas' log there is filled by its advisory on TMA multicast before the errors
_HOPPER_ONLY = "wgmma|setmaxnreg|__cluster_dims__ is not supported|'.multicast::cluster' modifier"
REFUSAL = {"gemm_w8a8_wgmma.cu": _HOPPER_ONLY, "gemm_w8a8_tma.cu": _HOPPER_ONLY, "gemv_v6.cu": _HOPPER_ONLY,
           "gemv_v4.cu": r"Feature 'cp.async.bulk' requires .target sm_90 or higher",
           "gemv_v5.cu": r"Feature 'cp.async.bulk' requires .target sm_90 or higher",
           "attention_decode_v3.cu": r"Feature 'cp.async.bulk' requires .target sm_90 or higher", **NATIVE}
# (source, arch) pairs that must NOT build, each with its reason; everything else must build.
NOT_BUILDABLE = {(f, cc): "wgmma / setmaxnreg exist only on sm_90a"
                 for f in ("gemm_w8a8_wgmma.cu", "gemm_w8a8_tma.cu", "gemv_v6.cu") for cc in ARCHS if cc != 90}
NOT_BUILDABLE.update({(f, cc): "the E2M1 conversions exist only on sm_100a / sm_120a / sm_121a"
                      for f in ("nvfp4_hw.cu", "gemv_nvfp4_hw.cu") for cc in ARCHS if cc not in (120, 121)})
NOT_BUILDABLE.update({("gemm_w4a4.cu", cc): "the block-scaled FP4 mma.sync exists only on sm_120a / sm_121a"
                      for cc in ARCHS if cc not in (120, 121)})
NOT_BUILDABLE[("gemv_v4.cu", 89)] = "the bulk copy engine (cp.async.bulk) exists from sm_90 on"
NOT_BUILDABLE[("gemv_v5.cu", 89)] = "the bulk copy engine (cp.async.bulk) exists from sm_90 on"
NOT_BUILDABLE[("attention_decode_v3.cu", 89)] = "the bulk copy engine (cp.async.bulk) exists from sm_90 on"
# kernels that ask for a hardware E2M1 conversion, the SASS form it must take, and on which archs.
GB10 = {120, 121}
NVFP4_HW_KERNELS = ("nvfp4_quant_bf16_cvt_hw", "nvfp4_quant_f32_cvt_hw", "nvfp4_quant_scalar_bf16_cvt",
                    "nvfp4_quant_scalar_f32_cvt", "e2m1_encode_cvt_elementwise", "check_e2m1_cvt", "e2m1_chain_cvt")
HW_E2M1: dict = {
    **{("nvfp4_hw.cu", k): ("F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C", GB10) for k in NVFP4_HW_KERNELS},
    **{("gemv_nvfp4_hw.cu", f"gemv_nvfp4_hw_r{r}_nt{nt}_c{c}"): ("F2FP.F16.E2M1.UNPACK_B", GB10)
       for r, nt, c in gemv_nvfp4_hw.KERNELS_HW},
}
W8A8_MMA_FP8 = ("gemm_w8a8.cu", ("w8a8_mma_fp8", "w8a8_mma_fp8_s3"))
WGMMA = ("gemm_w8a8_wgmma.cu", ("w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256", "w8a8_wgmma_ws"))
OMMA_FORM = "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"
# version C: every compiled TMA configuration (gemm_w8a8.TMA_CONFIGS), plus the two probe kernels
TMA_SRC = "gemm_w8a8_tma.cu"


def _tools_or_skip():
    missing = [n for n, ok in (("libnvrtc (nvidia-cuda-nvrtc)", nvrtc.available()), ("cuobjdump", _has_cuobjdump())) if not ok]
    if missing:
        msg = f"missing {', '.join(missing)}: pip install -r requirements.txt"
        if os.environ.get("CI"):
            pytest.fail(msg)  # CI installs them: a missing tool there is a defect, not a skip
        pytest.skip(msg)


def _has_cuobjdump() -> bool:
    try:
        sass.cuobjdump()
        return True
    except sass.ToolMissing:
        return False


@pytest.fixture(scope="session")
def built():
    _tools_or_skip()
    pairs = [(f, cc) for f in sources.SOURCES for cc in ARCHS if (f, cc) not in NOT_BUILDABLE]
    return sass.build_all(pairs)


def test_options_are_the_loaders_plus_what_cupy_appends():
    opts = _cuda.nvrtc_options("gemm_w8a8_wgmma.cu", 90)
    mine = _cuda.compile_options("gemm_w8a8_wgmma.cu", "sm_90a")
    assert opts[:len(mine)] == mine
    assert opts[len(mine):] == ("-ftz=true", "-arch=sm_90", "--device-as-default-execution-space")
    assert "--gpu-architecture=sm_90a" in mine and not any("fast_math" in o for o in opts)
    assert any(o.startswith("-DFP8LAB_E4M3_MAX=") for o in mine)


def test_declared_restrictions_are_the_listed_ones():
    declared = {(f, cc) for f, s in sources.SOURCES.items() for cc in ARCHS if not s.builds_for(cc)}
    assert declared == set(NOT_BUILDABLE)


@pytest.mark.parametrize("src,cc", sorted(NOT_BUILDABLE))
def test_not_buildable_is_a_real_limit(src, cc):
    """Compiled for the plain target anyway, NVRTC refuses: the restriction is the hardware's, not a guess."""
    _tools_or_skip()
    opts = _cuda.compile_options(src, f"sm_{cc}") + _cuda.cupy_appended_options(cc)
    with pytest.raises(nvrtc.CompileError, match=REFUSAL[src]):
        nvrtc.compile_cubin((_cuda.KERNEL_DIR / src).read_text(), opts, name=src)


# The targets next to the GB10's own: the Hopper arch-specific target, the plain (portable) sm_120 / sm_121 targets a
# binary built without the `a` suffix uses, and the B200's sm_100a (which has the E2M1 conversions, not the MMA).
NATIVE_REFUSALS = [(f, t) for f in NATIVE for t in ("sm_90a", "sm_120", "sm_121")] + [("gemm_w4a4.cu", "sm_100a")]


@pytest.mark.parametrize("src,target", NATIVE_REFUSALS)
def test_native_instructions_are_refused_off_the_a_targets(src, target):
    """The GB10-native sources compiled for a target without the instructions: ptxas refuses them. So a GB10 binary
    built for plain sm_121 cannot hold them at all -- the `a` suffix is what makes them exist."""
    _tools_or_skip()
    cc = sass.arch_cc(target)
    opts = _cuda.compile_options(src, target) + _cuda.cupy_appended_options(cc)
    with pytest.raises(nvrtc.CompileError, match=NATIVE[src] + f" '{target}'"):
        nvrtc.compile_cubin((_cuda.KERNEL_DIR / src).read_text(), opts, name=src)


def test_every_kernel_builds_for_every_listed_arch(built):
    for (f, cc), ks in built.items():
        assert ks, f"{f} for sm_{cc}: no kernels in the cubin"
        for name in sources.get(f).key_kernels:
            assert name in ks, f"{f} for sm_{cc}: key kernel {name} missing"
    # the same kernels everywhere, for the sources that build everywhere
    portable = {f for f in sources.SOURCES if not any((f, cc) in NOT_BUILDABLE for cc in ARCHS)}
    names = {cc: {n for (f, c), ks in built.items() if c == cc and f in portable for n in ks} for cc in ARCHS}
    assert all(names[cc] == names[90] for cc in ARCHS)


def test_wgmma_is_qgmma_on_sm90a(built):
    ks = built[(WGMMA[0], 90)]
    for name in WGMMA[1]:
        forms = ks[name].forms("QGMMA")
        assert forms and all("E4M3.E4M3" in f for f in forms), (name, forms)
        assert ks[name].count("HMMA") == 0


def test_tma_kernels_are_qgmma_with_tma_loads_on_sm90a(built):
    """Version C: FP8 tensor cores (QGMMA), loads by the copy engine (UTMALDG, multicast where clustered), stores by
    it where epi = 1 (UTMASTG), registers moved by setmaxnreg with two consumer warpgroups, and no local memory."""
    from fp8lab.kernels import gemm_w8a8 as G

    ks = built[(TMA_SRC, 90)]
    for bn, nwg, st, cl, epi in G.TMA_CONFIGS:
        name = f"w8a8_tma_n{bn}_w{nwg}_s{st}_c{cl}_e{epi}"
        k = ks[name]
        forms = k.forms("QGMMA")
        assert forms and all("E4M3.E4M3" in f for f in forms) and k.count("HMMA") == 0, (name, forms)
        assert k.count("QGMMA") == 4 * (bn // 128) * (2 if nwg == 1 else 1), (name, k.count("QGMMA"))  # k32 x sub-tiles
        assert k.count("UTMALDG") > 0 and k.count("LDGSTS") == 0, name
        assert k.has(r"^UTMALDG\.2D\.MULTICAST") == (cl == 2), name
        assert (k.count("UTMASTG") > 0) == (epi == 1), name
        assert (k.count("USETMAXREG") == 2) == (nwg == 2), name
        assert k.count("LDL") == 0 and k.count("STL") == 0, name
    # the pipelined consumers: a second batch in flight while one is promoted (wait_group 1), no local memory
    for bn, nwg, st, cl, epi in G.TMA_PIPE_CONFIGS:
        name = f"w8a8_tma_n{bn}_w{nwg}_s{st}_c{cl}_e{epi}_p2"
        k = ks[name]
        assert k.count("QGMMA") == 4 * (4 + 1), (name, k.count("QGMMA"))  # a group of 4 k-blocks + the remainder
        assert k.has(r"^WARPGROUP\.DEPBAR\.LE gsb0, 0x1"), name
        body = innermost_matrix_loop(k)  # clustered: a few bytes spilled per tile (the split schedule), not per k-block
        assert body and not {"LDL", "STL"} & set(body), (name, body)
    # scales staged in shared memory: the scale warp copies them (LDGSTS, arriving on the stage's barrier), the
    # consumers read them with LDS; no global load and no local memory in the loop around the QGMMAs (the only
    # global loads are the split fix-up's, after a tile's k-loop)
    for fam, suffix in (("W8A8_TMA_S", "_ss"), ("W8A8_TMA_PS", "_ss_p2")):
        for bn, nwg, st, cl, epi in G.TMA_COMPILED[fam]:
            name = f"w8a8_tma_n{bn}_w{nwg}_s{st}_c{cl}_e{epi}{suffix}"
            k = ks[name]
            assert k.count("LDGSTS") > 0 and k.has(r"^ARRIVES\.LDGSTSBAR"), name
            assert k.has(r"^WARPGROUP\.DEPBAR\.LE gsb0, 0x1") == suffix.endswith("_p2"), name
            body = innermost_matrix_loop(k)
            assert body and not {"LDL", "STL", "LDG"} & set(body), (name, body)
            assert body.get("LDS", 0) >= 3, (name, body)  # sb, sa of rows g and g + 8
    # staggered consumers: both warpgroups meet at named barrier 3 (the second before its first issue, the first
    # after its first MMAs; no bar.arrive, which could run ahead of the pairing); otherwise the k-loop is the staged-
    # scales loop (LDS of the scales, no local memory, no global load)
    for bn, nwg, st, cl, epi, stg in G.TMA_COMPILED["W8A8_TMA_SG"]:
        name = f"w8a8_tma_n{bn}_w{nwg}_s{st}_c{cl}_e{epi}_ss_sg{stg}"
        k = ks[name]
        body = innermost_matrix_loop(k)
        assert body.get("BAR") == 2 and not k.has(r"^BAR\.ARV"), (name, body.get("BAR"))
        assert k.has(r"^BAR\.SYNC\.DEFER_BLOCKING 0x3, 0x100") and k.count("LDGSTS") > 0, name
        assert body and not {"LDL", "STL", "LDG"} & set(body) and body.get("LDS", 0) >= 3, (name, body)
        assert body.get("QGMMA") == ks[name.rsplit("_sg", 1)[0]].count("QGMMA"), name
    assert ks["tma_copy_probe"].count("UTMALDG") == 1


def innermost_matrix_loop(k) -> dict:
    """Opcode counts of the shortest loop (a backward branch) that holds a matrix instruction (the k-loop)."""
    from collections import Counter

    body = k.loop_body(innermost=True)
    return dict(Counter(t.split()[0].split(".")[0] for t in body if t)) if body else {}


@pytest.mark.parametrize("src", [TMA_SRC, WGMMA[0]])
def test_ptxas_keeps_the_wgmma_pipeline_asynchronous(src):
    """ptxas serializes every wgmma of a kernel (each waits for the one before) when it cannot prove the accumulators
    untouched while a batch is in flight, and only says so in its -v log (C7514..C7518, 'Potential Performance
    Loss'). A kernel that compiles that way still validates, only slower: this catches it on the CPU."""
    _tools_or_skip()
    _, log = _cuda.compile_for(src, 90, ptxas_verbose=True)
    bad = [line for line in log.splitlines() if "serialized" in line or "warpgroup.wait is injected" in line]
    assert not bad, "\n".join(bad[:4])


@pytest.mark.parametrize("cc", [cc for cc in ARCHS if cc != 90])
@pytest.mark.parametrize("name", W8A8_MMA_FP8[1])
def test_mma_sync_e4m3_is_native_qmma(built, cc, name):
    k = built[(W8A8_MMA_FP8[0], cc)][name]
    assert any(f.startswith("QMMA.16832.F32.E4M3.E4M3") for f in k.forms("QMMA")), k.summary()["matrix_forms"]
    assert k.count("HMMA") == 0 and not k.has(r"^F2FP\.F16\.E4M3\.UNPACK")


@pytest.mark.parametrize("name", W8A8_MMA_FP8[1])
def test_mma_sync_e4m3_is_emulated_on_sm90(built, name):
    k = built[(W8A8_MMA_FP8[0], 90)][name]
    assert k.count("QMMA") == 0
    assert k.count("HMMA") > 0 and k.has(r"^F2FP\.F16\.E4M3\.UNPACK")


def test_e2m1_hardware_conversion_only_where_asked(built):
    found = {(f, name, cc) for (f, cc), ks in built.items() for name, k in ks.items() if k.has(r"^F2FP\.\S*E2M1")}
    asked = {(f, name, cc) for (f, name), (_, archs) in HW_E2M1.items() for cc in archs}
    assert found == asked
    for (f, name), (form, archs) in HW_E2M1.items():  # and in the form asked for: encode (quantizer), decode (GEMV)
        for cc in archs:
            forms = built[(f, cc)][name].forms("F2FP")
            assert form in forms and all("E2M1" not in x or x == form for x in forms), (f, name, cc, forms)


@pytest.mark.parametrize("cc", sorted(GB10))
def test_w4a4_is_the_block_scaled_fp4_mma(built, cc):
    """OMMA.SF on sm_120a / sm_121a, and the scales never touch the CUDA cores: no conversion but the bf16 output."""
    k = built[("gemm_w4a4.cu", cc)]["w4a4_omma"]
    assert k.forms("OMMA") == {OMMA_FORM: k.count("OMMA")} and k.count("OMMA") > 0, k.summary()["matrix_forms"]
    assert k.count("HMMA") == k.count("QMMA") == k.count("I2F") == 0
    assert set(k.forms("F2FP")) <= {"F2FP.BF16.F32.PACK_AB"}, k.forms("F2FP")
    loop = k.loop()
    assert loop["ops"].get("OMMA") == loop["matrix"] and "F2FP" not in loop["ops"], loop


def test_w4a4_emulation_is_portable(built):
    """The emulation: ordinary f16 tensor-core MMAs on every arch, no OMMA anywhere outside gemm_w4a4.cu."""
    for cc in ARCHS:
        k = built[("gemm_w4a4_emu.cu", cc)]["w4a4_emu"]
        assert k.count("HMMA") > 0 and k.count("OMMA") == 0
    omma = {(f, cc) for (f, cc), ks in built.items() for k in ks.values() if k.count("OMMA")}
    assert omma == {("gemm_w4a4.cu", cc) for cc in GB10}


def test_gemv_v4_streams_through_the_bulk_copy_engine(built):
    """Version 4's weights arrive by cp.async.bulk (UBLKCP) counted on mbarriers (SYNCS.ARRIVE.TRANS64 announces the
    bytes), and the warp reads them back with shared loads: in the unit loop there is no 128-bit global load of the
    weights (the only 128-bit LDGs left are the activations', C x 2 x NT per unit, and the fix-up's fp32 reads are
    32-bit), on every arch it builds for -- the GB10's sm_121 included. The slot's refill follows the MMAs that
    consumed its words (the order the source asks for; a copy issued before them raced on the H200)."""
    from fp8lab.kernels import gemv_v3 as V3

    for cc in (90, 120, 121):
        ks = built[("gemv_v4.cu", cc)]
        assert len(ks) == len(V3.KERNELS4)
        for (fmt, R, NT, C, D, e, n) in V3.KERNELS4:
            k = ks[V3.kernel_name(fmt, R, NT, C, D, e, n, version=4)]
            assert k.count("UBLKCP") >= 1 and k.has(r"SYNCS\.ARRIVE\.TRANS64"), (cc, fmt, R, NT, C, D)
            loop = k.loop()
            wide = sum(1 for _, t in k.instrs if re.match(r"LDG\.E\S*\.128", t))  # version 3: 36 at fp8c c2 p3
            act = C * NT * (4 if fmt == "nvfp4" else 2)
            assert wide <= act, (cc, fmt, R, NT, C, D, wide, act)
            assert loop["ops"].get("LDS", 0) >= 2 * C * R, (cc, fmt, loop["ops"].get("LDS"))
            assert loop["ops"].get("HMMA", 0) == C * R * NT * (8 if fmt == "nvfp4" else 4), (cc, fmt)
            # the refill may overwrite the slot only once every lane has consumed its words: in the unit loop every
            # shared load and every MMA (which waits for the loaded registers) comes before the bulk copy
            # (`LDS RZ, [RZ]`: the fence idiom ptxas emits in the fix-up on sm_120, not a read of the slot)
            body = [t for t in k.loop_body() if t]
            first_copy = next(i for i, t in enumerate(body) if t.startswith("UBLKCP"))
            reads = [i for i, t in enumerate(body) if t.startswith("HMMA") or (t.startswith("LDS") and " RZ," not in t)]
            assert max(reads) < first_copy, (cc, fmt, R, NT, C, D)


def test_gemv_v5_streams_one_ring_per_cta(built):
    """Version 5: the weights arrive by cp.async.bulk (UBLKCP, one per unit of a stage, NVFP4's scale codes too)
    counted on mbarriers, read back with shared loads (2 C R per unit and lane), no 128-bit global load of the weights
    (the activations' only); in the MMA warps' loop every MMA and every shared load of the ring comes before the arrival
    that releases the slot to the producer (mbarrier.arrive: SYNCS.ARRIVE.TRANS64.A1T0): the copy engine never
    overwrites words a warp has not consumed. Every arch it builds for."""
    from fp8lab.kernels import gemv_v3 as V3

    for cc in (90, 120, 121):
        ks = built[("gemv_v5.cu", cc)]
        assert len(ks) == len(V3.KERNELS5)
        for (fmt, R, NT, C, D, e, n) in V3.KERNELS5:
            what = (cc, fmt, R, NT, C, D)
            k = ks[V3.kernel_name(fmt, R, NT, C, D, e, n, version=5)]
            assert k.count("UBLKCP") >= (2 if fmt == "nvfp4" else 1) and k.has(r"SYNCS\.ARRIVE\.TRANS64"), what
            wide = sum(1 for _, t in k.instrs if re.match(r"LDG\.E\S*\.128", t))
            assert wide <= C * NT * (4 if fmt == "nvfp4" else 2), what   # the activations' only
            body = [t for t in k.loop_body() if t]
            ops = [t.split()[0] for t in body]
            assert sum(o.startswith("HMMA") for o in ops) == C * R * NT * (8 if fmt == "nvfp4" else 4), what
            assert sum(o == "LDS.128" for o in ops) >= 2 * C * R, what
            release = ops.index("SYNCS.ARRIVE.TRANS64.A1T0")
            reads = [i for i, o in enumerate(ops) if o.startswith("HMMA") or o == "LDS.128"]
            assert max(reads) < release, what


def test_kernel_at_finds_an_opcode_in_full_or_by_its_base():
    k = sass.Kernel("k", [(0, "SYNCS.CCTL.IVALL"), (16, "CCTL.IVALL"), (32, "ATOMG.E.ADD.S32.STRONG.GPU PT, R0, [R2], R9"),
                          (48, "MEMBAR.ALL.GPU"), (64, "")])
    assert k.at("CCTL.IVALL") == [16] and k.at("ATOMG") == [32] and k.at("MEMBAR.ALL.GPU") == [48]
    assert k.at("SYNCS") == [0] and k.at("MEMBAR.SC.GPU") == []


def _check_arrivals(k, what):
    """ptx.cuh's counter pattern, once per counter: a release add (MEMBAR.ALL.GPU + ATOMG) and, after it, the last
    arrival's acquire (fence.acq_rel.gpu: MEMBAR.ALL.GPU + CCTL.IVALL); no sequentially consistent fence, and no L1
    invalidation but the acquire's, each after its atomic."""
    atom, ivall, membar = k.at("ATOMG"), k.at("CCTL.IVALL"), k.at("MEMBAR.ALL.GPU")
    assert atom and not k.has(r"MEMBAR\.SC"), what
    assert len(ivall) == len(atom) and len(membar) == 2 * len(atom), (what, len(atom), len(ivall), len(membar))
    assert all(i > a for a, i in zip(sorted(atom), sorted(ivall))), what


def test_gemv_split_fixup_fences(built):
    """The stream-K fix-up of the packed GEMVs (gemv_v3_common.cuh v3_finish_span): each contributor signals with a
    release add (ptx.cuh arrive_release) and only the last one acquires (acquire_after_arrival), so the SM's L1 (every
    warp's cached activations) is invalidated once per split group, not at each contributor. Every packed version,
    every arch it builds for."""
    from fp8lab.kernels import gemv_v3 as V3

    for v in V3.VERSIONS:
        for cc in ARCHS:
            if (f"gemv_v{v}.cu", cc) in NOT_BUILDABLE:
                continue
            for name, k in built[(f"gemv_v{v}.cu", cc)].items():
                _check_arrivals(k, (cc, name))


def test_attention_merge_counter_fences(built):
    """Decode attention version 3's in-kernel merge (attention_decode_v3.cu merge_in_kernel): a barrier, thread 0's
    release add, and the last block's acquire after it -- one counter per main kernel, on every arch it builds for
    (under __threadfence() it was MEMBAR.SC.GPU + CCTL.IVALL in every block and again in the last). The reduce
    kernel has no counter."""
    for cc in ARCHS:
        if ("attention_decode_v3.cu", cc) in NOT_BUILDABLE:
            continue
        mains = {n: k for n, k in built[("attention_decode_v3.cu", cc)].items() if n != "decode_reduce"}
        assert mains, cc
        for name, k in mains.items():
            assert k.count("ATOMG") == 1, (cc, name)
            _check_arrivals(k, (cc, name))


def test_merge_fence_sass_compares_the_shipped_counter_with_the_threadfence_pair():
    """attention_fp8kv.merge_fence_sass (notebook 08's table): the shipped merge has a release fence and one acquire
    (one L1 invalidation, the last block's), the __threadfence() pair patched back in (THREADFENCE_MERGE_PATCH, which
    must still apply) two sequentially consistent fences and two invalidations; one atomic either way."""
    _tools_or_skip()
    from fp8lab.kernels import attention_fp8kv as att

    shipped, before = att.merge_fence_sass(90)
    assert (shipped["MEMBAR.SC.GPU"], shipped["MEMBAR.ALL.GPU"], shipped["CCTL.IVALL"], shipped["ATOMG"]) == (0, 2, 1, 1)
    assert (before["MEMBAR.SC.GPU"], before["MEMBAR.ALL.GPU"], before["CCTL.IVALL"], before["ATOMG"]) == (2, 0, 2, 1)
    with pytest.raises(ValueError, match="no version 3 default kernel"):
        att.merge_fence_sass(90, D=96)


def test_gemv_and_gemm_kernels_build_for_sm89(built):
    """fma.rn.bf16x2 with -0.0 (ptx.cuh bf16x2_mul) replaced mul.rn.bf16x2 (sm_90+): the decode kernels run on Ada."""
    for f in ("gemv_fp8.cu", "gemv_nvfp4.cu", "gemm_w8a8.cu"):
        assert any(k.count("HMMA") or k.count("QMMA") for k in built[(f, 89)].values()), f


def test_summary_table_renders(built):
    s = sass.summarize(ARCHS)  # cached compiles: no extra cost
    text = sass.format_summary(s)
    assert re.search(r"sm_90\s+w8a8_wgmma\s+sm_90a", text) and "QGMMA" in text
    assert "not built: wgmma" in text
    assert re.search(r"sm_121\s+w4a4_omma\s+sm_121a\s+\d+\s+OMMA\.SF", text)
    assert re.search(r"sm_90\s+gemm_w4a4\.cu\s+not built: mma\.sync kind::mxf4nvf4", text)


def test_attention_v3_reads_the_cache_through_the_bulk_copy_engine(built):
    """Decode attention version 3: the cache rows arrive by cp.async.bulk (UBLKCP) counted on mbarriers: the token loop
    (the innermost loop holding the MMAs) has no global load of 64 bits or more (Q's are before it; NVFP4's scale rows
    of a partial or misaligned tile are the lanes' 32-bit loads), and the warp reads each tile back with shared loads
    (K: 2 x KP per lane, V: 4 x NVP, plus NVFP4's scale codes) feeding the step's MMAs (Q.K^T: 2 x D/16, P.V: D/16 per
    8 heads; twice that for COPY = 2, whose stage holds two tiles). The tile's refill follows every shared load and MMA of the step (a refill right behind the loads raced
    in gemv_v4)."""
    from fp8lab.kernels import attention_fp8kv as att

    for cc in (90, 120, 121):
        ks = built[("attention_decode_v3.cu", cc)]
        for fmt, D, g, ns, copy, minb in att.V3_KERNELS:
            k = ks[att.v3_kernel_name(fmt, D, g, (ns, copy, minb))]
            what = (cc, fmt, D, g, ns, copy, minb)
            assert k.count("UBLKCP") >= 1 and k.has(r"SYNCS\.ARRIVE\.TRANS64"), what
            body = [t for t in k.loop_body(innermost=True) if t]
            assert not [t for t in body if re.match(r"LDG\.E\S*\.(64|128)", t)], what
            rowb = {"bf16": 2 * D, "nvfp4": D // 2}.get(fmt, D)
            kp, nvp = (1, 1) if fmt == "nvfp4" else (max(1, rowb // 64), max(1, rowb // 128))
            lds = sum(1 for t in body if t.startswith("LDS") and " RZ," not in t)
            assert lds >= 2 * kp + 4 * nvp, (what, lds)
            nt = 2 if g == "g16" else 1
            tps = 2 if copy == 2 else 1  # COPY = 2: two tiles per stage, the step's loop unrolled over both
            assert lds >= tps * (2 * kp + 4 * nvp), (what, lds)
            assert sum(1 for t in body if t.startswith("HMMA")) == tps * (2 * (D // 16) + nt * (D // 16)), what
            first_copy = next(i for i, t in enumerate(body) if t.startswith("UBLKCP"))
            reads = [i for i, t in enumerate(body) if t.startswith("HMMA") or (t.startswith("LDS") and " RZ," not in t)]
            assert max(reads) < first_copy, what


def _gap_kernel_sass():
    """(kernel name, cubin, disassembly) of the prefill gap run's examined kernel on sm_90a, the package's sources."""
    from fp8lab.kernels import gemm_prefill, gemm_w8a8 as G

    cubin = _cuda.compile_for(TMA_SRC, 90)[0]
    return G.TMA_KERNELS[gemm_prefill.GAP_KERNELS[0]].function, cubin, sass.disassemble(cubin)


def test_largest_loop_is_a_loop_not_a_stubs_jump_back(built):
    """Kernel.loop_range: no key kernel's loop spans an unpredicated EXIT (an out-of-line stub after the kernel's end
    jumps back into it; that jump is no loop), and the examined prefill kernel's largest loop is its tile loop: it
    holds the k-loop and is longer."""
    seen = 0
    for (f, cc), ks in built.items():
        for name in sources.get(f).key_kernels:
            k = ks.get(name)
            r = k and k.loop_range()
            if r:
                seen += 1
                assert not any(r[0] <= e <= r[1] for e in k.exits), (f, cc, name, [hex(x) for x in r])
    assert seen > 20
    fn, _, text = _gap_kernel_sass()
    k = sass.parse(text)[fn]
    (lo, hi), (ilo, ihi) = k.loop_range(), k.loop_range(innermost=True)
    assert k.exits and lo <= ilo and ihi <= hi and hi - lo > ihi - ilo


def test_control_fields_round_trip():
    """sass.control / with_control: each field of the high word read back as written, the others untouched; a value
    too wide for its field is an error."""
    hi = 0x000FE20000000003
    for field, (lo, n) in sass.CONTROL_FIELDS.items():
        top = (1 << n) - 1
        new = sass.with_control(hi, **{field: top})
        c, c0 = sass.control(new), sass.control(hi)
        assert c[field] == top and all(c[f] == c0[f] for f in c if f != field)
        assert new & ((1 << 41) - 1) == hi & ((1 << 41) - 1)  # below the control bits: the operands stay
        with pytest.raises(ValueError, match="does not fit"):
            sass.with_control(hi, **{field: top + 1})
    assert sass.control(sass.with_control(hi, reuse=0b0010, **{"yield": 0})) == {**sass.control(hi), "reuse": 2, "yield": 0}
    # the positions themselves, written out (bits 105-125 of the instruction; DeepGEMM's FFMA mask 0x0800200000000000
    # is reuse flag 1 and the yield bit)
    assert sass.with_control(0, **{"yield": 1}) == 1 << 45 and sass.with_control(0, reuse=0b0010) == 1 << 59
    assert sass.with_control(0, stall=15) == 0xF << 41 and sass.with_control(0, wait_mask=63) == 0x3F << 52
    assert sass.with_control(0, reuse=1, **{"yield": 1}) | (1 << 59) == sass.with_control(0, reuse=3, **{"yield": 1})
    for bad in ({"bogus": 1}, {"stall": 1.0}, {"stall": True}, {"reuse": -1}):
        with pytest.raises(ValueError):
            sass.with_control(0, **bad)


def test_control_edit_rewrites_only_the_promotion_ffmas(monkeypatch):
    """sass.edit_control on the examined prefill kernel (sm_90a): each CONTROL_EDITS entry leaves every instruction's
    text and low word as they were and changes high words only of the promotion's FFMAs, which then carry the fields
    asked for; ptxas's own pattern (the yield bit cleared on about half of the promotion FFMAs, alternating with
    reuse flags) is what the edits start from. Bytes that do not match the disassembly and unknown kernels are
    errors."""
    _tools_or_skip()
    from fp8lab.kernels import gemm_prefill

    fn, cubin, text = _gap_kernel_sass()
    k = sass.parse(text)[fn]
    pick = sass.promotion_ffmas(k)
    before = sass.encoded(text)[fn]
    # cuobjdump's own text is the independent check of the reuse field: '.reuse' on an operand <=> a reuse flag set
    assert all((".reuse" in t) == (sass.control(hi)["reuse"] != 0) for _, t, _, hi in before)
    ffma = [sass.control(hi) for a, t, lo, hi in before if pick(a, t)]
    assert len(ffma) == 128  # 2 x 64 per k-block: a 64 x 256 slice per consumer warpgroup
    assert {(c["yield"], c["reuse"] != 0) for c in ffma} <= {(1, True), (0, False), (1, False)}
    assert sum(c["yield"] == 0 for c in ffma) >= 48  # ptxas interleaves yields across the promotion
    for name, (what, fields) in gemm_prefill.CONTROL_EDITS.items():
        counts: dict = {}
        new = gemm_prefill.control_edit(fn, fields, counts)(cubin)
        assert len(new) == len(cubin) and counts["ffmas"] == 128
        after = sass.encoded(sass.disassemble(new))[fn]
        assert all((".reuse" in t) == (sass.control(hi)["reuse"] != 0) for _, t, _, hi in after), name
        plain = lambda code: [(a, t.replace(".reuse", ""), lo) for a, t, lo, _ in code]  # noqa: E731
        assert plain(after) == plain(before), name  # the same instructions; the reuse flags may differ
        moved = [(a, t) for (a, t, _, h0), (_, _, _, h1) in zip(before, after) if h0 != h1]
        assert all(pick(a, t) for a, t in moved) and len(moved) == counts["changed"], name
        for a, t, lo, hi in after:
            if pick(a, t):
                assert all(sass.control(hi)[f] == v for f, v in fields.items()), (name, hex(a))
        diff = [i for i, (x, y) in enumerate(zip(cubin, new)) if x != y]
        assert len({i // 16 for i in diff}) == counts["changed"], name  # nothing else in the file moved
        assert (counts["changed"] > 0) == bool(fields), name
    with pytest.raises(ValueError, match="no kernel"):
        sass.edit_control(cubin, "no_such_kernel", pick, reuse=0)
    with pytest.raises(ValueError, match="picked no instruction"):
        sass.edit_control(cubin, fn, lambda a, t: False, reuse=0)
    with pytest.raises(ValueError, match="no loop holding a matrix instruction"):
        sass.promotion_ffmas(sass.Kernel("plain", [(0, "FFMA R1, R2, R3, R1"), (16, "EXIT")]))
    secs = sass.elf_sections(cubin)
    shifted = {**secs, ".text." + fn: (secs[".text." + fn][0] + 16, secs[".text." + fn][1])}  # a wrong offset
    monkeypatch.setattr(sass, "elf_sections", lambda blob: shifted)
    with pytest.raises(ValueError, match="not those cuobjdump printed"):
        sass.edit_control(cubin, fn, pick, reuse=0)
    monkeypatch.undo()
    for blob in (b"not an elf file at all", b"\x7fELF", b"\x7fELF\x02\x01", cubin[:0x40], cubin[:len(cubin) // 2]):
        with pytest.raises(ValueError):
            sass.elf_sections(blob)


def test_cli_prints_a_kernels_loop_with_its_control_bits(capsys):
    """`python -m fp8lab.kernels.sass --source ... --kernel ... --control`: the examined prefill kernel's k-loop, one
    line per instruction with the fields sass.control reads (the same as the encoded words say); a kernel the
    source does not have is a one-line error with exit code 2."""
    _tools_or_skip()
    fn, _, text = _gap_kernel_sass()
    assert sass.main(["--source", TMA_SRC, "--arch", "sm_90", "--kernel", fn, "--control"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["addr", "stall", "yield", "reuse", "instruction"]
    k = sass.parse(text)[fn]
    lo, hi = k.loop_range(innermost=True)
    assert len(out) - 1 == sum(1 for a, _ in k.instrs if lo <= a <= hi)
    code = {a: w for a, _, _, w in sass.encoded(text)[fn]}
    for line in out[1:]:
        addr, stall, yld, reuse = line.split()[:4]
        c = sass.control(code[int(addr, 16)])
        assert (int(stall), int(yld), int(reuse, 2)) == (c["stall"], c["yield"], c["reuse"]), line
    assert sum("FFMA" in ln for ln in out) == 128
    assert sass.main(["--source", TMA_SRC, "--arch", "sm_90", "--kernel", "nope", "--control"]) == 2
    assert "no kernel 'nope'" in capsys.readouterr().err


def test_leave_one_out_patch_compiles_and_removes_the_promotion():
    """The prefill gap run's variants (gemm_prefill.LEAVE_ONE_OUT) apply to today's sources and compile for sm_90a:
    no_promote leaves the examined kernel its MMAs but a single FFMA per k-block where the promotion was,
    promote_twice doubles the FFMAs (ptxas does not fuse them away); the package's own sources are untouched and in
    use again after the block."""
    _tools_or_skip()
    from fp8lab.kernels import gemm_prefill, gemm_w8a8 as G

    fn = G.TMA_KERNELS[gemm_prefill.GAP_KERNELS[0]].function
    orig = _cuda.KERNEL_DIR
    base = sass.parse(sass.disassemble(_cuda.compile_for(TMA_SRC, 90)[0]))[fn]
    with _cuda.patched_sources(gemm_prefill.LEAVE_ONE_OUT["no_promote"][1]) as d:
        assert _cuda.KERNEL_DIR == d != orig
        cut = sass.parse(sass.disassemble(_cuda.compile_for(TMA_SRC, 90)[0]))[fn]
    assert _cuda.KERNEL_DIR == orig and gemm_prefill.PROMOTE_LOOP in (orig / "wgmma.cuh").read_text()
    b, c = innermost_matrix_loop(base), innermost_matrix_loop(cut)
    assert b["QGMMA"] == c["QGMMA"] == base.count("QGMMA")
    assert b["FFMA"] == 128 and c["FFMA"] == 2, (b.get("FFMA"), c.get("FFMA"))  # 2 x 64 per k-block -> one per half
    with _cuda.patched_sources(gemm_prefill.LEAVE_ONE_OUT["promote_twice"][1]):
        twice = innermost_matrix_loop(sass.parse(sass.disassemble(_cuda.compile_for(TMA_SRC, 90)[0]))[fn])
    assert twice["QGMMA"] == b["QGMMA"] and twice["FFMA"] == 256, twice.get("FFMA")  # the FFMAs doubled, not fused
    with pytest.raises(ValueError, match="does not apply"):
        with _cuda.patched_sources({"wgmma.cuh": [("no such text", "x")]}):
            pass
    with pytest.raises(ValueError, match="not a kernel source"):
        with _cuda.patched_sources({"nope.cu": [("a", "b")]}):
            pass
    assert _cuda.KERNEL_DIR == orig


def test_decode_timeline_copy_stamps_four_times_and_keeps_the_kernel():
    """The decode timeline's instrumented copy of version 3 (gemv_timeline.patches) applies to today's sources and
    compiles for sm_90a: each kernel reads the GPU-wide clock four times (entry, first unit, last unit, end) and reads
    its SM id once, and keeps the shipped kernel's loads and MMAs (the same LDG and HMMA counts): only stamps added."""
    _tools_or_skip()
    from fp8lab.kernels import _cuda, sass
    from fp8lab.kernels import gemm_decode as D
    from fp8lab.kernels import gemv_timeline as T

    header = (_cuda.KERNEL_DIR / "gemv_timeline.cuh").read_text()
    assert f"#define V3_TL_MAX_WARPS {T.MAX_WARPS}" in header   # the Python side reads arrays of this size
    for fmt in T.FORMATS:
        full = D.decode_gap_sass(fmt, "full", Ms=T.MS)
        with _cuda.patched_sources(T.patches(fmt)):
            cubin, _ = _cuda.compile_for("gemv_v3.cu", 90)
        ks = sass.parse(sass.disassemble(cubin))
        assert sorted(ks) == sorted(full), fmt
        for name, k in ks.items():
            clock = sum(1 for _, t in k.instrs if "SR_GLOBALTIMER" in t)
            assert clock >= 4 and sum(1 for _, t in k.instrs if "SMID" in t) >= 1, (name, clock)   # SR_VIRTUALSMID
            assert k.count("LDG") == full[name]["LDG"] and k.count("HMMA") == full[name]["HMMA"], name


def test_decode_gap_variants_cut_the_arithmetic_and_keep_every_load():
    """The decode gap run's copies of version 3 (gemm_decode.DECODE_GAP) apply to today's sources and compile for
    sm_90a with every load of the shipped kernel (weights, NVFP4 scale words, activations: the same LDG count) and
    less arithmetic (no_x_loads: the same MMAs, fewer loads): no MMA in no_mma and loads_only, no bf16x2 multiply in no_mul, fewer integer ops in min_widen
    than in no_mul; only the kernels the run times are compiled; a variant without a form for a format is refused."""
    _tools_or_skip()
    from fp8lab.kernels import gemm_decode as D

    for fmt in D.DECODE_GAP_FORMATS:
        full = D.decode_gap_sass(fmt, "full")
        assert sorted(full) == sorted(f"gemv3_{f}_r{R}_nt{nt}_c{C}_p{P}_e0_n0" for f, R, nt, C, P, _, _ in D.decode_gap_keys(fmt))
        for v, (_, forms) in D.DECODE_GAP.items():
            if fmt not in forms:
                with pytest.raises(ValueError, match="no nvfp4 form"):
                    D.decode_gap_patches(v, fmt)
                continue
            cut = D.decode_gap_sass(fmt, v)
            for name, c in cut.items():
                f = full[name]
                if v == "empty":  # the launch alone: a few instructions, no load, no MMA
                    assert sum(c.values()) < 64 and not c.get("LDG") and not c.get("HMMA"), (fmt, name, c)
                    continue
                if v == "no_x_loads":  # only the activation loads go: C NT XV per unit, P units unrolled
                    assert 0 < c.get("LDG") < f["LDG"] and c["HMMA"] == f["HMMA"], (fmt, v, name)
                    continue
                assert c.get("LDG") == f["LDG"], (fmt, v, name, c.get("LDG"), f["LDG"])
                assert f["HMMA"] > 0 and f["HMUL2"] > 0
                if v in ("no_mma", "loads_only"):
                    assert c.get("HMMA", 0) == 0, (fmt, v, name)
                else:
                    assert c["HMMA"] == f["HMMA"], (fmt, v, name)
                if v in ("no_mul", "min_widen", "loads_only"):
                    assert c.get("HMUL2", 0) == 0, (fmt, v, name, c.get("HMUL2"))
                assert sum(c.values()) < sum(f.values()) or v == "no_mma", (fmt, v, name)
        if fmt == "fp8c":
            nm, mw = D.decode_gap_sass(fmt, "no_mul"), D.decode_gap_sass(fmt, "min_widen")
            for name in nm:
                ops = lambda c: c.get("LOP3", 0) + c.get("SHF", 0)  # noqa: E731
                assert ops(mw[name]) < ops(nm[name]), name
    with pytest.raises(ValueError, match="no fp8c form|has no"):
        D.decode_gap_patches("nope", "fp8c")
