#!/usr/bin/env bash
# The ABI promise of doc/abi.md, checked against the committed baseline (share/abi/):
#  1. every exported symbol is an fsdp_* function with a version node FSDP_<major>.<minor>;
#  2. the SONAME is the baseline's (a bump is deliberate: a new baseline with it);
#  3. libabigail's abidiff finds no change to anything the baseline has: no function removed or
#     changed, no type or enumerator value changed. Added functions are allowed (--no-added-syms).
#     The *_COUNT sentinels that end the enums are not part of the ABI and are ignored (the
#     suppression is generated from fsdp.h, so a new sentinel needs no list kept by hand).
# Usage: check_abi.sh <libfsdp.so> <baseline.abi> <include dir> <work dir>
# Exit 77 (skipped) without abidw/abidiff (Debian: abigail-tools).
set -euo pipefail
lib=$1 baseline=$2 headers=$3 work=$4
command -v abidw > /dev/null && command -v abidiff > /dev/null || {
  echo "skipped: abidw/abidiff not installed (Debian: abigail-tools)"; exit 77; }
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# 1. Symbol versions.
unversioned=$(objdump -T "$lib" | awk '$NF ~ /^fsdp_/ && $(NF-1) !~ /^FSDP_[0-9]+\.[0-9]+$/ {print $NF}')
[ -z "$unversioned" ] || fail "symbols without an FSDP_x.y version node: $unversioned"
nodes=$(objdump -T "$lib" | awk '$NF ~ /^fsdp_/ {print $(NF-1)}' | sort -u | tr '\n' ' ')
echo "symbol versions: $nodes"

# 2. SONAME.
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
base_soname=$(sed -n "s/.*soname='\([^']*\)'.*/\1/p" "$baseline" | head -1)
[ "$soname" = "$base_soname" ] || fail "SONAME $soname, baseline $base_soname: a SONAME bump \
needs a new baseline (make abi-baseline; doc/abi.md)"

# 3. abidiff against the baseline.
{
  for s in $(grep -o 'FSDP_[A-Z_]*_COUNT' "$headers/fsdp.h" | sort -u); do
    printf '[suppress_type]\n  type_kind = enum\n  changed_enumerators = %s\n' "$s"
  done
} > "$work/sentinels.abignore"
abidw --headers-dir "$headers" --drop-private-types --exported-interfaces-only --no-corpus-path \
  --out-file "$work/current.abi" "$lib"
set +e
abidiff --no-added-syms --suppressions "$work/sentinels.abignore" "$baseline" "$work/current.abi" \
  > "$work/abidiff.txt"
rc=$?
set -e
cat "$work/abidiff.txt"
[ $rc -eq 0 ] || fail "abidiff exit $rc: the ABI changed against $baseline (see above). Keep \
the ABI, or make the change deliberate: bump the SONAME or the version node and regenerate the \
baseline (make abi-baseline; doc/abi.md)"
echo "PASS: ABI of $soname matches the baseline (added functions allowed)"
