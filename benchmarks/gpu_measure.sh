#!/usr/bin/env bash
# Measure a GPU in one command (issue "Measure a GPU"): calibrated profiles for llama-3-8b, llama-2-7b
# and llama-2-70b shapes (TP=1, per-layer timings) in bf16, the datasheet/imported/measured
# cross-check, and the fidelity validation with an 8B-shaped model in bf16 at 20-80% load.
# Every output goes to one folder:
#
#   bash benchmarks/gpu_measure.sh [OUT]        # OUT defaults to runs/gpu-<hostname>-<date>
#
# Needs: a CUDA build of torch already on the machine (this script never installs torch) and the
# pure-Python dependencies; on a machine without network, first run `pip download -d wheels .`
# where there is network and carry `wheels/`: the script installs from it with --no-index.
# Status: written and checked on a CPU machine only; no GPU was lent to the session that wrote it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu-$(hostname)-$(date +%Y%m%d)}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
exec > >(tee -a "$OUT/run.log") 2>&1

if [ -d wheels ]; then
  "$PY" -m pip install --quiet --no-index --find-links wheels -e . || exit 2
fi
"$PY" - <<'EOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("error: torch.cuda.is_available() is False: this script measures a GPU (use llmplan calibrate --device cpu on a CPU)")
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__, "cuda", torch.version.cuda)
EOF
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
start=$(date +%s)

for model in llama-3-8b llama-2-7b llama-2-70b; do
  "$PY" -m simulator.cli calibrate --device cuda --model "$model" --dtype bf16 --no-progress \
      --out "$OUT/profiles/$(hostname)-$model-bf16"
done
"$PY" -m simulator.cli profiles > "$OUT/profiles.txt"
for model in llama-3-8b llama-2-7b llama-2-70b; do
  "$PY" -m simulator.cli profiles show "$OUT/profiles/$(hostname)-$model-bf16" > "$OUT/profiles/$model-fit.txt"
done
"$PY" benchmarks/crosscheck_profiles.py > "$OUT/crosscheck.txt" || true
"$PY" -m simulator.cli validate --device cuda --model llama-3-8b --loads 0.2,0.4,0.6,0.8 \
    --dtype bf16 --profile "$OUT/profiles/$(hostname)-llama-3-8b-bf16" --repeats 3 --clock wall --out "$OUT/fidelity"
echo "device time: $(( $(date +%s) - start )) s" | tee "$OUT/device_time.txt"
