"""fp8lab.gpus: every number says where it comes from; the measured H200 comes from the committed file."""

import json
import shutil
from pathlib import Path

import pytest

from fp8lab import gpus
from fp8lab.gpus import GPUS, NAMES, get_gpu, measured_h200

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "outputs" / "reference" / "h200_ceilings_2026-11-29.json"
SHARED = Path("/work/shared/reference/h200_ceilings_2026-11-29.json")


def test_every_entry_is_labelled():
    for name in NAMES:
        g = get_gpu(name)
        assert g.citation and g.bandwidth_TBps > 0
        assert g.label == ("spec, not measured" if g.source == "spec" else "measured 2026-11-29 on NVIDIA H200")
    assert {get_gpu(n).source for n in NAMES} == {"spec", "measured"}
    with pytest.raises(ValueError, match="valid names: H100, H200, B200, GB10, H200-measured"):
        get_gpu("A100")


def test_gb10_is_the_published_spec_only():
    g = get_gpu("gb10")
    # NVIDIA: 273 GB/s LPDDR5x, 128 GB, "1 PFLOP FP4 with sparsity" -> 500 dense; nothing else published
    assert (g.bandwidth_TBps, g.memory_GB, g.tflops["fp4"]) == (0.273, 128, 500.0)
    assert g.tflops["fp8"] is None and g.tflops["bf16"] is None
    assert g.source == "spec" and "nvidia.com" in g.citation
    assert all(u.startswith("https://") for u in gpus.GB10_SOURCES)
    assert "nvfp4" in g.native_formats  # Blackwell: FP4 tensor cores


def test_measured_h200_reads_the_committed_file():
    assert COMMITTED.is_file(), "outputs/reference/ must hold the measured ceilings"
    ref = json.loads(COMMITTED.read_text())
    g = get_gpu("H200-measured")
    assert g.bandwidth_TBps == ref["copy_TBps"]
    assert g.tflops["bf16"] == ref["bf16_gemm_TFLOPs"]
    assert g.tflops["fp8"] == ref["fp8_scaled_mm_tensorwise_TFLOPs"]
    assert g.tflops["fp8_block"] == ref["fp8_blockwise_TFLOPs"]
    assert g.tflops["fp4"] is None and g.tflops["int8"] is None  # not measured: never filled in from the spec
    assert (g.date, g.device) == ("2026-11-29", "NVIDIA H200")
    assert "outputs/reference/h200_ceilings_2026-11-29.json" in g.citation


@pytest.mark.skipif(not SHARED.exists(), reason="the lab's shared reference folder is not mounted here")
def test_committed_copy_is_byte_identical_to_the_shared_reference():
    assert COMMITTED.read_bytes() == SHARED.read_bytes()


def test_measured_file_damaged_or_missing(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        measured_h200(tmp_path / "none.json")
    bad = tmp_path / "h200_ceilings_2026-01-02.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        measured_h200(bad)
    bad.write_text(json.dumps({"copy_TBps": "fast"}))
    with pytest.raises(ValueError, match="copy_TBps"):
        measured_h200(bad)
    shutil.copy(COMMITTED, bad)
    assert measured_h200(bad).date == "2026-01-02"  # the date in the file name when the file has none


def test_spec_table_has_no_measured_entry():
    assert {g.source for g in GPUS.values()} == {"spec"}
    assert "H200-measured" not in GPUS  # read from its file, not typed into the module


def test_gpu_table_prints_labels():
    t = gpus.format_gpu_table()
    assert "GB10" in t and "spec, not measured" in t and "measured 2026-11-29 on NVIDIA H200" in t
