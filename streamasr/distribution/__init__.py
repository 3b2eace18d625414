"""Model distribution: the released models, and getting them safely onto this machine.

    catalog.py       the one table of released models: names, URLs, checksums, engine data
    cache.py         where pulled models live, what counts as installed, one pull at a time
    install.py       `models pull`: download or take an archive, check it, install it atomically
    download.py      HTTP with resume, stall detection, size caps and a full-disk check
    extract.py       safe unpacking: plain files and folders only, nothing outside the target
    manifest.py      per-file checksums of an install; `models verify`; the check before use
    pins.py          trust on first use for archives whose checksum nobody publishes
    local_models.py  what a local model folder is (engine, kind, chunks), from its own files

Nothing here touches the terminal; the `models` command and the loaders call in.
"""
