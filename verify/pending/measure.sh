#!/usr/bin/env bash
# The device call that measures what waits here (issue 15), in order of what it settles (a call cut
# short still returns the summary written so far): how fast SMs take in bytes from L2 by how many
# read and how (`ingest`, scripts/probes/ingest.cu: seconds), the class forms' exchange of
# partials alone, through distributed shared memory against L2 (`exchange`,
# scripts/probes/exchange.cu: seconds),
# then builds beside main's (`ahead`: the step of the base and of each at 32, 64 and 128 rows, a
# traced pass that prints the step trace's marks inside the decode GEMMs, then their GPU checks),
# then main beside the anchors in the same call, which no call has taken on an H200 since run 246
# (issues 15 and 18 state their goals on the H200): the decode step beside torch.compile (`step`),
# prefill_heavy_b16 beside torch.compile (`chunks`), and the prefill attention's grid beside cuDNN
# (`grid`); then the decode GEMMs at 32 and 128 rows under ncu with W warm in L2 (`gemm_ncu`),
# compute-sanitizer on the builds' epilogues (`sanitize_new`), the whole GPU suite (`checks`), the
# hand-off probe and the fuzzer. Built here with `scripts/device-build.sh` (main alone; then SKIP
# names `ahead` and `sanitize_new`), or with builds beside it as verify/pending/README.md says
# (`scripts/device-build-refs.sh base=main:gpu_ops NAME=BRANCH:gpu_gemm,gpu_model,gpu_engine`), then
# the device tool: command "bash verify/pending/measure.sh", carry ["device-pack.tgz"]. Writes
# $OUT/summary.txt and $OUT/results.tgz. SKIP="step ..." leaves out those stages (names below); on
# an H200, H200_SKIP replaces it. MAIN names the build the other stages run (device-bin-$MAIN,
# default main; MAIN=base with device-build-refs.sh's pack; device-build.sh's pack holds device-bin
# itself); BASE the builds' base (default base); AHEAD_BUILDS the builds beside it (device-bin-NAME
# each; default the two verify/pending/README.md names, wg17 and slab), AHEAD_BATCHES the
# batches the ahead stage steps (default 32,64,128). `ahead` takes about 6 minutes for three
# builds (run 319: 426 s), `step` 5 (run 325: 281 s), `grid` 1, `gemm_ncu` about
# 1, `sanitize_new` up to 7 a build: past one call's 10 minutes together, so a second call on the
# same warm machine takes the rest (SKIP naming the stages done).
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
AHEAD_BUILDS=${AHEAD_BUILDS:-wg17 slab}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $gpu" | tee $S
# H200_SKIP replaces SKIP on an H200, which calls rarely get: its figures for issues 15 and 18
# (step, chunks, grid) come before whatever else the call was for.
[[ $gpu == *H200* && -n ${H200_SKIP:-} ]] && SKIP=$H200_SKIP && echo "on an H200: SKIP=$SKIP" >> $S
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

ahead() {
  # The builds AHEAD_BUILDS names beside their base (verify/pending/README.md: session 64's
  # warpgroup form for gate/up from 17 rows, and the plain form's grid slab-major). The step
  # first: it answers whether a patch is worth its checks. AHEAD_PASSES and AHEAD_TESTS (default 3; gpu_gemm
  # gpu_engine gpu_model) trim it for a short call.
  # The traced pass (before the checks, for a call cut short) prints the decode GEMMs' marks
  # (step_trace_mark, first read in runs 319-320).
  local base=device-bin-${BASE:-base} b builds=() traced=()
  for b in $AHEAD_BUILDS; do builds+=(device-bin-$b); traced+=(device-bin-$b:ASYNCT_STEP_TRACE=1); done
  # 150 s a build, the base's included.
  BUILDS="$base ${builds[*]}" BUILDS_PASSES=${AHEAD_PASSES:-3} STEP_BATCHES=${AHEAD_BATCHES:-32,64,128} OUT=$R/ahead \
    timeout $((150 * (1 + ${#builds[@]}))) scripts/device-run.sh builds > $R/ahead.log 2>&1
  echo "ahead rc=$?" >> $S
  cat $R/ahead/builds-table.txt >> $S 2>/dev/null
  # Each build compiles every kernel again with the trace on: 150 s a build (run 319 ran out at 150
  # for three).
  # TRACE_BASE=0 leaves the base out of it, for a short call whose base's marks an earlier run has;
  # TRACED=0 leaves the traced pass out.
  [ "${TRACE_BASE:-1}" = 0 ] || traced=("$base:ASYNCT_STEP_TRACE=1" "${traced[@]}")
  if [ "${TRACED:-1}" != 0 ]; then
    BUILDS="${traced[*]}" BUILDS_PASSES=1 STEP_BATCHES=32,128 OUT=$R/traced \
      timeout $((150 * ${#traced[@]})) scripts/device-run.sh builds > $R/traced.log 2>&1
    cp -r /tmp/asynct-builds $R/traced-runs
    for f in $R/traced-runs/*.log; do
      echo "== $f"
      grep -E "^step trace B|^    [a-z_]+\.cu |marks after release|last mark by" $f
    done >> $S
  fi
  pack
  local t
  for t in ${AHEAD_TESTS:-gpu_gemm gpu_engine gpu_model}; do
    for b in $AHEAD_BUILDS; do
      timeout 240 device-bin-$b/$t > $R/$b-$t.log 2>&1
      echo "$b/$t rc=$?" >> $S
      grep -E "passed|FAIL" $R/$b-$t.log | tail -3 >> $S
    done
  done
}

sanitize_new() {
  # compute-sanitizer on the patches' epilogues and sends (every form's periln, silu_mul and q/k
  # checks) in each build AHEAD_BUILDS names.
  local b tool
  for b in $AHEAD_BUILDS; do
    for tool in memcheck racecheck; do
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 device-bin-$b/gpu_gemm epilogue \
        > $R/$b-$tool-epilogue.log 2>&1
      echo "$b/gpu_gemm epilogue $tool rc=$?" >> $S
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/$b-$tool-epilogue.log | tail -1 >> $S
    done
  done
}

checks() {
  OUT=$R/tests scripts/device-run.sh tests > $R/tests.log 2>&1
  echo "tests rc=$?" >> $S
  grep -E "^test .*(FAIL|failed)|passed, .* failed" $R/tests.log >> $S
}

gemm_ncu() {
  # Run 315's lead: past one row the four decode GEMMs are 2.9x (B32) and 4.6x (B128) their
  # bytes' floor, and chains of latencies under ncu. Each point's plan in the step at that batch
  # alone (Store, the fourth eager launch), `--set full` with the SASS, W left in L2 by the
  # launches before (as a step's prefetch leaves it) and the clocks free, then
  # scripts/ncu_regions.py's table of the warps' samples before, in and after the main loop and
  # the hottest instructions. (The bench's own dispatcher flag names cuBLASLt past 64 rows, run
  # 316, so the paths are named here.)
  for spec in o_proj_M128=skinny-classes-wg-m128-r64 down_M128=skinny-classes-wg-m128-r64 \
    qkv_M128=skinny-m64-r16 gate_up_M128=skinny-wide-m128-r64 o_proj_M32=skinny-classes-m32-r64; do
    local point=${spec%%=*} plan=${spec#*=}
    local rep=$R/ncu-$point
    timeout 120 ncu --set full --import-source yes --cache-control none --clock-control none \
      -k regex:"gemm" --launch-skip 3 --launch-count 1 -f \
      -o $rep device-bin/asynct-bench --gemm --point $point --path "$plan" --no-graph --reps 1 --trials 1 \
      > $rep.log 2>&1
    ncu --import $rep.ncu-rep --page source --csv --print-source sass > $rep.csv 2>/dev/null
    { echo "== $point: $plan"
      ncu --import $rep.ncu-rep --page details \
        | grep -E "Duration|DRAM Thr|L2 Cache Thr|Compute \(SM\) Thr|Issued Warp|Achieved Occ|Registers Per"
      python3 scripts/ncu_regions.py $rep.csv --hot 16; } >> $R/gemm-ncu.txt 2>&1
  done
  cat $R/gemm-ncu.txt >> $S
}

# Builds scripts/probes/$1.cu with nvcc and runs it for at most $2 seconds, into the summary.
run_probe() {
  nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/$1 scripts/probes/$1.cu > $R/$1-build.log 2>&1 \
    && timeout $2 /tmp/$1 > $R/$1.txt 2>&1
  echo "$1 rc=$?" >> $S
  cat $R/$1.txt >> $S 2>/dev/null || tail -5 $R/$1-build.log >> $S
}

exchange() { run_probe exchange 90; }

ingest() { run_probe ingest 120; }

probe() { run_probe handoff 60; }

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

stage ingest
stage exchange
stage ahead
stage step
stage chunks
stage grid
stage gemm_ncu
stage sanitize_new
stage checks
stage probe
stage fuzz
