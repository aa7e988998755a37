#!/usr/bin/env bash
# Runs on the device machine (H200), from the repository root, after scripts/device-build.sh here:
#   device tool: command "scripts/device-run.sh tests sanitize fuzz bench gemm", carry ["device-bin", ".whl"]
#   (the step stage also needs ".qwen3")
# (.whl holds FlashInfer's wheels for the attention anchor, from scripts/anchor-wheels.sh; without it
# the anchor times SDPA alone.)
# Stages (any subset, in this order):
#   tests     the GPU test binaries (every GPU path and op against the f64 oracle)
#   sanitize  compute-sanitizer memcheck and racecheck on a few cases of each path
#   fuzz      asynct-verify fuzz with the GPU paths for FUZZ_MINUTES (default 2), seed FUZZ_SEED,
#             failing if a path ran fewer than FUZZ_MIN_CASES cases (default 0); each failure is
#             shrunk for up to FUZZ_SHRINK_SECONDS (default 60) and saved under $OUT/regressions
#   bench     the attention anchor (SDPA cuDNN and flash, FlashInfer's paged decode; graph-timed)
#             and asynct-bench in the same call, ratios printed last; with BENCH_PREFILL=1 also the
#             anchor's prefill points and asynct-bench --prefill --prefill-crossover
#             (bench-prefill.json/log)
#   gemm      asynct-bench --gemm: asynct-0.5b's GEMM shapes at M 1 to 128, every skinny instantiation
#             and cuBLASLt, graph-timed in effective TB/s against issue 9's goal (bench-gemm.json/log)
#   ncu       Nsight Compute on one launch of each NCU_PATHS plan at NCU_POINT (default B128_L4096;
#             a prefill point such as B4_T4096 with NCU_PATHS=prefill-wgmma profiles the prefill)
#   step      issue 9's "How fast" on asynct-0.5b (generated into /tmp/m05; carry ".qwen3" for its
#             tokenizer): the PyTorch decode anchor (scripts/decode_anchor.py, variants
#             STEP_ANCHOR_VARIANTS, default compile-default at B1/B32/B128 and max-autotune at
#             B1/B32), `asynct bench --decode-batch 1,32,128` with whole-step graphs and with
#             --enforce-eager beside it, SPEC section 7's scenarios (STEP_SCENARIOS, default all),
#             and ncu of one B1 and one B32 decode step through scripts/step_profile.py (each kernel
#             family's share); STEP_PARTS picks among "anchor graph eager scenarios ncu" (default
#             all), STEP_BATCHES the decode batches (default 1,32,128), STEP_NCU_BATCHES the
#             profiled ones (default "1 32"). Seconds per part go to step-times.txt; the whole
#             stage aims at under 8 minutes. The anchor's and the graph run's JSON are also kept in
#             /tmp/asynct-step, where a later call on the same warm machine finds them
#   variants  the decode step (asynct-0.5b, graphs, STEP_BATCHES) once per setting of
#             VARIANTS (default "pdl1-fuse pdl0-fuse pdl1-nofuse pdl0-nofuse"): pdl0 sets
#             ASYNCT_PDL=0, nofuse ASYNCT_FUSION=none, noqkv ASYNCT_FUSION=peri_ln,silu, each
#             to bench-decode-VARIANT.json/log
# Logs and JSON go to $OUT (the device tool brings them back).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
export ASYNCT_KERNEL_CACHE=/tmp/asynct-kernels
B=device-bin
status=0
echo "commit $(cat $B/COMMIT | tr '\n' ' ')| $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee "$OUT/env.txt"
for stage in "$@"; do
  case "$stage" in
    tests)
      for t in $B/gpu_*; do
        "$t" 2>&1 | tee "$OUT/$(basename "$t").log" || status=1
      done ;;
    sanitize)
      for tool in memcheck racecheck; do
        for t in $B/gpu_*; do
          # gpu_attention's and gpu_prefill's full suites are long; their `sanitize` checks hold a
          # few cases of every path. The ops checks are small enough to run whole.
          filter=""
          case "$(basename "$t")" in gpu_attention|gpu_prefill) filter=sanitize ;; esac
          compute-sanitizer --tool "$tool" --error-exitcode 3 "$t" $filter 2>&1 \
            | tail -n 30 | tee "$OUT/sanitize-$tool-$(basename "$t").log" || status=1
        done
      done ;;
    fuzz)
      $B/asynct-verify fuzz --gpu --minutes "${FUZZ_MINUTES:-2}" --seed "${FUZZ_SEED:-1}" --out "$OUT/regressions" \
        --min-cases-per-path "${FUZZ_MIN_CASES:-0}" --shrink-seconds "${FUZZ_SHRINK_SECONDS:-60}" 2>&1 \
        | tee "$OUT/fuzz.log" || status=1 ;;
    bench)
      # The image lacks FlashInfer; its wheels travel in .whl. A failed install costs only the
      # anchor's FlashInfer column (it says so in anchor.log), never the SDPA one.
      if ls .whl/*.whl >/dev/null 2>&1 \
        && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        echo "anchor: FlashInfer wheels installed into /tmp/site: $(cd .whl && ls *.whl | tr '\n' ' ')" | tee "$OUT/anchor.log"
      else
        echo "anchor: FlashInfer wheels not installed (no .whl carried, or pip failed); SDPA only" | tee "$OUT/anchor.log"
      fi
      # FlashInfer (0.5.3 reads FLASHINFER_WORKSPACE_BASE) and tvm-ffi JIT-compile into these.
      export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer TVM_FFI_CACHE_DIR=/tmp/tvm-ffi PYTHONUNBUFFERED=1
      python3 scripts/attention_anchor.py "$OUT/anchor.json" ${BENCH_PREFILL:+--prefill} 2>&1 | tee -a "$OUT/anchor.log"
      $B/asynct-bench --anchor "$OUT/anchor.json" --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" || status=1
      if [ -n "${BENCH_PREFILL:-}" ]; then
        $B/asynct-bench --prefill --prefill-crossover --anchor "$OUT/anchor.json" --out "$OUT/bench-prefill.json" 2>&1 \
          | tee "$OUT/bench-prefill.log" || status=1
      fi ;;
    gemm)
      $B/asynct-bench --gemm --out "$OUT/bench-gemm.json" 2>&1 | tee "$OUT/bench-gemm.log" || status=1 ;;
    ncu)
      NCU_POINT=${NCU_POINT:-B128_L4096}
      for path in ${NCU_PATHS:-split-k-sparse-g8 decode-sparse-g8}; do
        case "$NCU_POINT" in *_T*) mode=--prefill ;; *) mode="" ;; esac
        ncu --clock-control none --kernel-name "regex:hp1_(decode|split|prefill)_" --launch-skip 3 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
          $B/asynct-bench $mode --point "$NCU_POINT" --path "$path" --reps 1 --trials 1 --no-graph 2>&1 \
          | grep -v "^==PROF==" > "$OUT/ncu-$path.txt" || status=1
        tail -n 80 "$OUT/ncu-$path.txt"
      done ;;
    step)
      export ASYNCT_QWEN3_TOKENIZER_DIR=$PWD/.qwen3 PYTHONUNBUFFERED=1
      export TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor-decode-anchor TRITON_CACHE_DIR=/tmp/triton-decode-anchor
      M=/tmp/m05
      # The anchor's and the graph run's JSON are kept here too, so that a later call on the same
      # (still warm) machine running only some parts finds them: each call gets a fresh $OUT.
      keep=/tmp/asynct-step
      mkdir -p $keep
      found() { for f in "$OUT/$1" "$keep/$1"; do [ -f "$f" ] && { echo "$f"; return; }; done; }
      stage_start=$SECONDS
      took() { echo "step: $1 took $((SECONDS - part_start)) s ($((SECONDS - stage_start)) s into the stage)" | tee -a "$OUT/step-times.txt"; }
      part_start=$SECONDS
      if [ ! -f $M/model.safetensors ]; then
        $B/asynct init --preset asynct-0.5b --out $M 2>&1 | tee "$OUT/step-init.log" || status=1
      fi
      took init
      parts=" ${STEP_PARTS:-anchor graph eager scenarios ncu} "
      anchor=()
      if [[ $parts == *" anchor "* ]]; then
        part_start=$SECONDS
        python3 scripts/decode_anchor.py "$OUT/decode-anchor.json" --config $M/config.json \
          --variants "${STEP_ANCHOR_VARIANTS:-compile-default,max-autotune@1/32}" 2>&1 \
          | tee "$OUT/decode-anchor.log" || status=1
        cp "$OUT/decode-anchor.json" $keep/ 2>/dev/null
        took anchor
      fi
      f=$(found decode-anchor.json); [ -n "$f" ] && anchor=(--anchor "$f")
      for mode in graph eager; do
        [[ $parts == *" $mode "* ]] || continue
        part_start=$SECONDS
        eager=(); [ $mode = eager ] && eager=(--enforce-eager)
        $B/asynct bench --model $M --decode-batch "${STEP_BATCHES:-1,32,128}" --context 1024 "${eager[@]}" "${anchor[@]}" \
          --out "$OUT/bench-decode-$mode.json" 2>&1 | tee "$OUT/bench-decode-$mode.log" || status=1
        cp "$OUT/bench-decode-$mode.json" $keep/ 2>/dev/null
        took "decode $mode"
      done
      if [[ $parts == *" scenarios "* ]]; then
        part_start=$SECONDS
        scenarios=(); for s in ${STEP_SCENARIOS:-all}; do scenarios+=(--scenario "$s"); done
        $B/asynct bench --model $M "${scenarios[@]}" --out "$OUT/bench-e2e.json" 2>&1 \
          | tee "$OUT/bench-e2e.log" || status=1
        took scenarios
      fi
      if [[ $parts == *" ncu "* ]]; then
        for b in ${STEP_NCU_BATCHES:-1 32}; do
          part_start=$SECONDS
          # Only the steps between cuProfilerStart and cuProfilerStop (--profile-steps) are
          # profiled; each kernel of a graph replay is its own result (--graph-profiling node).
          ncu --csv --log-file "$OUT/ncu-step-b$b.csv" --profile-from-start off --graph-profiling node \
            --metrics gpu__time_duration.sum --print-units base --clock-control none --cache-control none \
            $B/asynct bench --model $M --decode-batch $b --context 1024 --profile-steps 1 \
            > "$OUT/ncu-step-b$b.log" 2>&1 || status=1
          wall=(); f=$(found bench-decode-graph.json); [ -n "$f" ] && wall=(--bench "$f" --batch $b)
          python3 scripts/step_profile.py "$OUT/ncu-step-b$b.csv" --steps 1 "${wall[@]}" \
            --json "$OUT/step-profile-b$b.json" 2>&1 | tee "$OUT/step-profile-b$b.txt" || status=1
          took "ncu B$b"
        done
      fi ;;
    variants)
      export ASYNCT_QWEN3_TOKENIZER_DIR=$PWD/.qwen3
      M=/tmp/m05
      [ -f $M/model.safetensors ] || $B/asynct init --preset asynct-0.5b --out $M > "$OUT/variants-init.log" 2>&1
      for v in ${VARIANTS:-pdl1-fuse pdl0-fuse pdl1-nofuse pdl0-nofuse}; do
        pdl=1; [[ $v == pdl0* ]] && pdl=0
        fuse=(); [[ $v == *nofuse ]] && fuse=(ASYNCT_FUSION=none); [[ $v == *noqkv ]] && fuse=(ASYNCT_FUSION=peri_ln,silu)
        env ASYNCT_PDL=$pdl "${fuse[@]}" $B/asynct bench --model $M --decode-batch "${STEP_BATCHES:-1,32,128}" \
          --context 1024 --out "$OUT/bench-decode-$v.json" > "$OUT/bench-decode-$v.log" 2>&1 || status=1
        echo "== $v"; grep "^decode B" "$OUT/bench-decode-$v.log"
      done ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
