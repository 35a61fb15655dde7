# Runs one libFuzzer target for SECONDS over a working copy of its seed corpus (cmake -P, so the
# test needs no shell). Fails on any crash, leak, timeout or sanitizer report; the input is left
# in WORK/crashes/ (make it a regression input: tests/fuzz/regressions/<target>/).
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/crashes)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -rss_limit_mb=4096 -timeout=30
          -print_final_stats=1 -artifact_prefix=${WORK}/crashes/ ${WORK}/corpus
  RESULT_VARIABLE rc)
file(GLOB corpus ${WORK}/corpus/*)
list(LENGTH corpus n)
message("corpus: ${n} inputs")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the fuzzer failed (exit ${rc}); its input is in ${WORK}/crashes/")
endif()
