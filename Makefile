# Quick start: `make demo` and `make check`. Everything else is plain CMake in build/.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Which MPI, named explicitly: MPI=mpich (the default) or MPI=openmpi picks Debian's wrappers of
# that MPI (mpicc.openmpi, mpiexec.openmpi...); the generic mpicc/mpiexec follow whichever MPI was
# installed last. Any other MPI (a module's): set MPICC, MPIFORT and MPIEXEC. (Recursive
# variables: looked up when used, after `deps` has installed the MPI.)
MPI ?= mpich
MPICC ?= $(shell command -v mpicc.$(MPI) || command -v mpicc)
MPIFORT ?= $(shell command -v mpifort.$(MPI) || command -v mpifort)
MPIEXEC ?= $(shell command -v mpiexec.$(MPI) || command -v mpiexec)
CMAKE_ARGS ?=

.PHONY: all deps configure build demo check gpu-check gpu-bundle sanitize tsan memcheck soak fuzz fuzz-merge bench bench-gpt abi-baseline install clean

all: build

deps:
	@bash share/scripts/install-deps.sh

# The PyTorch tests (the FSDP2 conformance suite among them) need PyTorch >= 2.6, which Debian
# lacks: the virtual environment of bench/setup-python.sh (PyPI; cached under
# ~/.cache/libfsdp/bench-venv, reused when it imports). Where it cannot be made (no network),
# configure goes on and those tests report Skipped, saying why. TORCH_PYTHON=OFF skips it.
TORCH_PYTHON ?= $(shell bash bench/setup-python.sh 2>/tmp/libfsdp-setup-python.log || echo OFF)
configure: deps
	cmake -S . -B $(BUILD_DIR) \
	  -DMPI_C_COMPILER=$(MPICC) -DMPI_Fortran_COMPILER=$(MPIFORT) \
	  -DMPIEXEC_EXECUTABLE=$(MPIEXEC) -DFSDP_TORCH_PYTHON=$(TORCH_PYTHON) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The C MLP example: trains on 4 ranks (hybrid, F = 2) and saves a checkpoint, then resumes it on
# 2 ranks.
demo: build
	OPENBLAS_NUM_THREADS=1 $(MPIEXEC) -n 4 $(BUILD_DIR)/examples/mlp/fsdp_mlp --save $(BUILD_DIR)/demo.h5
	OPENBLAS_NUM_THREADS=1 $(MPIEXEC) -n 2 $(BUILD_DIR)/examples/mlp/fsdp_mlp --resume $(BUILD_DIR)/demo.h5

# CTEST_ARGS: more ctest options (-L openmpi, -R ..., -E ...).
CTEST_ARGS ?=
check: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# On a machine with a GPU: the GPU tests and bench_gpu, with a verdict and the ratios (doc/gpu.md).
# The GPU run (doc/gpu.md): no `deps` (a GPU machine may not be this Debian image), CUDA and NCCL
# required (a loud configure error naming what is missing), then share/scripts/gpu-check.sh.
gpu-check:
	cmake -S . -B $(BUILD_DIR) $(if $(MPICC),-DMPI_C_COMPILER=$(MPICC)) \
	  $(if $(MPIFORT),-DMPI_Fortran_COMPILER=$(MPIFORT)) \
	  $(if $(MPIEXEC),-DMPIEXEC_EXECUTABLE=$(MPIEXEC)) \
	  -DFSDP_ENABLE_CUDA=ON -DFSDP_REQUIRE_NCCL=ON $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)
	bash share/scripts/gpu-check.sh $(BUILD_DIR) "$(MPIEXEC)"

# For a GPU machine that cannot build this project (no MPICH, no parallel HDF5, no network): the
# same CUDA build made here (GPU_BUILD_DIR), packed with the shared libraries it links into
# GPU_BUNDLE (.gpu, under 20 MB); there, `bash share/scripts/gpu-bundle.sh run .gpu` runs
# gpu-check.sh on it (doc/gpu.md, "A machine that cannot build").
GPU_BUILD_DIR ?= build-gpu
GPU_BUNDLE ?= .gpu
gpu-bundle: deps
	cmake -S . -B $(GPU_BUILD_DIR) -DMPI_C_COMPILER=$(MPICC) -DMPI_Fortran_COMPILER=$(MPIFORT) \
	  -DMPIEXEC_EXECUTABLE=$(MPIEXEC) -DFSDP_ENABLE_CUDA=ON -DFSDP_REQUIRE_NCCL=ON $(CMAKE_ARGS)
	cmake --build $(GPU_BUILD_DIR) -j $(JOBS)
	bash share/scripts/gpu-bundle.sh pack $(GPU_BUILD_DIR) $(GPU_BUNDLE)

# The whole suite (multi-rank included) under AddressSanitizer + UndefinedBehaviorSanitizer, in its
# own build tree. Any report fails its test. (CUDA off: this build checks the host code.)
SANITIZE_DIR ?= build-sanitize
SANITIZE_ARGS = -DMPI_C_COMPILER=$(MPICC) -DMPI_Fortran_COMPILER=$(MPIFORT) \
  -DMPIEXEC_EXECUTABLE=$(MPIEXEC) -DFSDP_ENABLE_CUDA=OFF -DFSDP_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=Debug $(CMAKE_ARGS)
# Left out here, run by make check: what builds or runs nothing of this sanitized tree
# (test_pip builds its own wheel) or is PyTorch's time, not ours, under the sanitizers (the DCP
# conversion, the Hugging Face models, the FSDP2 conformance suite, the GPT comparisons: 10 of
# the run's minutes); the PyTorch front's own tests stay.
SANITIZE_CTEST_ARGS ?= -E 'test_pip|test_dcp_convert|test_pytorch_hf|fsdp2_conformance|example_gpt'
sanitize: deps
	cmake -S . -B $(SANITIZE_DIR) -DFSDP_SANITIZE=address,undefined $(SANITIZE_ARGS)
	cmake --build $(SANITIZE_DIR) -j $(JOBS)
	cd $(SANITIZE_DIR) && ctest --output-on-failure -j $(JOBS) $(SANITIZE_CTEST_ARGS)

# ThreadSanitizer over the tests with threads: the progress thread (asynchronous calls and
# checkpoints), the watchdog, the shared-memory transport.
TSAN_DIR ?= build-tsan
TSAN_TESTS ?= test_async|test_checkpoint_async|test_debug_collectives|test_shm_transport|test_trace
tsan: deps
	cmake -S . -B $(TSAN_DIR) -DFSDP_SANITIZE=thread $(SANITIZE_ARGS)
	cmake --build $(TSAN_DIR) -j $(JOBS)
	cd $(TSAN_DIR) && ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# libFuzzer (clang, ASan + UBSan) over everything libfsdp parses: each target runs FUZZ_SECONDS
# from the committed corpus in tests/fuzz/corpus; a crash fails and leaves its input in
# $(FUZZ_DIR)/tests/fuzz/<target>.work/crashes/. `make fuzz-merge` folds new finds into the corpus.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = fuzz_safetensors fuzz_checkpoint fuzz_capi fuzz_plan_model
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -DFSDP_FUZZ=ON -DFSDP_SANITIZE=address,undefined \
	  -DFSDP_FUZZ_SECONDS=$(FUZZ_SECONDS) -DFSDP_BUILD_TESTS=OFF -DFSDP_BUILD_EXAMPLES=OFF \
	  -DFSDP_BUILD_BENCH=OFF -DFSDP_BUILD_FORTRAN=OFF -DFSDP_ENABLE_CUDA=OFF \
	  -DBUILD_SHARED_LIBS=OFF -DMPI_C_COMPILER=$(MPICC) -DMPIEXEC_EXECUTABLE=$(MPIEXEC) $(CMAKE_ARGS)
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	cd $(FUZZ_DIR) && ctest --output-on-failure -L fuzz

fuzz-merge:
	for t in $(FUZZ_TARGETS); do \
	  $(FUZZ_DIR)/tests/fuzz/$$t -merge=1 tests/fuzz/corpus/$$t $(FUZZ_DIR)/tests/fuzz/$$t.work/corpus; done

# valgrind memcheck over every single-rank test (mpiexec -n 1 valgrind <test>): invalid reads
# and writes, uses of uninitialized values and definite leaks fail the test. (Python and install
# tests excluded: the interpreter and the compilers are not ours to check.)
MEMCHECK_DIR ?= build-memcheck
VALGRIND_OPTIONS = --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite --track-origins=yes --num-callers=30 \
  --suppressions=$(CURDIR)/share/sanitizers/valgrind.supp
VALGRIND = valgrind$(subst $(eval) ,,$(foreach o,$(VALGRIND_OPTIONS),;$(o)))
memcheck: deps
	cmake -S . -B $(MEMCHECK_DIR) $(SANITIZE_ARGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DMPIEXEC_PREFLAGS=$(VALGRIND)"
	cmake --build $(MEMCHECK_DIR) -j $(JOBS)
	cd $(MEMCHECK_DIR) && UCX_MEM_MALLOC_HOOKS=no ctest --output-on-failure -j $(JOBS) -L np1 \
	  -LE 'python|install|fuzz'

# The soak: 100,000 unshard/reshard/reduce cycles over 12 units and 3,000 checkpoint saves with
# rotation on 4 ranks; fails if memory, library counters, MPI objects or descriptors grew. The
# memory curve is written to $(BUILD_DIR)/tests/soak/curve.csv.
SOAK_CYCLES ?= 100000
SOAK_SAVES ?= 3000
soak: build
	$(MPIEXEC) -n 4 $(BUILD_DIR)/tests/fsdp_soak $(BUILD_DIR)/tests/soak $(SOAK_CYCLES) \
	  $(SOAK_SAVES) --curve $(BUILD_DIR)/tests/soak/curve.csv

# Every benchmark (collectives, memory, overlap, overhead, checkpoints, end to end against PyTorch
# FSDP2 and DDP), then build/bench/summary.md and PNG plots. Sets up a PyTorch >= 2.6 virtual
# environment on first use (bench/setup-python.sh).
bench: build
	bash bench/run.sh $(BUILD_DIR) "$(MPIEXEC)"

# The ABI baseline (doc/abi.md): regenerate only for a deliberate change (a new version node's
# functions are additions and need none; a SONAME bump or a changed type does).
abi-baseline: build
	abidw --headers-dir include --drop-private-types --exported-interfaces-only --no-corpus-path \
	  --out-file $$(sed -n 's/^FSDP_ABI_BASELINE:INTERNAL=//p' $(BUILD_DIR)/CMakeCache.txt) \
	  $(BUILD_DIR)/src/libfsdp.so

# The seed's Table 3.1 (doc/pytorch.md): three GPT sizes x {DDP, FSDP2, libfsdp, no communication}
# x {FP32, BF16, FP16} x activation checkpointing, 2 ranks, about 30 minutes. Markdown, JSON and a
# PNG of the loss curves in $(BUILD_DIR)/bench/gpt/.
bench-gpt: build
	bash bench/run.sh $(BUILD_DIR) "$(MPIEXEC)" gpt

install: build
	cmake --install $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
