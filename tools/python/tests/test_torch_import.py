import subprocess
import sys


def test_import_without_torch():
    # fgds.torch, fgds.safetensors and fgds.lmcache must import without
    # importing torch (torch is imported lazily, on first use).
    code = (
        "import sys, fgds, fgds.torch, fgds.safetensors, fgds.lmcache;"
        "assert 'torch' not in sys.modules, 'torch imported';"
        "assert callable(fgds.torch.gds_register_buffer) and fgds.torch.GdsFile"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
