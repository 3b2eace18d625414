"""A folder that Python's entry-point discovery reads as if the energy engine
(tests/energy_backend.py) were installed as the plugin `energy`: a dist-info with METADATA and
entry_points.txt, put on PYTHONPATH by the tests that start a CLI with it."""

from __future__ import annotations

from pathlib import Path


def energy_plugin_site(folder: Path) -> Path:
    """Write the plugin's dist-info into `folder` and return it."""
    info = folder / "streamasr_plugin_energy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: streamasr-plugin-energy\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[streamasr.backends]\nenergy = energy_backend:BACKEND\n", encoding="utf-8"
    )
    return folder
