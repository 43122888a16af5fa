"""GPU ceilings for napkin math: memory bandwidth and tensor-core FLOP rates.

Two kinds of entry, never mixed in one record:

* ``source="spec"`` -- numbers from NVIDIA's public datasheets, **spec, not measured**. NVIDIA quotes
  tensor-core rates *with 2:4 structured sparsity*; a dense model cannot use that, so every rate below is
  the **dense** figure (the datasheet number / 2). A rate NVIDIA does not publish is ``None``.
* ``source="measured"`` -- numbers the lab measured itself, read from a committed file under
  ``outputs/reference/`` (with the file's date and device). A rate the lab did not measure is ``None`` --
  never filled in from the spec.

Example (the H200's ridge point: below this many FLOPs per byte, a kernel waits on memory)::

    >>> g = get_gpu("H200")
    >>> round(g.ridge("bf16"), 1)     # 989.5e12 FLOP/s / 4.8e12 B/s
    206.1
    >>> get_gpu("H200-measured").tflops["fp8"]   # torch._scaled_mm, 8192^3, from the committed file
    1319.9545793735435
    >>> get_gpu("GB10").bandwidth_TBps, get_gpu("GB10").tflops["fp4"]   # spec, not measured
    (0.273, 500.0)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the lab's own H200 ceilings, copied into the repository (outputs/reference/README.md says from where)
H200_REFERENCE = REPO / "outputs" / "reference" / "h200_ceilings_2026-11-29.json"


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
    date: str | None = None      # measured entries: the day of the run
    device: str | None = None    # measured entries: the device the run saw

    @property
    def label(self) -> str:
        """'spec, not measured' or 'measured <date> on <device>': the words every printed number carries."""
        if self.source == "measured":
            return f"measured {self.date or '?'} on {self.device or '?'}"
        return "spec, not measured"

    def rate(self, dtype: str) -> float | None:
        """Dense TFLOP/s for a compute dtype, or None when unknown."""
        return self.tflops.get(dtype)

    def ridge(self, dtype: str) -> float | None:
        """FLOPs per byte at which the compute roof meets the memory roof."""
        r = self.rate(dtype)
        return None if r is None else r * 1e12 / (self.bandwidth_TBps * 1e12)


_HOPPER_NATIVE = frozenset({"bf16", "fp8_tensor", "fp8_block128", "int8_channel"})
_BLACKWELL_NATIVE = _HOPPER_NATIVE | {"nvfp4", "mxfp4", "mxfp8"}

# GB10 (DGX Spark, sm_121). NVIDIA's DGX Spark page lists "1 PFLOP - theoretical FP4 TOPS using the sparsity
# feature", 128 GB LPDDR5x unified memory and 273 GB/s memory bandwidth:
#   https://www.nvidia.com/en-us/products/workstations/dgx-spark/
# (the FP4 line is quoted from that page in https://github.com/huggingface/huggingface.js/pull/1861; the 273 GB/s
# figure as "verified against the NVIDIA DGX Spark product page" in https://ai-infrastructure.net/dgx-spark/).
# NVIDIA publishes no FP8 or BF16 tensor rate for the GB10, so those stay None rather than being derived from the
# FP4 figure by an assumed 2x/4x ladder. (At Hot Chips 2025 NVIDIA gave ~31 TFLOPS of FP32 on the CUDA cores,
# https://afnnews.qaasid.com/145463 -- not a tensor-core rate, not used here.)
GB10_SOURCES = (
    "https://www.nvidia.com/en-us/products/workstations/dgx-spark/",
    "https://github.com/huggingface/huggingface.js/pull/1861",
    "https://ai-infrastructure.net/dgx-spark/",
)

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
        # 1 PFLOP FP4 with sparsity -> 500 TFLOP/s dense. FP8 / BF16 / INT8: not published by NVIDIA.
        tflops={"bf16": None, "fp8": None, "int8": None, "fp4": 500.0},
        native_formats=_BLACKWELL_NATIVE,
        citation="NVIDIA DGX Spark specifications (GB10, 128 GB LPDDR5x, 273 GB/s, 1 PFLOP FP4 sparse): "
                 + GB10_SOURCES[0],
        notes="spec, not measured; unified LPDDR5x shared with the CPU; NVIDIA publishes only the FP4 rate "
              "(FP8/BF16 tensor rates: not published, left unknown)",
    ),
}


# ---- the lab's measured H200, from the committed file ---------------------------------------------------

def _reference_date(path: Path, data: dict) -> str | None:
    """The run's day: the file's own "date" field, else the YYYY-MM-DD in its name."""
    if isinstance(data.get("date"), str):
        return data["date"][:10]
    m = re.search(r"\d{4}-\d{2}-\d{2}", path.name)
    return m.group(0) if m else None


def _num(data: dict, key: str, path: Path):
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{path}: field {key!r} must be a positive number, got {v!r}")
    return float(v)


def measured_h200(path: Path | str = H200_REFERENCE) -> GPU:
    """The "H200-measured" entry, read from the committed reference file (copy bandwidth, GEMM rates).

    Raises ValueError naming the file when it is missing or damaged: a measured ceiling is never invented."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{path}: cannot read the measured H200 ceilings ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path}: not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict) or _num(data, "copy_TBps", path) is None:
        raise ValueError(f"{path}: expected a JSON object with copy_TBps")
    dev = data.get("device") if isinstance(data.get("device"), dict) else {}
    device = str(dev.get("name") or "unknown device")
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return GPU(
        name="H200-measured", source="measured", bandwidth_TBps=_num(data, "copy_TBps", path),
        memory_GB=_num(dev, "mem_gb", path),
        tflops={
            "bf16": _num(data, "bf16_gemm_TFLOPs", path),
            "fp8": _num(data, "fp8_scaled_mm_tensorwise_TFLOPs", path),
            "fp8_rowwise": _num(data, "fp8_scaled_mm_rowwise_TFLOPs", path),
            "fp8_block": _num(data, "fp8_blockwise_TFLOPs", path),
            "int8": None,  # not measured
            "fp4": None,   # Hopper: no FP4 tensor cores
        },
        native_formats=_HOPPER_NATIVE,
        citation=f"{rel} (one run, {_reference_date(path, data)}, {device}, torch {dev.get('torch', '?')})",
        notes="one run on a shared machine; figures vary run to run (outputs/reference/README.md)",
        date=_reference_date(path, data), device=device,
    )


@lru_cache(maxsize=1)
def _measured() -> GPU:
    return measured_h200()


def _all() -> dict:
    return {**GPUS, "H200-measured": _measured()}


#: every name get_gpu accepts (the measured entry is read from its file on first use)
NAMES = (*GPUS, "H200-measured")


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name (case-insensitive); ValueError lists the valid names."""
    for key in NAMES:
        if key.lower() == str(name).lower():
            return _measured() if key == "H200-measured" else GPUS[key]
    raise ValueError(f"unknown GPU {str(name)[:40]!r}; valid names: {', '.join(NAMES)}")


def format_gpu_table() -> str:
    """One line per GPU: bandwidth, dense rates, where the numbers come from. None prints as '-'."""
    keys = ["bf16", "fp8", "fp8_block", "int8", "fp4"]
    lines = [f"{'name':<15}{'TB/s':>7}{'GB':>7}" + "".join(f"{k:>10}" for k in keys) + "  source"]
    for g in _all().values():
        rates = "".join(f"{'-' if g.rate(k) is None else f'{g.rate(k):.0f}':>10}" for k in keys)
        mem = "-" if g.memory_GB is None else f"{g.memory_GB:.0f}"
        lines.append(f"{g.name:<15}{g.bandwidth_TBps:>7.3f}{mem:>7}{rates}  {g.label}")
    lines.append("rates: dense TFLOP/s (datasheet sparse figures halved); '-': not published or not measured")
    return "\n".join(lines)
