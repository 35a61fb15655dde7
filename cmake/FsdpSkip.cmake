# Tests whose optional dependency is missing (Python with numpy, PyTorch >= 2.6, Doxygen) report
# themselves skipped, never passed: their command is a stand-in, cmake/fsdp_skip.sh, that says
# why and exits 77, which the test's SKIP_RETURN_CODE 77 turns into "Skipped". The exit status
# lives in that script, not in a shell string CMake could cut at a ';' (`sh -c "echo x; exit 77"`
# becomes `sh -c "echo x" "exit 77"` and passes). tests/check_skips.sh, in make check, configures
# a tree without those dependencies and fails if any of their tests reports Passed.

# fsdp_skip_command(<var> <reason>)
# Sets <var> to the stand-in command (a list), for a place that expects an interpreter: arguments
# appended to it (a script and its own arguments, under mpiexec too) are ignored.
function(fsdp_skip_command var reason)
  set(${var} /bin/sh ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/fsdp_skip.sh "${reason}" PARENT_SCOPE)
endfunction()

# fsdp_add_skipped_test(<name> <reason> [<property> <value>]...)
# Registers test <name> as the stand-in, with SKIP_RETURN_CODE 77 and any further properties
# (LABELS, PROCESSORS...) given.
function(fsdp_add_skipped_test name reason)
  fsdp_skip_command(command "${reason}")
  add_test(NAME ${name} COMMAND ${command})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 ${ARGN})
endfunction()
