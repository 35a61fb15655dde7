#include "checkpoint/index.hpp"

#include <algorithm>
#include <cstring>

#include "base/crc32c.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/names.hpp"

namespace fsdp::ckpt {
namespace {

constexpr std::size_t kDtypeChars = 8;  // "float32", "float64", NUL-padded

// One row's packed bytes, in this field order (doc/checkpoint-format.md, "/index").
struct RowLayout {
  std::size_t path_chars = 1, max_ndim = 1;
  std::size_t path() const { return 0; }
  std::size_t dtype() const { return path_chars; }
  std::size_t ndim() const { return dtype() + kDtypeChars; }
  std::size_t shape() const { return ndim() + sizeof(int32_t); }
  std::size_t offset() const { return shape() + max_ndim * sizeof(int64_t); }
  std::size_t crc() const { return offset() + sizeof(uint64_t); }
  std::size_t step() const { return crc() + sizeof(uint32_t); }
  std::size_t size() const { return step() + sizeof(int64_t); }
};

// The compound type of a row: little-endian in the file, native in memory (the same on the
// little-endian machines libfsdp supports, but HDF5 converts either way).
Hid row_type(const RowLayout& l, bool file) {
  Hid t(h5_check(H5Tcreate(H5T_COMPOUND, l.size()), Errc::Internal, "H5Tcreate"));
  Hid path = fixed_string_type(l.path_chars), dtype = fixed_string_type(kDtypeChars);
  const hsize_t dims[1] = {l.max_ndim};
  Hid shape(h5_check(H5Tarray_create2(file ? H5T_STD_I64LE : H5T_NATIVE_INT64, 1, dims),
                     Errc::Internal, "H5Tarray_create2"));
  H5Tinsert(t, "path", l.path(), path);
  H5Tinsert(t, "dtype", l.dtype(), dtype);
  H5Tinsert(t, "ndim", l.ndim(), file ? H5T_STD_I32LE : H5T_NATIVE_INT32);
  H5Tinsert(t, "shape", l.shape(), shape);
  H5Tinsert(t, "offset", l.offset(), file ? H5T_STD_U64LE : H5T_NATIVE_UINT64);
  H5Tinsert(t, "crc32c", l.crc(), file ? H5T_STD_U32LE : H5T_NATIVE_UINT32);
  H5Tinsert(t, "step", l.step(), file ? H5T_STD_I64LE : H5T_NATIVE_INT64);
  return t;
}

template <class T>
void put(std::vector<char>& buf, std::size_t at, T v) {
  std::memcpy(buf.data() + at, &v, sizeof v);
}
template <class T>
T get(const std::vector<char>& buf, std::size_t at) {
  T v;
  std::memcpy(&v, buf.data() + at, sizeof v);
  return v;
}

// The index's own checksum: over each row's fields in order, independent of padding and of the
// path and shape widths chosen at save.
uint32_t rows_checksum(const std::vector<IndexRow>& rows) {
  uint32_t c = 0;
  for (const IndexRow& r : rows) {
    c = crc32c(c, r.path.c_str(), r.path.size() + 1);
    const char* dt = dtype_name(r.dtype);
    c = crc32c(c, dt, std::strlen(dt) + 1);
    const auto nd = static_cast<int32_t>(r.shape.size());
    c = crc32c(c, &nd, sizeof nd);
    c = crc32c(c, r.shape.data(), r.shape.size() * sizeof(int64_t));
    c = crc32c(c, &r.offset, sizeof r.offset);
    c = crc32c(c, &r.crc, sizeof r.crc);
    c = crc32c(c, &r.step, sizeof r.step);
  }
  return c;
}

// HDF5 names of the two dtypes the format stores.
bool parse_dtype(const std::string& s, DType& out) {
  if (s == dtype_name(DType::Float32)) return out = DType::Float32, true;
  if (s == dtype_name(DType::Float64)) return out = DType::Float64, true;
  return false;
}

std::string fixed_string(const std::vector<char>& buf, std::size_t at, std::size_t chars) {
  const char* p = buf.data() + at;
  return std::string(p, strnlen(p, chars));
}

// Whether the dataset at `path` still starts at `offset`: h5repack and similar tools copy /index
// but move the data.
bool offset_matches(hid_t file, const IndexRow& row) {
  if (H5Lexists(file, row.path.c_str(), H5P_DEFAULT) <= 0) return false;
  const hid_t id = H5Dopen2(file, row.path.c_str(), H5P_DEFAULT);
  if (id < 0) return false;
  Hid ds(id);
  return H5Dget_offset(ds) == row.offset;
}

}  // namespace

void write_index(hid_t file, const std::vector<IndexRow>& rows) {
  RowLayout l;
  for (const IndexRow& r : rows) {
    l.path_chars = std::max(l.path_chars, r.path.size() + 1);
    l.max_ndim = std::max(l.max_ndim, r.shape.size());
  }
  std::vector<char> buf(std::max<std::size_t>(rows.size(), 1) * l.size(), '\0');
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const IndexRow& r = rows[i];
    const std::size_t at = i * l.size();
    std::memcpy(buf.data() + at + l.path(), r.path.data(), r.path.size());
    const char* dt = dtype_name(r.dtype);
    std::memcpy(buf.data() + at + l.dtype(), dt, std::strlen(dt));
    put(buf, at + l.ndim(), static_cast<int32_t>(r.shape.size()));
    for (std::size_t d = 0; d < r.shape.size(); ++d)
      put(buf, at + l.shape() + d * sizeof(int64_t), r.shape[d]);
    put(buf, at + l.offset(), r.offset);
    put(buf, at + l.crc(), r.crc);
    put(buf, at + l.step(), r.step);
  }
  const hsize_t n = rows.size();
  Hid space(h5_check(H5Screate_simple(1, &n, nullptr), Errc::Io, "/index: dataspace"));
  Hid ftype = row_type(l, true), mtype = row_type(l, false);
  Hid ds(
      h5_check(H5Dcreate2(file, kIndexDataset, ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
               Errc::Io, "creating /index"));
  write_attr_u32(ds, kChecksumAttr, rows_checksum(rows));
  // Every writer holds the same rows: with a parallel file, one collective write.
  Hid dxpl(h5_check(H5Pcreate(H5P_DATASET_XFER), Errc::Io, "H5Pcreate"));
  Hid fapl(h5_check(H5Fget_access_plist(file), Errc::Io, "H5Fget_access_plist"));
  if (H5Pget_driver(fapl) == H5FD_MPIO) H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  if (n > 0)
    h5_check_status(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, dxpl, buf.data()), Errc::Io,
                    "writing /index");
}

std::optional<std::vector<IndexRow>> read_index(hid_t file, std::size_t expected_rows) {
  if (H5Lexists(file, kIndexDataset, H5P_DEFAULT) <= 0) return std::nullopt;
  const hid_t id = H5Dopen2(file, kIndexDataset, H5P_DEFAULT);
  if (id < 0) return std::nullopt;
  Hid ds(id);
  Hid space(H5Dget_space(ds)), ftype(H5Dget_type(ds));
  if (!space.valid() || !ftype.valid() || H5Tget_class(ftype) != H5T_COMPOUND ||
      H5Sget_simple_extent_ndims(space) != 1 || !has_attr(ds, kChecksumAttr))
    return std::nullopt;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  if (n != expected_rows) return std::nullopt;
  // The widths chosen at save: the path string's and the shape array's.
  RowLayout l;
  const int path_i = H5Tget_member_index(ftype, "path");
  const int shape_i = H5Tget_member_index(ftype, "shape");
  if (path_i < 0 || shape_i < 0) return std::nullopt;
  Hid path_t(H5Tget_member_type(ftype, static_cast<unsigned>(path_i)));
  Hid shape_t(H5Tget_member_type(ftype, static_cast<unsigned>(shape_i)));
  if (!path_t.valid() || !shape_t.valid() || H5Tget_class(path_t) != H5T_STRING ||
      H5Tis_variable_str(path_t) > 0 || H5Tget_class(shape_t) != H5T_ARRAY ||
      H5Tget_array_ndims(shape_t) != 1)
    return std::nullopt;
  hsize_t dims = 0;
  H5Tget_array_dims2(shape_t, &dims);
  l.path_chars = H5Tget_size(path_t);
  l.max_ndim = dims;
  std::vector<char> buf(std::max<hsize_t>(n, 1) * l.size(), '\0');
  Hid mtype = row_type(l, false);
  if (n > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    return std::nullopt;
  std::vector<IndexRow> rows(n);
  for (std::size_t i = 0; i < n; ++i) {
    IndexRow& r = rows[i];
    const std::size_t at = i * l.size();
    r.path = fixed_string(buf, at + l.path(), l.path_chars);
    if (!parse_dtype(fixed_string(buf, at + l.dtype(), kDtypeChars), r.dtype)) return std::nullopt;
    const auto nd = get<int32_t>(buf, at + l.ndim());
    if (nd < 0 || static_cast<std::size_t>(nd) > l.max_ndim) return std::nullopt;
    for (int32_t d = 0; d < nd; ++d)
      r.shape.push_back(get<int64_t>(buf, at + l.shape() + static_cast<std::size_t>(d) * 8));
    r.offset = get<uint64_t>(buf, at + l.offset());
    r.crc = get<uint32_t>(buf, at + l.crc());
    r.step = get<int64_t>(buf, at + l.step());
  }
  if (static_cast<uint32_t>(read_attr_i64(ds, kChecksumAttr, kIndexDataset)) != rows_checksum(rows))
    return std::nullopt;
  if (!rows.empty() && (!offset_matches(file, rows.front()) || !offset_matches(file, rows.back())))
    return std::nullopt;
  return rows;
}

}  // namespace fsdp::ckpt
