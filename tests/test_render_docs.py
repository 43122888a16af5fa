"""The pages' result blocks are exactly what tools/render_docs.py renders from the committed outputs/.

When this fails after a result was re-recorded: `python tools/render_docs.py`, then commit the pages with it.
"""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("render_docs", REPO / "tools" / "render_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rd():
    return _tool()


def test_committed_pages_match_their_rendering(rd):
    stale = [str(p.relative_to(REPO)) for p, text in rd.render().items() if p.read_text(encoding="utf-8") != text]
    assert not stale, f"out of date: {stale}; run python tools/render_docs.py and commit the result"


def test_rendered_pages_hold_no_nan(rd):
    """A value missing from a record renders as "not recorded", never as nan."""
    import re

    for page, text in rd.render().items():
        assert not re.search(r"\bnan\b", text, re.IGNORECASE), page


def test_every_page_has_its_markers(rd):
    for page, (name, _) in rd.PAGES.items():
        text = page.read_text(encoding="utf-8")
        assert text.count(f"<!-- {name}:begin -->") == 1 and text.count(f"<!-- {name}:end -->") == 1, page


def test_splice_replaces_only_the_block(rd):
    page = "intro 1.07 %\n<!-- results:begin -->\nold 9.99\n<!-- results:end -->\ntail\n"
    out = rd.splice(page, "results", "new")
    assert out == "intro 1.07 %\n<!-- results:begin -->\nnew\n<!-- results:end -->\ntail\n"
    with pytest.raises(ValueError):
        rd.splice("no markers here", "results", "new")


def test_missing_results_say_not_recorded(rd, tmp_path, monkeypatch):
    """A checkout without a result renders a clear "not recorded", never a traceback or a stale number."""
    monkeypatch.setattr(rd, "OUT", tmp_path)
    block = rd.readme_block()
    assert "not recorded" in block
    assert "%" not in block.split("**Kernels")[0].replace("95 %", "")   # no delta from anywhere else
    assert "not timed" in rd.notebooks_block()


def test_readme_block_comes_from_the_files(rd):
    """Every delta in the quality paragraph is the CSV's, to the printed digits."""
    from fp8lab import findings
    from fp8lab import notebook as nb

    csv = REPO / "outputs" / "results.csv"
    if not csv.is_file():
        pytest.skip("outputs/results.csv is not recorded")
    df = nb.results_frame(csv)
    r = findings.sweep_delta(df, "e4m3-w")
    assert findings.ci(r["delta_pct"], r["ci95_low"], r["ci95_high"]) in " ".join(rd.readme_block().split())
