#!/usr/bin/env bash
# Runs on the device machine (H200), from the repository root, after scripts/device-build.sh here:
#   device tool: command "scripts/device-run.sh tests sanitize fuzz bench gemm", carry ["device-bin", ".whl"]
#   (the step, start and serve stages also need ".qwen3"; past the tool's 64 MiB carry limit,
#   carry ["device-pack.tgz"] from scripts/device-build.sh and prefix "tar xzf device-pack.tgz &&")
# (.whl holds FlashInfer's wheels for the attention anchor, from scripts/anchor-wheels.sh; without it
# the anchor times SDPA alone.)
# Stages (any subset, in this order):
#   tests     the GPU test binaries (every GPU path and op against the f64 oracle); TESTS names a
#             subset (e.g. "gpu_ops gpu_gemm"), default every one
#   sanitize  compute-sanitizer memcheck and racecheck on a few cases of each path
#   fuzz      asynct-verify fuzz with the GPU paths for FUZZ_MINUTES (default 2), seed FUZZ_SEED,
#             failing if a path ran fewer than FUZZ_MIN_CASES cases (default 0); each failure is
#             shrunk for up to FUZZ_SHRINK_SECONDS (default 60) and saved under $OUT/regressions
#   bench     the attention anchor (SDPA cuDNN and flash, FlashInfer's paged decode; graph-timed)
#             and asynct-bench in the same call, ratios printed last; with BENCH_PREFILL=1 also the
#             anchor's prefill points and asynct-bench --prefill --prefill-crossover
#             (bench-prefill.json/log)
#   gemm      asynct-bench --gemm: asynct-0.5b's GEMM shapes at M 1 to 128, every skinny instantiation,
#             cuBLASLt and cuBLASLt pinned as the LM head is, graph-timed in effective TB/s against
#             issue 9's goal (bench-gemm.json/log)
#   lengths   asynct-bench's decode points on batches of mixed lengths: for each profile of
#             LENGTHS (default "uniform spread one-long") the points LENGTHS_POINTS (default
#             "B128_L1024 B128_L4096", the profile's suffix added; any B{batch}_L{context}, on
#             the bench's grid or off it) through the plans whose name holds LENGTHS_PATH
#             (default sparse-g16-h2: the paired decode and split-K kernels), one line a plan in
#             bench-lengths.log and the JSON in bench-lengths.json
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
#             to bench-decode-VARIANT.json/log; lt-LIST (PDL on, every fusion) sets
#             ASYNCT_DECODE_CUBLASLT (the weights whose decode rows run cuBLASLt) to LIST with "."
#             for ",", "_split" for ":split" and "_at" for "@": lt-gate_up_at32.down_split is
#             gate_up@32,down:split
#   chunks    issue 18's prefill comparison on asynct-0.5b (generated into /tmp/m05; carry ".qwen3"):
#             the torch.compile prefill anchor (device-bin/torch_prefill_anchor.py, copied there by
#             scripts/device-build.sh from ../shared/anchors; CHUNK_ANCHOR=0 skips it), then `asynct
#             bench` of CHUNK_SCENARIOS (default prefill_heavy_b16) once per setting of
#             CHUNK_VARIANTS (default "fused unfused fused unfused"): fused sets
#             ASYNCT_CHUNK_FUSION=qkv,peri_ln,silu (the WGMMA GEMM's epilogues on sm_90), unfused
#             leaves the default (chunk rows through cuBLASLt and separate ops), old runs the
#             default on device-bin/asynct-old (an earlier build, from OLD_BIN in
#             scripts/device-build.sh); each to bench-chunks-VARIANT-N.json/log
#             and a line of prefill tok/s per run to chunks-summary.txt
#   prefill   where prefill_heavy_b16's full-budget prefill steps go (issue 18): ncu of its first
#             PREFILL_STEPS engine steps (default 4) on each binary of PREFILL_BINS (default
#             "asynct"; add asynct-old for before/after), through scripts/step_profile.py (each
#             kernel family's share, prefill-profile-BIN.txt/json); then, unless PREFILL_FULL=0,
#             ncu's full section set on one launch of the WGMMA prefill attention in the last
#             profiled step (ncu-prefill-attention.txt: throughput, pipes, scheduler, occupancy)
#   start     issue 16's fast start: `asynct serve` of asynct-0.5b (carry ".qwen3") timed from launch to
#             its first 200 on /health with an empty kernel cache (NVRTC compiles every kernel; the
#             log shows "compiling kernel N of M"), again with the cache that start filled (the goal:
#             within 3 s), and once more with --enforce-eager (no graph captures) to show their share;
#             seconds to start-times.txt with each start's phase breakdown (the server's `start:`
#             lines and the launch-to-main time), each start's log to start-LABEL.log
#   serve     issue 16's serving benchmark on asynct-0.5b: the same work (SERVE_PROMPTS requests,
#             default 256, of SERVE_INPUT prompt tokens, default 128, and SERVE_OUTPUT output tokens,
#             default 256, the same seeded ids) through `asynct bench` (engine only, all submitted at
#             once, serve-engine.json/log) and through `asynct serve` loaded by `asynct bench-serve`
#             at SERVE_CONCURRENCY streams (default 256; serve-http.json/log, the server's log in
#             serve-server.log, with the server's /metrics after the run appended); the HTTP output
#             throughput's ratio to the engine's goes to serve-ratio.txt (the goal: at least 0.9), with
#             what tells the losses apart: the engine's decode step beside the server's (its /metrics
#             step and between-step seconds), TPOT, the requests whose first token came over 0.5 s
#             late, net.core.somaxconn and the kernel's listen-queue overflows during the HTTP run
#   builds    the decode step of several builds in one call (scripts/device-build-refs.sh): for
#             each folder of BUILDS (default "device-bin"), in turn, BUILDS_PASSES times (default
#             2), `asynct bench --decode-batch STEP_BATCHES --context BUILDS_CONTEXT` (default 1024)
#             on asynct-0.5b (carry ".qwen3"); a line per run in builds-summary.txt and every run's
#             report in builds.json, each build's median ms per batch and pass in builds-table.txt
#             (three files, for the 8 a call brings back). An entry
#             FOLDER:VAR=VALUE[,VAR=VALUE] runs that folder's build with those variables set, named
#             FOLDER-VARVALUE (one binary measured with a setting on and off: ASYNCT_FOLD_O=0).
#             With ASYNCT_STEP_TRACE=1 among them the runs also print (and write into builds.json)
#             each launch's time on the step's path (gpu::runtime::step_trace); their logs stay in
#             /tmp/asynct-builds, so the command cats them into one file of $OUT
#   prefill-builds  the prefill attention of several builds in one call (issue 18): for each
#             folder of BUILDS (default "device-bin"), in turn, PREFILL_BUILDS_PASSES times (default
#             4), `asynct-bench --prefill --path PREFILL_BUILDS_PATH --trials 7` (default path
#             prefill-wgmma; PREFILL_BUILDS_POINT times one point, off the grid too: B256_T64), a
#             line of graph-timed us per point and run in prefill-builds-summary.txt; with
#             PREFILL_NCU_POINT set, then ncu --set full of one launch there per build, its time,
#             instructions and clock and scripts/ncu_regions.py's table (the warps' samples before,
#             in and after the main loop) in prefill-builds-ncu.txt
#   budget    issue 18's step-budget sweep on asynct-0.5b (generated into /tmp/m05 as the step stage
#             does; carry ".qwen3"): `asynct bench` of BUDGET_SCENARIOS (default "prefill_heavy_b16
#             balanced_b32 long_decode_b32") once per --max-num-batched-tokens in BUDGETS (default
#             "2304 4352 8448 16640", i.e. chunks x 512 + 256; "default" runs without the flag), each to
#             bench-budget-N.json/log, and a table of prefill tok/s, decode tok/s and the median decode
#             step per scenario per budget to budget-summary.txt. Aims at under 6 minutes.
#   trained   issue 17 on the shipped model trained/asynct-mini-shakespeare (tracked in git, its
#             held-out plays in its heldout.txt, so nothing more to carry): gpu_trained (perplexity
#             and greedy agreement up to near-ties against the CPU; gpu_trained.log), then
#             `asynct bench --decode-batch` at TRAINED_BATCHES (default 1,32,128), context
#             TRAINED_CONTEXT (default 960: the model holds 1024 positions), with seeded random ids
#             and with windows of the held-out text (--prompt-text), to
#             bench-trained-{random,text}.json/log; each part's seconds to trained-times.txt
#             (the stage aims at under 3 minutes)
# Logs and JSON go to $OUT (the device tool brings them back, at most 8 files a call: PACK_OUT=1
# packs everything under $OUT into $OUT/results.tgz at the end). REQUIRE_GPU=H200 runs nothing
# (and exits 0) unless the GPU's name holds it: the device tool may lend an H100 where an H200 was
# asked for, and issue 15's goals are H200 figures, so a call that only wants those costs its start.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/asynct-out}
mkdir -p "$OUT"
export ASYNCT_KERNEL_CACHE=/tmp/asynct-kernels
# BIN_DIR: the binaries' folder (default device-bin), e.g. a device-bin-NAME of
# scripts/device-build-refs.sh, run with OUT=$OUT/NAME so that builds do not overwrite each other.
B=${BIN_DIR:-device-bin}
status=0
# Waits until 127.0.0.1:$1 answers /health with 200 (true), or $2 seconds pass or process $3 ends
# (false), through bash's /dev/tcp (no curl needed).
wait_healthy() {
  local port=$1 limit=$2 pid=$3 start=$SECONDS line
  while (( SECONDS - start < limit )) && kill -0 "$pid" 2>/dev/null; do
    if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
      printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
      line=""; read -r -t 5 line <&3
      exec 3<&- 3>&-
      [[ $line == *" 200 "* ]] && return 0
    fi 2>/dev/null
    sleep 0.05
  done
  return 1
}
# Starts `asynct serve --model $M --port $2 ${@:3}` with its log in $OUT/$1.log and waits for it to
# be healthy; prints and records the seconds from launch. The server's pid is left in $served.
start_serve() {
  local label=$1 port=$2; shift 2
  local t0; t0=$(date +%s.%N)
  $B/asynct serve --model $M --port "$port" "$@" > "$OUT/$label.log" 2>&1 &
  served=$!
  if wait_healthy "$port" 600 $served; then
    echo "$label: healthy after $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s ($(grep -c 'compiling kernel' "$OUT/$label.log") kernels compiled)" \
      | tee -a "$OUT/start-times.txt"
    # The server's own breakdown (one `start: PHASE` line each, then the summary, which names the
    # Unix time main began: launch to main is the process's own start).
    grep '^start: ' "$OUT/$label.log" | sed "s/^/$label /" | tee -a "$OUT/start-times.txt"
    local main_at; main_at=$(grep -o 'began at unix [0-9.]*' "$OUT/$label.log" | awk '{ print $4 }')
    [ -n "$main_at" ] && echo "$label start: launch to main $(awk "BEGIN { printf \"%.3f\", $main_at - $t0 }") s" \
      | tee -a "$OUT/start-times.txt"
  else
    echo "$label: exited or not healthy within 600 s; the log's end:" | tee -a "$OUT/start-times.txt"; tail -n 20 "$OUT/$label.log"
    return 1
  fi
}
# Writes the body of GET $2 on 127.0.0.1:$1 to $3 (bash's /dev/tcp, no curl needed).
http_get() {
  if exec 3<>"/dev/tcp/127.0.0.1/$1"; then
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3
    timeout 10 cat <&3 | sed '1,/^\r$/d' > "$3"
    exec 3<&- 3>&-
  fi
}
# The kernel's listen-queue counters (SYNs dropped for a full backlog), or nothing without nstat.
listen_drops() { nstat -az TcpExtListenOverflows TcpExtListenDrops 2>/dev/null | awk '/^TcpExt/ { printf "%s=%s ", $1, $2 }'; }
# asynct-0.5b, generated into /tmp/m05 once per machine (its tokenizer from .qwen3, which the
# stage must carry), named by $M from then on; the init's output to $OUT/$1-init.log.
half_billion() {
  export ASYNCT_QWEN3_TOKENIZER_DIR=$PWD/.qwen3
  M=/tmp/m05
  [ -f $M/model.safetensors ] || $B/asynct init --preset asynct-0.5b --out $M > "$OUT/$1-init.log" 2>&1
}
# Stops the server start_serve left running (SIGTERM, then waits for it to drain and exit).
stop_serve() { kill -TERM "$served" 2>/dev/null; wait "$served"; }
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
echo "commit $(cat $B/COMMIT | tr '\n' ' ')| $device" | tee "$OUT/env.txt"
if [ -n "${REQUIRE_GPU:-}" ] && [[ ${device%%,*} != *"$REQUIRE_GPU"* ]]; then
  echo "REQUIRE_GPU=$REQUIRE_GPU: this device is not one; nothing run" | tee -a "$OUT/env.txt"
  exit 0
fi
for stage in "$@"; do
  case "$stage" in
    tests)
      tests=(); for t in ${TESTS:-}; do tests+=("$B/$t"); done
      [ ${#tests[@]} = 0 ] && tests=($B/gpu_*)
      for t in "${tests[@]}"; do
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
    lengths)
      jsons=()
      for l in ${LENGTHS:-uniform spread one-long}; do
        case "$l" in uniform) suffix="" ;; *) suffix="_$l" ;; esac
        for point in ${LENGTHS_POINTS:-B128_L1024 B128_L4096}; do
          $B/asynct-bench --lengths "$l" --point "$point$suffix" --path "${LENGTHS_PATH:-sparse-g16-h2}" \
            --out "$OUT/lengths-$point$suffix.json" 2>&1 | grep -E "^B[0-9]+_L" | tee -a "$OUT/bench-lengths.log" || status=1
          jsons+=("$OUT/lengths-$point$suffix.json")
        done
      done
      python3 -c 'import json, sys; json.dump([json.load(open(f)) for f in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)' \
        "$OUT/bench-lengths.json" "${jsons[@]}" && rm -f "${jsons[@]}" ;;
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
    builds)
      builds=${BUILDS:-device-bin}
      [ -x $B/asynct ] || { B=${builds%% *}; B=${B%%:*}; }  # the model's init needs some build's asynct
      half_billion builds
      runs=/tmp/asynct-builds; rm -rf $runs; mkdir -p $runs
      for pass in $(seq "${BUILDS_PASSES:-2}"); do
        for entry in $builds; do
          d=${entry%%:*} vars=()
          [[ $entry == *:* ]] && IFS=, read -ra vars <<< "${entry#*:}"
          n=${d#device-bin-}
          for v in "${vars[@]}"; do n+=-${v//[^A-Za-z0-9_]/}; done
          env "${vars[@]}" $d/asynct bench --model $M --decode-batch "${STEP_BATCHES:-1,32,128}" \
            --context "${BUILDS_CONTEXT:-1024}" --out "$runs/$n-$pass.json" > "$runs/$n-$pass.log" 2>&1 \
            || { status=1; tail -n 20 "$runs/$n-$pass.log"; }
          echo "$n ($(head -c 7 $d/COMMIT)) pass $pass: $(grep '^decode B' "$runs/$n-$pass.log" | tr '\n' ' ')" \
            | tee -a "$OUT/builds-summary.txt"
        done
      done
      python3 - "$runs" "$OUT/builds.json" <<'PY' 2>&1 | tee "$OUT/builds-table.txt" || status=1
import glob, json, os, sys
runs = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name, run = os.path.basename(path)[:-5].rsplit("-", 1)
    runs.setdefault(name, {})[run] = json.load(open(path))
json.dump(runs, open(sys.argv[2], "w"), indent=1)
# Each build's median step ms per batch, its passes side by side: the table RESULTS quotes.
for name, passes in runs.items():
    cells = {}
    for run in sorted(passes, key=int):
        for d in passes[run].get("decode", []):
            cells.setdefault(d["batch"], []).append(f"{d['step_ms']['median']:.3f}")
    print(f"{name:<32} " + "  ".join(f"B{b} {', '.join(v)}" for b, v in sorted(cells.items())))
PY
      ;;
    prefill-builds)
      path=${PREFILL_BUILDS_PATH:-prefill-wgmma}
      runs=/tmp/asynct-prefill-builds; rm -rf $runs; mkdir -p $runs
      for pass in $(seq "${PREFILL_BUILDS_PASSES:-4}"); do
        for d in ${BUILDS:-device-bin}; do
          log=$runs/${d#device-bin-}-$pass.log
          $d/asynct-bench --prefill --path "$path" --trials 7 ${PREFILL_BUILDS_POINT:+--point "$PREFILL_BUILDS_POINT"} \
            > "$log" 2>&1 || { status=1; tail -n 5 "$log"; }
          echo "${d#device-bin-} ($(head -c 7 $d/COMMIT)) pass $pass: $(awk '/^B[0-9]+_T[0-9]+ +prefill/ { printf "%s %s  ", $1, $5 }' "$log")" \
            | tee -a "$OUT/prefill-builds-summary.txt"
        done
      done
      if [ -n "${PREFILL_NCU_POINT:-}" ]; then
        for d in ${BUILDS:-device-bin}; do
          rep=$runs/ncu-${d#device-bin-}
          ncu --set full --import-source yes --kernel-name "regex:hp1_prefill_" --launch-skip 3 --launch-count 1 -f -o "$rep" \
            $d/asynct-bench --prefill --point "$PREFILL_NCU_POINT" --path "$path" --reps 1 --trials 1 --no-graph \
            > "$rep.log" 2>&1 || status=1
          ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>/dev/null
          { echo "== ${d#device-bin-} ($(head -c 7 $d/COMMIT)) at $PREFILL_NCU_POINT"
            ncu --import "$rep.ncu-rep" --page details | grep -E "Duration|Executed Instructions  |SM Frequency"
            python3 scripts/ncu_regions.py "$rep.csv"; } 2>&1 | tee -a "$OUT/prefill-builds-ncu.txt"
        done
      fi ;;
    budget)
      half_billion budget
      scenarios=(); for sc in ${BUDGET_SCENARIOS:-prefill_heavy_b16 balanced_b32 long_decode_b32}; do scenarios+=(--scenario "$sc"); done
      jsons=()
      for n in ${BUDGETS:-2304 4352 8448 16640}; do
        flag=(); [ "$n" = default ] || flag=(--max-num-batched-tokens "$n")
        t0=$SECONDS
        $B/asynct bench --model $M "${scenarios[@]}" "${flag[@]}" --out "$OUT/bench-budget-$n.json" \
          > "$OUT/bench-budget-$n.log" 2>&1 || { status=1; tail -n 20 "$OUT/bench-budget-$n.log"; }
        echo "budget $n: $((SECONDS - t0)) s"
        [ -f "$OUT/bench-budget-$n.json" ] && jsons+=("$OUT/bench-budget-$n.json")
      done
      python3 - "${jsons[@]}" <<'PY' 2>&1 | tee "$OUT/budget-summary.txt" || status=1
import json, sys
def num(x, fmt):
    return format(x, fmt) if x is not None else "-"
print(f"{'budget':>8} {'scenario':<18} {'prefill tok/s':>14} {'decode tok/s':>13} {'step med ms':>12} "
      f"{'steps p/m/d':>14} {'wall s':>8}")
for path in sys.argv[1:]:
    report = json.load(open(path))
    for s in report["scenarios"]:
        step = (s.get("decode_step_ms") or {}).get("median")
        k = s["steps"]
        print(f"{report['max_num_batched_tokens']:>8} {s['name']:<18} {s['prefill_tok_s']:>14.0f} "
              f"{num(s.get('decode_tok_s'), '.0f'):>13} {num(step, '.3f'):>12} "
              f"{k['prefill']:>4}/{k['mixed']}/{k['decode']:<5} {s['wall_s']:>8.2f}")
if len(sys.argv) > 1:
    print(f"device: {json.load(open(sys.argv[1]))['device']}")
PY
      ;;
    variants)
      half_billion variants
      for v in ${VARIANTS:-pdl1-fuse pdl0-fuse pdl1-nofuse pdl0-nofuse}; do
        pdl=1; [[ $v == pdl0* ]] && pdl=0
        fuse=(); [[ $v == *nofuse ]] && fuse=(ASYNCT_FUSION=none); [[ $v == *noqkv ]] && fuse=(ASYNCT_FUSION=peri_ln,silu)
        if [[ $v == lt-* ]]; then
          list=${v#lt-}; list=${list//./,}; list=${list//_split/:split}; fuse=(ASYNCT_DECODE_CUBLASLT=${list//_at/@})
        fi
        env ASYNCT_PDL=$pdl "${fuse[@]}" $B/asynct bench --model $M --decode-batch "${STEP_BATCHES:-1,32,128}" \
          --context 1024 --out "$OUT/bench-decode-$v.json" > "$OUT/bench-decode-$v.log" 2>&1 || status=1
        echo "== $v"; grep "^decode B" "$OUT/bench-decode-$v.log"
      done ;;
    chunks)
      half_billion chunks
      export PYTHONUNBUFFERED=1
      if [ "${CHUNK_ANCHOR:-1}" = 1 ] && [ -f $B/torch_prefill_anchor.py ]; then
        export TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor-prefill-anchor TRITON_CACHE_DIR=/tmp/triton-prefill-anchor
        OUT=$OUT python3 $B/torch_prefill_anchor.py default 2>&1 | tee "$OUT/torch-prefill-anchor.log" || status=1
      fi
      scenarios=(); for sc in ${CHUNK_SCENARIOS:-prefill_heavy_b16}; do scenarios+=(--scenario "$sc"); done
      i=0
      for v in ${CHUNK_VARIANTS:-fused unfused fused unfused}; do
        i=$((i + 1))
        fuse=(); [ "$v" = fused ] && fuse=(ASYNCT_CHUNK_FUSION=qkv,peri_ln,silu)
        bin=asynct; [ "$v" = old ] && bin=asynct-old
        env "${fuse[@]}" $B/$bin bench --model $M "${scenarios[@]}" --out "$OUT/bench-chunks-$v-$i.json" \
          > "$OUT/bench-chunks-$v-$i.log" 2>&1 || { status=1; tail -n 20 "$OUT/bench-chunks-$v-$i.log"; }
        python3 - "$OUT/bench-chunks-$v-$i.json" "$v" <<'PY' 2>&1 | tee -a "$OUT/chunks-summary.txt"
import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]:
    print(f"{sys.argv[2]:>8} {s['name']:<18} prefill {s['prefill_tok_s']:>10.0f} tok/s, wall {s['wall_s']:.2f} s")
PY
      done ;;
    prefill)
      half_billion prefill
      steps=${PREFILL_STEPS:-4}
      for bin in ${PREFILL_BINS:-asynct}; do
        # Only the scenario's first $steps engine steps run between cuProfilerStart and Stop
        # (--profile-steps); each kernel of a graph replay is its own result.
        ncu --csv --log-file "$OUT/ncu-prefill-$bin.csv" --profile-from-start off --graph-profiling node \
          --metrics gpu__time_duration.sum --print-units base --clock-control none --cache-control none \
          $B/$bin bench --model $M --scenario prefill_heavy_b16 --output-len 2 --profile-steps $steps \
          > "$OUT/ncu-prefill-$bin.log" 2>&1 || status=1
        python3 scripts/step_profile.py "$OUT/ncu-prefill-$bin.csv" --steps $steps \
          --json "$OUT/prefill-profile-$bin.json" 2>&1 | tee "$OUT/prefill-profile-$bin.txt" || status=1
      done
      if [ "${PREFILL_FULL:-1}" = 1 ]; then
        # One attention launch per layer and step: skip to the last step's first layer.
        layers=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' $M/config.json)
        ncu --set full --profile-from-start off --graph-profiling node --kernel-name regex:hp1_prefill_wgmma \
          --launch-skip $(( (steps - 1) * layers )) --launch-count 1 \
          $B/asynct bench --model $M --scenario prefill_heavy_b16 --output-len 2 --profile-steps $steps \
          2>&1 | grep -v "^==PROF==" > "$OUT/ncu-prefill-attention.txt" || status=1
        tail -n 60 "$OUT/ncu-prefill-attention.txt"
      fi ;;
    start)
      half_billion start
      # A cache of this stage's own, emptied, so the first start compiles every kernel.
      ASYNCT_KERNEL_CACHE=/tmp/asynct-kernels-start
      rm -rf "$ASYNCT_KERNEL_CACHE"
      for label in start-first start-second start-eager; do
        eager=(); [ $label = start-eager ] && eager=(--enforce-eager)
        if start_serve $label 8100 "${eager[@]}"; then stop_serve; else status=1; kill "$served" 2>/dev/null; fi
      done
      ls -la "$ASYNCT_KERNEL_CACHE" > "$OUT/start-cache.txt"
      ASYNCT_KERNEL_CACHE=/tmp/asynct-kernels ;;
    serve)
      half_billion serve
      n=${SERVE_PROMPTS:-256} c=${SERVE_CONCURRENCY:-256} in=${SERVE_INPUT:-128} gen=${SERVE_OUTPUT:-256}
      vocab=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" $M/config.json)
      # The engine alone: every request submitted at once, the same seeded ids bench-serve sends.
      $B/asynct bench --model $M --scenario decode_heavy_b32 --requests $n --prompt-len $in --output-len $gen \
        --max-num-seqs $c --out "$OUT/serve-engine.json" 2>&1 | tee "$OUT/serve-engine.log" || status=1
      rm -f /tmp/serve-metrics.txt
      { echo "somaxconn: $(cat /proc/sys/net/core/somaxconn 2>/dev/null)"; echo "listen drops before: $(listen_drops)"; } > /tmp/serve-net.txt
      if start_serve serve-server 8100 --max-num-seqs $c --max-connections $((c + 64)); then
        $B/asynct bench-serve --url http://127.0.0.1:8100 --vocab-size "$vocab" --num-prompts $n --max-concurrency $c \
          --input-len $in --output-len $gen --out "$OUT/serve-http.json" 2>&1 | tee "$OUT/serve-http.log" || status=1
        http_get 8100 /metrics /tmp/serve-metrics.txt
        stop_serve
        { echo "== /metrics after the run"; cat /tmp/serve-metrics.txt; } >> "$OUT/serve-server.log"
      else
        status=1; kill "$served" 2>/dev/null
      fi
      echo "listen drops after: $(listen_drops)" >> /tmp/serve-net.txt
      python3 - "$OUT/serve-engine.json" "$OUT/serve-http.json" /tmp/serve-metrics.txt /tmp/serve-net.txt <<'PY' 2>&1 | tee "$OUT/serve-ratio.txt" || status=1
import json, re, sys
engine = json.load(open(sys.argv[1]))["scenarios"][0]
http = json.load(open(sys.argv[2]))
try:
    metrics = open(sys.argv[3]).read()
except OSError:
    metrics = ""
def sample(name):
    m = re.search("^" + re.escape(name) + r" (\S+)$", metrics, re.M)
    return float(m.group(1)) if m else None
print(open(sys.argv[4]).read().strip())
steps = {k: sample(f'asynct_engine_steps_total{{kind="{k}"}}') for k in ("decode", "other")}
secs = {k: sample(f'asynct_engine_step_seconds_total{{kind="{k}"}}') for k in ("decode", "other")}
between = sample("asynct_engine_between_steps_seconds_total")
if steps["decode"]:
    all_steps = steps["decode"] + (steps["other"] or 0)
    print(f"decode step: engine {engine['decode_step_ms']['mean']:.3f} ms mean ({engine['steps']['decode']} steps); "
          f"server {secs['decode'] / steps['decode'] * 1e3:.3f} ms mean ({steps['decode']:.0f} steps, "
          f"{steps['other']:.0f} others); the server's own work between steps {between / all_steps * 1e3:.3f} ms per step")
else:
    print("decode step: the server's /metrics were not read")
requests = http["requests"]
late = sorted(r["ttft_ms"] for r in requests if (r.get("ttft_ms") or 0) > 500)
# A request whose text came only with its last token (held as a partial character) has a TTFT of about its end.
held = sum(1 for r in requests if r.get("ttft_ms") is not None and r["e2el_ms"] - r["ttft_ms"] < 2 * http["tpot_ms"]["median"])
print(f"ttft: median {http['ttft_ms']['median']:.1f} ms, p99 {http['ttft_ms']['p99']:.1f} ms; {len(late)} over 500 ms "
      f"({', '.join(f'{t:.0f}' for t in late[:12])}); {held} released no text before their end (their TTFT is "
      f"their end); tpot median {http['tpot_ms']['median']:.3f} ms")
engine_out = engine["generated_tokens"] / engine["wall_s"]
engine_total = (engine["prompt_tokens"] + engine["generated_tokens"]) / engine["wall_s"]
ratio = http["output_throughput"] / engine_out
print(f"engine: {engine_out:.0f} output tok/s, {engine_total:.0f} total tok/s over {engine['wall_s']:.2f} s")
print(f"http:   {http['output_throughput']:.0f} output tok/s, {http['total_token_throughput']:.0f} total tok/s over "
      f"{http['duration_s']:.2f} s; {http['completed']} completed, {http['failed']} failed")
print(f"ratio (http / engine output tok/s): {ratio:.3f} (goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'})")
sys.exit(0 if ratio >= 0.9 and http["failed"] == 0 else 1)
PY
      ;;
    trained)
      M=trained/asynct-mini-shakespeare
      part_start=$SECONDS
      $B/gpu_trained 2>&1 | tee "$OUT/gpu_trained.log" || status=1
      echo "trained: gpu_trained took $((SECONDS - part_start)) s" | tee -a "$OUT/trained-times.txt"
      for prompts in random text; do
        part_start=$SECONDS
        text=(); [ $prompts = text ] && text=(--prompt-text $M/heldout.txt)
        $B/asynct bench --model $M --decode-batch "${TRAINED_BATCHES:-1,32,128}" --context "${TRAINED_CONTEXT:-960}" \
          "${text[@]}" --out "$OUT/bench-trained-$prompts.json" 2>&1 | tee "$OUT/bench-trained-$prompts.log" || status=1
        echo "trained: the decode bench on $prompts prompts took $((SECONDS - part_start)) s" \
          | tee -a "$OUT/trained-times.txt"
      done ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
if [ -n "${PACK_OUT:-}" ]; then
  tar czf /tmp/asynct-results.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/asynct-results.tgz "$OUT/results.tgz"
fi
exit $status
