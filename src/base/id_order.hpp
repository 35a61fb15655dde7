// The objects of a registry kept by id, in id order: creation order, the same on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace fsdp {

template <class T>
std::vector<T*> in_id_order(const std::map<uint64_t, std::unique_ptr<T>>& by_id) {
  std::vector<T*> all;
  all.reserve(by_id.size());
  for (const auto& [id, p] : by_id) all.push_back(p.get());
  return all;
}

}  // namespace fsdp
