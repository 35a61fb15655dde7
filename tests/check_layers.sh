#!/usr/bin/env bash
# The layers of src/ (doc/architecture.md), checked on every #include "...": a folder includes
# only the folders below it. Core sees transports only through their interface
# (transport/transport.hpp, transport/transport_options.hpp); placement/ is the one place that
# builds concrete transports; capi/ is the only way in from outside.
# Usage: check_layers.sh [source dir]
set -euo pipefail
src=${1:-$(dirname "$0")/../src}
declare -A allowed=(
  [base]="base"
  [diag]="base diag"
  [memory]="base memory"
  [runtime]="base diag memory runtime"
  [transport]="base diag memory runtime transport"
  [core]="base diag memory runtime core transport/transport.hpp transport/transport_options.hpp"
  [placement]="base diag memory runtime transport core placement"
  [optim]="base diag memory runtime transport/transport.hpp core optim"
  [checkpoint]="base diag memory runtime core optim checkpoint"
  [capi]="base diag memory runtime transport/transport.hpp core optim checkpoint capi"
  [tools]="tools"
)
bad=0
while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  layer=${rel%%/*}
  if [ -z "${allowed[$layer]+x}" ]; then
    echo "$rel: folder '$layer' is not a known layer (add it to tests/check_layers.sh and doc/architecture.md)"
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    ok=0
    for a in ${allowed[$layer]}; do
      case "$inc" in "$a"/* | "$a") ok=1 ;; esac
    done
    if [ $ok = 0 ]; then
      echo "$rel includes \"$inc\": $layer/ may include only: ${allowed[$layer]}"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\/[^"]*\)".*/\1/p' "$file")
done < <(find "$src" -mindepth 2 \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' \) -print0)
[ $bad = 0 ] && echo "layers: every include goes downwards"
exit $bad
