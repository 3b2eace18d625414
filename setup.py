"""Packaging hook: the wheel carries the bundled demo model (models/tiny-en), nothing else.

Why: an installed streamasr must transcribe out of the box, like a clone does; the models/
folder sits beside the package in the repository, so the build copies the demo model's
runtime files into the package as `streamasr/bundled_models/tiny-en`. Test-only models
(models/tiny-random-*, the NeMo fixtures) stay out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DEMO_MODEL = "tiny-en"
# what the engine and the quick start use; the training record (loss.csv, comparisons) stays
RUNTIME_GLOBS = ("*.onnx", "tokens.txt", "bpe.model", "bpe.vocab", "README.md",
                 "test_wavs/*.wav", "test_wavs/trans.txt")


class BuildWithDemoModel(build_py):
    """build_py, plus the demo model's files copied into the built package."""

    def run(self) -> None:
        super().run()
        source = ROOT / "models" / DEMO_MODEL
        target = Path(self.build_lib) / "streamasr" / "bundled_models" / DEMO_MODEL
        for pattern in RUNTIME_GLOBS:
            for path in sorted(source.glob(pattern)):
                dest = target / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)


setup(cmdclass={"build_py": BuildWithDemoModel})
