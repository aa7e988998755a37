#!/usr/bin/env bash
# The device call that measures what waits here (issues 15 and 18), in order of what it settles
# (a call cut short still returns the summary written so far): first the patches of session 58
# (`patches`: their GPU checks, then the decode step of main, with EARLY K on and off, and of
# each patch, in one call), then the twin engines' probe (`twins`), then main with every kernel
# at one carveout (`carveout`), then the whole GPU suite, then main beside the anchors in the same call, which no call has taken on an
# H200 since run 246 (issues 15 and 18 state their goals on the H200): the decode step beside
# torch.compile, prefill_heavy_b16 beside torch.compile, and the prefill attention's grid beside
# cuDNN; then the hand-off probe and the fuzzer. On an H200 SKIP="probe fuzz".
# Built here: `git am verify/pending/early-keys-one-head.patch` on a branch exp-h1 and `git am
# verify/pending/qkv-rope-early.patch` on a branch exp-rope (each from main), then
# `scripts/device-build-refs.sh main=main h1=exp-h1:gpu_attention
# rope=exp-rope:gpu_gemm,gpu_model,gpu_engine` (device-bin-NAME and device-pack.tgz; without
# patches waiting, `scripts/device-build.sh` and SKIP=patches), then the device tool: command
# "bash verify/pending/measure.sh", carry ["device-pack.tgz"]. Writes $OUT/summary.txt and
# $OUT/results.tgz. SKIP="step ..." leaves out those stages (names below); the stages after
# `patches` run device-bin-$MAIN's binaries (MAIN default main; device-bin's where
# `scripts/device-build.sh` built them).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
tar xzf device-pack.tgz
[ -d device-bin ] || ln -s "device-bin-${MAIN:-main}" device-bin
MAIN_BIN=${MAIN:-main}
R=/tmp/pending-runs
rm -rf $R
mkdir -p $R
S=$OUT/summary.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $gpu" | tee $S
pack() { tar czf "$OUT/results.tgz" -C /tmp pending-runs 2>/dev/null; }
# Runs the stage (a function below) named $1 unless SKIP names it, and notes its time.
stage() {
  local name=$1 t0=$SECONDS
  [[ " ${SKIP:-} " == *" $name "* ]] && return
  echo "== $name" >> $S
  "$name"
  echo "== $name: $((SECONDS - t0)) s" >> $S
  pack
}

patches() {
  # Session 58's two patches: gpu_attention on early-keys-one-head (h1), gpu_gemm, gpu_model and
  # gpu_engine on qkv-rope-early (rope), then the step of main (EARLY K on and off) and of each
  # patch at B1 (rope's target; h1 level) and B8 (h1's target).
  timeout 300 device-bin-h1/gpu_attention > $R/attn-h1.log 2>&1
  echo "h1/gpu_attention rc=$?" >> $S
  grep -E "passed, |OlderKeys" $R/attn-h1.log | cut -c1-300 | head -3 >> $S
  for t in rope/gpu_gemm rope/gpu_model rope/gpu_engine; do
    timeout 240 device-bin-$t > $R/${t/\//-}.log 2>&1
    echo "$t rc=$?" >> $S
    grep -E "passed|FAIL" $R/${t/\//-}.log | tail -3 >> $S
  done
  BUILDS="device-bin-main device-bin-main:ASYNCT_EARLY_KEYS=0 device-bin-h1 device-bin-rope" \
    STEP_BATCHES=1,8 OUT=$R/patches timeout 330 scripts/device-run.sh builds > $R/patches.log 2>&1
  echo "patches rc=$?" >> $S
  cat $R/patches/builds-table.txt >> $S 2>/dev/null
}

twins() {
  # Session 59's probe (issue 15): each batch's step beside two engines of half the batch, each
  # on a stream of its own, stepped in turn (`asynct bench --decode-twins`): what a step whose
  # halves overlap (one half's attention beside the other's GEMMs) could take at best. Uses the
  # model the `patches` stage generated, or generates it.
  export ASYNCT_QWEN3_TOKENIZER_DIR=$PWD/.qwen3
  M=/tmp/m05
  [ -f $M/model.safetensors ] || device-bin-$MAIN_BIN/asynct init --preset asynct-0.5b --out $M > $R/init.log 2>&1
  timeout 400 device-bin-$MAIN_BIN/asynct bench --model $M --decode-batch 32,64,96,128 --decode-twins \
    --out $R/twins.json > $R/twins.log 2>&1
  echo "twins rc=$?" >> $S
  grep -E "^decode (B|twins)" $R/twins.log | cut -c1-150 >> $S
  tail -3 $R/twins.log >> $S
}

carveout() {
  # Session 58's open question (RESULTS run 307's reading): does the driver's shared-memory split
  # per kernel cost the launches' overlap? The step with every kernel at the largest carveout
  # (ASYNCT_CARVEOUT=100) beside the driver's choice, one binary.
  BUILDS="device-bin device-bin:ASYNCT_CARVEOUT=100" STEP_BATCHES=1,32,128 \
    OUT=$R/carveout timeout 300 scripts/device-run.sh builds > $R/carveout.log 2>&1
  echo "carveout rc=$?" >> $S
  cat $R/carveout/builds-table.txt >> $S 2>/dev/null
}

checks() {
  OUT=$R/tests scripts/device-run.sh tests > $R/tests.log 2>&1
  echo "tests rc=$?" >> $S
  grep -E "^test .*(FAIL|failed)|passed, .* failed" $R/tests.log >> $S
}

probe() {
  nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/handoff scripts/probes/handoff.cu > $R/handoff-build.log 2>&1 \
    && timeout 60 /tmp/handoff > $R/handoff.txt 2>&1
  echo "probe rc=$?" >> $S
  cat $R/handoff.txt >> $S 2>/dev/null || tail -5 $R/handoff-build.log >> $S
}

fuzz() {
  FUZZ_MINUTES=2 OUT=$R/fuzz scripts/device-run.sh fuzz > $R/fuzz.log 2>&1
  echo "fuzz rc=$?" >> $S
  tail -6 $R/fuzz.log >> $S
}

step() {
  STEP_PARTS="anchor graph" STEP_ANCHOR_VARIANTS=compile-default OUT=$R/step \
    scripts/device-run.sh step > $R/step.log 2>&1
  echo "step rc=$?" >> $S
  tail -25 $R/step.log >> $S
}

chunks() {
  CHUNK_VARIANTS="unfused unfused" OUT=$R/chunks scripts/device-run.sh chunks > $R/chunks.log 2>&1
  echo "chunks rc=$?" >> $S
  cat $R/chunks/chunks-summary.txt >> $S 2>/dev/null
  tail -8 $R/chunks/torch-prefill-anchor.log >> $S 2>/dev/null
}

grid() {
  for p in "" B256_T64 B64_T256; do
    BUILDS=device-bin PREFILL_BUILDS_PASSES=2 PREFILL_BUILDS_POINT=$p OUT=$R/pb-$p \
      scripts/device-run.sh prefill-builds > $R/pb-$p.log 2>&1
    cat $R/pb-$p/prefill-builds-summary.txt >> $S 2>/dev/null
  done
  python3 scripts/attention_anchor.py $R/anchor.json --prefill > $R/anchor.log 2>&1
  grep -iE "cudnn|B[0-9]+_T" $R/anchor.log | head -20 >> $S
}

stage patches
stage twins
stage carveout
stage checks
stage step
stage chunks
stage grid
stage probe
stage fuzz
