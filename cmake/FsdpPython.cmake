# The Python interpreter for the binding's tests and examples: FSDP_PYTHON, else the first of
# /usr/bin/python3 (where Debian's python3-numpy and python3-torch install) and python3 on PATH
# that imports numpy. Without one, the Python tests still run and report themselves skipped;
# FSDP_PYTHON=OFF asks for that (tests/check_skips.sh).
if(NOT DEFINED FSDP_PYTHON OR FSDP_PYTHON STREQUAL "")
  foreach(_candidate /usr/bin/python3 python3)
    find_program(_python NAMES ${_candidate} NO_CACHE)
    if(_python)
      execute_process(COMMAND ${_python} -c "import numpy" RESULT_VARIABLE _rc OUTPUT_QUIET
                      ERROR_QUIET)
      if(_rc EQUAL 0)
        set(FSDP_PYTHON ${_python} CACHE FILEPATH "Python 3 with numpy for the binding's tests")
        break()
      endif()
    endif()
    unset(_python)
  endforeach()
endif()
if(FSDP_PYTHON)
  message(STATUS "libfsdp: Python binding tests with ${FSDP_PYTHON}")
  set(FSDP_PYTHON_RUN ${FSDP_PYTHON})
else()
  message(STATUS "libfsdp: no Python 3 with numpy: the binding's tests will report skipped")
  set(FSDP_PYTHON "")  # OFF reads as none below
  fsdp_skip_command(FSDP_PYTHON_RUN "no python3 with numpy")
endif()
# What the binding needs to find itself and the library in the build tree.
set(FSDP_PYTHON_ENV "PYTHONPATH=${PROJECT_SOURCE_DIR}/python" "LIBFSDP_LIBRARY=$<TARGET_FILE:fsdp>"
    "OMP_NUM_THREADS=1")

# A PyTorch >= 2.6 interpreter for the tests that need a recent PyTorch (float16 on the CPU,
# transformers): FSDP_TORCH_PYTHON, else the benchmark's virtual environment
# (bench/setup-python.sh) when it exists. Without one those tests report themselves skipped;
# FSDP_TORCH_PYTHON=OFF asks for that (tests/check_skips.sh).
set(_venv "$ENV{FSDP_BENCH_VENV}")
if(NOT _venv)
  set(_venv "$ENV{HOME}/.cache/libfsdp/bench-venv")
endif()
if(NOT DEFINED FSDP_TORCH_PYTHON OR FSDP_TORCH_PYTHON STREQUAL "")
  if(EXISTS "${_venv}/bin/python")
    execute_process(COMMAND "${_venv}/bin/python" -c
      "import torch, numpy; assert tuple(int(x) for x in torch.__version__.split('.')[:2]) >= (2, 6)"
      RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(FSDP_TORCH_PYTHON "${_venv}/bin/python" CACHE FILEPATH "Python with PyTorch >= 2.6")
    endif()
  endif()
endif()
if(FSDP_TORCH_PYTHON)
  message(STATUS "libfsdp: PyTorch >= 2.6 tests with ${FSDP_TORCH_PYTHON}")
  set(FSDP_TORCH_PYTHON_RUN ${FSDP_TORCH_PYTHON})
else()
  message(STATUS "libfsdp: no Python with PyTorch >= 2.6: its tests will report skipped")
  set(FSDP_TORCH_PYTHON "")  # OFF reads as none below
  fsdp_skip_command(FSDP_TORCH_PYTHON_RUN
                    "no Python with PyTorch >= 2.6 (run bench/setup-python.sh)")
endif()

# A Python with JAX for the JAX embedding (tests/test_jax_mlp.py, examples/python/jax_mlp.py):
# FSDP_JAX_PYTHON, else the benchmark's virtual environment when it imports jax (bench/setup-python.sh
# installs it there), else the binding's interpreter, where those scripts report themselves skipped
# (exit 77) for want of jax. FSDP_JAX_PYTHON=OFF asks for the stand-in (tests/check_skips.sh).
if(NOT DEFINED FSDP_JAX_PYTHON OR FSDP_JAX_PYTHON STREQUAL "")
  set(FSDP_JAX_PYTHON_RUN ${FSDP_PYTHON_RUN})
  if(EXISTS "${_venv}/bin/python")
    execute_process(COMMAND "${_venv}/bin/python" -c "import jax, numpy"
                    RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(FSDP_JAX_PYTHON_RUN "${_venv}/bin/python")
    endif()
  endif()
elseif(FSDP_JAX_PYTHON)
  set(FSDP_JAX_PYTHON_RUN ${FSDP_JAX_PYTHON})
else()
  fsdp_skip_command(FSDP_JAX_PYTHON_RUN "no Python with JAX (run bench/setup-python.sh)")
endif()
if(FSDP_JAX_PYTHON_RUN MATCHES "fsdp_skip.sh")
  message(STATUS "libfsdp: no Python with JAX: its tests will report skipped")
else()
  message(STATUS "libfsdp: JAX tests with ${FSDP_JAX_PYTHON_RUN} (skipped if it lacks jax)")
endif()
