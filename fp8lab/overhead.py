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

import json
import statistics
import time
from pathlib import Path

import torch

__all__ = ["bench_overhead", "main"]

DEFAULT_RECIPES = ("e4m3-w", "e4m3-wa", "e4m3-wakv", "e4m3-kv-perchannel", "w8a8-block")


@torch.no_grad()
def _forward_time(model, ids) -> float:
    t = time.perf_counter()
    model(input_ids=ids, use_cache=False)
    return time.perf_counter() - t


def bench_overhead(model, recipes=DEFAULT_RECIPES, seq_len: int = 512, reps: int = 5, seed: int = 0) -> list[dict]:
    from fp8lab.recipes import apply_recipe, remove_recipe
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), generator=g)
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


def main(args, argv) -> int:
    from fp8lab import models, sweep
    from fp8lab.recipes import get_recipe
    names = sweep._split(args.recipes) if args.recipes else list(DEFAULT_RECIPES)
    for n in names:
        get_recipe(n)                       # RecipeError lists the valid names
    seq_len = args.seq_len or 512
    t0 = time.time()
    lm = models.load_model(args.model)
    res = bench_overhead(lm.model, names, seq_len=seq_len, reps=7, seed=args.seed)
    for r in res:
        goal = "meets" if r["ratio"] <= 1.3 else "misses"
        print(f"{r['recipe']:<20} {r['ratio']:.2f}x  (fastest/fastest {r['ratio_of_fastest']:.2f}x; plain "
              f"{r['plain_median_s']:.2f} s, fake-quant {r['fakequant_median_s']:.2f} s per forward; weights "
              f"quantized in {r['apply_seconds']:.1f} s, untimed)  {goal} the <= 1.3x goal")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = sweep.base_provenance(argv)
    prov.update(wall_seconds=round(time.time() - t0, 1), model={"name": lm.name, "sha256": lm.file_sha256},
                model_note=lm.model_note, settings={"seq_len": seq_len, "reps": 7, "batch": 1},
                goal="ratio <= 1.3", method=__doc__.split("\n\n")[2],
                notes=["CPU shared with other jobs while this ran; pair_ratios shows the spread."])
    path = out / "fakequant_overhead.json"
    path.write_text(json.dumps({"provenance": prov, "results": res}, indent=1))
    print(path)
    return 0
