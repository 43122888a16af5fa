"""fp8lab.sensitivity on a tiny random Llama: the parts, the recipe each cell applies, the CLI and its errors."""
import torch

from fp8lab import recipes as R
from fp8lab import sensitivity as S
from fp8lab.distributed import tiny_causal_lm
from fp8lab.scaling import fake_quant
from fp8lab.store import read_rows


def test_parts_of_a_llama():
    m = tiny_causal_lm()
    parts = S.model_parts(m)
    names = [p.name for p in parts]
    assert names == ["layer0", "layer1", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj", "lm_head", "kv"]
    grid = S.model_parts(m, ("grid",))
    assert len(grid) == 14 and grid[0].name == "layer0.q_proj"


def _quantized_linears(m, desc):
    before = {n: x.weight.detach().clone() for n, x in m.named_modules() if isinstance(x, torch.nn.Linear)}
    with R.applied(m, S.build_recipe(desc)):
        return {n for n, x in m.named_modules() if isinstance(x, torch.nn.Linear)
                and not torch.equal(x.weight, before[n])}, before


def test_each_part_quantizes_exactly_its_tensors():
    m = tiny_causal_lm()
    linears = [n for n, x in m.named_modules() if isinstance(x, torch.nn.Linear)]
    for p in S.model_parts(m, ("layers", "types", "lm_head", "grid")):
        got, before = _quantized_linears(m, S.part_desc(p, "nvfp4"))
        if p.kind == "layer":
            want = {n for n in linears if f".layers.{p.name[5:]}." in n}
        elif p.kind == "type":
            want = {n for n in linears if n.endswith("." + p.name)}
        elif p.kind == "grid":
            layer, t = p.name.split(".")
            want = {n for n in linears if f".layers.{layer[5:]}." in n and n.endswith("." + t)}
        else:
            want = {"lm_head"}
        assert got == want, p.name
    # the quantized weight is the reference fake_quant of the original
    with R.applied(m, S.build_recipe({"weights": [[r"\.layers\.1\.", "fp8_tensor"]]})):
        w = m.model.layers[1].self_attn.o_proj.weight
        assert torch.equal(w, fake_quant(before["model.layers.1.self_attn.o_proj"], S.WEIGHT_SPECS["fp8_tensor"]))


def test_kv_part_has_a_cell_only_for_cache_formats():
    kv = S.Part("kv", "kv", kv=True)
    assert S.part_desc(kv, "e4m3") == {"kv": "fp8"}
    assert S.part_desc(kv, "mxfp4") is None
    r = S.build_recipe({"kv": "nvfp4"})
    assert r.key == S.KV_SPECS["nvfp4"] and r.weight_map == ()


def test_cli_tiny_run_writes_rows_and_heatmap(tmp_path, capsys):
    out = tmp_path / "s"
    rc = S.main(["--model", "tiny-llama", "--windows", "3", "--seq-len", "16", "--out", str(out), "--workers", "0",
                 "--plot", "--boot", "200"])
    assert rc == 0
    rows = read_rows(out / "sensitivity.csv", S.CSV_FIELDS)
    assert len(rows) == 2 * 11                      # 11 parts x 2 formats (kv has both)
    assert all(float(r["ci95_low"]) <= float(r["delta_pct"]) <= float(r["ci95_high"]) for r in rows)
    assert (out / "sensitivity.png").stat().st_size > 10_000
    assert (out / "provenance.json").is_file()
    assert S.read_sensitivity(out)[("layer1", "nvfp4")][0] == float(
        next(r for r in rows if r["part"] == "layer1" and r["format"] == "nvfp4")["delta_pct"])


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert S.main(["--model", "tiny-llama", "--formats", "e4m3,fp7", "--out", str(tmp_path)]) == 2
    assert "unknown format" in capsys.readouterr().err
    assert S.main(["--model", "tiny-llama", "--parts", "heads", "--out", str(tmp_path)]) == 2
    assert "unknown part group" in capsys.readouterr().err
    assert S.main(["--model", "no-such-model", "--out", str(tmp_path), "--workers", "0"]) == 2
    assert "error:" in capsys.readouterr().err
    from fp8lab.store import REFERENCE
    assert S.main(["--model", "tiny-llama", "--out", str(REFERENCE / "sensitivity" / "x"), "--workers", "0"]) == 2
    assert "--record" in capsys.readouterr().err          # the committed folder is written only on purpose
