# Quick start: `make demo` and `make check`. Everything else is plain CMake in build/.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# MPICH explicitly: on Debian the generic mpicc/mpiexec switch to Open MPI when a package pulls it in.
# (Recursive variables: looked up when used, after `deps` has installed MPICH.)
MPICC ?= $(shell command -v mpicc.mpich || command -v mpicc)
MPIFORT ?= $(shell command -v mpifort.mpich || command -v mpifort)
MPIEXEC ?= $(shell command -v mpiexec.mpich || command -v mpiexec)
CMAKE_ARGS ?=

.PHONY: all deps configure build demo check bench install clean

all: build

deps:
	@bash share/scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) \
	  -DMPI_C_COMPILER=$(MPICC) -DMPI_Fortran_COMPILER=$(MPIFORT) \
	  -DMPIEXEC_EXECUTABLE=$(MPIEXEC) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The C MLP example: trains on 4 ranks (hybrid, F = 2) and saves a checkpoint, then resumes it on
# 2 ranks.
demo: build
	OPENBLAS_NUM_THREADS=1 $(MPIEXEC) -n 4 $(BUILD_DIR)/examples/mlp/fsdp_mlp --save $(BUILD_DIR)/demo.h5
	OPENBLAS_NUM_THREADS=1 $(MPIEXEC) -n 2 $(BUILD_DIR)/examples/mlp/fsdp_mlp --resume $(BUILD_DIR)/demo.h5

check: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Every benchmark (collectives, memory, overlap, overhead, checkpoints, end to end against PyTorch
# FSDP2 and DDP), then build/bench/summary.md and PNG plots. Sets up a PyTorch >= 2.6 virtual
# environment on first use (bench/setup-python.sh).
bench: build
	bash bench/run.sh $(BUILD_DIR) "$(MPIEXEC)"

install: build
	cmake --install $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
