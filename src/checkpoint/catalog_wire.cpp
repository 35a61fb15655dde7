#include "checkpoint/catalog_wire.hpp"

#include <cstring>
#include <type_traits>

#include "base/error.hpp"
#include "checkpoint/nesting.hpp"

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

// The writing end: each group's fields in the walk's order, a list's length before its items.
struct Put : Writing {
  Out o;
  template <class S>
  void fields(const Node&, const Table<S>& table, const S& s) {
    for (const Field<S>& f : table) std::visit([&](auto m) { put_value(o, s.*m); }, f.member);
  }
  void datasets(const Node&, const std::vector<DatasetInfo>& v) {
    o.num<uint64_t>(v.size());
    for (const DatasetInfo& d : v) fields(Node{}, dataset_fields(), d);
  }
  template <class T, class F>
  void list(const Node& n, const Count& count, const std::vector<T>& items, F&& each) {
    o.num<uint64_t>(items.size());
    Writing::list(n, count, items, each);
  }
  template <class F>
  void optional(const Node& n, bool present, F&& body) {
    o.num<int32_t>(present ? 1 : 0);
    Writing::optional(n, present, body);
  }
  void strings(const Node&, const std::vector<std::pair<std::string, std::string>>& kv) {
    o.num<uint64_t>(kv.size());
    for (const auto& [key, value] : kv) o.str(key), o.str(value);
  }
};

// The reading end: the same, sizing each list from its length.
struct Get : Reading {
  In in;
  template <class S>
  void fields(const Node&, const Table<S>& table, S& s) {
    for (const Field<S>& f : table) std::visit([&](auto m) { get_value(in, s.*m); }, f.member);
  }
  void datasets(const Node&, std::vector<DatasetInfo>& v) {
    v.resize(in.num<uint64_t>());
    for (DatasetInfo& d : v) fields(Node{}, dataset_fields(), d);
  }
  template <class T, class F>
  void list(const Node&, const Count&, std::vector<T>& items, F&& each) {
    sized(items, in.num<uint64_t>(), each);
  }
  template <class F>
  void optional(const Node&, bool& present, F&& body) {
    present = in.num<int32_t>() != 0;
    if (present) body();
  }
  void strings(const Node&, std::vector<std::pair<std::string, std::string>>& kv) {
    kv.resize(in.num<uint64_t>());
    for (auto& [key, value] : kv) key = in.str(), value = in.str();
  }
};

}  // namespace

// What the nesting does not hold first (the layout, the file's size, where the lists came from),
// then the catalog as checkpoint/nesting.hpp walks it.
std::vector<char> serialize(const Catalog& c) {
  Put p;
  p.o.str(c.layout);
  p.o.num(c.file_size);
  p.o.num<int32_t>(c.from_index ? 1 : 0);
  walk_catalog(p, c);
  return std::move(p.o.buf);
}

Catalog deserialize(const std::vector<char>& bytes) {
  Get g{{}, In(bytes)};
  Catalog c;
  c.layout = g.in.str();
  c.file_size = g.in.num<uint64_t>();
  c.from_index = g.in.num<int32_t>() != 0;
  walk_catalog(g, c);
  return c;
}

}  // namespace fsdp::ckpt
