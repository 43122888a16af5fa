"""What every bad-input test of a lab command checks: stderr is one line `error: ...` (no traceback, no usage block)
holding each of `words`; with `no_stdout`, nothing was printed on stdout either. Returns that line."""


def one_line_error(capsys, *words, no_stdout: bool = False) -> str:
    cap = capsys.readouterr()
    err = cap.err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    if no_stdout:
        assert cap.out == "", cap.out
    for w in words:
        assert w in err, err
    return err.rstrip("\n")
