"""The one place that imports CrypTen.

CrypTen 0.4.1's package import always loads `crypten.nn`, whose ONNX converter imports
`torch.onnx._internal.registration`; torch 2.13 moved that module to
`torch.onnx._internal.torchscript_exporter.registration`. We alias the new module under
the old name in `sys.modules` before `import crypten` (the converter is never used).
Every CrypTen import in this project goes through `load_crypten()`.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

_OLD_NAME = "torch.onnx._internal.registration"
_NEW_NAME = "torch.onnx._internal.torchscript_exporter.registration"


def load_crypten() -> ModuleType:
    """Import and return the `crypten` module with the registration alias in place."""
    if "crypten" in sys.modules:
        return sys.modules["crypten"]
    if _OLD_NAME not in sys.modules:
        try:
            importlib.import_module(_OLD_NAME)
        except ImportError:
            sys.modules[_OLD_NAME] = importlib.import_module(_NEW_NAME)
    return importlib.import_module("crypten")
