"""What every fp8lab command line does with bad input: one line on stderr, exit status 2, no traceback.

    ap = OneLineParser(prog="python -m fp8lab.audit", description="...")
    args = ap.parse_args(argv)        # bad flags -> UsageError("argument --batch: invalid int value: 'x'")
    emit(text)                        # never UnicodeEncodeError (names with lone surrogates, odd locales)
    split_list("a,b", "--configs")    # -> ['a', 'b']; an empty value or item -> UsageError

Why a helper: argparse prints a usage block and `error:` on two lines and calls `sys.exit`, which an
in-process caller (a test, a notebook) must catch; and `print` raises `UnicodeEncodeError` when a tensor name
or a file name holds a lone surrogate and stdout is UTF-8. Both are expected input, so both become one line.
"""
from __future__ import annotations

import argparse
import sys


class UsageError(ValueError):
    """A bad command line: reported as `error: <message>` and exit status 2. The one class every lab command raises
    (fp8lab.results, kv_bits and kv_drift re-export it)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting; --help still prints and exits 0."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see {self.prog} --help)")


def split_list(text, option: str) -> list[str]:
    """A comma-separated option value as its stripped items; UsageError for an empty value or an empty item (a
    doubled or trailing comma is a typo, not "skip this one").

    split_list("e4m3, e5m2", "--formats") -> ['e4m3', 'e5m2']
    split_list("a,,b", "--configs")       -> UsageError: --configs 'a,,b' has an empty item"""
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise UsageError(f"{option} is empty: give one or more comma-separated values")
    if not all(items):
        raise UsageError(f"{option} {text!r} has an empty item (a doubled or trailing comma)")
    return items


def safe_text(text: str, encoding: str | None = None) -> str:
    """`text` with whatever the stream cannot encode written as backslash escapes ('a\\udcff.safetensors')."""
    enc = encoding or "utf-8"
    try:
        return text.encode(enc, "backslashreplace").decode(enc)
    except LookupError:  # an unknown encoding name: fall back to ASCII escapes
        return text.encode("ascii", "backslashreplace").decode("ascii")


def emit(text: str, stream=None) -> None:
    """Print `text` (plus a newline) on `stream` (stdout), escaping what its encoding cannot hold."""
    stream = sys.stdout if stream is None else stream
    stream.write(safe_text(text, getattr(stream, "encoding", None)) + "\n")


def fail(message: str) -> int:
    """`error: message` on stderr as one line (newlines folded); returns the exit status 2."""
    emit("error: " + " ".join(str(message).split()), sys.stderr)
    return 2


def parse(parser: argparse.ArgumentParser, argv):
    """(args, None) or (None, exit status): --help/--version give 0, a bad command line 2 (one line on stderr)."""
    try:
        return parser.parse_args(argv), None
    except UsageError as e:
        return None, fail(str(e))
    except SystemExit as e:  # --help / --version: argparse already printed
        return None, e.code if isinstance(e.code, int) else 0


def run(main) -> None:
    """The `if __name__ == "__main__"` of a lab CLI: exit with main()'s status. A reader that closes the pipe
    early (`| head`) ends the output quietly; Ctrl-C ends it with one line."""
    import os
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout again at exit: let that go nowhere
        status = 1
    except KeyboardInterrupt:
        emit("interrupted", sys.stderr)
        status = 130
    sys.exit(status)
