#include "checkpoint/catalog_attrs.hpp"

#include "checkpoint/names.hpp"
#include "fsdp.h"

namespace fsdp::ckpt {

RootInfo this_library_root(int64_t world_size, int64_t sharding_factor, const std::string& strategy,
                           const std::string& created, int64_t num_units) {
  RootInfo r;
  r.format_version = kFormatVersion;
  r.library_version = std::to_string(FSDP_VERSION_MAJOR) + "." +
                      std::to_string(FSDP_VERSION_MINOR) + "." + std::to_string(FSDP_VERSION_PATCH);
  r.world_size = world_size;
  r.sharding_factor = sharding_factor;
  r.strategy = strategy;
  r.created = created;
  r.num_units = num_units;
  return r;
}

namespace {
GroupSpec root_group(const RootInfo& root) {
  GroupSpec g{"/", {Attr::str(kFormatAttr, kFormatName)}};
  for (Attr& a : to_attrs(root_fields(), root)) g.attrs.push_back(std::move(a));
  return g;
}
}  // namespace

GroupSpec root_group(int64_t world_size, int64_t sharding_factor, const std::string& strategy,
                     const std::string& created, int64_t num_units) {
  return root_group(this_library_root(world_size, sharding_factor, strategy, created, num_units));
}

std::vector<GroupSpec> attribute_groups(const Catalog& c) {
  std::vector<GroupSpec> groups{root_group(static_cast<const RootInfo&>(c)), {kModelGroup, {}}};
  if (!c.optimizers.empty())
    groups.push_back(
        {kOptimizersGroup, {Attr::i64(kCountAttr, static_cast<int64_t>(c.optimizers.size()))}});
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const OptimizerInfo& o = c.optimizers[k];
    GroupSpec og{optimizer_path(k), to_attrs(optimizer_fields(), o)};
    og.attrs.push_back(Attr::i64(kNumGroupsAttr, static_cast<int64_t>(o.groups.size())));
    groups.push_back(std::move(og));
    for (std::size_t g = 0; g < o.groups.size(); ++g)
      groups.push_back(
          {optimizer_group_path(k, g), to_attrs(optimizer_group_fields(), o.groups[g])});
    for (const std::string& name : state_names(o.kind)) groups.push_back({state_path(k, name), {}});
  }
  if (c.scaler.present) groups.push_back({kScalerGroup, to_attrs(scaler_fields(), c.scaler)});
  GroupSpec meta{kMetadataGroup, {}};
  for (const auto& kv : c.metadata) meta.attrs.push_back(Attr::str(kv.first, kv.second));
  groups.push_back(std::move(meta));
  return groups;
}

std::vector<OptimizerInfo> read_optimizers(hid_t file) {
  std::vector<OptimizerInfo> out;
  if (H5Lexists(file, kOptimizersGroup, H5P_DEFAULT) <= 0) return out;
  Hid all(h5_check(H5Gopen2(file, kOptimizersGroup, H5P_DEFAULT), Errc::Format, kOptimizersGroup));
  const int64_t n = read_attr_i64(all, kCountAttr, kOptimizersGroup);
  for (int64_t k = 0; k < n; ++k) {
    const std::string path = optimizer_path(static_cast<std::size_t>(k));
    Hid g(h5_check(H5Gopen2(file, path.c_str(), H5P_DEFAULT), Errc::Format, path));
    OptimizerInfo o;
    read_attrs(g, optimizer_fields(), o, path);
    const std::vector<std::string> states = state_names(o.kind);
    if (states.empty()) fail(Errc::Format, path + ": unknown optimizer kind '" + o.kind + "'");
    const int64_t ngroups = read_attr_i64(g, kNumGroupsAttr, path);
    if (ngroups < 1 || ngroups > 100000) fail(Errc::Format, path + ": bad num_groups");
    for (int64_t i = 0; i < ngroups; ++i) {
      const std::string gp =
          optimizer_group_path(static_cast<std::size_t>(k), static_cast<std::size_t>(i));
      Hid gg(h5_check(H5Gopen2(file, gp.c_str(), H5P_DEFAULT), Errc::Format, gp));
      o.groups.emplace_back();
      read_attrs(gg, optimizer_group_fields(), o.groups.back(), gp);
    }
    o.states.resize(states.size());
    out.push_back(std::move(o));
  }
  return out;
}

ScalerInfo read_scaler(hid_t file) {
  ScalerInfo s;
  if (H5Lexists(file, kScalerGroup, H5P_DEFAULT) <= 0) return s;
  Hid g(h5_check(H5Gopen2(file, kScalerGroup, H5P_DEFAULT), Errc::Format, kScalerGroup));
  read_attrs(g, scaler_fields(), s, kScalerGroup);
  s.present = true;
  return s;
}

std::vector<std::pair<std::string, std::string>> read_metadata_group(hid_t file) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (H5Lexists(file, kMetadataGroup, H5P_DEFAULT) <= 0) return kv;
  Hid g(h5_check(H5Gopen2(file, kMetadataGroup, H5P_DEFAULT), Errc::Format, kMetadataGroup));
  for (const std::string& k : attr_names(g))
    kv.emplace_back(k, read_attr_string(g, k.c_str(), kMetadataGroup));
  return kv;
}

}  // namespace fsdp::ckpt
