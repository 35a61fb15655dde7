#include "checkpoint/h5util.hpp"

namespace fsdp::ckpt {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

void Hid::reset() noexcept {
  if (id_ < 0) return;
  QuietHdf5 quiet;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void Hid::close(const std::string& what) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  herr_t rc = 0;
  switch (H5Iget_type(id)) {
    case H5I_FILE: rc = H5Fclose(id); break;
    case H5I_DATASET: rc = H5Dclose(id); break;
    default: {
      Hid other(id);  // closes by type
      return;
    }
  }
  h5_check_status(rc, Errc::Io, what);
}

void close_file_checked(Hid& file, const std::string& what) {
  if (!file.valid()) return;
  // A failed flush inside H5Fclose (a full disk) leaves HDF5 1.10's file object half released:
  // a second close, or HDF5's cleanup at exit, then crashes. So the metadata is flushed first;
  // if that fails, the file is left open (HDF5 closes it at exit, retrying the flush into the
  // already unlinked temporary file) and the error reported.
  if (H5Fflush(file, H5F_SCOPE_LOCAL) < 0) {
    const std::string m = hdf5_message();
    file.release();
    fail(Errc::Io, m.empty() ? what : what + ": " + m);
  }
  file.close(what);
}

QuietHdf5::QuietHdf5() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietHdf5::~QuietHdf5() {
  H5Eset_auto2(H5E_DEFAULT, func_, data_);
}

namespace {

herr_t collect(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc) static_cast<std::vector<std::string>*>(out)->push_back(e->desc);
  return 0;
}

}  // namespace

std::string hdf5_message() {
  // Upward: the innermost frame (where the error was detected) first, the API call's last.
  std::vector<std::string> frames;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &frames);
  if (frames.empty()) return "";
  // A failed system call (the file driver's frame) carries errno's text, e.g. "No space left on
  // device": the cause a user can act on, after what HDF5 was doing.
  for (const std::string& f : frames) {
    const std::string tag = "error message = '";
    const std::size_t at = f.find(tag);
    if (at == std::string::npos) continue;
    const std::size_t end = f.find('\'', at + tag.size());
    return frames.back() + ": " + f.substr(at + tag.size(), end - at - tag.size());
  }
  return frames.front();
}

hid_t h5_check(hid_t id, Errc code, const std::string& what) {
  if (id < 0) {
    std::string m = hdf5_message();
    fail(code, m.empty() ? what : what + ": " + m);
  }
  return id;
}

void h5_check_status(herr_t rc, Errc code, const std::string& what) {
  if (rc < 0) h5_check(-1, code, what);
}

namespace {

void write_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* v) {
  Hid space(h5_check(H5Screate(H5S_SCALAR), Errc::Io, "H5Screate"));
  Hid a(h5_check(H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT), Errc::Io,
                 std::string("creating attribute '") + name + "'"));
  h5_check_status(H5Awrite(a, mem_type, v), Errc::Io,
                  std::string("writing attribute '") + name + "'");
}

Hid open_attr(hid_t obj, const char* name, const std::string& where) {
  if (H5Aexists(obj, name) <= 0)
    fail(Errc::Format, where + ": attribute '" + name + "' is missing");
  return Hid(h5_check(H5Aopen(obj, name, H5P_DEFAULT), Errc::Format,
                      where + ": attribute '" + name + "'"));
}

void read_numeric(hid_t obj, const char* name, const std::string& where, hid_t mem_type, void* v) {
  Hid a = open_attr(obj, name, where);
  Hid t(h5_check(H5Aget_type(a), Errc::Format, where + ": attribute '" + name + "'"));
  const H5T_class_t c = H5Tget_class(t);
  if (c != H5T_INTEGER && c != H5T_FLOAT)
    fail(Errc::Format, where + ": attribute '" + name + "' is not a number");
  h5_check_status(H5Aread(a, mem_type, v), Errc::Format,
                  where + ": reading attribute '" + name + "'");
}

}  // namespace

Hid fixed_string_type(std::size_t chars) {
  Hid t(h5_check(H5Tcopy(H5T_C_S1), Errc::Internal, "H5Tcopy"));
  H5Tset_size(t, chars);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  return t;
}

void write_attr_string(hid_t obj, const char* name, const std::string& value) {
  Hid t = fixed_string_type(value.empty() ? 1 : value.size());
  H5Tset_cset(t, H5T_CSET_UTF8);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attr(obj, name, t, t, padded.data());
}

void write_attr_i64(hid_t obj, const char* name, int64_t value) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attr_u32(hid_t obj, const char* name, uint32_t value) {
  write_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value);
}

void write_attr_f64(hid_t obj, const char* name, double value) {
  write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

bool has_attr(hid_t obj, const char* name) {
  return H5Aexists(obj, name) > 0;
}

std::string read_attr_string(hid_t obj, const char* name, const std::string& where) {
  Hid a = open_attr(obj, name, where);
  Hid t(h5_check(H5Aget_type(a), Errc::Format, where + ": attribute '" + name + "'"));
  if (H5Tget_class(t) != H5T_STRING)
    fail(Errc::Format, where + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(t) > 0) {  // written by another tool (h5py writes these)
    Hid mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    char* s = nullptr;
    h5_check_status(H5Aread(a, mt, &s), Errc::Format, where + ": attribute '" + name + "'");
    std::string v = s ? s : "";
    H5free_memory(s);
    return v;
  }
  const std::size_t n = H5Tget_size(t);
  std::string v(n, '\0');
  h5_check_status(H5Aread(a, t, v.data()), Errc::Format, where + ": attribute '" + name + "'");
  v.resize(v.find('\0') == std::string::npos ? n : v.find('\0'));
  return v;
}

int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where) {
  int64_t v = 0;
  read_numeric(obj, name, where, H5T_NATIVE_INT64, &v);
  return v;
}

double read_attr_f64(hid_t obj, const char* name, const std::string& where) {
  double v = 0;
  read_numeric(obj, name, where, H5T_NATIVE_DOUBLE, &v);
  return v;
}

namespace {

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  h5_check_status(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names),
                  Errc::Format, "listing attributes");
  return names;
}

std::vector<std::string> link_names(hid_t group) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  h5_check_status(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &names),
                  Errc::Format, "listing a group");
  return names;
}

}  // namespace fsdp::ckpt
