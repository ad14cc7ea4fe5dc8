"""Finds the sluice binary for the tests that run pipelines: $SLUICE_BIN,
else one built once per test run from this repository with `go build`."""

import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_built = None


def sluice_bin():
    global _built
    if os.environ.get("SLUICE_BIN"):
        return os.environ["SLUICE_BIN"]
    if _built is None:
        if shutil.which("go") is None or not os.path.exists(os.path.join(ROOT, "go.mod")):
            raise unittest.SkipTest("no $SLUICE_BIN and no go to build cmd/sluice with")
        d = tempfile.mkdtemp(prefix="sluice-pytest-")
        out = os.path.join(d, "sluice")
        subprocess.run(["go", "build", "-o", out, "./cmd/sluice"], cwd=ROOT, check=True)
        _built = out
    return _built
