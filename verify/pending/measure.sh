#!/usr/bin/env bash
# The device call that measures what waits here (issues 15 and 18), in order of what it settles
# (a call cut short still returns the summary written so far): session 52's two prefill patches
# on main as it is since the unit-form gate (run 280 measured them on its parent, where the
# first was 8% slower at B1_T16384), then main's decode step beside the torch.compile anchor and
# prefill_heavy_b16 on an H200 (issues 15 and 18 state their goals on the H200). Built here:
#   git branch -f exp-k-table main && git switch exp-k-table && git am verify/pending/exp-prefill-table-ahead.patch
#   git branch -f exp-k-both exp-k-table && git switch exp-k-both && git am verify/pending/exp-prefill-lookup-once.patch
#   git switch main
#   scripts/device-build-refs.sh a=exp-k-table:gpu_prefill b=exp-k-both:gpu_prefill t=main:gpu_prefill
# then the device tool: command "bash verify/pending/measure.sh", carry ["device-pack.tgz"].
# a - t is the table-ahead patch, b - a the lookup-once patch. Writes $OUT/summary.txt and
# $OUT/results.tgz. SKIP="tests grid ..." leaves out those stages (names below), for a call that
# finishes what an earlier one cut short.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
tar xzf device-pack.tgz
R=/tmp/pending-runs
rm -rf $R
mkdir -p $R
S=$OUT/summary.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $gpu" | tee $S
pack() { tar czf "$OUT/results.tgz" -C /tmp pending-runs 2>/dev/null; }
# Runs stage $1 unless SKIP names it, and notes its time in the summary.
stage() {
  local name=$1 t0=$SECONDS
  shift
  [[ " ${SKIP:-} " == *" $name "* ]] && return
  echo "== $name" >> $S
  "$@"
  echo "== $name: $((SECONDS - t0)) s" >> $S
  pack
}

tests() {
  for n in b t; do
    BIN_DIR=device-bin-$n OUT=$R/$n scripts/device-run.sh tests > $R/$n-tests.log 2>&1
    echo "$n tests rc=$?" >> $S
    grep -E "test result|passed|failed|FAIL|Error" $R/$n-tests.log | tail -12 >> $S
  done
}

all_builds="device-bin-a device-bin-b device-bin-t"
grid() {
  BUILDS=$all_builds PREFILL_BUILDS_PASSES=2 PREFILL_NCU_POINT=B16_T1024 OUT=$R/pb \
    scripts/device-run.sh prefill-builds > $R/pb.log 2>&1
  echo "prefill-builds rc=$?" >> $S
  cat $R/pb/prefill-builds-summary.txt $R/pb/prefill-builds-ncu.txt >> $S 2>/dev/null
  for n in a b t; do
    ncu --import /tmp/asynct-prefill-builds/ncu-$n.ncu-rep --page details > $R/ncu-$n-details.txt 2>&1
  done
}

points() {
  for p in B256_T64 B64_T256; do
    BUILDS=$all_builds PREFILL_BUILDS_PASSES=2 PREFILL_BUILDS_POINT=$p OUT=$R/pb-$p \
      scripts/device-run.sh prefill-builds > $R/pb-$p.log 2>&1
    cat $R/pb-$p/prefill-builds-summary.txt >> $S 2>/dev/null
  done
}

anchor() {
  python3 scripts/attention_anchor.py $R/anchor.json --prefill > $R/anchor.log 2>&1
  grep -iE "cudnn|B[0-9]+_T" $R/anchor.log | head -20 >> $S
}

sanitize() {
  for n in b; do
    BIN_DIR=device-bin-$n OUT=$R/${n}s scripts/device-run.sh sanitize > $R/$n-sanitize.log 2>&1
    echo "$n sanitize rc=$?" >> $S
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" $R/$n-sanitize.log | tail -10 >> $S
  done
}

step() {
  BIN_DIR=device-bin-t STEP_PARTS="anchor graph" OUT=$R/step scripts/device-run.sh step > $R/step.log 2>&1
  echo "step rc=$?" >> $S
  tail -25 $R/step.log >> $S
}

chunks() {
  for n in t; do
    BIN_DIR=device-bin-$n CHUNK_VARIANTS="unfused unfused" OUT=$R/chunks-$n scripts/device-run.sh chunks \
      > $R/chunks-$n.log 2>&1
    echo "prefill_heavy_b16 on $n:" >> $S
    cat $R/chunks-$n/chunks-summary.txt $R/chunks-$n/torch-prefill-anchor.log 2>/dev/null | tail -8 >> $S
  done
}

if [[ $gpu == *H200* ]]; then
  stage step step
fi
stage tests tests
stage grid grid
stage points points
stage anchor anchor
if [[ $gpu == *H200* ]]; then
  stage chunks chunks
fi
stage sanitize sanitize
