#!/usr/bin/env bash
# The device call that measures what waits here (issues 15 and 18), in order of what it settles
# (a call cut short still returns the summary written so far): session 59's patches (`patches`:
# their GPU checks and racecheck on the sampler's, then the decode step of main and of each
# patch, with a traced pass each), then the whole GPU suite (`checks`),
# then main beside the anchors in the same call, which no call has taken on an H200 since run
# 246 (issues 15 and 18 state their goals on the H200): the decode step beside torch.compile
# (`step`), prefill_heavy_b16 beside torch.compile (`chunks`), and the prefill attention's grid
# beside cuDNN (`grid`); then the decode GEMMs at 32 and 128 rows under ncu (`gemm_ncu`, run
# 315's lead), the hand-off probe and the fuzzer. On an H200 SKIP="probe fuzz".
# Built here: `git am verify/pending/embed-norm.patch` on a branch exp-en from main and `git am
# verify/pending/sampler-push.patch` on a branch exp-sp from main, then
# `scripts/device-build-refs.sh main=main en=exp-en:gpu_ops,gpu_model,gpu_engine
# sp=exp-sp:gpu_ops,gpu_sampling,gpu_engine` (past the 64 MiB a call carries, main=main:gpu_ops
# and SKIP=checks; without patches, `scripts/device-build.sh` and SKIP=patches), then the device
# tool: command "bash verify/pending/measure.sh", carry ["device-pack.tgz"]. Writes $OUT/summary.txt
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

patches() {
  # Session 59's embed-norm (the gather and layer 0's input norm in one launch) and sampler-push
  # (the sampler's row cluster gathers by pushes to CTA 0's mbarrier).
  for t in en/gpu_ops en/gpu_model en/gpu_engine sp/gpu_ops sp/gpu_sampling sp/gpu_engine; do
    timeout 240 device-bin-$t > $R/${t/\//-}.log 2>&1
    echo "$t rc=$?" >> $S
    grep -E "passed|FAIL" $R/${t/\//-}.log | tail -3 >> $S
  done
  for f in argmax sampler_draws; do
    timeout 240 compute-sanitizer --tool racecheck --error-exitcode 3 device-bin-sp/gpu_ops $f \
      > $R/sp-racecheck-$f.log 2>&1
    echo "sp/gpu_ops $f racecheck rc=$?" >> $S
    grep -E "ERROR SUMMARY|hazard" $R/sp-racecheck-$f.log | tail -2 >> $S
  done
  BUILDS="device-bin-main device-bin-en device-bin-sp" STEP_BATCHES=1,32,128 OUT=$R/patches \
    timeout 300 scripts/device-run.sh builds > $R/patches.log 2>&1
  echo "patches rc=$?" >> $S
  cat $R/patches/builds-table.txt >> $S 2>/dev/null
  BUILDS="device-bin-main:ASYNCT_STEP_TRACE=1 device-bin-en:ASYNCT_STEP_TRACE=1 device-bin-sp:ASYNCT_STEP_TRACE=1" \
    BUILDS_PASSES=1 STEP_BATCHES=1,128 OUT=$R/traced timeout 200 scripts/device-run.sh builds > $R/traced.log 2>&1
  cp -r /tmp/asynct-builds $R/traced-runs
  for f in $R/traced-runs/*.log; do
    echo "== $f"
    grep -E "^step trace B|^ +[0-3] [a-z_]+\.cu|sampling\.cu" $f
  done >> $S
}

checks() {
  OUT=$R/tests scripts/device-run.sh tests > $R/tests.log 2>&1
  echo "tests rc=$?" >> $S
  grep -E "^test .*(FAIL|failed)|passed, .* failed" $R/tests.log >> $S
}

gemm_ncu() {
  # Run 315's lead: past one row the four decode GEMMs are 2.9x (B32) and 4.6x (B128) their
  # bytes' floor, and chains of latencies under ncu. Each point's default plan alone (Store, the
  # fourth eager launch), `--set full` with the SASS, then scripts/ncu_regions.py's table of the
  # warps' samples before, in and after the main loop and the hottest instructions.
  for point in o_proj_M128 down_M128 qkv_M128 gate_up_M128 o_proj_M32 gate_up_M32; do
    local rep=$R/ncu-$point
    device-bin/asynct-bench --gemm --point $point --no-graph --reps 1 --trials 1 --out $rep.json > $rep-list.log 2>&1
    local plan
    plan=$(python3 - $rep.json <<'PY'
import json, sys
points = json.load(open(sys.argv[1]))["gemm"]
print(next(t["name"] for p in points for t in p["paths"] if t["dispatcher"]))
PY
)
    timeout 120 ncu --set full --import-source yes -k regex:"gemm|nvjet|sm90" --launch-skip 3 --launch-count 1 -f \
      -o $rep device-bin/asynct-bench --gemm --point $point --path "$plan" --no-graph --reps 1 --trials 1 \
      > $rep.log 2>&1
    ncu --import $rep.ncu-rep --page source --csv --print-source sass > $rep.csv 2>/dev/null
    { echo "== $point: $plan"
      ncu --import $rep.ncu-rep --page details \
        | grep -E "Duration|DRAM Thr|L2 Cache Thr|Compute \(SM\) Thr|Issued Warp|Achieved Occ|Registers Per"
      python3 scripts/ncu_regions.py $rep.csv --hot 12; } >> $R/gemm-ncu.txt 2>&1
  done
  cat $R/gemm-ncu.txt >> $S
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
stage checks
stage step
stage chunks
stage grid
stage gemm_ncu
stage probe
stage fuzz
