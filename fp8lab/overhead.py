"""How much slower is a fake-quantized forward than a plain one? `python -m fp8lab.sweep --bench-overhead`

A benchmark, not a test: the sweep's wall time is forward passes, and fake quantization adds elementwise
work (one scale + one rounding per Linear input, per forward; weights are quantized once, when the recipe
is applied, and are then plain float32 tensors, so a weight-only recipe should cost ~1.0x).

Method: one [1, seq_len] window; `reps` interleaved pairs (plain forward, then the recipe applied and one
fake-quant forward, then removed), after a warm-up of each. Applying the recipe (quantizing the weights)
is outside the timed region and reported separately. Interleaving matters on a CPU shared with other
jobs: both arms of a pair see the same load. Headline: the median of the per-pair ratios; also the ratio
of the fastest forwards (the least disturbed). Goal: <= 1.3x.

    $ python -m fp8lab.sweep --bench-overhead
    e4m3-wa     1.2x  (...)            # illustrative; outputs/fakequant_overhead.json has the measured run
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from fp8lab.provenance import provenance
from fp8lab.store import atomic_write_json

__all__ = ["bench_overhead", "main"]

DEFAULT_RECIPES = ("e4m3-w", "e4m3-wa", "e4m3-wakv", "e4m3-kv-perchannel", "w8a8-block")


@torch.no_grad()
def _forward_time(model, ids) -> float:
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t = time.perf_counter()
    model(input_ids=ids, use_cache=False)
    sync()
    return time.perf_counter() - t


def bench_overhead(model, recipes=DEFAULT_RECIPES, seq_len: int = 512, reps: int = 5, seed: int = 0) -> list[dict]:
    from fp8lab.recipes import apply_recipe, remove_recipe
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), generator=g).to(next(model.parameters()).device)
    res = []
    for name in recipes:
        plain, fq, apply_s = [], [], []
        for i in range(reps + 1):                 # pair 0 is the warm-up, not recorded
            tp = _forward_time(model, ids)
            t0 = time.perf_counter()
            apply_recipe(model, name)
            ta = time.perf_counter() - t0
            try:
                tq = _forward_time(model, ids)
            finally:
                remove_recipe(model)
            if i:
                plain.append(tp), fq.append(tq), apply_s.append(ta)
        ratios = [q / p for p, q in zip(plain, fq)]
        res.append({"recipe": name, "ratio": statistics.median(ratios), "ratio_of_fastest": min(fq) / min(plain),
                    "plain_median_s": statistics.median(plain), "fakequant_median_s": statistics.median(fq),
                    "apply_seconds": statistics.median(apply_s), "pair_ratios": ratios,
                    "plain_s": plain, "fakequant_s": fq})
    return res


def main(plan: dict, model: str | None, out: Path, command: str, recipes=None) -> int:
    """`python -m fp8lab.sweep --bench-overhead [--recipes ...] [--seq-len N] [--out DIR | --record]`.

    `plan` is the sweep's validated plan (recipes, seq_len, seed, device); the caller holds <out>'s lock."""
    from fp8lab import models
    names = [r for r in recipes if r != "baseline"] if recipes else list(DEFAULT_RECIPES)
    seq_len = plan["seq_len"]
    prov = provenance(command, cuda=plan.get("device", "cpu") != "cpu")    # before anything is written
    t0 = time.time()
    lm = models.load_model(model)
    if plan.get("device", "cpu") != "cpu":
        lm.model.to(plan["device"])
    res = bench_overhead(lm.model, names, seq_len=seq_len, reps=7, seed=plan["seed"])
    for r in res:
        goal = "meets" if r["ratio"] <= 1.3 else "misses"
        print(f"{r['recipe']:<20} {r['ratio']:.2f}x  (fastest/fastest {r['ratio_of_fastest']:.2f}x; plain "
              f"{r['plain_median_s']:.2f} s, fake-quant {r['fakequant_median_s']:.2f} s per forward; weights "
              f"quantized in {r['apply_seconds']:.1f} s, untimed)  {goal} the <= 1.3x goal")
    prov.update(wall_seconds=round(time.time() - t0, 1), model={"name": lm.name, "sha256": lm.file_sha256},
                model_note=lm.model_note, settings={"seq_len": seq_len, "reps": 7, "batch": 1,
                                                    "device": plan.get("device", "cpu")},
                goal="ratio <= 1.3", method=__doc__.split("\n\n")[2],
                notes=["CPU shared with other jobs while this ran; pair_ratios shows the spread."])
    path = atomic_write_json(Path(out) / "fakequant_overhead.json", {"provenance": prov, "results": res})
    print(path)
    return 0
