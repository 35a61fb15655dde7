#include "checkpoint/catalog_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/nesting.hpp"

namespace fsdp::ckpt {
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

// The groups that hold data datasets (checkpoint/nesting.hpp): /model, then each optimizer's state
// groups, with the catalog list each fills. Groups a file may lack and does are left out.
using DataGroups = std::vector<std::pair<std::string, std::vector<DatasetInfo>*>>;
struct DataGroupFinder : Writing {
  hid_t file;
  DataGroups groups;
  template <class S>
  void fields(const Node&, const Table<S>&, S&) {}
  void datasets(const Node& n, std::vector<DatasetInfo>& list) {
    if (!n.may_be_absent || H5Lexists(file, n.path.c_str(), H5P_DEFAULT) > 0)
      groups.emplace_back(n.path, &list);
  }
  void strings(const Node&, std::vector<std::pair<std::string, std::string>>&) {}
};

DataGroups data_groups(hid_t file, Catalog& c) {
  DataGroupFinder f{{}, file, {}};
  walk_catalog(f, c);
  return std::move(f.groups);
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

// Opens a checkpoint after checking what read_catalog promises of the file as a whole (its file
// size into `c`).
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
  if (!has_attr(root, kFormatAttr) || read_attr_string(root, kFormatAttr, where) != kFormatName)
    fail(Errc::Format, where + " is an HDF5 file but not an fsdp checkpoint (no root attribute " +
                           kFormatAttr + " = \"" + kFormatName + "\")");
  // The version first: a newer file may lack what this version's schema requires.
  const int64_t version = read_attr_i64(root, kFormatVersionAttr, where);
  if (version > kFormatVersion || version < 1)
    fail(Errc::Version, where + " has checkpoint format version " + std::to_string(version) +
                            "; this library reads up to " + std::to_string(kFormatVersion) +
                            " (upgrade libfsdp)");
  return file;
}

std::string read_layout(hid_t file) {
  if (H5Lexists(file, kLayoutDataset, H5P_DEFAULT) <= 0) return {};
  Hid ds(h5_check(H5Dopen2(file, kLayoutDataset, H5P_DEFAULT), Errc::Format, kLayoutDataset));
  Hid t(h5_check(H5Dget_type(ds), Errc::Format, kLayoutDataset));
  if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) > 0)
    fail(Errc::Format, std::string(kLayoutDataset) + " is not a fixed-length string");
  std::string layout(H5Tget_size(t), '\0');
  h5_check_status(H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, layout.data()), Errc::Corrupt,
                  kLayoutDataset);
  layout.resize(std::strlen(layout.c_str()));
  return layout;
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
  read_attribute_groups(file, "'" + path + "'", c);
  c.layout = read_layout(file);
  const DataGroups groups = data_groups(file, c);
  c.from_index = source == CatalogSource::Index && datasets_from_index(file, groups, c.file_size);
  if (!c.from_index)
    for (const auto& g : groups)
      *g.second = read_datasets(file, g.first, c.file_size, g.second != &c.model);
  return c;
}

}  // namespace fsdp::ckpt
