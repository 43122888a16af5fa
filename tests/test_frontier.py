"""fp8lab.frontier: bytes per decode step per part, the greedy path, budgets and the CLI on a tiny Llama."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fp8lab import bandwidth as bw
from fp8lab import frontier as F
from fp8lab.distributed import tiny_causal_lm
from fp8lab.sensitivity import CSV_FIELDS as SENS_FIELDS, Part, model_parts
from fp8lab.store import read_rows, write_rows


def _untied():
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("make", [tiny_causal_lm, _untied])
@pytest.mark.parametrize("fmt,kv", [("bf16", "bf16"), ("fp8_tensor", "fp8"), ("nvfp4", "nvfp4"), ("mxfp4", "bf16")])
@pytest.mark.parametrize("batch,context", [(1, 512), (8, 4096)])
def test_uniform_assignment_equals_fp8lab_bandwidth(make, fmt, kv, batch, context):
    m = make()
    parts = model_parts(m, ("layers", "lm_head", "kv"))
    a = {p.name: (kv if p.kv else "bf16" if p.lm_head else fmt) for p in parts}
    mine = F.decode_bytes(F.inventory(m), a, parts, batch, context)
    ref = bw.bytes_per_decode_step(m.config.to_dict(), fmt, kv, batch=batch, context=context, policy="linear")
    assert mine == pytest.approx(ref, rel=1e-12)


def test_quantizing_a_tied_lm_head_adds_the_embedding_row_back():
    m = tiny_causal_lm()
    parts = model_parts(m, ("layers", "lm_head", "kv"))
    inv = F.inventory(m)
    base = F.decode_bytes(inv, {}, parts)
    head = F.decode_bytes(inv, {"lm_head": "fp8_tensor"}, parts)
    V, H = inv.lm_head
    assert base - head == V * H * 2 - (V * H + 4) - H * 2      # bf16 table -> fp8 + scale, + one bf16 row


def test_greedy_takes_the_cheapest_bytes_first_and_stops_at_each_budget():
    parts = [Part(f"p{i}", "layer", rf"p{i}") for i in range(3)]
    size = {"bf16": 4.0, "fp8": 2.0, "fp4": 1.0}
    cost = {("p0", "fp8"): 0.1, ("p0", "fp4"): 5.0, ("p1", "fp8"): 0.05, ("p1", "fp4"): 0.2,
            ("p2", "fp8"): -0.3, ("p2", "fp4"): 9.0}
    bytes_fn = lambda a: sum(size[a.get(p.name, "bf16")] for p in parts)
    path = F.greedy_path(parts, {p.name: ["fp8", "fp4"] for p in parts}, cost, bytes_fn)
    sizes = [b for _, b, _ in path]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 12 and sizes[-1] == 3
    # cost per byte saved: p2->fp8 is free (-0.3 clipped to 0); then p1->fp8 0.025 < p0->fp8 0.05 < p1->fp4 0.067;
    # from p1=fp8, p1->fp4 costs 0.15 per byte > p0->fp8's 0.05; the expensive fp4 moves come last
    order = [next(f"{k}:{a[k]}" for k in a if a[k] != prev[k]) for (prev, _, _), (a, _, _) in zip(path, path[1:])]
    assert order == ["p2:fp8", "p1:fp8", "p0:fp8", "p1:fp4", "p0:fp4", "p2:fp4"]
    assert path[-1][2] == pytest.approx(5.0 + 0.2 + 9.0)


def test_parse_budget():
    assert F.parse_budget("0.5, 120MB,0.2GB,3e8", 1e9) == [5e8, 1.2e8, 2e8, 3e8]
    for bad in ("", "abc", "-1", "0"):
        with pytest.raises(F.UsageError):
            F.parse_budget(bad, 1e9)


def _fake_sensitivity(folder):
    m = tiny_causal_lm()
    rows = []
    for p in model_parts(m, ("layers", "lm_head", "kv")):
        for fmt, d in (("e4m3", 0.1), ("nvfp4", 2.0)):
            rows.append(dict(model="tiny-llama", model_sha256="x", part=p.name, kind=p.kind, format=fmt, ppl=1,
                             baseline_ppl=1, delta_pct=d * (1 + int(p.name == "layer0")), ci95_low=0, ci95_high=3,
                             n=2, seq_len=16, seconds=0, device="cpu", model_note="test"))
    write_rows(rows, folder / "sensitivity.csv", SENS_FIELDS)
    return folder


def test_cli_tiny_frontier(tmp_path, capsys):
    sens = _fake_sensitivity(tmp_path / "sens")
    out = tmp_path / "f"
    rc = F.main(["--model", "tiny-llama", "--sensitivity", str(sens), "--budget", "0.3,0.45,0.7", "--windows", "2",
                 "--seq-len", "16", "--context", "16", "--out", str(out), "--workers", "0", "--plot", "--boot", "200"])
    assert rc == 0
    rows = read_rows(out / "frontier.csv", F.CSV_FIELDS)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("baseline") == 1 and kinds.count("uniform") == len(F.UNIFORM) and "mixed" in kinds
    for r in rows:
        if r["kind"] == "mixed":
            assert float(r["bytes_per_step"]) <= float(r["budget"])
    assert (out / "frontier.png").stat().st_size > 10_000
    rc = F.main(["--model", "tiny-llama", "--sensitivity", str(sens), "--bytes-only", "--budget", "0.5"])
    assert rc == 0 and "mixed <= 50%" in capsys.readouterr().out


def test_cli_errors_exit_2(tmp_path, capsys):
    assert F.main(["--model", "tiny-llama", "--sensitivity", str(tmp_path), "--bytes-only"]) == 2
    assert "no sensitivity.csv" in capsys.readouterr().err
    sens = _fake_sensitivity(tmp_path)
    assert F.main(["--model", "tiny-llama", "--sensitivity", str(sens), "--bytes-only", "--budget", "x"]) == 2
    assert "bad budget" in capsys.readouterr().err
    rows = [r for r in read_rows(sens / "sensitivity.csv") if r["part"] != "kv"]
    write_rows(rows, sens / "sensitivity.csv", SENS_FIELDS)
    assert F.main(["--model", "tiny-llama", "--sensitivity", str(sens), "--bytes-only"]) == 2
    assert "no rows for part(s) kv" in capsys.readouterr().err
