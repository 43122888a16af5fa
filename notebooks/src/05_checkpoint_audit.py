PATH = "notebooks/05_checkpoint_audit.ipynb"
CELLS = [
("md", r"""
# 05 · What does an "FP8" checkpoint really hold?

**The big idea.** A safetensors file begins with an 8-byte length and a JSON header that lists every tensor's name,
storage dtype, shape and byte range. Reading that header costs kilobytes — never the payload, never a GPU — and it is
enough to tell which tensors a recipe converted, with which scale layout, and whether K/V cache scales ship.

**The key insight** (seed 004, *"Where FP8 checkpoints come from"*). "FP8" on a model card covered three different
things: a DeepSeek expert cast to E4M3 with 128×128 block scales; MiniMax's MXFP8 — E4M3 too, but with an 8-bit
power-of-two scale per 32 values, which Hopper runs through a weight-only W8A16 kernel; and a gpt-oss "FP8" whose
fused 3-D expert tensors were still BF16, because the recipe targeted `Linear` layers. The label is where an
investigation begins, not where it ends.

**What we can and cannot measure here.** We hold no real checkpoint (and download none). `fp8lab.audit_fixtures`
writes tiny synthetic checkpoints with the real tensor names, dtypes and scale layouts of each case (zero payloads,
hidden sizes of 64–256) and a `config.json` label in the style of each release. `fp8lab.audit` reads only their
headers, exactly as it would read a download of hundreds of gigabytes. What headers cannot tell: which kernel an engine picks, and
whether the model still answers correctly.
"""),
("code", r"""
import struct, tempfile
from pathlib import Path
from fp8lab import audit as au, audit_fixtures as af, bandwidth as bw
from fp8lab import notebook as nb

SMALL = nb.small()
root = Path(tempfile.mkdtemp())
paths = af.make_all(root)
reports = {name: au.audit(path) for name, path in paths.items()}
print(au.format_summary(reports))
"""),
("md", r"""
"Block weights" are the decoder-block tensors a recipe converts (attention, dense MLP, experts) — the verdict is judged
on them, because embeddings, norms and routers stay BF16 in every recipe. Now the three cases of the seed, one by one.

## Case 1: a DeepSeek-style block-FP8 cast
"""),
("code", r"""
print(au.format_table(reports["deepseek_block_fp8"]))
"""),
("md", r"""
**Reading it.** Every expert, shared expert, MLA projection and dense MLP is `F8_E4M3`, each with an `F32`
`weight_scale_inv` whose shape is `[ceil(N/128), ceil(K/128)]` — the 128×128 block layout that the label's
`weight_block_size: [128, 128]` announces. Label and bytes agree. What the header cannot say is where the FP8 came
from: seed 004's cast was made from an MXFP4 original, and a cast to a wider format restores nothing. It only costs
disk — which the bandwidth module can check against the seed's expert count and file sizes (quoted in the code):
"""),
("code", r"""
SEED004 = {"expert_values": 296.35e9, "mxfp4_file_GB": 167, "fp8_file_GB": 307}     # seed 004, as printed
experts = bw.class_size_bytes(SEED004["expert_values"], ("mxfp4", "fp8_block128"))
print({k: f"{v / 1e9:.1f} GB" for k, v in experts.items()},
      f"-> x{experts['fp8_block128'] / experts['mxfp4']:.2f} for the experts; the seed's whole files: "
      f"x{SEED004['fp8_file_GB'] / SEED004['mxfp4_file_GB']:.2f}")
rest = [SEED004["mxfp4_file_GB"] - experts["mxfp4"] / 1e9, SEED004["fp8_file_GB"] - experts["fp8_block128"] / 1e9]
nb.md(f'''The expert tensors alone account for {experts["mxfp4"] / 1e9:.0f} → {experts["fp8_block128"] / 1e9:.0f} GB; the remaining
{rest[0]:.0f} and {rest[1]:.0f} GB of the seed's two totals are the rest of the model, so the seed's
{100 * (SEED004["fp8_file_GB"] / SEED004["mxfp4_file_GB"] - 1):.0f} % more disk is consistent with the formats.''')
"""),
("md", r"""
## Case 2: a MiniMax-style MXFP8 release
"""),
("code", r"""
r = reports["minimax_mxfp8"]
print(au.format_table(r))
for layout in r["scale_layouts"] + ["fp8-block-128x128"]:
    print(f"on Hopper, {layout}: {au.HOPPER_PATH[layout]}")
"""),
("md", r"""
**Reading it.** The elements are the same E4M3 bytes as case 1; the scales are not: a `U8` (E8M0, a power of two)
per 32 values along each row, `[rows, cols/32]`. Same element type, different format — and on Hopper, per seed 004's
engine log, a different kernel (weight-only W8A16 via Marlin) rather than FP8 tensor cores. If such a file were
labelled plain "FP8", the audit says so:
"""),
("code", r"""
mislabelled = af.minimax_mxfp8(root / "minimax_labelled_fp8",
                               quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
print(au.audit(mislabelled)["verdict"])
"""),
("md", r"""
## Case 3: a gpt-oss "FP8" whose experts stayed BF16
"""),
("code", r"""
print(au.format_table(reports["gptoss_fp8_bf16_experts"]))
"""),
("md", r"""
**Reading it.** The label (compressed-tensors, 8-bit float, `targets: ["Linear"]`) is true of the attention
projections and of nothing else. gpt-oss stores its experts as fused 3-D parameters (`mlp.experts.gate_up_proj`
`[E, H, 2I]`), not as `Linear` modules, so the recipe passed over them: the checkpoint is BF16 where it matters. In
seed 004 that meant most of the file's bytes (its figures are quoted in the code below). The original's layout, for
comparison:
"""),
("code", r"""
SEED004_GPTOSS = {"bf16_expert_params": 114.7e9, "file_GB": 232.7}                  # seed 004, as printed
ex = bw.class_size_bytes(SEED004_GPTOSS["bf16_expert_params"], ("bf16", "mxfp4"))
print(f"{SEED004_GPTOSS['bf16_expert_params'] / 1e9:.1f}e9 BF16 expert parameters = {ex['bf16'] / 1e9:.0f} GB of the "
      f"{SEED004_GPTOSS['file_GB']} GB file; the same experts in MXFP4: {ex['mxfp4'] / 1e9:.0f} GB "
      f"(x{ex['bf16'] / ex['mxfp4']:.1f})")
"""),
("code", r"""
print(au.format_table(reports["gptoss_mxfp4"]))
"""),
("md", r"""
## Per-tensor FP8, NVFP4 in two namings, plain BF16 — and the K/V scales
"""),
("code", r"""
for name in ("fp8_per_tensor", "nvfp4_compressed_tensors", "nvfp4_modelopt", "bf16_plain"):
    rep = reports[name]
    kv = rep["kv_scale_tensors"][0] if rep["has_kv_scales"] else "none"
    print(f"{name}\n  layouts: {', '.join(rep['scale_layouts']) or '-'}\n  K/V scales: {kv}\n  {rep['verdict']}\n")
"""),
("md", r"""
**Reading it.** NVFP4 arrives under two naming schemes for the same layout — compressed-tensors
(`weight_packed`, `weight_scale`, `weight_global_scale`) and ModelOpt (`weight` as `U8`, `weight_scale` as E4M3,
`weight_scale_2`) — and the audit recognises both by dtypes and shapes, not only names: packed `U8 [N, K/2]` plus
`F8_E4M3 [N, K/16]`. K/V cache scales also come in several namings (`self_attn.k_scale`, `k_proj.k_scale`, legacy
`kv_scale`). Seed 004 found none in the real checkpoint indices it read; absence in the files says nothing about the
scale an engine uses at run time (often 1.0, uncalibrated) — that is notebook 03's territory.

## Bad files fail loudly, in bounded memory
"""),
("code", r"""
bad = root / "truncated.safetensors"
bad.write_bytes(struct.pack("<Q", 10 ** 12) + b'{"a": ')      # claims a 1 TB header
for target in (bad, root / "does_not_exist"):
    try:
        au.audit(target)
    except au.AuditError as e:
        print("AuditError:", e)
"""),
("md", r"""
The header length is checked against a cap (`audit.MAX_HEADER_BYTES`, the safetensors library's own) and the file
size *before* anything is read; offsets are checked against the payload and each other; unknown dtypes, bad JSON and
duplicate names are refused. The tests fuzz thousands of mutated headers and accept nothing but `AuditError`.

## From the lab's recipes to a checkpoint, and back through the audit

`fp8lab.export` writes a recipe's quantized weights as a real compressed-tensors (or ModelOpt) checkpoint — the
bytes are `fp8lab.scaling`'s codes — and the audit reads it back like any download. On the lab's model
(SmolLM2-135M, whose weights are 4-bit GGUF dequantized: the export re-quantizes an already-quantized model); at
small size (`FP8LAB_SMALL=1`, the tests) a tiny random 2-layer Llama stands in, to skip the model's conversion.
"""),
("code", r"""
from fp8lab import export
for recipe, fmt in (("e4m3-w", "compressed-tensors"), ("nvfp4-w", "modelopt")):
    path, rep = export.demo(nb.scratch("05"), recipe, fmt, model="tiny" if SMALL else None)
    print(f"{recipe} as {fmt} -> {nb.rel(path)}\n  {rep['verdict']}\n")
print(au.format_table(dict(rep, path=nb.rel(rep["path"]))))
"""),
("md", r"""
## The checklist (seed 004's lesson)
1. **Identify the tensor roles** — the role × dtype table: are the experts (most of a MoE's bytes) converted?
2. **Inspect the scales** — per-tensor, per-channel, 128×128 blocks, MX per-32, NVFP4 per-16: each is a different
   format and a different kernel.
3. **Confirm the kernel** — only the engine's log can (`Using 'MARLIN' Mxfp4 MoE backend`); the headers tell you
   which line to look for.
4. **Test the output before timing it** — a fast wrong model is not a result; the quality notebooks measure that.

## Exercises

Worked answers: `notebooks/solutions/05_checkpoint_audit.py`.

1. Run `python -m fp8lab.audit /path/to/any/checkpoint` on a folder you already have (headers only; nothing is
   loaded) — or on one of the fixtures above: which roles are converted?
2. Give `af.fp8_per_tensor(path, kv_scales="legacy")` and check which names `has_kv_scales` recognises.
3. Write a block-FP8 tensor with 64×64 blocks under a `[128, 128]` label (`af.w_fp8_block(..., b=64)`): what does
   the audit warn?
4. Export `e4m3-wa-tok` (`export.plan("e4m3-wa-tok")`): what does the checkpoint's config say about the activation
   scales, and can a checkpoint hold an *oracle* activation recipe?
"""),
]
