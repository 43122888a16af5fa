"""Prefill: the W8A8 block-scaled GEMM (1x128 activation x 128x128 weight scales) against cuBLAS bf16 and
torch._scaled_mm (blockwise, tensorwise) in interleaved rounds; the climb of version C; seed 001's accuracy gate.

    bench_prefill(bench, skip=set())           # the 30-shape grid + the climb at CLIMB_SHAPES (records into bench)
    bench_gap(bench, skip=set())               # where the gap goes: the promotion left out, staggered consumers
    tune(shapes, names)                        # the tuning sweep of a device run (tools/gpu/prefill.sh)
    sass_facts()                               # QGMMA / TMA counts, registers, spills, shared memory per kernel
    accuracy_gate_run(skip) -> [{"kind": "random", "shape": ..., "wgmma_tma": {"cosine": ..., "rel_rms": ...}, ...}]

Every kernel is validated against the float64 reference (output poisoned, tolerances.matmul at this K) before it
is timed; _scaled_mm blockwise is checked against the same reference (its layout must compute OUR arithmetic).
Timing: CUDA graphs of several calls over rotating input sets (harness.graph_time_us), variants interleaved in
rounds (Bench.compare), median and quartiles recorded.

Command line (a device run; the recording bench is `python -m fp8lab.kernels.bench gemm`):
    python -m fp8lab.kernels.gemm_prefill --tune --shapes 4096x7168x7168 --out /tmp/tune.json
"""
from __future__ import annotations

import argparse
import math
import sys
import threading

from . import harness, tolerances
from .gemm_anchors import scaled_mm_calls
from .gemm_smoke import out_of_time

PREFILL_M = (128, 512, 2048, 4096, 8192)
#: (N, K) of the prefill grid: Llama-3-8B (4096 / 14336) and Qwen2.5-7B-like (3584 / 18944) projections, 7168^2
PREFILL_NK = ((4096, 4096), (7168, 7168), (14336, 4096), (4096, 14336), (18944, 3584), (3584, 18944))
PREFILL_SHAPES = [(M, N, K) for (N, K) in PREFILL_NK for M in PREFILL_M]
#: where the climb is timed (every rung, the older versions, the anchors)
CLIMB_SHAPES = [(4096, 7168, 7168)]
#: at every shape of the grid: version C's default and the previous best
GEMM_KERNELS = ("wgmma_tma", "wgmma_ws")
#: the climb, in order; each rung adds one change (gemm_w8a8.TMA_LADDER says which)
LADDER = ("wgmma_ws", "wgmma_tma_a", "wgmma_tma_b", "wgmma_tma_c", "wgmma_tma_d", "wgmma_tma_e", "wgmma_tma_e_ss",
          "wgmma_tma_e_ss_tmastore", "wgmma_tma_e_ss_tmastore_split", "wgmma_tma")
#: side branches timed with the climb: {kernel: the rung it changes} (128 x 128 tiles with two partial-sum buffers)
CLIMB_BRANCH = {"wgmma_tma_p": "wgmma_tma_d", "wgmma_tma_p_tmastore": "wgmma_tma_p"}
CLIMB_STEPS = {
    "mma_bf16": "mma.sync bf16 (FP8 widened in registers)",
    "mma_fp8": "mma.sync e4m3 (emulated by ptxas on sm_90)",
    "wgmma": "wgmma e4m3, cp.async by all threads, 4 stages",
    "wgmma_pipe": "+ 6 stages",
    "wgmma_256": "256 x 128 tiles instead",
    "wgmma_ws": "cp.async producer warpgroup + 2 consumers (previous best)",
    "wgmma_tma_a": "TMA loads + mbarrier pipeline, 1 consumer warpgroup",
    "wgmma_tma_b": "+ 2 consumer warpgroups, setmaxnreg 40/232",
    "wgmma_tma_c": "+ persistent grid, grouped tile order",
    "wgmma_tma_d": "+ 2-CTA clusters, B multicast",
    "wgmma_tma_e": "+ 128 x 256 tiles",
    "wgmma_tma_e_ss": "+ scales staged in shared memory by a producer warp",
    "wgmma_tma_e_ss_tmastore": "+ bf16 tile out by TMA store (3 stages)",
    "wgmma_tma_e_ss_tmastore_split": "+ a mostly idle last wave cut along K (none at this shape)",
    "wgmma_tma_p": "from _d: two partial-sum buffers (promotion under the next MMAs)",
    "wgmma_tma_p_tmastore": "+ bf16 tile out by TMA store",
    "wgmma_tma": "the default: configuration chosen per shape",
}
OLDER = ("wgmma_256", "wgmma_pipe", "wgmma", "mma_bf16", "mma_fp8")
ANCHORS = ("bf16_cublas", "scaled_mm_blockwise", "scaled_mm_tensorwise")
#: NVIDIA's datasheet figure for H100/H200 SXM FP8 tensor cores, dense (3958 with 2:4 sparsity): a spec, not a measurement
SPEC_DENSE_FP8_TFLOPS = 1979


#: each prefill timer first runs its variant alone for this long (harness.graph_time_us settle_ms). These kernels
#: hold an H100/H200 at its power limit, where the clock a variant gets depends on what ran just before it
#: (bench_order measures how much); every variant and anchor is settled alike.
SETTLE_MS = 60.0


def _timed(calls, mc: int, settle_ms: float = SETTLE_MS):
    """Every prefill timer: `calls` in a CUDA graph of >= mc calls, 10 replays, settled first."""
    return harness.graph_time_us(calls, min_calls=mc, rep=10, settle_ms=settle_ms)


def _min_calls(flops: float) -> int:
    """Calls per graph replay: about 200 us of work per replay at ~1 PFLOP/s, at least 4."""
    return int(min(64, max(4, math.ceil(200e-6 / max(flops / 1e15, 1e-9)))))


class _Shape:
    """Inputs of one shape: rotating FP8 sets (and bf16 ones for cuBLAS), scales, the float64 reference."""

    def __init__(self, M, N, K, need_bf16=True, seed=None):
        import torch

        from . import gemm_w8a8 as G
        from . import gemv_fp8 as F8

        torch.manual_seed(M + N + K if seed is None else seed)
        self.M, self.N, self.K = M, N, K
        self.flops = 2 * M * N * K
        self.nset = min(4, harness.sets_for_l2(M * K + N * K, factor=4, cap=32))
        self.A = [F8.random_codes(M, K) for _ in range(self.nset)]
        self.B = [F8.random_codes(N, K) for _ in range(self.nset)]
        KB, NB = -(-K // 128), -(-N // 128)
        self.sa = torch.rand(M, KB, device="cuda") * 1e-2 + 1e-3
        self.sb = torch.rand(NB, KB, device="cuda") * 1e-2 + 1e-3
        self.fp8_bytes = M * K + N * K + 2 * M * N + 4 * (self.sa.numel() + self.sb.numel())
        self.Abf = [torch.randn(M, K, device="cuda").to(torch.bfloat16) for _ in range(self.nset)] if need_bf16 else []
        self.Bbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(self.nset)] if need_bf16 else []
        self.ref = G.reference(self.A[0], self.sa, self.B[0], self.sb)
        ad = F8.decode_e4m3(self.A[0]) * self.sa.double().repeat_interleave(128, 1)[:, :K]
        bd = F8.decode_e4m3(self.B[0]) * self.sb.double().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
        self.terms = ad.abs() @ bd.abs().T
        del ad, bd

    @property
    def name(self) -> str:
        return f"M={self.M} N={self.N} K={self.K}"

    def check(self, kernel_family: str):
        tol = tolerances.matmul(kernel_family, self.K)
        return lambda y: ((e := tol.worst(y, self.ref, self.terms)) <= 1.0, {"err_over_tol": e})


def _add_anchors(bench: harness.Bench, sh: _Shape, timers: dict, meta: dict, kinds=ANCHORS,
                 settle_ms: float = SETTLE_MS) -> None:
    import torch

    mc = _min_calls(sh.flops)
    if "bf16_cublas" in kinds:
        name = f"bf16_cublas {sh.name}"
        bench.trust(name, "library anchor (torch matmul, bf16 operands of the same shape)")
        timers[name] = lambda: _timed([lambda a=a, b=b: a @ b.t() for a, b in zip(sh.Abf, sh.Bbf)], mc, settle_ms)
        meta[name] = ("bf16_cublas (torch matmul)", "bf16 x bf16", 2 * (sh.M * sh.K + sh.N * sh.K + sh.M * sh.N), {})
    for kind in ("tensorwise", "rowwise", "blockwise"):
        if f"scaled_mm_{kind}" not in kinds:
            continue
        name = f"scaled_mm_{kind} {sh.name}"
        try:
            fns = [scaled_mm_calls(kind, a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn), sh.sa, sh.sb)
                   for a, b in zip(sh.A, sh.B)]
        except Exception as e:  # noqa: BLE001 - recorded: this torch may not have the layout
            bench.notes.append({"kernel": name, "error": str(e)[:500]})
            continue
        extra = {"layout": fns[0][1]}
        if kind == "blockwise":  # the layout we found must compute OUR arithmetic
            bench.validate(name, fns[0][0], sh.check("mma_bf16"))
        else:
            bench.trust(name, "library anchor (unit scales: times the FP8 matmul, not our scaling)")
        timers[name] = lambda fns=fns: _timed([f for f, _ in fns], mc, settle_ms)
        meta[name] = (f"scaled_mm_{kind} (torch._scaled_mm)", "e4m3 x e4m3", sh.fp8_bytes, extra)


def _add_kernel(bench: harness.Bench, sh: _Shape, kernel: str, timers: dict, meta: dict, config=None,
                label: str | None = None, settle_ms: float = SETTLE_MS) -> bool:
    """Validate one of our kernels (poisoned output) and add its timer; False if it failed."""
    from . import gemm_w8a8 as G

    label = label or f"w8a8_{kernel}"
    name = f"{label} {sh.name}"
    try:
        launch = G.prepare(sh.A[0], sh.sa, sh.B[0], sh.sb, kernel=kernel, config=config)
    except Exception as e:  # noqa: BLE001 - a config refused here (shape rules, shared memory) is recorded
        bench.validation[name] = {"passed": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        bench.notes.append({"kernel": name, "error": f"prepare failed: {type(e).__name__}: {str(e)[:300]}"})
        return False
    if not bench.validate(name, launch, sh.check(kernel), outputs=[launch.out]):
        return False
    mc = _min_calls(sh.flops)
    timers[name] = lambda: _timed(
        [G.prepare(a, sh.sa, b, sh.sb, kernel=kernel, config=config) for a, b in zip(sh.A, sh.B)], mc, settle_ms)
    extra = {"validated_err_over_tol": bench.validation[name].get("err_over_tol")}
    cfg = getattr(launch, "config", None)
    if cfg is not None:
        extra.update(config=cfg.function, persistent=cfg.persistent, grid_units=launch.grid_units, group=launch.group,
                     bn=cfg.bn, cluster=cfg.cluster, stages=cfg.stages, epi=cfg.epi, split=launch.split[1],
                     split_whole_tiles=launch.split[0])
    meta[name] = (label, "e4m3 x e4m3 (1x128, 128x128)", sh.fp8_bytes, extra)
    return True


def _record(bench: harness.Bench, sh: _Shape, timings: dict, meta: dict, subset: str) -> None:
    base = {n.split()[0]: t.median for n, t in timings.items()}
    t_bf16 = base.get("bf16_cublas")
    for name, timing in timings.items():
        label, dtype, nbytes, extra = meta[name]
        extra = dict(extra)
        if not label.startswith("bf16_cublas"):
            for a in ("scaled_mm_blockwise", "scaled_mm_tensorwise", "scaled_mm_rowwise"):
                if a in base and not label.startswith(a):
                    extra[f"speedup_vs_{a}"] = base[a] / timing.median
        anchor = t_bf16 is not None and not label.startswith("bf16_cublas")
        bench.record(harness.Result(label, sh.name, dtype, timing.median, bytes=nbytes, flops=sh.flops,
                                    anchor="bf16_cublas" if anchor else "", anchor_time_us=t_bf16 if anchor else None,
                                    copy_gbps=bench.ceilings.get("copy_gbps"),
                                    extra={**extra, "M": sh.M, "N": sh.N, "K": sh.K, "family": "prefill",
                                           "subset": subset}), timing)
        print(f"  {label:30s} {sh.name:26s} {timing.median:9.1f} us  {sh.flops / timing.median / 1e6:7.1f} TFLOP/s",
              flush=True)


def bench_prefill(bench: harness.Bench, skip: set, shapes=None, climb_shapes=None, kernels=GEMM_KERNELS,
                  grid_rounds: int = 3) -> None:
    """The grid (every shape: `kernels` + the anchors, `grid_rounds` interleaved rounds) and the climb (CLIMB_SHAPES:
    every rung and the older versions, the bench's rounds).

    The SASS facts of the climb's kernels are compiled on the side (a thread: NVRTC releases the GIL) and stored
    in bench.extra["prefill_sass"]."""
    import time

    import torch

    shapes = PREFILL_SHAPES if shapes is None else shapes
    climb_shapes = CLIMB_SHAPES if climb_shapes is None else climb_shapes
    facts: dict = {}
    th = threading.Thread(target=lambda: facts.update(sass_facts()), daemon=True)
    th.start()
    todo = [(s, "climb") for s in climb_shapes] + [(s, "grid") for s in shapes if s not in climb_shapes]
    t0 = time.time()
    for (M, N, K), subset in todo:
        shape = f"M={M} N={N} K={K}"
        if out_of_time(shape, bench.notes):
            continue
        sh = _Shape(M, N, K)
        timers, meta = {}, {}
        _add_anchors(bench, sh, timers, meta)
        names = [k for k in (LADDER + tuple(CLIMB_BRANCH) + OLDER if subset == "climb" else kernels) if k not in skip]
        for k in dict.fromkeys(names):
            _add_kernel(bench, sh, k, timers, meta)
        t = bench.compare({n: f for n, f in timers.items() if bench.validation.get(n, {}).get("passed")},
                          rounds=None if subset == "climb" else grid_rounds)
        _record(bench, sh, t, meta, subset)  # the climb shape is in the grid too: its rows serve both
        print(f"  [{subset} {sh.name}: {time.time() - t0:.0f} s since the prefill start]", flush=True)
        del sh
        torch.cuda.empty_cache()
    th.join(timeout=300)
    bench.extra["prefill_sass"] = facts or None


# ---- where the gap goes: leave-one-out timings ------------------------------------------------------------------
#: the kernel examined (the default's configuration at full grids, without the split option it does not use there),
#: and kernels of the same arithmetic timed beside it (the staggered consumers: the same bits, checked)
#: the examined kernel first, then kernels of the same arithmetic: its two staggered forms, and the 128 x 192 and
#: 128 x 224 tilings (one m64n192 batch per k-block; n128 + n96 sub-tiles, whose waves are fuller at some shapes,
#: e.g. 2048x3584: 1.94 waves of 66 pairs instead of 1.70, and emptier at others)
GAP_KERNELS = ("wgmma_tma_e_ss_tmastore", "wgmma_tma_e_ss_tmastore_sg1", "wgmma_tma_e_ss_tmastore_sg2",
               "wgmma_tma_w192_ss_tmastore", "wgmma_tma_w224_ss_s5")
#: full-grid shapes (wave_busy >= 0.97 with 128 x 256 tiles on 66 pairs) of the prefill list
GAP_SHAPES = [(4096, 7168, 7168), (8192, 4096, 4096), (2048, 14336, 4096), (4096, 4096, 14336)]
#: the promotion loop of wgmma.cuh, as the kernel has it
PROMOTE_LOOP = "for (int j = 0; j < 16; ++j) promote4(acc + 4 * j, p + 4 * j, s0, s1);"
#: leave-one-out and do-it-twice variants: {name: (what changes, source patches)}. They compute wrong numbers by
#: design, so they are timed without validation and recorded as such. What a stage costs is the time it takes away
#: (no_promote); whether that cost grows with the stage's work or is a fixed wait per k-block shows when the stage is
#: done twice (promote_twice: twice the FFMAs, the same waits).
LEAVE_ONE_OUT = {
    "no_promote": ("the FP32 promotion: one FFMA per k-block instead of 64 per 64 x 128 sub-tile (it keeps the MMA "
                   "results live, so the MMAs and their waits stay)",
                   {"wgmma.cuh": [(PROMOTE_LOOP, "acc[0] = fmaf(p[0] + p[63], s0, acc[0]);")]}),
    "promote_twice": ("the FP32 promotion done twice: 128 FFMAs per 64 x 128 sub-tile instead of 64, the same waits",
                      {"wgmma.cuh": [(PROMOTE_LOOP, "for (int r = 0; r < 2; ++r) " + PROMOTE_LOOP)]}),
}


#: control-bit edits of the examined kernel's cubin (sass.edit_control on the promotion's FFMAs, sass.promotion_ffmas):
#: {name: (what changes, control fields set)}. The opcodes stay, so an edited kernel must compute the examined
#: kernel's bits (checked on poisoned outputs); what changes is when its warps issue and, where reuse flags are
#: dropped, how often the register file is read. ptxas already clears the yield bit on about half of the promotion
#: FFMAs, alternating with FFMAs that carry a reuse flag; DeepGEMM rewrites its binaries to clear it on more of them,
#: together with their reuse flags (a warp switch loses the reuse cache). "as_compiled" loads the unedited cubin the
#: same way: the control the others are read against (gemm_report.leave_one_out gives their shares against it).
CONTROL_EDITS = {
    "as_compiled": ("no change: the cubin as compiled, loaded the way the edited ones are", {}),
    "ffma_yield_all": ("every promotion FFMA may yield the issue slot to another warp (yield bit clear) and keeps "
                       "nothing in the reuse cache", {"yield": 0, "reuse": 0}),
    "ffma_yield_none": ("no promotion FFMA yields (yield bit set on all; reuse flags as compiled)", {"yield": 1}),
    "ffma_no_reuse": ("no promotion FFMA keeps an operand in the reuse cache (yield bits as compiled): every operand "
                      "read from the register file", {"reuse": 0}),
}


def control_edit(function: str, fields: dict, counts: dict | None = None):
    """An edit for _cuda.edited_binary: set `fields` on the promotion FFMAs of kernel `function` (counts, if given,
    receives {"changed": instructions changed, "ffmas": promotion FFMAs})."""
    from . import sass

    def edit(cubin: bytes) -> bytes:
        text = sass.disassemble(cubin)
        ks = sass.parse(text)
        if function not in ks:
            raise ValueError(f"no kernel {function!r} in this cubin")
        k = ks[function]
        pick = sass.promotion_ffmas(k)
        new, n = sass.edit_control(cubin, function, pick, sass_text=text, **fields)
        if counts is not None:
            counts.update(changed=n, ffmas=sum(1 for a, t in k.instrs if pick(a, t)))
        return new

    return edit


def bench_gap(bench: harness.Bench, skip: set, shapes=None, kernels=GAP_KERNELS, leave_out=tuple(LEAVE_ONE_OUT),
              edits=tuple(CONTROL_EDITS)) -> None:
    """Where the prefill gap goes, at full-grid shapes: the examined kernel (kernels[0]) with one stage left out
    (LEAVE_ONE_OUT, compiled from patched sources), kernels of the same arithmetic (checked bit for bit against
    kernels[0] on poisoned outputs, then against the float64 reference like every kernel), and _scaled_mm blockwise
    and tensorwise, interleaved in the bench's rounds; and the examined kernel with control bits of its promotion
    FFMAs rewritten in the cubin (CONTROL_EDITS; checked bit for bit like the kernels of the same arithmetic).
    Records: family "prefill", subset "gap"; the left-out variants are named '<label>-<variant>' and carry left_out
    (what is missing) and validated False; the edited ones '<label>+<edit>', with sass_edit, ffmas_changed and
    bits_equal_to."""
    import torch

    from . import _cuda
    from . import gemm_w8a8 as G

    for M, N, K in (GAP_SHAPES if shapes is None else shapes):
        shape = f"M={M} N={N} K={K}"
        if out_of_time(shape, bench.notes):
            continue
        sh = _Shape(M, N, K, need_bf16=False)
        timers, meta = {}, {}
        _add_anchors(bench, sh, timers, meta, kinds=("scaled_mm_blockwise", "scaled_mm_tensorwise"))
        names = [k for k in kernels if k not in skip]
        ok = [k for k in names if _add_kernel(bench, sh, k, timers, meta)]
        first = None
        if names and names[0] in ok:  # the same arithmetic: the same bits as the examined kernel
            first = G.prepare(sh.A[0], sh.sa, sh.B[0], sh.sb, kernel=names[0])
            harness.poison_(first.out)
            first()

        def same_bits(name, launch) -> bool:
            return bench.validate(name, launch, lambda y: bool(torch.equal(y, first.out)), outputs=[launch.out])

        if first is not None:
            for k in ok[1:]:
                same = same_bits(f"w8a8_{k} {sh.name} bits == {names[0]}",
                                 G.prepare(sh.A[0], sh.sa, sh.B[0], sh.sb, kernel=k))
                meta[f"w8a8_{k} {sh.name}"][3]["bits_equal_to"] = names[0] if same else None
            mc = _min_calls(sh.flops)
            for v in leave_out:
                what, patches = LEAVE_ONE_OUT[v]
                label = f"w8a8_{names[0]}-{v}"
                name = f"{label} {sh.name}"
                try:
                    with _cuda.patched_sources(patches):
                        launches = [G.prepare(a, sh.sa, b, sh.sb, kernel=names[0]) for a, b in zip(sh.A, sh.B)]
                        launches[0]()  # compiled from the patched copy while it exists
                except Exception as e:  # noqa: BLE001 - a variant that does not build or launch is recorded, not fatal
                    bench.notes.append({"kernel": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    continue
                bench.trust(name, f"leave-one-out ({what}): computes wrong numbers by design; timed, not validated")
                timers[name] = lambda ls=launches: _timed(ls, mc)
                meta[name] = (label, "e4m3 x e4m3 (1x128, 128x128)", sh.fp8_bytes,
                              {"left_out": what, "validated": False, "of_kernel": names[0]})
            for v in edits:
                what, fields = CONTROL_EDITS[v]
                label = f"w8a8_{names[0]}+{v}"
                name = f"{label} {sh.name}"
                counts: dict = {}
                try:
                    with _cuda.edited_binary("gemm_w8a8_tma.cu", control_edit(first.config.function, fields, counts)):
                        launches = [G.prepare(a, sh.sa, b, sh.sb, kernel=names[0]) for a, b in zip(sh.A, sh.B)]
                except Exception as e:  # noqa: BLE001 - an edit that does not apply or load is recorded, not fatal
                    bench.notes.append({"kernel": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    continue
                if not same_bits(name, launches[0]):
                    continue
                timers[name] = lambda ls=launches: _timed(ls, mc)
                meta[name] = (label, "e4m3 x e4m3 (1x128, 128x128)", sh.fp8_bytes,
                              {"sass_edit": what, "control_fields": fields, "ffmas_changed": counts.get("changed"),
                               "promotion_ffmas": counts.get("ffmas"), "bits_equal_to": names[0],
                               "of_kernel": names[0]})
        t = bench.compare(timers)
        _record(bench, sh, t, meta, "gap")
        del sh
        torch.cuda.empty_cache()


#: the order run: the examined kernel timed after each of these (anchors, and a slower kernel of ours that computes
#: the same bits), under one name per neighbour, unsettled (settle 0) and settled (SETTLE_MS)
ORDER_SHAPES = [(4096, 7168, 7168), (8192, 4096, 4096)]
ORDER_NEIGHBOURS = ("scaled_mm_blockwise", "bf16_cublas", "wgmma_tma_w192_ss_tmastore", "scaled_mm_tensorwise")


def bench_order(bench: harness.Bench, skip: set, shapes=None, kernel: str = GAP_KERNELS[0],
                neighbours=ORDER_NEIGHBOURS, rounds: int = 5) -> None:
    """Does a kernel's time depend on what ran just before it? One interleaved run per shape and settle time
    (0, SETTLE_MS): the neighbours and the examined kernel alternate, the kernel under one name per neighbour
    (N1 A1 N2 A2 ... N4 A4, then N1 once more after the last copy), the rounds rotating by whole pairs (interleave
    step 2), so copy i follows neighbour i in every round. The same machine code under several names: their spread
    is what the order alone does to a timing. Records: family "prefill", subset "order", labels
    '<label>@after_<neighbour>' for the copies, with after, copy_of (the examined kernel), settle_ms and rotation."""
    import torch

    for M, N, K in (ORDER_SHAPES if shapes is None else shapes):
        shape = f"M={M} N={N} K={K}"
        if out_of_time(f"order {shape}", bench.notes) or kernel in skip:
            continue
        sh = _Shape(M, N, K)
        for settle in (0.0, SETTLE_MS):
            timers, meta = {}, {}
            _add_anchors(bench, sh, timers, meta, kinds=tuple(n for n in neighbours if n in ANCHORS), settle_ms=settle)
            for n in neighbours:
                if n not in ANCHORS and n not in skip:
                    _add_kernel(bench, sh, n, timers, meta, settle_ms=settle)
            if not _add_kernel(bench, sh, kernel, timers, meta, settle_ms=settle):
                break
            own = f"w8a8_{kernel} {sh.name}"
            named = {f"{n} {sh.name}" if n in ANCHORS else f"w8a8_{n} {sh.name}": n for n in neighbours}
            named = {full: n for full, n in named.items() if full in timers}
            if not named:  # every neighbour failed to build or validate: nothing to time the kernel after
                bench.notes.append({"kernel": own, "error": "order run: no neighbour passed validation"})
                break
            order, info = {}, {}

            def add(name, src, label, **extra):
                order[name] = timers[src]
                _, dtype, nbytes, ex = meta[src]
                info[name] = (label, dtype, nbytes, {**ex, **extra, "settle_ms": settle, "rotation": "pairs"})
                if name != src:  # a copy times the launch validated (or trusted) under its source's name
                    bench.validation[name] = {**bench.validation[src], "same_timer_as": src}

            for full, n in named.items():
                add(full, full, meta[full][0])
                add(f"w8a8_{kernel}@after_{n} {sh.name}", own, f"{meta[own][0]}@after_{n}", after=n, copy_of=kernel)
            first = next(iter(named))
            base = meta[first][0].split()[0]
            add(f"{base}@after_{kernel} {sh.name}", first, f"{base}@after_{kernel}", after=kernel)
            t = bench.compare(order, rounds=rounds, step=2)
            _record(bench, sh, t, info, "order")
        del sh
        torch.cuda.empty_cache()


# ---- the tuning sweep of a device run -------------------------------------------------------------------------
def tune(shapes, names=None, extra_configs=None, rounds: int = 3, anchors=ANCHORS, out=None, skip=()) -> list[dict]:
    """Validate and time named kernels and extra configurations at each shape, interleaved with the anchors.

    extra_configs: {label: (kernel, TmaConfig)}. Returns the records (and writes them with provenance to `out`)."""
    from fp8lab import provenance, store

    from . import gemm_w8a8 as G

    names = list(names or (LADDER + tuple(G.TMA_VARIANTS)))
    bench = harness.Bench("gemm_prefill_tune", out or "/dev/null", "gemm_prefill --tune", rounds=rounds)
    prov = provenance.provenance("gemm_prefill --tune", cuda=True) if out else None
    for M, N, K in shapes:
        sh = _Shape(M, N, K)
        timers, meta = {}, {}
        _add_anchors(bench, sh, timers, meta, kinds=anchors)
        for k in names:
            if k not in skip:
                _add_kernel(bench, sh, k, timers, meta)
        for label, (k, cfg) in (extra_configs or {}).items():
            if k not in skip:
                _add_kernel(bench, sh, k, timers, meta, config=cfg, label=label)
        t = bench.compare({n: f for n, f in timers.items() if bench.validation.get(n, {}).get("passed")})
        _record(bench, sh, t, meta, "tune")
        del sh
        if out:  # after every shape: a run cut short keeps what it measured
            store.atomic_write_json(out, harness._finite({"provenance": prov, "validation": bench.validation,
                                                          "results": bench.results, "notes": bench.notes}))
    return bench.results


# ---- SASS facts (no GPU needed) -------------------------------------------------------------------------------
def _ptxas_table(log: str) -> dict:
    """ptxas -v log -> {kernel: {registers, stack, spill_stores, spill_loads, smem_static}}."""
    import re

    out, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem_static"] = int(s.group(1)) if s else 0
    return out


def sass_facts(kernels=LADDER + tuple(CLIMB_BRANCH) + OLDER) -> dict:
    """What each named kernel runs on sm_90a: matrix and copy instructions, registers, spills, shared memory.

    {"wgmma_tma_e": {"function": "w8a8_tma_n256_w2_s4_c2_e0", "QGMMA": 8, "UTMALDG": 14, "registers": 168,
                     "registers_consumer": 232, "spill_stores": 0, "smem_dynamic": 197632, ...}, ...}
    registers: ptxas' allocation at kernel entry (the __launch_bounds__ cap); with setmaxnreg the consumer
    warpgroups run with registers_consumer and the producer with registers_producer."""
    from . import _cuda, sass
    from . import gemm_w8a8 as G

    out = {}
    for src in ("gemm_w8a8_tma.cu", "gemm_w8a8_wgmma.cu", "gemm_w8a8.cu"):
        try:
            _, log = _cuda.compile_for(src, 90, ptxas_verbose=True)
            table = _ptxas_table(log)
            ks = sass.kernels(src, 90)
        except Exception as e:  # noqa: BLE001 - no NVRTC / cuobjdump here: recorded
            out[f"error {src}"] = f"{type(e).__name__}: {str(e)[:200]}"
            continue
        for k in kernels:
            if k in G.TMA_KERNELS:
                cfg = G.TMA_KERNELS[k] or G.tma_default(4096, 7168, 7168)
                fn, smem, threads = cfg.function, cfg.smem, cfg.threads
                regs = (232, 40) if cfg.nwg == 2 else (None, None)
            elif k in G.KERNELS:
                f, fn, threads, stages, bm = G.KERNELS[k]
                if f != src:
                    continue
                smem = stages * (bm + 128) * 128 + 1024
                regs = (232, 40) if k == "wgmma_ws" else (None, None)
            else:
                continue
            if fn not in ks:
                continue
            c = ks[fn].opcodes()
            out[k] = {"function": fn, "source": src, "threads": threads, "smem_dynamic": smem,
                      **{op: c.get(op, 0) for op in ("QGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDGSTS", "STG", "FFMA",
                                                     "LDL", "STL")},
                      **table.get(fn, {}), "registers_consumer": regs[0], "registers_producer": regs[1],
                      "total_sass": sum(c.values())}
    return out


# ---- seed 001's gate ----------------------------------------------------------------------------------------------
def accuracy_gate_run(skip: set, M=1024, N=7168, K=7168, kernels=("wgmma_tma", "wgmma_ws", "wgmma", "mma_bf16")) -> list:
    """Seed 001's gate on the kernels' outputs (W8A8 vs W8A16) at a realistic size, both input kinds."""
    import torch

    from . import gemm_w8a8 as G
    from . import reference as R

    out = []
    for kind in ("random", "outliers"):
        x, w = G.test_inputs(M, N, K, kind=kind, seed=11)
        a, sa = R.quantize_group(x, 128)
        b, sb = R.quantize_block(w, 128)
        ref16 = G.w8a16_reference(x, b, sb)
        row = {"kind": kind, "shape": f"M={M} N={N} K={K}", "math_w8a8_fp64": G.accuracy_gate(G.reference(a, sa, b, sb), ref16)}
        for kernel in kernels:
            if kernel not in skip:
                row[kernel] = G.accuracy_gate(G.gemm_w8a8(a, sa, b, sb, kernel=kernel), ref16)
        out.append(row)
        print("  gate", kind, {k: (round(v["cosine"], 6), round(v["rel_rms"], 5)) for k, v in row.items() if isinstance(v, dict)},
              flush=True)
        del x, w, a, b, ref16
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.gemm_prefill", description=__doc__.split("\n")[0])
    p.add_argument("--tune", action="store_true", help="validate and time the ladder and the variants")
    p.add_argument("--shapes", default="4096x7168x7168", help="MxNxK,...")
    p.add_argument("--kernels", default=None, help="comma-separated named kernels (default: ladder + variants)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",") if s]
        assert all(len(s) == 3 and min(s) > 0 for s in shapes)
    except Exception:
        print(f"--shapes {a.shapes!r}: expected MxNxK,MxNxK (positive integers)", file=sys.stderr)
        return 2
    if a.tune:
        tune(shapes, a.kernels.split(",") if a.kernels else None, rounds=a.rounds, out=a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
