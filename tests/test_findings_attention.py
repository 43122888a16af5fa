"""fp8lab.findings' readings of the decode-attention recordings (notebook 08), on synthetic records: each sentence's
words and numbers, and what each says (or returns) where the recording lacks what it reads."""
import pytest

from fp8lab import findings
from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import attention_nvfp4kv as nv
from fp8lab.kernels import bench_attention as ba
from tests.test_kernels_attention import _decode_records


def _stale_record(context=32768):
    """A version-3 bf16 default whose recorded configuration is none that this tree's size rule picks."""
    return dict(kernel="v3_bf16kv", fmt="bf16", version=3, default=True, config=[9, 9, 9], head_dim=128, B=ba.B,
                n_q_heads=ba.HQ, n_kv_heads=ba.HK, context=context, layout="contiguous", time_us=100.0)


def test_attention_goal_line():
    assert findings.attention_goal_line(_decode_records()) == \
        f"goal: {ba.GOAL[0]} >= {ba.GOAL[1]}x -> measured 1.9: met"
    data = _decode_records()
    for r in data["results"]:
        if r["kernel"] == "v2_fp8kv[cvt]" and r["context"] == 32768:
            r["speedup"] = 1.8333
    assert findings.attention_goal_line(data).endswith("-> measured 1.83: not met")
    assert findings.attention_goal_line({"results": []}).endswith("-> measured None: not met")


def test_copy_bandwidth_above_one():
    rows = [dict(kernel="torch_sdpa[default=cudnn]", shape="B8 L16384", fraction_of_copy_bw=1.0254),
            dict(kernel="v3_fp8kv[cvt]", shape="B8 L16384", fraction_of_copy_bw=0.92),
            dict(kernel="v3_bf16kv", fraction_of_copy_bw=1.07),                      # no shape: an empty column
            dict(kernel="torch_sdpa[flash]", fraction_of_copy_bw=None)]
    text = findings.copy_bandwidth_above_one(rows)
    lines = text.splitlines()
    assert lines[0] == "rows above 1.0 of copy bandwidth: 2"
    assert lines[1] == f"  {'torch_sdpa[default=cudnn]':28s} {'B8 L16384':28s} 1.025"
    assert lines[2] == f"  {'v3_bf16kv':28s} {'':28s} 1.070"
    assert findings.copy_bandwidth_above_one([]) == "rows above 1.0 of copy bandwidth: 0"


def test_attention_context_bullets():
    data = _decode_records()
    text = findings.attention_context_bullets(data)
    lines = text.splitlines()
    assert lines[0] == ("* At 16k, 32k, 128k context: 1.9× faster than the same kernel on bf16 and 1.7× faster than "
                        "torch SDPA; FP8 reaches 0.9 of copy bandwidth, bf16 1.0.")
    assert lines[1] == f"* The lab's target ({ba.GOAL[0]}, at least {ba.GOAL[1]}×): measured 1.90×, met."
    assert len(lines) == 2 and "Short context" not in text                      # no context up to 4k in this run
    base = dict(layout="contiguous", head_dim=128, valid=True)
    for L, t, s in ((1024, 12.0, 1.2), (4096, 20.4, 1.6)):
        data["results"] += [dict(kernel="v2_fp8kv[cvt]", fmt="fp8cvt", version=2, default=True, time_us=t, speedup=s,
                                 context=L, **base),
                            dict(kernel="v2_bf16kv", fmt="bf16", version=2, default=True, time_us=t * s, context=L,
                                 **base)]
    short = findings.attention_context_bullets(data).splitlines()[0]
    assert short == ("* Short context (1k, 4k): the FP8 step takes 12–20 µs, 1.2–1.6× faster than bf16 (the same "
                     "kernel).")
    # nothing at 32k and a default this tree would not launch: the target not measured, then the note
    alone = findings.attention_context_bullets({"results": [_stale_record()]}).splitlines()
    assert alone[0].endswith("measured -, not measured.")
    assert alone[1] == "* " + findings.recorded_default_sentence({"results": [_stale_record()]})
    assert "(9, 9, 9) recorded" in alone[1]


def test_attention_version_sentences():
    data = _decode_records()
    base = dict(layout="contiguous", head_dim=64, context=32768, valid=True)
    data["results"] += [dict(kernel="v1_fp8kv[cvt]", fmt="fp8cvt", version=1, default=False, time_us=80.0, **base),
                        dict(kernel="v3_fp8kv[cvt]", fmt="fp8cvt", version=3, default=True, time_us=72.0, **base),
                        dict(kernel="v1_fp8kv[cvt]", fmt="fp8cvt", version=1, default=False, time_us=100.0,
                             **{**base, "context": 131072}),
                        dict(kernel="v3_fp8kv[cvt]", fmt="fp8cvt", version=3, default=True, time_us=110.0,
                             **{**base, "context": 131072})]
    out = findings.attention_version_sentences(data)
    assert out[0] == ("In this run version 2 is **faster** than version 1 on an FP8 cache (time v2 / v1 = 1.0 at "
                      "D = 128, contiguous), and slower on a bf16 cache (1.0).")
    assert out[1].endswith("Against the fastest bf16 kernel of the run, the fastest FP8 kernel is 1.7× as fast, the "
                           "NVFP4 kernel 2.8×.")
    assert out[2] == ("At D = 64, version 3 is sometimes faster, sometimes slower than version 1 on an FP8 cache "
                      "(time v3 / v1 = 0.9–1.1).")
    assert len(out) == 3                                                       # no version 3 at D = 128: no sentence
    assert findings._faster_word([1.1, 1.3]) == "slower" and findings._faster_word([0.8, 0.9]) == "faster"
    legacy = {"results": [dict(kernel="ours_fp8kv[cvt,va]", time_us=1.0, layout="contiguous", head_dim=128,
                               context=32768, default=True)]}
    assert findings.attention_version_sentences(legacy) == []                  # one version: nothing side by side


def _sweep(fp8, nvfp4_v3_us=124.3):
    """A version-3 sweep at 32k: fp8 = [(config, time_us, fraction of copy bandwidth, default?)], and an NVFP4 pair
    (version 2's best configuration at 110 us, version 3's default at `nvfp4_v3_us`)."""
    base = dict(valid=True, head_dim=128, layout="contiguous", context=32768)
    res = [dict(kernel="v3_fp8kv[cvt]" + ("" if d else "{" + ",".join(map(str, c)) + "}"), fmt="fp8cvt", version=3, default=d,
                sweep=not d, config=list(c), time_us=t, fraction_of_copy_bw=x, **base) for c, t, x, d in fp8]
    res += [dict(kernel="v3_nvfp4kv", fmt="nvfp4", version=3, default=True, config=[2, 1, 4], time_us=nvfp4_v3_us,
                 fraction_of_copy_bw=0.58, **base),
            dict(kernel="v2_nvfp4kv{2,3,1,3}", fmt="nvfp4", version=2, default=False, sweep=True, config=[2, 3, 1, 3],
                 time_us=110.0, fraction_of_copy_bw=0.65, **base)]
    return {"results": res}


def test_attention_sweep_sentences():
    out = findings.attention_sweep_sentences(_sweep([((2, 1, 4), 140.0, 0.93, True), ((4, 1, 3), 133.7, 0.97, False),
                                                     ((3, 0, 4), 176.5, 0.73, False)]))
    assert out[0] == ("Version 3 on an FP8 cache: the best copy-per-tile configuration (4, 1, 3) reads at 0.97 of copy "
                      "bandwidth, the best copy-per-row one (3, 0, 4) at 0.73 (1.32× the time): the copy loop costs "
                      "more than the bank conflicts it avoids.")
    assert out[1] == ("In this sweep at 32k the fastest FP8 configuration is (4, 1, 3), 1.047× as fast as the "
                      "default (2, 1, 4). A configuration becomes a default only once it has been measured at every "
                      "context the lab records, not at one; where the best one depends on the cache's size, the "
                      "default does too (the rule below).")
    assert out[2].startswith("On an NVFP4 cache the best version-3 configuration takes 1.13× the time of the best "
                             "version-2 one (2, 3, 1, 3) (0.58 against 0.65 of copy bandwidth): the copy engine does "
                             "not help there.")
    assert "updates the softmax once per 2 tile(s), which version 3 cannot." in out[2]
    assert out[2].endswith(f" The NVFP4 default is version {nv.DEFAULT_VERSION}.")
    # the default is the fastest, a copy per row beats a copy per tile, version 3 beats version 2 on NVFP4
    out = findings.attention_sweep_sentences(_sweep([((3, 0, 4), 100.0, 0.9, True), ((4, 1, 3), 111.4, 0.8, False)],
                                                    nvfp4_v3_us=100.0))
    assert out[0].endswith("(0.90× the time): here the padded rows pay for their copy loop.")
    assert out[1].startswith("In this sweep at 32k the default (3, 0, 4) is the fastest FP8 configuration. ")
    assert out[2] == ("On an NVFP4 cache the best version-3 configuration takes 0.91× the time of the best version-2 "
                      "one (2, 3, 1, 3) (0.58 against 0.65 of copy bandwidth). The NVFP4 default is version "
                      f"{nv.DEFAULT_VERSION}.")
    only_tile = findings.attention_sweep_sentences(_sweep([((2, 1, 4), 140.0, 0.93, True)]))
    assert len(only_tile) == 2 and only_tile[0].startswith("In this sweep")    # no copy-per-row row: no comparison
    assert findings.attention_sweep_sentences({"results": []}) == []


def test_v3_default_rule_line():
    text = findings.v3_default_rule_line()
    assert text.startswith("the rule: {")
    for k, v in att.V3_LONG_DEFAULTS.items():
        assert f"{k!r}: '{att.V3_DEFAULTS[k]} below {att.V3_LONG_ROWS} rows, {v} from there on'" in text


def test_default_rule_reading():
    base = dict(fmt="fp8cvt", version=3, valid=True, head_dim=128, layout="contiguous", context=16384)
    res = [dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 1, 4], time_us=69.0, **base),
           dict(kernel="v3_fp8kv[cvt]{2,2,3}", default=False, sweep=True, alt_default=True, config=[2, 2, 3],
                time_us=72.0, **base)]
    data = {"provenance": {"device": "H200"}, "results": res}
    assert findings.default_rule_reading(data) == findings.default_rule_sentence(ba.default_rule_rows(data), "H200")
    assert findings.default_rule_reading(data).startswith("On the H200")
    head = "This recording holds no timing of the rule's other choice: it timed one default at every context, "
    assert findings.default_rule_reading({"results": res[:1]}) == head + "the one this tree's rule picks."
    assert findings.default_rule_reading({"results": [_stale_record()]}) == head + (
        "the one launched when it was recorded (the note after the lab's target, above, says where that is not "
        "this tree's).")


def test_missed_goals_sentence():
    goals = ba.goals_table(_decode_records())
    assert findings.missed_goals_sentence(goals) == (
        "Missed: FP8 / torch SDPA (bf16, torch's pick) at 16k, 1.70 against 1.8; FP8 / torch SDPA (bf16, torch's "
        "pick) at 32k, 1.70 against 1.8; FP8 / torch SDPA (bf16, torch's pick) at 128k, 1.70 against 1.8.")
    assert findings.missed_goals_sentence([g for g in goals if g["goal"] != "fp8_vs_torch"]) is None
    assert findings.missed_goals_sentence(ba.goals_table({"results": []})) is None     # not measured is not missed


def _fixed_cost_records(fixed=10.0, torch_fixed=9.0, rate=4.0, torch_rate=4.5, saved=(1.5, 2.0, 3.5)):
    """Version 3 (merge inside the kernel) timed as fixed + MB / rate at three contexts beside torch's pick, its
    {reduce} row `saved` µs slower with quartiles apart, and a bf16 pair whose quartiles overlap."""
    recs = []
    for L, dt in zip(ba.CONTEXTS, saved):
        mb = L / 1000
        t, tt = fixed + mb / rate, torch_fixed + 2 * mb / torch_rate
        base = dict(layout="contiguous", head_dim=128, context=L, valid=True)
        recs += [dict(kernel="v3_fp8kv[cvt]", fmt="fp8cvt", version=3, default=True, merge="kernel", time_us=t,
                      bytes=mb * 1e6, fraction_of_copy_bw=0.5, spread_us={"q1": t - 0.1, "q3": t + 0.1}, **base),
                 dict(kernel="v3_fp8kv[cvt]{reduce}", fmt="fp8cvt", version=3, default=False, sweep=True,
                      merge="reduce", time_us=t + dt, spread_us={"q1": t + dt - 0.1, "q3": t + dt + 0.1}, **base),
                 dict(kernel="torch_sdpa[default=cudnn]", fmt="torch", time_us=tt, bytes=2 * mb * 1e6,
                      fraction_of_copy_bw=0.6, **base)]
    recs += [dict(kernel="v3_bf16kv", fmt="bf16", version=3, default=True, merge="kernel", time_us=250.0,
                  spread_us={"q1": 249.0, "q3": 251.0}, layout="contiguous", head_dim=128, context=32768),
             dict(kernel="v3_bf16kv{reduce}", fmt="bf16", version=3, default=False, sweep=True, merge="reduce",
                  time_us=250.5, spread_us={"q1": 250.0, "q3": 251.5}, layout="contiguous", head_dim=128,
                  context=32768)]
    return {"results": recs}


def test_attention_fixed_cost_sentence():
    text = findings.attention_fixed_cost_sentence(_fixed_cost_records())
    short = 10.0 + 16.384 / 4.0
    assert text.startswith("Our default FP8 kernel pays **10.0 µs** per call whatever the context and streams at "
                           "**4.00 TB/s**; torch's pick pays 9.0 µs and streams its bf16 cache at 4.50 TB/s. At 16k "
                           f"the fixed part is {10.0 / short:.0%} of our FP8 step; without it the kernel would read at "
                           f"{0.5 * short / (short - 10.0):.2f} of copy bandwidth there.")
    assert text.endswith("weighs twice as much in the ratio to torch, and a stream slower than torch's leaves less "
                         "than the factor of two that the bytes promise.")
    faster = findings.attention_fixed_cost_sentence(_fixed_cost_records(rate=5.0))
    assert faster.endswith("weighs twice as much in the ratio to torch.")
    no_torch = _fixed_cost_records()
    no_torch["results"] = [r for r in no_torch["results"] if r["fmt"] != "torch"]
    assert findings.attention_fixed_cost_sentence(no_torch) is None


def test_merge_in_kernel_sentence():
    text = findings.merge_in_kernel_sentence(_fixed_cost_records())
    assert text == ("Where the two rows' quartiles do not overlap, merging inside the kernel saves 1.5 to 3.5 µs per "
                    "call in this run (1 comparison(s) fall within the rounds' spread); the fixed part fitted above is "
                    "10.0 µs. With it, our fixed part is within 1.0 µs of torch's, so what separates the two at short "
                    "context is the stream rate (4.00 against 4.50 TB/s), not the per-call overhead.")
    same = findings.merge_in_kernel_sentence(_fixed_cost_records(torch_fixed=10.02))
    assert "With it, our fixed part equals torch's to 0.1 µs, so what separates" in same
    far = findings.merge_in_kernel_sentence(_fixed_cost_records(torch_fixed=5.0))
    assert far.endswith("the fixed part fitted above is 10.0 µs.")             # 5 µs apart: no comparison with torch
    slower = findings.merge_in_kernel_sentence(_fixed_cost_records(saved=(-0.5, -1.0, -2.0)))
    assert "merging inside the kernel changes the call time by +0.5 to +2.0 µs per call" in slower
    no_torch = _fixed_cost_records()
    no_torch["results"] = [r for r in no_torch["results"] if r["fmt"] != "torch"]
    assert findings.merge_in_kernel_sentence(no_torch).endswith("the fixed part fitted above is 10.0 µs.")
    no_spread = _fixed_cost_records()
    for r in no_spread["results"]:
        r.pop("spread_us", None)
    assert findings.merge_in_kernel_sentence(no_spread) is None                # nothing separated: no sentence
    assert findings.merge_in_kernel_sentence({"results": []}) is None


@pytest.mark.parametrize("fn", [findings.attention_context_bullets, findings.attention_version_sentences,
                                findings.attention_sweep_sentences, findings.default_rule_reading,
                                findings.attention_fixed_cost_sentence, findings.merge_in_kernel_sentence,
                                findings.attention_goal_line])
def test_every_reading_takes_an_empty_recording(fn):
    fn({"results": []})
