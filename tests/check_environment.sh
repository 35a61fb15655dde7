#!/usr/bin/env bash
# The FSDP_* variables: libfsdp reads the environment only through src/base/environment.cpp, and
# doc/environment.md lists exactly the variables of its table, each marked the same way (whether
# every rank must see the same value).
# Usage: check_environment.sh [repository root]
set -euo pipefail
root=${1:-$(dirname "$0")/..}
bad=0
# getenv anywhere else in the library (the fsdp-ckpt tool included)
if others=$(grep -rn 'getenv' "$root/src" | grep -v '^'"$root"'/src/base/environment.cpp:'); then
  echo "the environment is read outside src/base/environment.cpp:"
  echo "$others"
  bad=1
fi
# {"NAME", true|false, "..."} rows of the table, and | `NAME` | yes|no | rows of the doc
table=$(sed -n 's/^ *{"\(FSDP_[A-Z0-9_]*\)", \(true\|false\),.*/\1 \2/p' "$root/src/base/environment.cpp" |
        sed 's/ true$/ yes/; s/ false$/ no/' | sort)
doc=$(sed -n 's/^| `\(FSDP_[A-Z0-9_]*\)` | \(yes\|no\) |.*/\1 \2/p' "$root/doc/environment.md" | sort)
if [ -z "$table" ]; then echo "no variables found in src/base/environment.cpp"; bad=1; fi
if [ "$table" != "$doc" ]; then
  echo "doc/environment.md and src/base/environment.cpp differ (name, same on every rank):"
  diff <(echo "$table") <(echo "$doc") || true
  bad=1
fi
[ $bad = 0 ] && echo "environment: $(echo "$table" | wc -l) variables, read in one place, documented alike"
exit $bad
