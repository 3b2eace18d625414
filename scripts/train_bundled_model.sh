#!/usr/bin/env bash
# Rebuild the bundled English model (models/tiny-en) from nothing, on the CPU:
# synthesise the data, train, export chunk 16 and 32 (int8), and compare it with the
# previous model on every held-out set through `streamasr bench`.
#
#   bash scripts/train_bundled_model.sh [TRAIN_MINUTES] [PREVIOUS_MODEL]
#
# Run it again after an interruption: finished data sets are kept (delete a folder to
# remake it) and training resumes from build/train-open/checkpoint.pt. Needs the Debian
# packages of scripts/test.sh and `pip install -e '.[train]'`.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-100}"
previous="${2:-}"

[ -f build/open/train/manifest.jsonl ] ||
    python scripts/make_open_data.py --out build/open --train 12000 --seed 0
[ -f build/open-numbers/train/manifest.jsonl ] ||
    python scripts/make_open_data.py --out build/open-numbers --train 3000 --per-test 0 \
        --neural 0 --random-share 1 --seed 1
[ -f build/open/test-neural/manifest.jsonl ] ||
    python scripts/neural_tts.py --list build/open/sentences-neural.txt --out build/open/test-neural

python scripts/train_tiny_model.py train --data build/open build/open-numbers \
    --exp-dir build/train-open --vocab bpe --bpe-size 256 --max-minutes "$minutes" --resume
python scripts/train_tiny_model.py export --exp-dir build/train-open --out build/model-open

sets=()
for name in heldout-debian heldout-espeak seen; do
    sets+=(--set "$name=build/open/test-$name/manifest.jsonl")
done
sets+=(--set "neural=build/open/test-neural/manifest.jsonl")
models=(--model build/model-open)
[ -n "$previous" ] && models=(--model "$previous" "${models[@]}")
python scripts/compare_models.py "${models[@]}" "${sets[@]}" --librivox --chunk 16 \
    --out build/compare
echo "new model in build/model-open; copy it over models/tiny-en once it wins every set"
