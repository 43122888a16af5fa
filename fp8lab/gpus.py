"""GPU ceilings for napkin math: memory bandwidth and tensor-core FLOP rates.

Two kinds of entry, never mixed in one record:

* ``source="spec"`` -- numbers from NVIDIA's public datasheets. NVIDIA quotes
  tensor-core rates *with 2:4 structured sparsity*; a dense model cannot use
  that, so every rate below is the **dense** figure (the datasheet number / 2).
* ``source="measured"`` -- numbers the lab measured itself, copied from a file
  in ``/work/shared/reference`` (that folder is not part of the package, so the
  values are copied here with the file, date and device named). A rate the lab
  did not measure is ``None`` -- never filled in from the spec.

Example (the H200's ridge point: below this many FLOPs per byte, a kernel
waits on memory)::

    >>> g = get_gpu("H200")
    >>> round(g.ridge("bf16"), 1)     # 989.5e12 FLOP/s / 4.8e12 B/s
    206.1
    >>> get_gpu("H200-measured").tflops["fp8"]   # torch._scaled_mm, 8192^3
    1319.9545793735435
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GPU:
    name: str
    source: str  # "spec" or "measured"
    bandwidth_TBps: float  # HBM (or LPDDR) bytes/s / 1e12
    tflops: dict  # compute dtype -> dense TFLOP/s (None: not published / not measured)
    memory_GB: float | None
    # weight formats whose GEMM runs on low-precision tensor cores here. Any other
    # format is dequantized to BF16 in the kernel (weight-only, e.g. Marlin W4A16 /
    # W8A16 on Hopper), so its compute ceiling is the BF16 rate.
    native_formats: frozenset = field(default_factory=frozenset)
    citation: str = ""
    notes: str = ""

    def rate(self, dtype: str) -> float | None:
        """Dense TFLOP/s for a compute dtype, or None when unknown."""
        return self.tflops.get(dtype)

    def ridge(self, dtype: str) -> float | None:
        """FLOPs per byte at which the compute roof meets the memory roof."""
        r = self.rate(dtype)
        return None if r is None else r * 1e12 / (self.bandwidth_TBps * 1e12)


_HOPPER_NATIVE = frozenset({"bf16", "fp8_tensor", "fp8_block128", "int8_channel"})
_BLACKWELL_NATIVE = _HOPPER_NATIVE | {"nvfp4", "mxfp4", "mxfp8"}

GPUS: dict[str, GPU] = {
    "H100": GPU(
        name="H100", source="spec", bandwidth_TBps=3.35, memory_GB=80,
        # datasheet (SXM5): BF16 1,979 / FP8 3,958 TFLOPS / INT8 3,958 TOPS "with sparsity"
        tflops={"bf16": 989.5, "fp8": 1979.0, "int8": 1979.0, "fp4": None},
        native_formats=_HOPPER_NATIVE,
        citation="NVIDIA H100 Tensor Core GPU datasheet, SXM5 column",
        notes="dense = datasheet sparse figure / 2; no FP4 tensor cores",
    ),
    "H200": GPU(
        name="H200", source="spec", bandwidth_TBps=4.8, memory_GB=141,
        # same GH100 compute as H100 SXM; the datasheet lists the same sparse rates
        tflops={"bf16": 989.5, "fp8": 1979.0, "int8": 1979.0, "fp4": None},
        native_formats=_HOPPER_NATIVE,
        citation="NVIDIA H200 Tensor Core GPU datasheet, SXM column",
        notes="dense = datasheet sparse figure / 2; no FP4 tensor cores "
              "(the H200 NVL column lists lower rates: 3,341 TFLOPS FP8 sparse)",
    ),
    "B200": GPU(
        name="B200", source="spec", bandwidth_TBps=7.7, memory_GB=180,
        # HGX B200 per-GPU column: FP4 18 PF, FP8/FP6 9 PF, INT8 9 POPS, BF16 4.5 PF (sparse)
        tflops={"bf16": 2250.0, "fp8": 4500.0, "int8": 4500.0, "fp4": 9000.0},
        native_formats=_BLACKWELL_NATIVE,
        citation="NVIDIA HGX B200 specifications, individual-GPU column",
        notes="dense = sparse / 2; other NVIDIA pages quote 8 TB/s and 192 GB for B200",
    ),
    "GB10": GPU(
        name="GB10", source="spec", bandwidth_TBps=0.273, memory_GB=128,
        # DGX Spark: "up to 1 petaFLOP FP4 AI performance" (with sparsity); NVIDIA's
        # datasheet gives no BF16/FP8 tensor rate, so those stay None.
        tflops={"bf16": None, "fp8": None, "int8": None, "fp4": 500.0},
        native_formats=_BLACKWELL_NATIVE,
        citation="NVIDIA DGX Spark datasheet (GB10, 128 GB LPDDR5x, 273 GB/s)",
        notes="unified LPDDR5x memory shared with the CPU; only the FP4 rate is published",
    ),
    # Measured by the lab: /work/shared/reference/h200_ceilings_2026-11-29.json,
    # one run on 2026-11-29 on the lent "NVIDIA H200" (132 SMs, torch 2.11.0+cu130).
    # copy_TBps = device-to-device copy; GEMM rates at 8192^3. Values copied verbatim.
    "H200-measured": GPU(
        name="H200-measured", source="measured", bandwidth_TBps=4.196927022165589,
        memory_GB=139.80072021484375,
        tflops={
            "bf16": 745.136573254463,            # bf16_gemm_TFLOPs
            "fp8": 1319.9545793735435,           # fp8_scaled_mm_tensorwise_TFLOPs
            "fp8_rowwise": 1289.4411689606263,   # fp8_scaled_mm_rowwise_TFLOPs
            "fp8_block": 1129.4000543744182,     # fp8_blockwise_TFLOPs
            "int8": None,                        # not measured
            "fp4": None,                         # Hopper: no FP4 tensor cores
        },
        native_formats=_HOPPER_NATIVE,
        citation="/work/shared/reference/h200_ceilings_2026-11-29.json (2026-11-29, NVIDIA H200)",
        notes="one run on a shared machine; the reference README says figures vary run to run",
    ),
}


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name (case-insensitive); ValueError lists the valid names."""
    for key, gpu in GPUS.items():
        if key.lower() == str(name).lower():
            return gpu
    raise ValueError(f"unknown GPU {name!r}; valid names: {', '.join(GPUS)}")


def format_gpu_table() -> str:
    """One line per GPU: bandwidth, dense rates, source. None prints as '-' (not published / measured)."""
    keys = ["bf16", "fp8", "fp8_block", "int8", "fp4"]
    lines = [f"{'name':<15}{'source':<10}{'TB/s':>7}{'GB':>7}" + "".join(f"{k:>11}" for k in keys)]
    for g in GPUS.values():
        rates = "".join(f"{'-' if g.rate(k) is None else f'{g.rate(k):.0f}':>11}" for k in keys)
        mem = "-" if g.memory_GB is None else f"{g.memory_GB:.0f}"
        lines.append(f"{g.name:<15}{g.source:<10}{g.bandwidth_TBps:>7.3f}{mem:>7}{rates}")
    lines.append("rates: dense TFLOP/s (datasheet sparse figures halved); '-': not published or not measured")
    return "\n".join(lines)
