#!/usr/bin/env bash
# Vendor the front-end libraries from the npm registry into static/vendor/ (no CDN at run time).
# The vendored files are committed; re-run this script to upgrade, then commit the result.
# Pinned to the htmx 2.x line (django-htmx 1.x documents 2.x; htmx 4 changed attribute inheritance).
#   HTMX_VERSION=2.0.11 bash scripts/vendor-assets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HTMX_VERSION="${HTMX_VERSION:-2.0.11}"
DEST=static/vendor
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

mkdir -p "$DEST"
(cd "$TMP" && npm pack --silent "htmx.org@${HTMX_VERSION}" >/dev/null)
tar -xzf "$TMP"/htmx.org-"${HTMX_VERSION}".tgz -C "$TMP"
cp "$TMP/package/dist/htmx.min.js" "$DEST/htmx.min.js"
cp "$TMP/package/LICENSE" "$DEST/htmx.LICENSE"
sha256="$(sha256sum "$DEST/htmx.min.js" | cut -d' ' -f1)"
cat > "$DEST/README.md" <<MD
# Vendored front-end assets

Written by \`scripts/vendor-assets.sh\` from the npm registry; do not edit by hand.

| file | package | version | sha256 |
|---|---|---|---|
| htmx.min.js | htmx.org (0BSD, see htmx.LICENSE) | ${HTMX_VERSION} | ${sha256} |
MD
echo "vendored htmx.org ${HTMX_VERSION} -> $DEST/htmx.min.js ($sha256)"
