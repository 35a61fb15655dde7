#include "checkpoint/catalog_attrs.hpp"

#include "checkpoint/names.hpp"
#include "checkpoint/nesting.hpp"
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

// The save's side: every group, created in the walk's order, with its attributes.
struct AttrWriter : Writing {
  std::vector<GroupSpec> groups;

  GroupSpec& group(const std::string& path) {
    for (auto g = groups.rbegin(); g != groups.rend(); ++g)
      if (g->path == path) return *g;
    return groups.emplace_back(GroupSpec{path, {}});
  }
  template <class S>
  void fields(const Node& n, const Table<S>& table, const S& s) {
    if constexpr (std::is_same_v<S, RootInfo>)  // the format's magic first
      groups.push_back({n.path, {Attr::str(kFormatAttr, kFormatName)}});
    for (Attr& a : to_attrs(table, s)) group(n.path).attrs.push_back(std::move(a));
  }
  void datasets(const Node& n, const std::vector<DatasetInfo>&) { group(n.path); }
  template <class T, class F>
  void list(const Node& n, const Count& count, const std::vector<T>& items, F&& each) {
    if (items.empty() && n.may_be_absent) return;
    group(count.holder).attrs.push_back(Attr::i64(count.attr, static_cast<int64_t>(items.size())));
    Writing::list(n, count, items, each);
  }
  void strings(const Node& n, const std::vector<std::pair<std::string, std::string>>& kv) {
    GroupSpec& g = group(n.path);
    for (const auto& [key, value] : kv) g.attrs.push_back(Attr::str(key, value));
  }
};

bool exists(hid_t file, const std::string& path) {
  return H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0;
}

Hid open_group(hid_t file, const std::string& path) {
  return Hid(h5_check(H5Gopen2(file, path.c_str(), H5P_DEFAULT), Errc::Format, path));
}

// The load's side: every group's attributes into the catalog, the lists sized as the file says
// (the datasets themselves are catalog_reader's). A group the file must have and lacks is
// refused (Errc::Format) naming it.
struct AttrReader : Reading {
  hid_t file;
  std::string file_name;  // how errors name the root: the file

  template <class S>
  void fields(const Node& n, const Table<S>& table, S& s) {
    read_attrs(open_group(file, n.path), table, s, n.path == "/" ? file_name : n.path);
    if constexpr (std::is_same_v<S, OptimizerInfo>)
      if (state_names(s.kind).empty())
        fail(Errc::Format, n.path + ": unknown optimizer kind '" + s.kind + "'");
  }
  void datasets(const Node&, std::vector<DatasetInfo>&) {}
  template <class T, class F>
  void list(const Node& n, const Count& count, std::vector<T>& items, F&& each) {
    if (n.may_be_absent && !exists(file, n.path)) return;
    const int64_t size = read_attr_i64(open_group(file, count.holder), count.attr, count.holder);
    if (size < count.min || size > count.max)
      fail(Errc::Format, count.holder + ": bad " + count.attr);
    sized(items, static_cast<std::size_t>(size), each);
  }
  template <class F>
  void optional(const Node& n, bool& present, F&& body) {
    present = exists(file, n.path);
    if (present) body();
  }
  void strings(const Node& n, std::vector<std::pair<std::string, std::string>>& kv) {
    if (n.may_be_absent && !exists(file, n.path)) return;
    Hid g = open_group(file, n.path);
    for (const std::string& k : attr_names(g))
      kv.emplace_back(k, read_attr_string(g, k.c_str(), n.path));
  }
};

}  // namespace

std::vector<GroupSpec> attribute_groups(const Catalog& c) {
  AttrWriter w;
  walk_catalog(w, c);
  return std::move(w.groups);
}

void read_attribute_groups(hid_t file, const std::string& file_name, Catalog& c) {
  AttrReader r{{}, file, file_name};
  walk_catalog(r, c);
}

std::vector<std::pair<std::string, std::string>> read_metadata_group(hid_t file) {
  Catalog c;
  AttrReader{{}, file, {}}.strings(Node{kMetadataGroup, nullptr, true}, c.metadata);
  return c.metadata;
}

}  // namespace fsdp::ckpt
