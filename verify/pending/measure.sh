#!/usr/bin/env bash
# The device call that measures what waits here (issues 15 and 18), in order of what it settles
# (a call cut short still returns the summary written so far): the whole GPU suite (`checks`),
# then main beside the anchors in the same call, which no call has taken on an H200 since run
# 246 (issues 15 and 18 state their goals on the H200): the decode step beside torch.compile
# (`step`), prefill_heavy_b16 beside torch.compile (`chunks`), and the prefill attention's grid
# beside cuDNN (`grid`); then the hand-off probe and the fuzzer. On an H200 SKIP="probe fuzz".
# Built here: `scripts/device-build.sh` (device-bin and device-pack.tgz), then the device tool:
# command "bash verify/pending/measure.sh", carry ["device-pack.tgz"]. Writes $OUT/summary.txt
# and $OUT/results.tgz. SKIP="step ..." leaves out those stages (names below). A pack of
# several builds from `scripts/device-build-refs.sh` works too: MAIN names the one the stages
# run (device-bin-$MAIN, default main).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
tar xzf device-pack.tgz
[ -d device-bin ] || ln -s "device-bin-${MAIN:-main}" device-bin
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

stage checks
stage step
stage chunks
stage grid
stage probe
stage fuzz
