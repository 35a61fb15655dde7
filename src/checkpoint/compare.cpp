#include "checkpoint/compare.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/catalog_json.hpp"
#include "checkpoint/dataset_scan.hpp"
#include "checkpoint/from_rank0.hpp"
#include "memory/host/host_kernels.hpp"

namespace fsdp::ckpt {

namespace {

std::string printed(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// What differs between two checkpoints besides dataset values: metadata, optimizers (kind,
// groups and hyperparameters) and the gradient scaler, one line each.
std::vector<std::string> state_differences(const Catalog& a, const Catalog& b) {
  std::vector<std::string> out;
  std::map<std::string, std::string> ma(a.metadata.begin(), a.metadata.end()),
      mb(b.metadata.begin(), b.metadata.end());
  for (const auto& [k, v] : ma) {
    const auto it = mb.find(k);
    if (it == mb.end())
      out.push_back("metadata '" + k + "' only in A");
    else if (it->second != v)
      out.push_back("metadata '" + k + "': '" + v + "' vs '" + it->second + "'");
  }
  for (const auto& [k, v] : mb)
    if (!ma.count(k)) out.push_back("metadata '" + k + "' only in B");
  if (a.optimizers.size() != b.optimizers.size())
    out.push_back("optimizers: " + std::to_string(a.optimizers.size()) + " vs " +
                  std::to_string(b.optimizers.size()));
  for (std::size_t k = 0; k < std::min(a.optimizers.size(), b.optimizers.size()); ++k) {
    const OptimizerInfo &oa = a.optimizers[k], &ob = b.optimizers[k];
    const std::string who = "optimizer " + std::to_string(k);
    if (oa.kind != ob.kind) out.push_back(who + ": " + oa.kind + " vs " + ob.kind);
    if (oa.groups.size() != ob.groups.size())
      out.push_back(who + ": " + std::to_string(oa.groups.size()) + " vs " +
                    std::to_string(ob.groups.size()) + " groups");
    for (std::size_t g = 0; g < std::min(oa.groups.size(), ob.groups.size()); ++g) {
      const std::string at = who + " group " + std::to_string(g) + " ";
      for (const std::string& d :
           differing_fields(optimizer_group_fields(), oa.groups[g], ob.groups[g]))
        out.push_back(at + d);
    }
  }
  const ScalerInfo &sa = a.scaler, &sb = b.scaler;
  if (sa.present != sb.present)
    out.push_back(std::string("grad scaler: only in ") + (sa.present ? "A" : "B"));
  else if (sa.present)
    for (const std::string& d : differing_fields(scaler_fields(), sa, sb))
      out.push_back("grad scaler: " + d);
  return out;
}

}  // namespace

bool checkpoints_differ(MPI_Comm comm, const std::string& pa, const std::string& pb,
                        bool model_only, const ReportSink& out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Catalog a = shared_catalog(comm, pa), b = shared_catalog(comm, pb);
  if (model_only) {  // parameters alone: what an export or import carries
    for (Catalog* c : {&a, &b}) {
      c->optimizers.clear();
      c->scaler = ScalerInfo{};
      c->metadata.clear();
    }
  }
  const auto da_all = labelled_datasets(a), db_all = labelled_datasets(b);
  std::map<std::string, const DatasetInfo*> in_b;
  for (const auto& [label, d] : db_all) in_b[label] = &d;
  std::vector<std::string> only_a, only_b, shape;
  struct Pair {
    std::string label;
    const DatasetInfo *a, *b;
  };
  std::vector<Pair> common;
  std::set<std::string> in_a;
  for (const auto& [label, d] : da_all) {
    in_a.insert(label);
    const auto it = in_b.find(label);
    if (it == in_b.end())
      only_a.push_back(label);
    else if (it->second->shape != d.shape)
      shape.push_back(label + ": " + shape_text(d.shape) + " vs " + shape_text(it->second->shape));
    else
      common.push_back({label, &d, it->second});
  }
  for (const auto& [label, d] : db_all)
    if (!in_a.count(label)) only_b.push_back(label);
  std::vector<double> stats(2 * common.size(), 0.0);  // max abs, max rel per dataset
  agree_on(comm, [&] {
    PosixFile fa(pa, O_RDONLY), fb(pb, O_RDONLY);
    std::vector<double> x, y;
    std::vector<char> other;
    for (std::size_t i = 0; i < common.size(); ++i) {
      const DatasetInfo &da = *common[i].a, &db = *common[i].b;
      const auto [lo, hi] = element_share(da.numel, rank, size);
      for_chunks(fa, da, lo, hi, [&](uint64_t first, uint64_t n, const char* p) {
        x.resize(n), y.resize(n);
        host::convert(x.data(), DType::Float64, p, da.dtype, n);
        other.resize(n * dtype_size(db.dtype));
        fb.read_at(other.data(), other.size(), db.offset + first * dtype_size(db.dtype));
        host::convert(y.data(), DType::Float64, other.data(), db.dtype, n);
        for (uint64_t e = 0; e < n; ++e) {
          const double d = std::fabs(x[e] - y[e]);
          const double scale = std::max(std::fabs(x[e]), std::fabs(y[e]));
          const bool nan = std::isnan(x[e]) != std::isnan(y[e]);
          const double abs_d = nan ? INFINITY : std::isnan(d) ? 0.0 : d;
          stats[2 * i] = std::max(stats[2 * i], abs_d);
          if (scale > 0) stats[2 * i + 1] = std::max(stats[2 * i + 1], abs_d / scale);
        }
      });
    }
  });
  std::vector<double> global(stats.size());
  mpi_check(MPI_Allreduce(stats.data(), global.data(), static_cast<int>(stats.size()), MPI_DOUBLE,
                          MPI_MAX, comm),
            "MPI_Allreduce");
  const std::vector<std::string> state = state_differences(a, b);
  int values = 0;
  for (std::size_t i = 0; i < common.size(); ++i) values += global[2 * i] != 0;
  const bool differ =
      values != 0 || !only_a.empty() || !only_b.empty() || !shape.empty() || !state.empty();
  if (rank != 0 || !out.line) return differ;
  out.line(printed("%-48s %14s %14s", "dataset", "max abs diff", "max rel diff"));
  for (std::size_t i = 0; i < common.size(); ++i)
    out.line(
        printed("%-48s %14.6g %14.6g", common[i].label.c_str(), global[2 * i], global[2 * i + 1]));
  for (const auto& n : only_a) out.line("only in " + pa + ": " + n);
  for (const auto& n : only_b) out.line("only in " + pb + ": " + n);
  for (const auto& n : shape) out.line("shapes differ: " + n);
  for (const auto& n : state) out.line("differs (A vs B): " + n);
  // What was compared, so that a verdict never claims more than that.
  if (model_only && differ)
    out.line(
        printed("checkpoints differ in their parameters (--model-only: nothing else compared): %d "
                "dataset(s) by value, %zu only in one, %zu by shape",
                values, only_a.size() + only_b.size(), shape.size()));
  else if (differ)
    out.line(
        printed("checkpoints differ: %d dataset(s) by value, %zu only in one, %zu by shape, %zu "
                "in metadata, hyperparameters or scaler",
                values, only_a.size() + only_b.size(), shape.size(), state.size()));
  else if (model_only)
    out.line(
        "checkpoints have identical parameters (--model-only: optimizer state, "
        "hyperparameters, scaler and metadata not compared)");
  else
    out.line(
        "checkpoints are identical (parameters, optimizer state, hyperparameters, "
        "scaler and metadata)");
  return differ;
}

}  // namespace fsdp::ckpt
