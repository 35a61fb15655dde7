#include "checkpoint/catalog.hpp"

#include <algorithm>

namespace fsdp::ckpt {

const DatasetInfo* find_dataset(const std::vector<DatasetInfo>& by_name, const std::string& name) {
  auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                             [](const DatasetInfo& d, const std::string& n) { return d.name < n; });
  return it != by_name.end() && it->name == name ? &*it : nullptr;
}

namespace {
bool same_list(const std::vector<DatasetInfo>& a, const std::vector<DatasetInfo>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const DatasetInfo& x, const DatasetInfo& y) {
                      return x.name == y.name && x.dtype == y.dtype && x.shape == y.shape &&
                             x.crc == y.crc && x.offset == y.offset && x.step == y.step;
                    });
}
}  // namespace

bool same_datasets(const Catalog& a, const Catalog& b) {
  if (!same_list(a.model, b.model) || a.optimizers.size() != b.optimizers.size()) return false;
  for (std::size_t k = 0; k < a.optimizers.size(); ++k) {
    const auto &sa = a.optimizers[k].states, &sb = b.optimizers[k].states;
    if (sa.size() != sb.size()) return false;
    for (std::size_t i = 0; i < sa.size(); ++i)
      if (!same_list(sa[i], sb[i])) return false;
  }
  return true;
}

uint64_t Catalog::total_bytes() const {
  uint64_t b = 0;
  for (const auto& d : model) b += d.bytes();
  for (const auto& o : optimizers)
    for (const auto& s : o.states)
      for (const auto& d : s) b += d.bytes();
  return b;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

std::pair<uint64_t, uint64_t> element_share(uint64_t n, int rank, int size) {
  return {n * static_cast<uint64_t>(rank) / static_cast<uint64_t>(size),
          n * static_cast<uint64_t>(rank + 1) / static_cast<uint64_t>(size)};
}

}  // namespace fsdp::ckpt
