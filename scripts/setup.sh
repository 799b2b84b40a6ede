#!/usr/bin/env bash
# Prepares a fresh Debian machine (or re-checks a prepared one) for tprpc: the Debian packages the
# PyTorch parity fixtures, the benchmark reference and the native addon need, the npm devDependencies,
# and the builds (native addon, TypeScript).
# Idempotent: every step is skipped when already done. Run from anywhere: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "[setup] $*"; }

# 1. Debian packages. NB: python3-torch is Debian's torch for /usr/bin/python3, which
#    `npm run fixtures` and `npm run bench` use (a pyenv python3 on PATH may lack torch).
#    NB: without libopenblas0-pthread, Debian's torch does its matmuls with the reference BLAS
#    (libblas3, ~7 GFLOP/s instead of ~150 per core), which would make the bench's torch column a straw man.
#    NB: libopenblas-pthread-dev holds the static OpenBLAS (DYNAMIC_ARCH) that native/binding.gyp links
#    into the addon; it must be there before `npm ci`, whose install script compiles the addon.
#    libucx0 (~1 MB) lets the UCX channel, and the dlopen test of capabilities(), find libucp.so.0.
#    python3-jupyter-server runs the notebooks headless (npm run notebooks: `python3 -m jupyter_server`, as Debian
#    ships no jupyter-server command); jupyter-client and jupyter-core give `jupyter kernelspec list`.
#    iperf3 and iproute2 (`ip`) let test/channel/tcp_veth.test.ts compare the tcp channel with iperf3 across a
#    veth pair between two network namespaces. tcpdump captures the bridge of test/multihost (simulated hosts:
#    namespaces on a bridge, checking that TLS leaves no plain tensor byte on the wire).
#    jupyter-notebook (Debian's classic Notebook server, which also brings nbconvert) and chromium run the browser
#    test (npm run test:browser: notebooks live in a real browser, and exported to HTML); fonts-dejavu-core is the
#    font of the charts' PNG renderings (kernel-ext/png.ts) and of Chromium's pages.
APT_PACKAGES=(python3-torch python3-numpy libopenblas0-pthread libopenblas-pthread-dev libucx0 python3-jupyter-server jupyter-client jupyter-core iperf3 iproute2 tcpdump jupyter-notebook chromium fonts-dejavu-core)
# The addon's compiler toolchain (node-gyp needs python3, make and a C++17 compiler).
command -v g++ >/dev/null 2>&1 || APT_PACKAGES+=(g++)
command -v make >/dev/null 2>&1 || APT_PACKAGES+=(make)
command -v python3 >/dev/null 2>&1 || APT_PACKAGES+=(python3)
missing=()
if command -v dpkg >/dev/null 2>&1; then
  for p in "${APT_PACKAGES[@]}"; do
    status=$(dpkg -s "$p" 2>/dev/null | sed -n 's/^Status: //p' || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
  done
else
  log "dpkg not found (not Debian?): skipping apt; install ${APT_PACKAGES[*]} (or torch + numpy for /usr/bin/python3) yourself"
fi

if ((${#missing[@]} == 0)); then
  command -v dpkg >/dev/null 2>&1 && log "Debian packages present: ${APT_PACKAGES[*]}"
else
  if [[ $(id -u) -eq 0 ]]; then SUDO=(); elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n); else SUDO=(none); fi
  if [[ "${SUDO[*]-}" == none ]]; then
    log "WARNING: missing ${missing[*]} and not root (no passwordless sudo): skipping apt."
    log "         npm run fixtures / the torch column of npm run bench need them:"
    log "         sudo apt-get install -y ${missing[*]}"
  else
    log "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# 2. npm packages, from the lockfile. NB: npm writes node_modules/.package-lock.json on every
#    install, so a lockfile newer than it means the tree is stale. npm ci also runs our install
#    script, which compiles the addon; TPRPC_NATIVE_STRICT=1 makes a failed compile fail setup
#    (for users it only warns and tprpc falls back to its TypeScript backend).
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  log "npm ci"
  TPRPC_NATIVE_STRICT=1 npm ci --no-audit --no-fund
else
  log "node_modules up to date with package-lock.json"
fi

# NB: tslab's TypeScript 5.0 fork (@tslab/typescript-for-tslab) also installs a `tsc` bin, and npm may link
#     node_modules/.bin/tsc to it; the project's scripts call typescript's own tsc by path, and this keeps `npx tsc` right.
if [[ -e node_modules/typescript/bin/tsc && "$(readlink node_modules/.bin/tsc 2>/dev/null)" != "../typescript/bin/tsc" ]]; then
  ln -sf ../typescript/bin/tsc node_modules/.bin/tsc
  ln -sf ../typescript/bin/tsserver node_modules/.bin/tsserver
fi

# 3. Build: the addon (incremental: make recompiles only what changed since the last build) and tsc -> dist/.
log "npm run build:native"
npm run build:native --silent
log "npm run build"
npm run build --silent
log "done"
