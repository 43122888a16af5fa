import pytest

from fp8lab.csvrows import read_rows, write_rows


def test_round_trip_header_and_atomic_write(tmp_path):
    p = write_rows([{"a": 1, "b": 2.5}, {"a": 3, "b": -1}], tmp_path / "sub" / "x.csv")
    assert read_rows(p) == [{"a": "1", "b": "2.5"}, {"a": "3", "b": "-1"}]
    assert not (tmp_path / "sub" / "x.csv.partial").exists()
    write_rows([{"a": 1, "z": 9}], p, fieldnames=["a"])         # extra keys ignored, given header kept
    assert p.read_text().splitlines() == ["a", "1"]


def test_missing_and_empty(tmp_path):
    assert read_rows(tmp_path / "none.csv") == []
    with pytest.raises(ValueError, match="no rows"):
        write_rows([], tmp_path / "e.csv")
    assert read_rows(write_rows([], tmp_path / "e.csv", fieldnames=["a"])) == []
