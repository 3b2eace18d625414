"""The package's version, written once: a module with no imports, so anything (the
download client's User-Agent, reports, `--version`) can read it without importing the
package's lazy library face and the engine seam behind it."""

__version__ = "0.1.0"
