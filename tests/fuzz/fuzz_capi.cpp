// Fuzz target: the configuration values and parameter descriptors a program passes through the
// C ABI, and the environment variables libfsdp reads at fsdp_init. Each input is one program:
// a config (every field possibly any value, the header too), a few FSDP_* variables, then units
// of fuzzed descriptors and options, each unsharded, resharded and reduced. The oracle: every
// call returns a defined status; a failure names its call in fsdp_last_error(); a unit that was
// created holds exactly its initial values once unsharded (1 rank: the shard is the whole).
// Units above 16 MiB are not created (a fuzzer must not test the machine's memory).
#include <fsdp.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/guard.hpp"  // enum_int: a C enum field read as the int it holds
#include "fuzz_input.hpp"

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz_capi: %s\n", what.c_str());
  std::abort();
}

// A call's status must be defined, and a failure must say which call failed.
bool ok(fsdp_status_t s, const char* call) {
  if (s < FSDP_SUCCESS || s >= FSDP_STATUS_COUNT) broken(std::string(call) + ": undefined status");
  if (s == FSDP_SUCCESS) return true;
  const char* m = fsdp_last_error();
  if (!m || !std::strstr(m, call))
    broken(std::string(call) + " failed without naming itself: '" + (m ? m : "(null)") + "'");
  return false;
}

template <class T>
T any_or(FuzzInput& in, T sane) {
  if (in.pick(4) != 0) return sane;
  T v;
  const uint64_t bits = in.u64();
  std::memcpy(&v, &bits, sizeof v < sizeof bits ? sizeof v : sizeof bits);
  return v;
}

// Stores any int in a C enum field, as C allows (a C++ cast to the enum would be undefined).
template <class E>
void set_enum(E& field, int v) {
  static_assert(sizeof(E) == sizeof(int));
  std::memcpy(&field, &v, sizeof v);
}

// Small enum values mostly, so the fuzzer reaches the valid combinations; any int sometimes.
int enum_value(FuzzInput& in, int sane) {
  switch (in.pick(4)) {
    case 0: return static_cast<int>(in.u64());
    case 1: return static_cast<int>(in.pick(8)) - 2;
    default: return sane;
  }
}

fsdp_config_t config(FuzzInput& in) {
  fsdp_config_t c = FSDP_CONFIG_INIT;
  c.size = in.pick(8) == 0 ? in.pick(sizeof c + 16) : sizeof c;
  c.magic = any_or(in, c.magic);
  c.version = any_or(in, c.version);
  set_enum(c.strategy, enum_value(in, c.strategy));
  c.sharding_factor = enum_value(in, 0);
  set_enum(c.grad_reduction, enum_value(in, c.grad_reduction));
  set_enum(c.param_dtype, enum_value(in, c.param_dtype));
  set_enum(c.reduce_dtype, enum_value(in, c.reduce_dtype));
  c.max_unsharded = enum_value(in, 0);
  set_enum(c.memory_space, enum_value(in, c.memory_space));
  c.device = enum_value(in, -1);
  c.cpu_offload = enum_value(in, 0);
  set_enum(c.transport, enum_value(in, c.transport));
  c.debug_collectives = enum_value(in, 0);
  set_enum(c.on_timeout, enum_value(in, c.on_timeout));
  c.timeout_s = any_or(in, 0.0);
  return c;
}

const char* const kEnv[] = {"FSDP_TRANSPORT",       "FSDP_TIMEOUT",
                            "FSDP_ON_TIMEOUT",      "FSDP_DEBUG_COLLECTIVES",
                            "FSDP_PROGRESS_THREAD", "FSDP_REDUCE_SCATTER_ALGORITHM",
                            "FSDP_RANKS_PER_NODE",  "FSDP_RING_PIECE_BYTES"};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  fsdp_param_desc_t desc{};
  std::vector<char> values;
};

bool unit_round_trip(fsdp_context_t ctx, bool own_dtype, FuzzInput& in) {
  // nparams may be zero or negative, never more than the descriptors passed (a caller's lie the
  // library cannot see).
  const int n = 1 + static_cast<int>(in.pick(4));
  const int nparams = in.pick(8) == 0 ? -static_cast<int>(in.pick(3)) : n;
  std::vector<Param> params(static_cast<std::size_t>(n));
  std::vector<fsdp_param_desc_t> descs;
  double total_bytes = 0;
  for (int i = 0; i < n; ++i) {
    Param& p = params[static_cast<std::size_t>(i)];
    p.name = in.pick(6) == 0 ? in.str(6) : "p" + std::to_string(in.pick(4));
    const int ndim = enum_value(in, static_cast<int>(in.pick(3)));
    p.shape.assign(FSDP_MAX_NDIM, 1);
    double numel = 1;
    for (int k = 0; k < ndim && k < FSDP_MAX_NDIM; ++k) {
      p.shape[static_cast<std::size_t>(k)] = in.pick(6) == 0 ? in.i64() : int64_t(in.pick(9));
      numel *= static_cast<double>(p.shape[static_cast<std::size_t>(k)]);
    }
    p.desc.name = in.pick(10) == 0 ? nullptr : p.name.c_str();
    p.desc.ndim = ndim;
    p.desc.shape = in.pick(10) == 0 ? nullptr : p.shape.data();
    const int dtype = enum_value(in, FSDP_FLOAT32);  // stored as the C caller would: any int
    std::memcpy(&p.desc.dtype, &dtype, sizeof dtype);
    p.desc.requires_grad = static_cast<int>(in.pick(3));
    const std::size_t es = dtype == FSDP_FLOAT64 ? 8 : 4;
    total_bytes += std::fabs(numel) * double(es);
    if (numel >= 0 && numel * double(es) < 16.0 * (1 << 20)) {
      p.values.resize(static_cast<std::size_t>(numel) * es);
      for (std::size_t b = 0; b < p.values.size(); ++b) p.values[b] = static_cast<char>(b * 7 + i);
    }
    descs.push_back(p.desc);
  }
  if (total_bytes > 16.0 * (1 << 20)) return false;
  fsdp_unit_options_t opt = FSDP_UNIT_OPTIONS_INIT;
  opt.size = in.pick(8) == 0 ? in.pick(sizeof opt + 8) : sizeof opt;
  set_enum(opt.param_dtype, enum_value(in, opt.param_dtype));
  set_enum(opt.reduce_dtype, enum_value(in, opt.reduce_dtype));
  opt.sync_from_rank0 = enum_value(in, 0);
  std::vector<const void*> init;
  for (const Param& p : params) init.push_back(p.values.empty() ? nullptr : p.values.data());
  fsdp_unit_t unit = nullptr;
  if (!ok(fsdp_unit_create_ex(ctx, nparams, descs.data(), init.data(), &opt, &unit),
          "fsdp_unit_create_ex")) {
    if (unit) broken("fsdp_unit_create_ex failed but set *unit");
    return true;
  }
  if (ok(fsdp_unshard(unit), "fsdp_unshard")) {
    for (int i = 0; i < n; ++i) {
      const Param& p = params[static_cast<std::size_t>(i)];
      void* data = nullptr;
      if (!ok(fsdp_param_data(unit, i, &data), "fsdp_param_data")) continue;
      // Only a unit computing in its own dtype holds its initial bytes unchanged.
      const bool exact = own_dtype && fsdp::capi::enum_int(opt.param_dtype) == FSDP_DTYPE_AUTO;
      if (exact && !p.values.empty() && std::memcmp(data, p.values.data(), p.values.size()) != 0)
        broken("unsharded values differ from the initial values of '" + p.name + "'");
    }
    ok(fsdp_reshard(unit), "fsdp_reshard");
  }
  ok(fsdp_reduce_grads(unit), "fsdp_reduce_grads");
  if (!ok(fsdp_unit_destroy(&unit), "fsdp_unit_destroy") || unit) broken("destroy left the unit");
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  fsdp_config_t cfg = config(in);
  const std::size_t nenv = in.pick(3);
  std::vector<const char*> set;
  for (std::size_t k = 0; k < nenv; ++k) {
    const char* name = kEnv[in.pick(sizeof kEnv / sizeof *kEnv)];
    std::string value = in.str(12);
    value.erase(std::find(value.begin(), value.end(), '\0'), value.end());
    setenv(name, value.c_str(), 1);
    set.push_back(name);
  }
  fsdp_context_t ctx = nullptr;
  const bool with_cfg = in.coin();
  const bool created = ok(fsdp_init(MPI_COMM_WORLD, with_cfg ? &cfg : nullptr, &ctx), "fsdp_init");
  for (const char* name : set) unsetenv(name);
  if (!created) {
    if (ctx) broken("fsdp_init failed but set *ctx");
    return 0;
  }
  const std::size_t units = 1 + in.pick(3);
  for (std::size_t u = 0; u < units && in.left(); ++u)
    if (!unit_round_trip(ctx, !with_cfg || fsdp::capi::enum_int(cfg.param_dtype) == FSDP_DTYPE_AUTO,
                         in))
      break;
  if (!ok(fsdp_finalize(&ctx), "fsdp_finalize") || ctx) broken("fsdp_finalize left the context");
  return 0;
}
