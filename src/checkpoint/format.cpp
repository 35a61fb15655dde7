#include "checkpoint/format.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "checkpoint/h5util.hpp"
#include "checkpoint/index.hpp"

namespace fsdp::ckpt {

std::string escape_name(const std::string& name) {
  if (name == ".") return "%2E";
  if (name == "..") return "%2E%2E";
  std::string out;
  for (char c : name) {
    if (c == '%')
      out += "%25";
    else if (c == '/')
      out += "%2F";
    else
      out += c;
  }
  return out;
}

std::string unescape_name(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const std::string code = s.substr(i + 1, 2);
      if (code == "25" || code == "2F" || code == "2E") {
        out += code == "25" ? '%' : code == "2F" ? '/' : '.';
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> state_names(const std::string& kind) {
  if (kind == "sgd") return {"momentum"};
  if (kind == "adamw") return {"exp_avg", "exp_avg_sq"};
  return {};
}

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

namespace {

bool by_name(const DatasetInfo& a, const DatasetInfo& b) {
  return a.name < b.name;
}

// The element count of a shape, or false when an extent is negative or the count (or its bytes
// in `t`) does not fit 64 bits: values only a damaged or crafted file holds.
bool checked_numel(const std::vector<int64_t>& shape, DType t, uint64_t& numel) {
  uint64_t n = 1, bytes = 0;
  for (int64_t e : shape)
    if (e < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(e), &n)) return false;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(t)), &bytes)) return false;
  numel = n;
  return true;
}

void check_inside_file(const DatasetInfo& d, const std::string& where, uint64_t file_size) {
  // Written so that nothing wraps: offset and size may both be near 2^64 in a crafted file.
  if (d.offset > file_size || d.bytes() > file_size - d.offset)
    fail(Errc::Corrupt, where + ": its data ends beyond byte " + std::to_string(file_size) +
                            ", the file's size (truncated file)");
}

DatasetInfo read_dataset(hid_t group, const std::string& link, const std::string& where,
                         uint64_t file_size, bool optimizer_state) {
  DatasetInfo d;
  d.name = unescape_name(link);
  const std::string w = where + "/" + link;
  Hid ds(h5_check(H5Dopen2(group, link.c_str(), H5P_DEFAULT), Errc::Format, w));
  Hid type(h5_check(H5Dget_type(ds), Errc::Format, w));
  if (H5Tequal(type, H5T_IEEE_F32LE) > 0)
    d.dtype = DType::Float32;
  else if (H5Tequal(type, H5T_IEEE_F64LE) > 0)
    d.dtype = DType::Float64;
  else
    fail(Errc::Format, w + ": element type is not float32 or float64 little-endian");
  Hid space(h5_check(H5Dget_space(ds), Errc::Format, w));
  const int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 0) fail(Errc::Format, w + ": not a simple dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  for (hsize_t e : dims) d.shape.push_back(static_cast<int64_t>(e));
  if (!checked_numel(d.shape, d.dtype, d.numel))
    fail(Errc::Corrupt, w + ": its shape does not fit 64 bits");
  Hid dcpl(h5_check(H5Dget_create_plist(ds), Errc::Format, w));
  const haddr_t offset = H5Dget_offset(ds);
  if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0 || offset == HADDR_UNDEF)
    fail(Errc::Format, w + ": stored chunked, compressed or unallocated; libfsdp reads contiguous "
                           "datasets (rewrite it with h5repack -l CONTI)");
  d.offset = offset;
  check_inside_file(d, w, file_size);
  if (!has_attr(ds, kChecksumAttr))
    fail(Errc::Format, w + ": attribute '" + kChecksumAttr + "' is missing");
  d.crc = static_cast<uint32_t>(read_attr_i64(ds, kChecksumAttr, w));
  if (optimizer_state) d.step = read_attr_i64(ds, kStepAttr, w);
  return d;
}

std::vector<DatasetInfo> read_datasets(hid_t file, const std::string& path, uint64_t file_size,
                                       bool optimizer_state) {
  Hid g(h5_check(H5Gopen2(file, path.c_str(), H5P_DEFAULT), Errc::Format, path));
  std::vector<DatasetInfo> out;
  for (const std::string& link : link_names(g))
    out.push_back(read_dataset(g, link, path, file_size, optimizer_state));
  // Link order is by escaped name; lookups want parameter-name order.
  std::sort(out.begin(), out.end(), by_name);
  return out;
}

// An optimizer's kind and hyperparameter groups; its state datasets come from the index or a walk.
OptimizerInfo read_optimizer_groups(hid_t file, const std::string& path) {
  OptimizerInfo o;
  Hid g(h5_check(H5Gopen2(file, path.c_str(), H5P_DEFAULT), Errc::Format, path));
  o.kind = read_attr_string(g, "kind", path);
  if (state_names(o.kind).empty())
    fail(Errc::Format, path + ": unknown optimizer kind '" + o.kind + "'");
  const int64_t ngroups = read_attr_i64(g, "num_groups", path);
  if (ngroups < 1 || ngroups > 100000) fail(Errc::Format, path + ": bad num_groups");
  for (int64_t i = 0; i < ngroups; ++i) {
    const std::string gp = path + "/groups/" + std::to_string(i);
    Hid gg(h5_check(H5Gopen2(file, gp.c_str(), H5P_DEFAULT), Errc::Format, gp));
    OptimizerGroupInfo h;
    h.pattern = read_attr_string(gg, "pattern", gp);
    h.lr = read_attr_f64(gg, "lr", gp);
    h.weight_decay = read_attr_f64(gg, "weight_decay", gp);
    h.momentum = read_attr_f64(gg, "momentum", gp);
    h.dampening = read_attr_f64(gg, "dampening", gp);
    h.nesterov = read_attr_i64(gg, "nesterov", gp);
    h.beta1 = read_attr_f64(gg, "beta1", gp);
    h.beta2 = read_attr_f64(gg, "beta2", gp);
    h.eps = read_attr_f64(gg, "eps", gp);
    o.groups.push_back(h);
  }
  o.states.resize(state_names(o.kind).size());
  return o;
}

std::string optimizer_path(std::size_t k) {
  return std::string(kOptimizersGroup) + "/" + std::to_string(k);
}

// The groups that hold data datasets: /model, then each optimizer's state groups, with the
// catalog list each fills. Groups that do not exist are left out.
using DataGroups = std::vector<std::pair<std::string, std::vector<DatasetInfo>*>>;
DataGroups data_groups(hid_t file, Catalog& c) {
  DataGroups g;
  g.emplace_back(kModelGroup, &c.model);
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const std::vector<std::string> names = state_names(c.optimizers[k].kind);
    for (std::size_t b = 0; b < names.size(); ++b) {
      const std::string sp = optimizer_path(k) + "/" + names[b];
      if (H5Lexists(file, sp.c_str(), H5P_DEFAULT) > 0)
        g.emplace_back(sp, &c.optimizers[k].states[b]);
    }
  }
  return g;
}

// Fills the groups' dataset lists from /index. False when the index is absent, stale or names a
// dataset outside the groups: the caller then walks the objects, replacing whatever was filled.
bool datasets_from_index(hid_t file, const DataGroups& groups, uint64_t file_size) {
  std::size_t expected = 0;
  for (const auto& g : groups) {
    H5G_info_t info{};
    Hid grp(h5_check(H5Gopen2(file, g.first.c_str(), H5P_DEFAULT), Errc::Format, g.first));
    h5_check_status(H5Gget_info(grp, &info), Errc::Format, g.first);
    expected += info.nlinks;
  }
  const std::optional<std::vector<IndexRow>> rows = read_index(file, expected);
  if (!rows) return false;
  for (const IndexRow& r : *rows) {
    const std::size_t slash = r.path.find_last_of('/');
    if (slash == std::string::npos) return false;
    const std::string group = r.path.substr(0, slash);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == group; });
    if (it == groups.end()) return false;
    // A row the walk could not have produced: the walk decides (and reports) instead.
    if (r.dtype != DType::Float32 && r.dtype != DType::Float64) return false;
    DatasetInfo d;
    if (!checked_numel(r.shape, r.dtype, d.numel)) return false;
    d.name = unescape_name(r.path.substr(slash + 1));
    d.dtype = r.dtype;
    d.shape = r.shape;
    d.crc = r.crc;
    d.offset = r.offset;
    d.step = r.step;
    check_inside_file(d, r.path, file_size);
    it->second->push_back(std::move(d));
  }
  for (const auto& g : groups) std::sort(g.second->begin(), g.second->end(), by_name);
  return true;
}

// Opens a checkpoint after checking what read_catalog promises of the file as a whole, and reads
// the root attributes into `c`.
Hid open_checkpoint(const std::string& path, Catalog& c) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(Errc::Io, "'" + path + "' is not a regular file");
  c.file_size = static_cast<uint64_t>(st.st_size);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0)
    fail(is_h5 == 0 ? Errc::Format : Errc::Io,
         "'" + path + "' is not an HDF5 file (not an fsdp checkpoint)");
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) {
    const std::string m = hdf5_message();
    fail(Errc::Corrupt, "'" + path + "' cannot be opened by HDF5 (truncated or corrupt file)" +
                            (m.empty() ? std::string() : ": " + m));
  }
  Hid file(fid);
  Hid root(h5_check(H5Gopen2(file, "/", H5P_DEFAULT), Errc::Format, "/"));
  const std::string where = "'" + path + "'";
  if (!has_attr(root, "format") || read_attr_string(root, "format", where) != kFormatName)
    fail(Errc::Format, where +
                           " is an HDF5 file but not an fsdp checkpoint (no root attribute "
                           "format = \"" +
                           kFormatName + "\")");
  c.format_version = read_attr_i64(root, "format_version", where);
  if (c.format_version > kFormatVersion || c.format_version < 1)
    fail(Errc::Version, where + " has checkpoint format version " +
                            std::to_string(c.format_version) + "; this library reads up to " +
                            std::to_string(kFormatVersion) + " (upgrade libfsdp)");
  c.library_version = read_attr_string(root, "library_version", where);
  c.strategy = read_attr_string(root, "strategy", where);
  c.created = read_attr_string(root, "created", where);
  c.world_size = read_attr_i64(root, "world_size", where);
  c.sharding_factor = read_attr_i64(root, "sharding_factor", where);
  return file;
}

std::vector<std::pair<std::string, std::string>> read_metadata_group(hid_t file) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (H5Lexists(file, kMetadataGroup, H5P_DEFAULT) <= 0) return kv;
  Hid g(h5_check(H5Gopen2(file, kMetadataGroup, H5P_DEFAULT), Errc::Format, kMetadataGroup));
  for (const std::string& k : attr_names(g))
    kv.emplace_back(k, read_attr_string(g, k.c_str(), kMetadataGroup));
  return kv;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> read_metadata(const std::string& path) {
  QuietHdf5 quiet;
  Catalog header;
  Hid file = open_checkpoint(path, header);
  return read_metadata_group(file);
}

Catalog read_catalog(const std::string& path, CatalogSource source) {
  QuietHdf5 quiet;
  Catalog c;
  Hid file = open_checkpoint(path, c);
  if (H5Lexists(file, kLayoutDataset, H5P_DEFAULT) > 0) {
    Hid ds(h5_check(H5Dopen2(file, kLayoutDataset, H5P_DEFAULT), Errc::Format, kLayoutDataset));
    Hid t(h5_check(H5Dget_type(ds), Errc::Format, kLayoutDataset));
    if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) > 0)
      fail(Errc::Format, std::string(kLayoutDataset) + " is not a fixed-length string");
    c.layout.assign(H5Tget_size(t), '\0');
    h5_check_status(H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.layout.data()), Errc::Corrupt,
                    kLayoutDataset);
    c.layout.resize(std::strlen(c.layout.c_str()));
  }
  if (H5Lexists(file, kOptimizersGroup, H5P_DEFAULT) > 0) {
    Hid g(h5_check(H5Gopen2(file, kOptimizersGroup, H5P_DEFAULT), Errc::Format, kOptimizersGroup));
    const int64_t n = read_attr_i64(g, "count", kOptimizersGroup);
    for (int64_t i = 0; i < n; ++i)
      c.optimizers.push_back(
          read_optimizer_groups(file, optimizer_path(static_cast<std::size_t>(i))));
  }
  const DataGroups groups = data_groups(file, c);
  c.from_index = source == CatalogSource::Index && datasets_from_index(file, groups, c.file_size);
  if (!c.from_index)
    for (const auto& g : groups)
      *g.second = read_datasets(file, g.first, c.file_size, g.second != &c.model);
  if (H5Lexists(file, kScalerGroup, H5P_DEFAULT) > 0) {
    Hid g(h5_check(H5Gopen2(file, kScalerGroup, H5P_DEFAULT), Errc::Format, kScalerGroup));
    c.scaler.present = true;
    c.scaler.scale = read_attr_f64(g, "scale", kScalerGroup);
    c.scaler.growth_factor = read_attr_f64(g, "growth_factor", kScalerGroup);
    c.scaler.backoff_factor = read_attr_f64(g, "backoff_factor", kScalerGroup);
    c.scaler.growth_interval = read_attr_i64(g, "growth_interval", kScalerGroup);
    c.scaler.growth_tracker = read_attr_i64(g, "growth_tracker", kScalerGroup);
  }
  c.metadata = read_metadata_group(file);
  return c;
}

// ---- Serialization: fixed-width little-endian fields and length-prefixed strings ----
namespace {

class Out {
 public:
  template <class T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T>);
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
    if (pos_ + n > b_.size()) fail(Errc::Internal, "checkpoint catalog: truncated message");
  }
  const std::vector<char>& b_;
  std::size_t pos_ = 0;
};

void put(Out& o, const std::vector<DatasetInfo>& v) {
  o.num<uint64_t>(v.size());
  for (const auto& d : v) {
    o.str(d.name);
    o.num<int32_t>(static_cast<int32_t>(d.dtype));
    o.num<uint64_t>(d.shape.size());
    for (int64_t e : d.shape) o.num(e);
    o.num(d.numel), o.num(d.crc), o.num(d.offset), o.num(d.step);
  }
}

std::vector<DatasetInfo> get_datasets(In& in) {
  std::vector<DatasetInfo> v(in.num<uint64_t>());
  for (auto& d : v) {
    d.name = in.str();
    d.dtype = static_cast<DType>(in.num<int32_t>());
    d.shape.resize(in.num<uint64_t>());
    for (auto& e : d.shape) e = in.num<int64_t>();
    d.numel = in.num<uint64_t>(), d.crc = in.num<uint32_t>(), d.offset = in.num<uint64_t>();
    d.step = in.num<int64_t>();
  }
  return v;
}

}  // namespace

std::vector<char> serialize(const Catalog& c) {
  Out o;
  o.num(c.format_version);
  o.str(c.library_version), o.str(c.strategy), o.str(c.created), o.str(c.layout);
  o.num(c.world_size), o.num(c.sharding_factor), o.num(c.file_size);
  o.num<int32_t>(c.from_index ? 1 : 0);
  put(o, c.model);
  o.num<uint64_t>(c.optimizers.size());
  for (const auto& opt : c.optimizers) {
    o.str(opt.kind);
    o.num<uint64_t>(opt.groups.size());
    for (const auto& g : opt.groups) {
      o.str(g.pattern);
      o.num(g.lr), o.num(g.weight_decay), o.num(g.momentum), o.num(g.dampening);
      o.num(g.nesterov), o.num(g.beta1), o.num(g.beta2), o.num(g.eps);
    }
    o.num<uint64_t>(opt.states.size());
    for (const auto& s : opt.states) put(o, s);
  }
  o.num<int32_t>(c.scaler.present ? 1 : 0);
  o.num(c.scaler.scale), o.num(c.scaler.growth_factor), o.num(c.scaler.backoff_factor);
  o.num(c.scaler.growth_interval), o.num(c.scaler.growth_tracker);
  o.num<uint64_t>(c.metadata.size());
  for (const auto& kv : c.metadata) o.str(kv.first), o.str(kv.second);
  return std::move(o.buf);
}

Catalog deserialize(const std::vector<char>& bytes) {
  In in(bytes);
  Catalog c;
  c.format_version = in.num<int64_t>();
  c.library_version = in.str(), c.strategy = in.str(), c.created = in.str(), c.layout = in.str();
  c.world_size = in.num<int64_t>(), c.sharding_factor = in.num<int64_t>();
  c.file_size = in.num<uint64_t>();
  c.from_index = in.num<int32_t>() != 0;
  c.model = get_datasets(in);
  c.optimizers.resize(in.num<uint64_t>());
  for (auto& opt : c.optimizers) {
    opt.kind = in.str();
    opt.groups.resize(in.num<uint64_t>());
    for (auto& g : opt.groups) {
      g.pattern = in.str();
      g.lr = in.num<double>(), g.weight_decay = in.num<double>(), g.momentum = in.num<double>();
      g.dampening = in.num<double>(), g.nesterov = in.num<int64_t>(), g.beta1 = in.num<double>();
      g.beta2 = in.num<double>(), g.eps = in.num<double>();
    }
    opt.states.resize(in.num<uint64_t>());
    for (auto& s : opt.states) s = get_datasets(in);
  }
  c.scaler.present = in.num<int32_t>() != 0;
  c.scaler.scale = in.num<double>(), c.scaler.growth_factor = in.num<double>();
  c.scaler.backoff_factor = in.num<double>(), c.scaler.growth_interval = in.num<int64_t>();
  c.scaler.growth_tracker = in.num<int64_t>();
  c.metadata.resize(in.num<uint64_t>());
  for (auto& kv : c.metadata) kv.first = in.str(), kv.second = in.str();
  return c;
}

}  // namespace fsdp::ckpt
