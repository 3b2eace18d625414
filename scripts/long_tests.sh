#!/usr/bin/env bash
# The long variants of tests that CI runs at a smaller size (docs/development.md, "Tests").
# Same assertions, bigger inputs: every committed random model regenerated, a 10-minute file
# streamed in constant memory.
# Usage: bash scripts/long_tests.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q -p no:randomly -n 0 --long \
    tests/test_models_reproducible.py \
    tests/test_cli_file.py::test_long_file_streams_in_constant_memory \
    "$@"
