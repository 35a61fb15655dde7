#!/usr/bin/env bash
# pip install . and pip wheel . (scikit-build-core, pyproject.toml) into a fresh virtual
# environment, then, with no PYTHONPATH or LIBFSDP_LIBRARY:
#  - mpiexec -n 2 python -m libfsdp.selftest (unshard, reduce, SGD, checkpoint) on every rank;
#  - an mpi4py communicator (a split of COMM_WORLD) accepted by libfsdp.init;
#  - the wheel holds the package and the library (one file, named by its SONAME);
#  - bad input: the library linked against an MPI that is not here (its MPI library renamed in a
#    copy) fails at import with a message naming the missing library, not a crash.
# The MPI is the one named, as a user names it: MPICC=<its mpicc> pip install . (cmake/FsdpMpi.cmake).
# Needs PyPI (scikit-build-core, numpy, mpi4py; pip's cache serves later runs).
# Usage: test_pip.sh <source dir> <work dir> <mpiexec> <python with venv> <mpicc>
set -euo pipefail
src=$1 work=$2 mpiexec=$3 python=$4 mpicc=$5
export MPICC=$mpicc
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$python" -m venv "$work/venv" 2> "$work/venv.log" ||
  { echo "skipped: $python cannot create a virtual environment"; exit 77; }
py=$work/venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH LIBFSDP_LIBRARY
"$py" -m pip install -q "$src" > "$work/install.log" 2>&1 ||
  { tail -30 "$work/install.log"; fail "pip install . (see $work/install.log)"; }
cd "$work"
out=$("$mpiexec" -n 2 "$py" -m libfsdp.selftest)
echo "$out"
[ "$(grep -o 'libfsdp selftest: OK' <<<"$out" | wc -l)" = 2 ] || fail "selftest"
grep -q "library $work/venv/lib/python3[.0-9]*/site-packages/libfsdp/libfsdp.so.0" <<<"$out" ||
  fail "the library was not the one pip installed"

# The library pip built links the MPI named above.
mpilib=$(readelf -d "$(ls "$work"/venv/lib/python3*/site-packages/libfsdp/libfsdp.so.0)" |
         sed -n 's/.*NEEDED.*\[\(libmpi[a-z]*\.so\.[0-9]*\)\].*/\1/p' | head -1)
[ -n "$mpilib" ] || fail "libfsdp.so.0 links no libmpi*"
"$mpicc" -o "$work/which_mpi" -x c - <<'CEOF'
#include <mpi.h>
#include <stdio.h>
int main(void) { char v[MPI_MAX_LIBRARY_VERSION_STRING]; int n; MPI_Get_library_version(v, &n); puts(v); return 0; }
CEOF
wanted=$(ldd "$work/which_mpi" | sed -n 's/^\s*\(libmpi[a-z]*\.so\.[0-9]*\) .*/\1/p' | head -1)
[ "$mpilib" = "$wanted" ] || fail "pip's library links $mpilib, $mpicc links $wanted"
echo "pip install with MPICC=$mpicc: links $mpilib"

# mpi4py built from source against this MPI (its PyPI wheels expect libmpi.so.12, which Debian
# names libmpich.so.12 for MPICH). pip caches the wheel it builds by the source's name alone, so
# each MPI gets a cache of its own: another MPI's mpi4py would load the wrong libmpi.
PIP_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/libfsdp/pip-$(basename "$mpicc")" "$py" -m pip install -q --no-binary mpi4py mpi4py > "$work/mpi4py.log" 2>&1 ||
  { tail -20 "$work/mpi4py.log"; fail "pip install mpi4py (see $work/mpi4py.log)"; }
cat > "$work/with_mpi4py.py" <<'PYEOF'
import numpy as np
from mpi4py import MPI
import libfsdp
world = MPI.COMM_WORLD
sub = world.Split(0, world.Get_size() - 1 - world.Get_rank())  # ranks reversed
ctx = libfsdp.init(sub)
rank, size = ctx.group()
assert (rank, size) == (sub.Get_rank(), sub.Get_size()), (rank, size)
u = ctx.unit([("w", np.arange(10, dtype=np.float32))])
u.unshard()
assert np.array_equal(u.param(0), np.arange(10, dtype=np.float32))
u.reshard()
ctx.finalize()
print(f"mpi4py communicator: OK (rank {rank} of {size})", flush=True)
PYEOF
out=$("$mpiexec" -n 2 "$py" "$work/with_mpi4py.py")
echo "$out"
[ "$(grep -o 'mpi4py communicator: OK' <<<"$out" | wc -l)" = 2 ] || fail "mpi4py communicator"

"$py" -m pip wheel -q --no-deps -w "$work/wheels" "$src" > "$work/wheel.log" 2>&1 ||
  { tail -30 "$work/wheel.log"; fail "pip wheel . (see $work/wheel.log)"; }
listing=$("$py" -m zipfile -l "$work"/wheels/libfsdp-*.whl)
grep -q "libfsdp/libfsdp.so.0 " <<<"$listing" && grep -q "libfsdp/pytorch/fullyshard.py" <<<"$listing" ||
  fail "the wheel lacks the library or the package: $listing"
[ "$(grep -c 'libfsdp\.so' <<<"$listing")" = 1 ] || fail "more than one copy of the library"
echo "pip wheel: $(basename "$work"/wheels/libfsdp-*.whl)"

# A library linked against an MPI this machine lacks: a copy whose MPI library is renamed.
site=$(ls -d "$work"/venv/lib/python3*/site-packages)
cp -r "$site/libfsdp" "$work/othermpi"
renamed=libmpX${mpilib#libmpi}  # libmpich.so.12: libmpXch.so.12; libmpi.so.40: libmpX.so.40
"$py" - "$work/othermpi/libfsdp.so.0" "$mpilib" "$renamed" <<'PYEOF'
import sys
path, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
data = open(path, "rb").read()
assert old in data and len(old) == len(new)  # same length: the string table keeps its offsets
open(path, "wb").write(data.replace(old, new))
PYEOF
mkdir -p "$work/other/libfsdp" && cp -r "$work/othermpi/." "$work/other/libfsdp/"
set +e
msg=$(PYTHONPATH="$work/other" "$py" -c "import libfsdp" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "cannot load libfsdp.so" <<<"$msg" && grep -qF "$renamed" <<<"$msg" ||
  fail "another MPI's wheel: ($rc) $msg"
echo "another MPI's library: $(tail -1 <<<"$msg")"
echo "PASS: pip install, selftest, mpi4py, wheel"
