// Fuzz target: everything libfsdp reads from a checkpoint besides the values. The input does not
// become the file's bytes (that would fuzz HDF5's own parser, not libfsdp); it drives a writer of
// a well-formed HDF5 file whose content is adversarial: root attributes of the wrong type or
// value, /layout of any type, dataset names, element types, shapes, storage, checksums and steps,
// optimizer groups, user metadata, and an /index whose own checksum is right but whose rows lie
// (shapes that overflow, offsets past the end, unknown dtypes, paths outside the groups).
// The catalog read from it (from the index and by walking the groups) must either fail with a
// checkpoint error (Format, Corrupt, Version) or keep read_catalog's promises: every dataset a
// float32/float64 array whose bytes lie inside the file; and a catalog survives serialization.
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint/format.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/index.hpp"
#include "fuzz_input.hpp"

namespace ck = fsdp::ckpt;
using fsdp::DType;

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what.c_str());
  std::abort();
}

// An attribute that should be an integer: absent, the sane value, any value, or another type.
void attr_int_raw(hid_t obj, const char* name, FuzzInput& in, int64_t sane) {
  switch (in.pick(6)) {
    case 0: return;
    case 1: ck::write_attr_string(obj, name, in.str(12)); return;
    case 2: ck::write_attr_f64(obj, name, in.f64()); return;
    case 3: ck::write_attr_i64(obj, name, in.i64()); return;
    case 4: ck::write_attr_u32(obj, name, static_cast<uint32_t>(in.u64())); return;
    default: ck::write_attr_i64(obj, name, sane);
  }
}

void attr_f64_raw(hid_t obj, const char* name, FuzzInput& in) {
  switch (in.pick(4)) {
    case 0: return;
    case 1: ck::write_attr_string(obj, name, in.str(8)); return;
    case 2: ck::write_attr_i64(obj, name, in.i64()); return;
    default: ck::write_attr_f64(obj, name, in.f64());
  }
}

// A variable-length string attribute (libfsdp writes fixed-length ones; other tools may not).
void attr_vlen_string(hid_t obj, const char* name, const std::string& value) {
  ck::Hid t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, H5T_VARIABLE);
  ck::Hid s(H5Screate(H5S_SCALAR));
  ck::Hid a(H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT));
  const char* v = value.c_str();
  if (a.valid()) H5Awrite(a, t, &v);
}

void attr_str_raw(hid_t obj, const char* name, FuzzInput& in, const std::string& sane) {
  switch (in.pick(6)) {
    case 0: return;
    case 1: ck::write_attr_i64(obj, name, in.i64()); return;
    case 2: ck::write_attr_string(obj, name, in.str(24)); return;
    case 3: attr_vlen_string(obj, name, in.str(24)); return;
    default: ck::write_attr_string(obj, name, sane);
  }
}

// The generator's own writes may be refused by HDF5 (a name already taken): that attribute is
// then left out, and the file is read all the same.
template <class F>
void attempt(F write) {
  try {
    write();
  } catch (const fsdp::Error&) {
  }
}
void attr_int(hid_t obj, const char* name, FuzzInput& in, int64_t sane) {
  attempt([&] { attr_int_raw(obj, name, in, sane); });
}
void attr_f64(hid_t obj, const char* name, FuzzInput& in) {
  attempt([&] { attr_f64_raw(obj, name, in); });
}
void attr_str(hid_t obj, const char* name, FuzzInput& in, const std::string& sane) {
  attempt([&] { attr_str_raw(obj, name, in, sane); });
}

hid_t element_type(FuzzInput& in) {
  switch (in.pick(6)) {
    case 0: return H5T_IEEE_F64LE;
    case 1: return H5T_IEEE_F32BE;
    case 2: return H5T_STD_I32LE;
    case 3: return H5T_STD_U8LE;
    default: return H5T_IEEE_F32LE;
  }
}

// A name for a link: the escaped parameter name, or (rarely) a raw string HDF5 may refuse.
std::string link_name(FuzzInput& in) {
  std::string name = in.str(10);
  if (name.empty()) name = "p";
  return in.pick(8) == 0 ? name : ck::escape_name(name);
}

struct Written {
  std::string path;
  DType dtype;
  std::vector<int64_t> shape;
};

// A dataset group (/model or an optimizer state) of fuzzed datasets.
void data_group(hid_t file, const std::string& path, FuzzInput& in, bool state,
                std::vector<Written>& written) {
  ck::Hid g(H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) return;
  const std::size_t n = in.pick(5);
  for (std::size_t k = 0; k < n; ++k) {
    const std::string link = link_name(in);
    const hid_t type = element_type(in);
    const int nd = static_cast<int>(in.pick(4));
    hsize_t dims[3];
    hsize_t numel = 1;
    for (int d = 0; d < nd; ++d) dims[d] = in.pick(7), numel *= dims[d];
    ck::Hid space(nd ? H5Screate_simple(nd, dims, nullptr) : H5Screate(H5S_SCALAR));
    ck::Hid dcpl(H5Pcreate(H5P_DATASET_CREATE));
    const std::size_t storage = in.pick(4);
    if (storage == 1 && nd > 0 && numel > 0) {
      hsize_t chunk[3] = {1, 1, 1};
      H5Pset_chunk(dcpl, nd, chunk);
    } else {
      H5Pset_layout(dcpl, H5D_CONTIGUOUS);
      if (storage != 2) H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);  // 2: never allocated
    }
    ck::Hid ds(H5Dcreate2(g, link.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    if (!ds.valid()) continue;
    attr_int(ds, ck::kChecksumAttr, in, 0);
    if (state) attr_int(ds, ck::kStepAttr, in, 1);
    Written w{path + "/" + link,
              H5Tequal(type, H5T_IEEE_F64LE) > 0 ? DType::Float64 : DType::Float32,
              {}};
    for (int d = 0; d < nd; ++d) w.shape.push_back(static_cast<int64_t>(dims[d]));
    written.push_back(w);
  }
}

// /index: rows for what was written, then lies: any field of any row replaced.
void index_table(hid_t file, FuzzInput& in, const std::vector<Written>& written) {
  std::vector<ck::IndexRow> rows;
  for (const Written& w : written) {
    ck::IndexRow r;
    r.path = w.path, r.dtype = w.dtype, r.shape = w.shape, r.offset = 2048, r.step = -1;
    rows.push_back(r);
  }
  const std::size_t lies = in.pick(6);
  for (std::size_t l = 0; l < lies; ++l) {
    if (rows.empty() || in.pick(5) == 0) rows.push_back({});
    ck::IndexRow& r = rows[in.pick(rows.size())];
    switch (in.pick(7)) {
      case 0: r.path = in.coin() ? in.str(24) : "/model/" + in.str(8); break;
      case 1: r.dtype = static_cast<DType>(in.u8()); break;
      case 2: r.shape.push_back(in.i64()); break;
      case 3: r.shape.assign(in.pick(40), static_cast<int64_t>(in.u64() >> in.pick(64))); break;
      case 4: r.offset = in.u64(); break;
      case 5: r.crc = static_cast<uint32_t>(in.u64()); break;
      default: r.step = in.i64();
    }
  }
  if (in.coin() && !rows.empty()) rows.pop_back();
  try {
    ck::write_index(file, rows);
  } catch (const fsdp::Error&) {
    // An index libfsdp refuses to write is one no file of ours has.
  }
}

void write_file(const std::string& path, FuzzInput& in) {
  ck::Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!file.valid()) broken("cannot create " + path);
  ck::Hid root(H5Gopen2(file, "/", H5P_DEFAULT));
  attr_str(root, "format", in, ck::kFormatName);
  attr_int(root, "format_version", in, ck::kFormatVersion);
  attr_str(root, "library_version", in, "0.7.0");
  attr_str(root, "strategy", in, "full");
  attr_str(root, "created", in, "2026-11-21T00:00:00Z");
  attr_int(root, "world_size", in, 2);
  attr_int(root, "sharding_factor", in, 2);
  if (in.coin()) {  // /layout: a fixed string (as written), a variable one, or numbers
    const std::string text = in.str(40);
    ck::Hid t(in.coin() ? ck::fixed_string_type(text.size() + 1) : ck::Hid(H5Tcopy(H5T_STD_I32LE)));
    ck::Hid s(H5Screate(H5S_SCALAR));
    ck::Hid ds(H5Dcreate2(file, ck::kLayoutDataset, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (ds.valid() && H5Tget_class(t) == H5T_STRING) {
      std::vector<char> buf(text.begin(), text.end());
      buf.push_back('\0');
      H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    }
  }
  std::vector<Written> written;
  data_group(file, ck::kModelGroup, in, false, written);
  if (in.coin()) {
    ck::Hid g(H5Gcreate2(file, ck::kOptimizersGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    attr_int(g, "count", in, 1);
    const std::string kinds[] = {"sgd", "adamw", in.str(8)};
    const std::string kind = kinds[in.pick(3)];
    ck::Hid o(H5Gcreate2(file, "/optimizers/0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    attr_str(o, "kind", in, kind);
    attr_int(o, "num_groups", in, 1);
    ck::Hid gs(H5Gcreate2(file, "/optimizers/0/groups", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ck::Hid g0(H5Gcreate2(file, "/optimizers/0/groups/0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    attr_str(g0, "pattern", in, "");
    for (const char* h : {"lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps"})
      attr_f64(g0, h, in);
    attr_int(g0, "nesterov", in, 0);
    for (const std::string& s : ck::state_names(kind == "adamw" ? "adamw" : "sgd"))
      if (in.coin()) data_group(file, "/optimizers/0/" + s, in, true, written);
  }
  if (in.coin()) {
    ck::Hid g(H5Gcreate2(file, ck::kScalerGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (const char* a : {"scale", "growth_factor", "backoff_factor"}) attr_f64(g, a, in);
    attr_int(g, "growth_interval", in, 2000);
    attr_int(g, "growth_tracker", in, 0);
  }
  if (in.coin()) {
    ck::Hid g(H5Gcreate2(file, ck::kMetadataGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const std::size_t n = in.pick(4);
    for (std::size_t k = 0; k < n; ++k) {
      std::string key = in.str(10);
      if (key.empty() || key.find('\0') != std::string::npos) key = "k" + std::to_string(k);
      attr_str(g, key.c_str(), in, in.str(20));
    }
  }
  if (in.coin()) index_table(file, in, written);
  file.close(path);
}

// What read_catalog promises of every dataset it lists.
void check_list(const std::vector<ck::DatasetInfo>& list, uint64_t file_size) {
  for (const ck::DatasetInfo& d : list) {
    if (d.dtype != DType::Float32 && d.dtype != DType::Float64)
      broken("'" + d.name + "': accepted with a dtype that is not float32/float64");
    unsigned __int128 numel = 1;
    for (int64_t e : d.shape) {
      if (e < 0) broken("'" + d.name + "': accepted with a negative extent");
      numel *= static_cast<uint64_t>(e);
      if (numel > file_size) broken("'" + d.name + "': accepted larger than the file");
    }
    if (numel != d.numel) broken("'" + d.name + "': numel is not the product of the shape");
    if (d.offset > file_size || numel * fsdp::dtype_size(d.dtype) > file_size - d.offset)
      broken("'" + d.name + "': accepted with bytes outside the file");
  }
}

void check_catalog(const ck::Catalog& c) {
  check_list(c.model, c.file_size);
  for (const ck::OptimizerInfo& o : c.optimizers)
    for (const auto& s : o.states) check_list(s, c.file_size);
  const ck::Catalog back = ck::deserialize(ck::serialize(c));
  if (!ck::same_datasets(c, back) || back.metadata != c.metadata || back.layout != c.layout)
    broken("the catalog changed through serialize/deserialize");
}

bool checkpoint_error(const fsdp::Error& e) {
  return e.code() == fsdp::Errc::Format || e.code() == fsdp::Errc::Corrupt ||
         e.code() == fsdp::Errc::Version;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the generator's own refusals are expected
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");  // else memory: a file per input
    return std::string(dir && *dir                       ? dir
                       : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                         : "/tmp") +
           "/fsdp_fuzz_ckpt." + std::to_string(::getpid()) + ".h5";
  }();
  FuzzInput in(data, size);
  write_file(path, in);
  for (ck::CatalogSource source : {ck::CatalogSource::Index, ck::CatalogSource::Walk}) {
    try {
      check_catalog(ck::read_catalog(path, source));
    } catch (const fsdp::Error& e) {
      if (!checkpoint_error(e)) broken(std::string("unexpected error: ") + e.what());
    }
  }
  try {
    ck::read_metadata(path);
  } catch (const fsdp::Error& e) {
    if (!checkpoint_error(e)) broken(std::string("unexpected error: ") + e.what());
  }
  ::unlink(path.c_str());
  return 0;
}
