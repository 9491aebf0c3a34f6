#!/usr/bin/env bash
# Debian packages kvselect needs beyond Python: fonts for CJK names in PDFs, Poppler's pdfsig
# (signature cross-check), Pango for WeasyPrint, Chromium for the browser tests, Prometheus's promtool
# (the exported alerting rules are checked with `promtool check rules`; Debian ships it in `prometheus`),
# PostgreSQL and Redis binaries for the reliability suite's private servers (tests/reliability/services.py),
# a C compiler (with Python's headers) for the harness's compiled reader (benchmarks/harness/framereader.c),
# and CMake with a C++ compiler for llama.cpp's llama-server, which the real-engine tests build
# (scripts/build-llama-server.sh) where no cached binary is found.
# SoftHSM2 is the PKCS#11 token the signing tests (and an owner trying kvselect-sign) use.
set -euo pipefail
need=()
python=${PYTHON:-python3}
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -n "$include" ] && [ ! -f "$include/Python.h" ] && need+=(python3-dev)
for pkg in gcc g++ cmake libc6-dev fonts-noto-cjk poppler-utils libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 chromium chromium-driver gettext softhsm2 \
  prometheus postgresql redis-server; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
  echo "kvselect: please install these Debian packages: ${need[*]}" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "kvselect: installing ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
