#!/usr/bin/env bash
# The layers of src/ (doc/architecture.md), checked on every #include "..." (and <fsdp*.h>): a
# folder includes only what its line of src/layers.txt names (the folders below it, single headers
# of one, or a public header of include/ such as fsdp.h).
# The build checks the calls against the same lines (src/CMakeLists.txt, fsdp_layer_check_*).
# Usage: check_layers.sh [source dir]
set -euo pipefail
src=${1:-$(dirname "$0")/../src}
declare -A allowed=()
while IFS=: read -r layer uses; do
  case "$layer" in '' | '#'*) continue ;; esac
  allowed[$layer]=$(echo $uses)
done <"$src/layers.txt"
bad=0
while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  layer=${rel%%/*}
  if [ -z "${allowed[$layer]+x}" ]; then
    echo "$rel: folder '$layer' is not a known layer (add it to src/layers.txt and doc/architecture.md)"
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
  done < <(sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
    -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\(fsdp[^>]*\)>.*/\1/p' "$file")
done < <(find "$src" -mindepth 2 \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' \) -print0)
[ $bad = 0 ] && echo "layers: every include goes downwards"
exit $bad
