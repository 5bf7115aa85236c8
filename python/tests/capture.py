"""tests/capture.py: runs a module's main(argv) with stdout and stderr captured, for the CPU tests of the
`python -m flashtune.X` tools: returns (exit status, stdout text, stderr text)."""
import io
from contextlib import redirect_stderr, redirect_stdout


def run_main(main, argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()
