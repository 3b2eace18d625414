#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: install what is missing, run the NeMo backend
# on CUDA with the bundled tiny models (tokens must equal the CPU's at every look-ahead, CTC
# and RNNT), then a throughput run (streams x look-ahead: step time p50/p99, GPU memory per
# stream), written as JSON to build/gpu_check.json (or the path given as $1).
#
#   scripts/gpu_check.sh                  # on the GPU machine
#   DEVICE=cpu scripts/gpu_check.sh       # the same run on CPU (checks the script itself)
#
# Exit status: 0 when the device's tokens equal the CPU's everywhere, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build/gpu_check.json}"
PYTHON="${PYTHON:-python3}"

if [ -z "${DEVICE:-}" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        DEVICE=cuda
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    else
        echo "gpu_check: no NVIDIA GPU found (nvidia-smi); set DEVICE=cpu to run on CPU" >&2
        exit 1
    fi
fi

# torch: keep one that is there (a CUDA build on a GPU machine); else the project's pin
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q "torch==2.13.0"
fi
TORCH_VERSION="$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==$TORCH_VERSION" > "$CONSTRAINTS"
if ! "$PYTHON" -c "import nemo.collections.asr, soxr" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q -c "$CONSTRAINTS" "nemo_toolkit[asr]"
fi
if ! "$PYTHON" -c "import streamasr" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q -c "$CONSTRAINTS" -e .
fi
if [ "$DEVICE" != cpu ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else \
'torch ' + torch.__version__ + ' cannot use the GPU: install a CUDA build of torch')"
fi

"$PYTHON" scripts/nemo_throughput.py --device "$DEVICE" --out "$OUT" \
    ${STREAMS:+--streams "$STREAMS"} ${SECONDS_PER_STREAM:+--seconds "$SECONDS_PER_STREAM"}
echo "gpu_check: report in $OUT"
