"""Every kernel compiles for every listed arch, and the instructions that make each hardware path real are there.

No GPU: NVRTC (PyPI nvidia-cuda-nvrtc) compiles each source with exactly the options the loader gives CuPy plus
what CuPy appends (_cuda.nvrtc_options), for the target each device would use (sm_89, sm_90 / sm_90a, sm_120,
sm_121); cuobjdump (PyPI nvidia-cuda-cuobjdump) disassembles. Compiled once per test session, in parallel.

What is asserted, per arch:
  * wgmma kernels: QGMMA (Hopper's FP8 tensor cores) on sm_90a; they build nowhere else (NOT_BUILDABLE);
  * the mma.sync ... e4m3 W8A8 kernel: QMMA (native FP8 MMA) on sm_89 / sm_120 / sm_121, with no F2FP.F16.E4M3
    unpack + HMMA emulation; on sm_90 the emulation (F2FP...E4M3...UNPACK + HMMA) and no QMMA;
  * the E2M1 hardware conversion (F2FP...E2M1) only in the kernels that ask for it (HW_E2M1; none yet).
"""
import os
import re

import pytest

from fp8lab.kernels import _cuda, nvrtc, sass, sources

ARCHS = sources.ARCHS
# (source, arch) pairs that must NOT build, each with its reason; everything else must build.
NOT_BUILDABLE = {(f, cc): "wgmma / setmaxnreg exist only on sm_90a" for f in ("gemm_w8a8_wgmma.cu", "gemm_w8a8_tma.cu")
                 for cc in ARCHS if cc != 90}
# kernels that ask for the hardware E2M1 conversion (cvt...e2m1x2 -> F2FP...E2M1), and on which archs.
# The GB10-native variants add one line each, e.g. ("nvfp4_native.cu", "nvfp4_quant_bf16_hw"): {120, 121}.
HW_E2M1: dict = {}
W8A8_MMA_FP8 = ("gemm_w8a8.cu", "w8a8_mma_fp8")
WGMMA = ("gemm_w8a8_wgmma.cu", ("w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256", "w8a8_wgmma_ws"))
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
    # sm_89 has no clusters at all (the front end refuses __cluster_dims__); sm_120/121 have no wgmma/setmaxnreg, but
    # for gemm_w8a8_tma.cu ptxas' log there is filled by its advisory on TMA multicast before the errors
    with pytest.raises(nvrtc.CompileError,
                       match="wgmma|setmaxnreg|__cluster_dims__ is not supported|'.multicast::cluster' modifier"):
        nvrtc.compile_cubin((_cuda.KERNEL_DIR / src).read_text(), opts, name=src)


def test_every_kernel_builds_for_every_listed_arch(built):
    for (f, cc), ks in built.items():
        assert ks, f"{f} for sm_{cc}: no kernels in the cubin"
        for name in sources.get(f).key_kernels:
            assert name in ks, f"{f} for sm_{cc}: key kernel {name} missing"
    names = {cc: {n for (f, c), ks in built.items() if c == cc for n in ks} for cc in ARCHS}
    wg = set(WGMMA[1]) | set(built[(TMA_SRC, 90)])
    for cc in ARCHS:  # the same kernels everywhere, except what NOT_BUILDABLE leaves out
        assert names[cc] | (wg if cc != 90 else set()) == names[90]


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
    assert ks["tma_copy_probe"].count("UTMALDG") == 1


@pytest.mark.parametrize("cc", [cc for cc in ARCHS if cc != 90])
def test_mma_sync_e4m3_is_native_qmma(built, cc):
    k = built[(W8A8_MMA_FP8[0], cc)][W8A8_MMA_FP8[1]]
    assert any(f.startswith("QMMA.16832.F32.E4M3.E4M3") for f in k.forms("QMMA")), k.summary()["matrix_forms"]
    assert k.count("HMMA") == 0 and not k.has(r"^F2FP\.F16\.E4M3\.UNPACK")


def test_mma_sync_e4m3_is_emulated_on_sm90(built):
    k = built[(W8A8_MMA_FP8[0], 90)][W8A8_MMA_FP8[1]]
    assert k.count("QMMA") == 0
    assert k.count("HMMA") > 0 and k.has(r"^F2FP\.F16\.E4M3\.UNPACK")


def test_e2m1_hardware_conversion_only_where_asked(built):
    found = {(f, name, cc) for (f, cc), ks in built.items() for name, k in ks.items() if k.has(r"^F2FP\.\S*E2M1")}
    asked = {(f, name, cc) for (f, name), archs in HW_E2M1.items() for cc in archs}
    assert found == asked


def test_gemv_and_gemm_kernels_build_for_sm89(built):
    """fma.rn.bf16x2 with -0.0 (ptx.cuh bf16x2_mul) replaced mul.rn.bf16x2 (sm_90+): the decode kernels run on Ada."""
    for f in ("gemv_fp8.cu", "gemv_nvfp4.cu", "gemm_w8a8.cu"):
        assert any(k.count("HMMA") or k.count("QMMA") for k in built[(f, 89)].values()), f


def test_summary_table_renders(built):
    s = sass.summarize()  # cached compiles: no extra cost
    text = sass.format_summary(s)
    assert re.search(r"sm_90\s+w8a8_wgmma\s+sm_90a", text) and "QGMMA" in text
    assert "not built: wgmma" in text
