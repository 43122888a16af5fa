"""The attention tolerance's check (every attention GPU test compares through it), exercised on the CPU."""
import pytest
import torch

from fp8lab.kernels import tolerances


def test_attention_check_passes_within_bounds_and_names_offenders_outside():
    tol = tolerances.attention("bf16", 1024)
    ref = torch.linspace(-1, 1, 64, dtype=torch.float64).reshape(4, 16)
    err, rel = tol.check(ref + 1e-6, ref, vmax=1.0, what="near")
    assert 0 < err < 1e-5 and rel < tol.rms
    bad = ref.clone()
    bad[2, 3] += 0.5
    with pytest.raises(AssertionError, match=r"(?s)near: 1 of 64 outside tolerance.*\[2, 3\]"):
        tol.check(bad, ref, vmax=1.0, what="near")
    poisoned = ref.clone()
    poisoned[0, 0] = float("nan")
    with pytest.raises(AssertionError, match="1 non-finite outputs"):
        tol.check(poisoned, ref, vmax=1.0)
    small_everywhere = ref + tol.atol * 0.9          # each element within bounds, RMS over the limit
    with pytest.raises(AssertionError, match="relative RMS error"):
        tol.check(small_everywhere, ref, vmax=1.0)
