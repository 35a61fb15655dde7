#include "checkpoint/catalog_wire.hpp"

#include <cstring>
#include <type_traits>

#include "base/error.hpp"
#include "checkpoint/schema.hpp"

namespace fsdp::ckpt {
namespace {

// Fixed-width native fields and length-prefixed strings and lists: both ends are this library
// in one job.
class Out {
 public:
  template <class T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    const char* p = reinterpret_cast<const char*>(&v);
    buf.insert(buf.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    num<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  std::vector<char> buf;
};

class In {
 public:
  explicit In(const std::vector<char>& b) : b_(b) {}
  template <class T>
  T num() {
    T v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = num<uint64_t>();
    need(n);
    std::string s(b_.data() + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  void need(uint64_t n) {
    if (n > b_.size() - pos_) fail(Errc::Internal, "checkpoint catalog: truncated message");
  }
  const std::vector<char>& b_;
  std::size_t pos_ = 0;
};

// One field, by its type.
template <class T>
void put_value(Out& o, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    o.str(v);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    o.num<uint64_t>(v.size());
    for (int64_t e : v) o.num(e);
  } else {
    o.num(v);
  }
}

template <class T>
void get_value(In& in, T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    v = in.str();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    v.resize(in.num<uint64_t>());
    for (int64_t& e : v) e = in.num<int64_t>();
  } else {
    v = in.num<T>();
  }
}

template <class S>
void put(Out& o, const Table<S>& table, const S& s) {
  for (const Field<S>& f : table) std::visit([&](auto m) { put_value(o, s.*m); }, f.member);
}

template <class S>
void get(In& in, const Table<S>& table, S& s) {
  for (const Field<S>& f : table) std::visit([&](auto m) { get_value(in, s.*m); }, f.member);
}

void put_datasets(Out& o, const std::vector<DatasetInfo>& v) {
  o.num<uint64_t>(v.size());
  for (const DatasetInfo& d : v) put(o, dataset_fields(), d);
}

std::vector<DatasetInfo> get_datasets(In& in) {
  std::vector<DatasetInfo> v(in.num<uint64_t>());
  for (DatasetInfo& d : v) get(in, dataset_fields(), d);
  return v;
}

}  // namespace

std::vector<char> serialize(const Catalog& c) {
  Out o;
  put(o, root_fields(), static_cast<const RootInfo&>(c));
  o.str(c.layout);
  o.num(c.file_size);
  o.num<int32_t>(c.from_index ? 1 : 0);
  put_datasets(o, c.model);
  o.num<uint64_t>(c.optimizers.size());
  for (const OptimizerInfo& opt : c.optimizers) {
    put(o, optimizer_fields(), opt);
    o.num<uint64_t>(opt.groups.size());
    for (const OptimizerGroupInfo& g : opt.groups) put(o, optimizer_group_fields(), g);
    o.num<uint64_t>(opt.states.size());
    for (const auto& s : opt.states) put_datasets(o, s);
  }
  o.num<int32_t>(c.scaler.present ? 1 : 0);
  put(o, scaler_fields(), c.scaler);
  o.num<uint64_t>(c.metadata.size());
  for (const auto& kv : c.metadata) o.str(kv.first), o.str(kv.second);
  return std::move(o.buf);
}

Catalog deserialize(const std::vector<char>& bytes) {
  In in(bytes);
  Catalog c;
  get(in, root_fields(), static_cast<RootInfo&>(c));
  c.layout = in.str();
  c.file_size = in.num<uint64_t>();
  c.from_index = in.num<int32_t>() != 0;
  c.model = get_datasets(in);
  c.optimizers.resize(in.num<uint64_t>());
  for (OptimizerInfo& opt : c.optimizers) {
    get(in, optimizer_fields(), opt);
    opt.groups.resize(in.num<uint64_t>());
    for (OptimizerGroupInfo& g : opt.groups) get(in, optimizer_group_fields(), g);
    opt.states.resize(in.num<uint64_t>());
    for (auto& s : opt.states) s = get_datasets(in);
  }
  c.scaler.present = in.num<int32_t>() != 0;
  get(in, scaler_fields(), c.scaler);
  c.metadata.resize(in.num<uint64_t>());
  for (auto& kv : c.metadata) kv.first = in.str(), kv.second = in.str();
  return c;
}

}  // namespace fsdp::ckpt
