#!/usr/bin/env bash
# The device half of `npm run gpu:check`: run at the repository root of the device machine's copy
# of the working tree, with .gpu-pack carried (scripts/gpu_check/pack.mjs made it here):
#   bash scripts/gpu_check/run.sh
# 1. unpacks .gpu-pack/tprpc.tar.gz (dist/sdk, the addon, pruned node_modules) outside the tree;
# 2. uses the machine's node when it is >= 20.19, else the packed one (.gpu-pack/node.gz);
# 3. records the device (nvidia-smi), runs PyTorch's reference (torch_ref.py: parity values,
#    benchmark, GPT step; torch_rpc_ref.py: the CUDA-RPC recipe), then tprpc's sections (main.mjs),
#    each bounded by a timeout;
# 4. leaves report.md, report.json, torch_ref.json and run.log in $OUT (./.gpu-out without $OUT).
# Exit status: main.mjs's (1 when a section failed, 3 when tprpc sees no CUDA device), 2 when the
# pack is missing. A dry run on a machine without a GPU (exit 3, every section "not available"):
#   OUT=/tmp/gpu-check-out bash scripts/gpu_check/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/.gpu-out}"
mkdir -p "$OUT"
PACK=.gpu-pack
WORK="${TMPDIR:-/tmp}/tprpc-gpu-check"
log() { echo "[gpu:check] $*" | tee -a "$OUT/run.log"; }

if [ ! -f "$PACK/tprpc.tar.gz" ]; then
  log "no $PACK/tprpc.tar.gz: run 'npm run gpu:check' on the build machine first and carry .gpu-pack"
  exit 2
fi
rm -rf "$WORK" && mkdir -p "$WORK"
tar -xzf "$PACK/tprpc.tar.gz" -C "$WORK"

NODE=""
if command -v node >/dev/null 2>&1 &&
  node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  NODE="$(command -v node)"
else
  gunzip -c "$PACK/node.gz" >"$WORK/node" && chmod +x "$WORK/node" && NODE="$WORK/node"
fi
log "node: $NODE $("$NODE" --version 2>&1)"

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/run.log"
else
  log "nvidia-smi: not found (no CUDA device here)"
fi

# TPRPC_GPU_CHECK_SECTIONS (e.g. "device,channels"): run only those sections, and only the PyTorch
# reference they compare against. A full run may not fit one 10-minute device call: split it.
SECTIONS="${TPRPC_GPU_CHECK_SECTIONS:-}"
want() { [ -z "$SECTIONS" ] || [[ ",$SECTIONS," == *",$1,"* ]]; }
if command -v python3 >/dev/null 2>&1; then
  if want parity || want bench || want gpt; then
    timeout 200 python3 scripts/gpu_check/torch_ref.py "$OUT/torch_ref.json" >>"$OUT/run.log" 2>&1
    log "PyTorch reference: exit $?"
  fi
  if want channels; then
    timeout 120 python3 scripts/gpu_check/torch_rpc_ref.py "$OUT/torch_ref.json" >>"$OUT/run.log" 2>&1
    log "PyTorch's CUDA-RPC recipe: exit $?"
  fi
else
  log "python3: not found; sections run without PyTorch's numbers"
fi

# "ops" (only when named): the GPT step's op families timed by tprpc and by PyTorch, side by side
# (probe.mjs ops, torch_ops.py), to find the kernels that make the step GPU-bound.
if [[ ",$SECTIONS," == *",ops,"* ]]; then
  timeout 90 python3 scripts/gpu_check/torch_ops.py "$OUT/torch_ops.json" >>"$OUT/run.log" 2>&1
  log "PyTorch's ops: exit $?"
  timeout 120 "$NODE" --expose-gc scripts/gpu_check/probe.mjs "$WORK" "$OUT" ops >>"$OUT/run.log" 2>&1
  log "tprpc's ops (probe-ops.json): exit $?"
fi

timeout 330 "$NODE" --expose-gc scripts/gpu_check/main.mjs "$WORK" "$OUT/torch_ref.json" "$OUT" $SECTIONS 2>&1 | tee -a "$OUT/run.log"
rc=${PIPESTATUS[0]}
log "tprpc sections: exit $rc (report in $OUT/report.md)"
exit "$rc"
