#!/usr/bin/env bash
# Measure a GPU in one command: measured kernel profiles for llama-3-8b, llama-2-7b and llama-2-70b
# shapes (TP=1, per-layer timings) in bf16, float8 GEMMs (torch._scaled_mm) where the GPU runs
# them, and the fidelity validation (simulator vs the torch reference engine) with an 8B-shaped
# model in bf16 at 20-80% load. Every output goes to one folder:
#
#   bash benchmarks/gpu_measure.sh OUT [STAGE ...]
#
# Stages, in this order by default (name some to run only those):
#   env                 nvidia-smi, torch/CUDA/driver versions -> OUT/env.txt
#   tests               pytest -m gpu (the CUDA tests CI cannot run)
#   cal-<model>         bf16 calibration        -> OUT/profiles/<gpu>-<model>-bf16/
#   val-llama-3-8b      llmplan validate --device cuda (needs cal-llama-3-8b) -> OUT/fidelity-llama-3-8b/
#   fp8-<model>         fp8 GEMM calibration    -> OUT/profiles/<gpu>-<model>-fp8/
# Models: llama-3-8b, llama-2-7b, llama-2-70b (any preset works: tiny-llama for a dry run).
#
# Dry run on a CPU first (GPU time is scarce): DEVICE=cpu CAL_ARGS="--quick --max-tokens 64" \
#   VAL_ARGS="--num-requests 20 --repeats 1" bash benchmarks/gpu_measure.sh /tmp/dry cal-tiny-llama val-tiny-llama
# (CAL_ARGS and VAL_ARGS are appended to every calibrate / validate command.)
#
# BUDGET_S (default 3000): no stage starts after this many seconds and the running one is cut at
# that point (a cut calibration resumes from OUT on the next run with the same OUT). Each stage's
# wall time goes to OUT/stage_times.txt.
#
# Needs a CUDA build of torch already on the machine (this script never installs torch) and the
# pure-Python dependencies. On a machine without network, carry wheels in WHEELS (default .whl:
# `pip download --no-deps --only-binary=:all: -d .whl simpy pydantic pydantic-core annotated-types
# typing-inspection typing-extensions` for the machine's Python); they are installed into a private
# folder put on PYTHONPATH, nothing else is touched.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: bash benchmarks/gpu_measure.sh OUT [STAGE ...]}"
shift
MODELS=(llama-3-8b llama-2-7b llama-2-70b)
if [ $# -gt 0 ]; then STAGES=("$@"); else
  STAGES=(env tests cal-llama-3-8b val-llama-3-8b cal-llama-2-7b cal-llama-2-70b fp8-llama-3-8b fp8-llama-2-70b)
fi
BUDGET_S="${BUDGET_S:-3000}"
PY="${PYTHON:-python3}"
WHEELS="${WHEELS:-.whl}"
DEVICE="${DEVICE:-cuda}"
read -r -a CAL_EXTRA <<< "${CAL_ARGS:-}"
read -r -a VAL_EXTRA <<< "${VAL_ARGS:-}"
mkdir -p "$OUT/profiles"
exec > >(tee -a "$OUT/run.log") 2>&1
t_start=$(date +%s)

if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  site="$(mktemp -d)/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$WHEELS"/*.whl \
    || { echo "error: installing the wheels in $WHEELS failed"; exit 2; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
DEVICE="$DEVICE" "$PY" - <<'EOF' || exit 2
import os, sys
try:
    import torch
except ImportError:
    sys.exit("error: torch is not installed; this script measures a GPU with a CUDA build of torch")
if os.environ["DEVICE"] == "cuda" and not torch.cuda.is_available():
    sys.exit("error: torch.cuda.is_available() is False: this script measures a GPU "
             "(use llmplan calibrate --device cpu on a CPU)")
import simpy, pydantic, pandas, yaml, typer, rich  # noqa: F401  (fail here, not mid-run)
print("device:", torch.cuda.get_device_name(0) if os.environ["DEVICE"] == "cuda" else "cpu",
      "| torch", torch.__version__, "| cuda", torch.version.cuda)
EOF
if [ "$DEVICE" = cuda ]; then
  GPU=$("$PY" -c "import re, torch; n = torch.cuda.get_device_name(0).lower().replace('nvidia', ''); print(re.sub('[^a-z0-9]+', '-', n).strip('-'))")
else GPU=cpu; fi

left() { echo $(( BUDGET_S - ($(date +%s) - t_start) )); }
run_stage() {   # run_stage NAME CMD...: cut at the budget; record the stage's wall time and status
  local name=$1; shift
  local budget; budget=$(left)
  if [ "$budget" -le 5 ]; then echo "== $name: skipped (budget spent)"; echo "$name skipped" >> "$OUT/stage_times.txt"; return; fi
  echo "== $name ($(date -u +%H:%M:%S), ${budget} s of budget left)"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=20 "$budget" "$@"
  local rc=$?
  echo "$name rc=$rc wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/stage_times.txt"
}

for stage in "${STAGES[@]}"; do
  case "$stage" in
    env)
      { date -u; nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE;
        "$PY" -c "import torch, platform; p = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else 'no CUDA device'; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'python', platform.python_version()); print(p)";
        "$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|numpy|pandas|scipy|simpy|pydantic|triton) '; } > "$OUT/env.txt" 2>&1
      echo "env -> $OUT/env.txt ($GPU)";;
    tests)
      run_stage tests "$PY" -m pytest -q -s -m gpu -p no:cacheprovider tests/test_calibrate.py tests/test_engine.py;;
    cal-*)
      model=${stage#cal-}
      run_stage "$stage" "$PY" -m simulator.cli calibrate --device "$DEVICE" --model "$model" --dtype bf16 --no-progress "${CAL_EXTRA[@]}" \
          --name "$GPU-$model-bf16" --out "$OUT/profiles/$GPU-$model-bf16"
      [ -f "$OUT/profiles/$GPU-$model-bf16/profile.yaml" ] && \
        "$PY" -m simulator.cli profiles show "$OUT/profiles/$GPU-$model-bf16" > "$OUT/profiles/$GPU-$model-bf16/fit.txt" 2>&1;;
    fp8-*)
      model=${stage#fp8-}
      run_stage "$stage" "$PY" -m simulator.cli calibrate --device "$DEVICE" --model "$model" --dtype fp8 --no-progress "${CAL_EXTRA[@]}" \
          --name "$GPU-$model-fp8" --out "$OUT/profiles/$GPU-$model-fp8";;
    val-*)
      model=${stage#val-}
      prof="$OUT/profiles/$GPU-$model-bf16"
      if [ ! -f "$prof/profile.yaml" ]; then echo "== $stage: skipped ($prof has no profile.yaml)"; continue; fi
      run_stage "$stage" "$PY" -m simulator.cli validate --device "$DEVICE" --model "$model" --dtype bf16 \
          --loads 0.2,0.4,0.6,0.8 --profile "$prof" --repeats 3 --clock wall "${VAL_EXTRA[@]}" --out "$OUT/fidelity-$model";;
    *) echo "error: unknown stage $stage (env, tests, cal-MODEL, val-MODEL, fp8-MODEL; models: ${MODELS[*]})"; exit 2;;
  esac
done
echo "device time (this run): $(( $(date +%s) - t_start )) s" | tee -a "$OUT/stage_times.txt"
