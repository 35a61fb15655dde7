#!/bin/sh
# The command of a test whose optional dependency is missing (cmake/FsdpSkip.cmake): prints why
# and exits 77, CTest's "skipped" (SKIP_RETURN_CODE 77). Arguments after the reason (the script
# the test would have run, and its own) are ignored.
# Usage: fsdp_skip.sh <reason> [ignored...]
echo "skipped: $1"
exit 77
