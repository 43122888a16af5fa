"""The notebooks' prose holds no hand-typed measurements, and no page speaks of the lab's work tickets.

A number measured by the lab drifts the moment a result is re-recorded; typed into a markdown cell it stays
behind and contradicts the table under it (one commit of this lab existed only to re-sync notebook 07's
prose). So measured numbers are rendered by code from committed files, and markdown cells may contain only:

  * the structural and format constants in ALLOWED (E4M3's 448, E5M2's 57344, block sizes, bit widths, ...),
  * identifiers: seed and notebook numbers ("seed 003", "notebook 06", a title's "# 12 ·"), section marks ("§3"), model names ("SmolLM2-135M", "Llama-3-8B"), shapes ("128×128", "1x128"), powers written
    with a superscript exponent ("2⁻⁹", "10⁻³"), context lengths written as "8k",
  * small integers 0..10 that carry no unit (list items, "two levels", "3 mantissa bits"),
  * a few numbers-with-units that are definitions everywhere (DEFINITIONS: the 95 % of every interval, ...),
  * a short per-notebook list of EXCEPTIONS, each a definition, each commented.

A number followed by a unit of measurement (%, µs, GB/s, TFLOP/s, dB, points, s, ..., or a ratio written "16×")
is a measurement ("2 × 76" with spaces is a product, not a ratio):
only a notebook's EXCEPTIONS admit it, never ALLOWED. Inline code, fenced code and URLs are not prose
(commands and identifiers live there). The rules apply to every notebook, present and future: a new notebook
passes with no exception at all, or adds a commented one here.
"""
import re
import runpy
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted((NB_DIR / "src").glob("[0-9][0-9]_*.py"))

# ---- what prose may contain --------------------------------------------------------------------------------
ALLOWED = {
    # E4M3 / E5M2 / E4M3FNUZ largest finite values; 6 * 448 = NVFP4's global-scale divisor
    "448", "57344", "240", "2688",
    # E2M1's grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} and its midpoints (the ties of seed 002's conversion)
    "0.5", "1.5", "0.25", "0.75", "1.25", "1.75", "2.5", "3.5", "5.0",
    # NVFP4's cost per value: 4 bits + one 8-bit scale per 16 = 4.5 bits = 0.5625 bytes
    "4.5", "0.5625",
    # powers of two: bit widths, block / group / tile sizes, head dims, context lengths, L2-sized strides
    *(str(2 ** k) for k in range(4, 18)),
    # the scale 1.0 ("uncalibrated": k_scale = v_scale = 1.0), a factor of one
    "1.0",
}
SMALL_INTEGERS = {str(i) for i in range(11)}
#: numbers with a unit that are definitions everywhere (a unit normally marks a measurement)
DEFINITIONS = {
    "95 %": "the confidence level of every interval the lab prints",
    "6 dB": "one bit of precision is 20·log10(2) = 6.02 dB of SQNR",
    "2 FLOP": "a multiply-add counts as two floating-point operations",
}

EXCEPTIONS = {
    # notebook stem prefix -> {number as written: why it is a definition, not a measurement}
    "01": {
        "0.02": "the synthetic weight tensor is drawn N(0, 0.02²): an input of the example, not a result",
        "50": "the synthetic outlier column is scaled by 50: an input of the example",
        "1024": "the synthetic tensor is 256×1024 (also a power of two)",
        "3": "the probe's small tensor has σ = 3·10⁻⁴: an input (written as 3·10⁻⁴)",
        "1.0": "the probe's typical tensor has σ = 1.0: an input",
        "4096": "the probe draws 4,096 values: an input",
        "10": "10⁶ random floats in the bit-exactness test: a test size",
        "3e-4": "the probe's small magnitude, as the exercise's argument",
        "3e-3": "the exercise's other magnitude",
    },
    "04": {
        "7": "seven kernels per layer: the assumption overhead_budget states (not measured)",
    },
    "05": {
        "100": "the audit's header-size cap is 100 MB: a constant of fp8lab.audit (MAX_HEADER_BYTES)",
        "10,000": "the fuzz test mutates 10,000 headers: the test's size",
        "22": "seed 004 found no K/V scales in 22 checkpoint indices: the count of files the seed inspected",
    },
}
#: units that make a number a measurement (checked after an optional space)
MEASURE_UNITS = re.compile(r"(×|x(?![\w])|\s?%|\s?µs|\s?(?:us\b|ms\b|s\b|sec|seconds?\b|minutes?\b|min\b|hours?\b|h\b|"
                           r"[KMGT]B\b|[KMGT]i?B/s|TB/s|GB/s|TFLOP|FLOP|dB\b|pp\b|points?\b|tok/s|tokens/s|"
                           r"GHz|W\b))")
NUMBER = re.compile(r"(?<![\w.,/])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e-?\d+)?)")
SUPERSCRIPT = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺"


def prose(md: str) -> str:
    """Markdown without what is not prose: fenced code, inline code, URLs, HTML comments, link targets."""
    md = re.sub(r"```.*?```", " ", md, flags=re.S)
    md = re.sub(r"`[^`]*`", " ", md)
    md = re.sub(r"<!--.*?-->", " ", md, flags=re.S)
    md = re.sub(r"\]\([^)]*\)", "]", md)
    md = re.sub(r"https?://\S+", " ", md)
    return md


def violations(md: str, exceptions: dict) -> list[str]:
    """The hand-typed numbers of one markdown cell (each with a little context)."""
    text = prose(md)
    bad = []
    for m in NUMBER.finditer(text):
        tok, start, end = m.group(1), m.start(1), m.end(1)
        before, after = text[max(0, start - 12):start], text[end:end + 12]
        plain = tok.replace(",", "")
        if tok in exceptions or plain in exceptions:
            continue
        if re.search(r"(seed |notebooks? |§)$", before) or re.search(r"(^|\n)#+ $", before) or (len(plain) > 1 and plain[0] == "0" and "." not in plain):
            continue                                          # seed 003, notebook 06, §3, 06–08
        if after[:1] and after[0] in SUPERSCRIPT:
            if plain in ("2", "10"):
                continue                                      # 2⁻⁹, 10⁻³: a power, written as one
        if re.match(r"[×x]\d", after) or re.search(r"\d[×x]$", before):
            continue                                          # 128×128, 1x128: a shape (both of its sides)
        if re.match(r"k\b", after) and plain in {str(2 ** k) for k in range(0, 8)}:
            continue                                          # 8k, 32k: a context length
        if re.match(r"[MB]\b", after) and re.search(r"[-\w]$", before):
            continue                                          # SmolLM2-135M, Llama-3-8B: a model's name
        unit = MEASURE_UNITS.match(after)
        if unit and f"{plain} {unit.group(0).strip()}" in DEFINITIONS:
            continue
        if unit:
            bad.append(f"{tok}{unit.group(0)!s}  (…{before}[{tok}]{after}…)")
            continue
        if re.match(r"[A-Za-z_]", after):
            continue                                          # part of an identifier: 3D, 2I, 4th
        if plain in ALLOWED or (plain in SMALL_INTEGERS and "," not in tok):
            continue
        bad.append(f"{tok}  (…{before}[{tok}]{after}…)")
    return bad


def _md_cells_ipynb(path):
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def _md_cells_src(path):
    spec = runpy.run_path(str(path))
    return [s for k, s in spec["CELLS"] if k == "md"]


def _check(name: str, cells: list[str]):
    exc = EXCEPTIONS.get(name[:2], {})
    found = []
    for i, md in enumerate(cells):
        for v in violations(md, exc):
            found.append(f"markdown cell {i}: {v}")
    assert not found, (f"{name}: numbers typed into prose (render them from a committed file in a code cell, "
                       f"or, for a definition, add a commented exception in {Path(__file__).name}):\n  "
                       + "\n  ".join(found))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_markdown_has_no_typed_measurements(path):
    _check(path.name, _md_cells_ipynb(path))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_notebook_source_markdown_has_no_typed_measurements(path):
    _check(path.name, _md_cells_src(path))


# ---- the rule itself -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("md, n_bad", [
    ("E4M3 ends at 448 and E5M2 at 57344.", 0),
    ("The kernel reaches 0.91 of copy bandwidth.", 1),                 # a measured fraction
    ("It is 16× faster than torch eager.", 1),                         # 16 is allowed, 16× is not
    ("32 layers × 2 × 8 heads × 128 × 2 bytes", 0),                    # a product of structural numbers
    ("Blocks of 16 and 32 values, 128×128 tiles, a 1x128 group.", 0),
    ("+1.07 % perplexity on E4M3 weights.", 1),
    ("seed 003 and notebooks 06–08, §3.", 0),
    ("# 12 · Beyond one model", 0),
    ("SmolLM2-135M and Llama-3-8B at 8k and 32k context.", 0),
    ("2⁻⁹ is E4M3's smallest subnormal; 10⁻³ is small.", 0),
    ("Run `python -m fp8lab.sweep --tokens 16384` (2 levels, 3 mantissa bits).", 0),
    ("The step takes 12–38 µs.", 2),
    ("ARC-Easy n = 40 questions.", 1),
    ("about 206 FLOP/byte", 1),
    ("a 95 % interval, 2 FLOPs per weight, +6 dB per bit", 0),
    ("a 2.8–3.9 range", 2),
])
def test_the_rule(md, n_bad):
    assert len(violations(md, {})) == n_bad, violations(md, {})


# ---- no tickets in what attendees read -------------------------------------------------------------------
ISSUE = re.compile(r"\bissues?\b", re.I)
#: "instruction issue", "issue rate", "issue slot": the processor's word, not a ticket
ISSUE_OK = re.compile(r"(instruction|dual|to) issues?\b|\bissues? (rate|slots?|width|bandwidth|an? )", re.I)


def _ticket_words(text: str) -> list[str]:
    out = []
    for m in ISSUE.finditer(text):
        ctx = text[max(0, m.start() - 20):m.end() + 12]
        if not ISSUE_OK.search(ctx):
            out.append(" ".join(ctx.split()))
    return out


def _notebook_text(path) -> str:
    nb = nbformat.read(path, as_version=4)
    parts = []
    for c in nb.cells:
        parts.append(c.source)
        for o in c.get("outputs", []):
            parts.append(o.get("text", "") if isinstance(o.get("text", ""), str) else "")
            parts.append(str(o.get("data", {}).get("text/plain", "")))
            parts.append(str(o.get("data", {}).get("text/markdown", "")))
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS + [REPO / "README.md", NB_DIR / "README.md"], ids=lambda p: p.name)
def test_no_page_speaks_of_issues(path):
    if not path.exists():
        pytest.skip(f"{path.name} does not exist")
    text = _notebook_text(path) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")
    found = _ticket_words(text)
    assert not found, f"{path.name} speaks of issues, which attendees cannot see (speak of the lab): {found}"


def test_ticket_rule():
    assert _ticket_words("The goals of this issue") and _ticket_words("see issue 14")
    assert not _ticket_words("bound by instruction issue rather than bandwidth")
