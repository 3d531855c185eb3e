"""`import hwtune` and a selection must not import torch, flashinfer or triton, nor initialise CUDA."""

import subprocess
import sys

CODE = """
import sys
import hwtune
sel = hwtune.select_attention(hwtune.AttentionSpec(32, 8, 128), device="h100", assume_installed=True)
assert sel.backend == "FLASH_ATTN", sel.backend
sel = hwtune.select_all2all(hwtune.All2AllSpec(8, 256, 8, 7168), device="b200", assume_installed=True)
heavy = sorted(m for m in ("torch", "flashinfer", "triton", "numpy") if m in sys.modules)
print(",".join(heavy))
"""


def test_import_and_select_stay_light() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def test_cli_module_stays_light() -> None:
    code = (
        "import sys, hwtune.cli.main; print(','.join(m for m in ('torch','flashinfer','triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
