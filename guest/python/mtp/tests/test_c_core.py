"""The object table's own C test, compiled with the system compiler."""

import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "..", "csrc")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_objtable_randomised(tmp_path):
    exe = tmp_path / "objtable_test"
    subprocess.run(["cc", "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-o", str(exe),
                    os.path.join(HERE, "c", "objtable_test.c"),
                    os.path.join(CSRC, "objtable.c"), os.path.join(CSRC, "metamem.c")],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "objtable: ok" in out.stdout
