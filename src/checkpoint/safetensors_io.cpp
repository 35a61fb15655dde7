#include "checkpoint/safetensors_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/error.hpp"
#include "base/group.hpp"
#include "checkpoint/catalog.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/partial_checksums.hpp"
#include "checkpoint/posix_file.hpp"
#include "checkpoint/posix_sink.hpp"
#include "checkpoint/safetensors_format.hpp"
#include "checkpoint/writer.hpp"
#include "memory/host/host_kernels.hpp"

namespace fsdp::ckpt {
namespace {

constexpr uint64_t kChunkBytes = uint64_t{16} << 20;
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// The caller's communicator as a Group (not owned: never freed here).
Group group_of(MPI_Comm comm) {
  Group g;
  g.comm = comm;
  MPI_Comm_rank(comm, &g.rank);
  MPI_Comm_size(comm, &g.size);
  return g;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  return "";
}

std::optional<DType> dtype_of(const std::string& s) {
  if (s == "F32") return DType::Float32;
  if (s == "F64") return DType::Float64;
  if (s == "BF16") return DType::BFloat16;
  if (s == "F16") return DType::Float16;
  return std::nullopt;
}

// One safetensors file to write: its tensors (indices into the export's order) and header.
struct OutFile {
  std::string path, name;
  std::vector<std::size_t> tensors;
  std::vector<TensorEntry> entries;
  std::string header;
};

// Tensors cut into files of at most max_bytes of data, in order (a larger tensor alone).
std::vector<std::vector<std::size_t>> split(const std::vector<uint64_t>& bytes,
                                            uint64_t max_bytes) {
  std::vector<std::vector<std::size_t>> files(1);
  uint64_t in_file = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (max_bytes && !files.back().empty() && in_file + bytes[i] > max_bytes)
      files.emplace_back(), in_file = 0;
    files.back().push_back(i);
    in_file += bytes[i];
  }
  return files;
}

std::string shard_name(std::size_t k, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

// Writes `text` to `path` and fsyncs it.
void write_text_file(const std::string& path, const std::string& text) {
  PosixFile f(path, O_CREAT | O_TRUNC | O_WRONLY);
  f.write_at(text.data(), text.size(), 0);
  f.sync();
}

// One input safetensors file, open on every rank once its header is checked.
struct InFile {
  std::string path;
  SafetensorsHeader header;
  uint64_t size = 0;
  std::optional<PosixFile> file;
};

// Rank 0 reads the header of `path`; every rank parses the same text (or throws the same error,
// naming the file).
SafetensorsHeader shared_header(const Group& c, const std::string& path, uint64_t& file_size) {
  std::string json;
  agree_on(c.comm, [&] {
    if (c.rank != 0) return;
    PosixFile f(path, O_RDONLY);
    file_size = f.size();
    if (file_size < 8) fail(Errc::Format, "'" + path + "' is too short for a safetensors file");
    unsigned char len[8];
    f.read_at(len, 8, 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    if (n > (uint64_t{100} << 20) || 8 + n > file_size)
      fail(Errc::Format, "'" + path + "': header length " + std::to_string(n) +
                             " is not plausible (not a safetensors file)");
    json.resize(n);
    f.read_at(json.data(), n, 8);
  });
  MPI_Bcast(&file_size, 1, MPI_UINT64_T, 0, c.comm);
  json = broadcast_string(c.comm, json);
  SafetensorsHeader h;
  agree_on(c.comm, [&] {
    try {
      h = parse_safetensors(json, file_size);
    } catch (const Error& e) {
      fail(e.code(), "'" + path + "': " + e.what());
    }
  });
  return h;
}

// The files an import reads: one safetensors file, or the shards an index names (each checked
// against the index: present, holding exactly the tensors named for it).
std::vector<InFile> input_files(const Group& c, const std::string& in) {
  std::string index_path, single;
  if (is_directory(in)) {
    index_path = join(in, kIndexFile);
    single = join(in, kSingleFile);
    if (::access(index_path.c_str(), F_OK) != 0) index_path.clear();
  } else if (in.size() >= 5 && in.compare(in.size() - 5, 5, ".json") == 0) {
    index_path = in;
  } else {
    single = in;
  }
  std::vector<InFile> files;
  if (index_path.empty()) {
    InFile f;
    f.path = single;
    f.header = shared_header(c, single, f.size);
    files.push_back(std::move(f));
    return files;
  }
  std::string json;
  agree_on(c.comm, [&] {
    if (c.rank != 0) return;
    PosixFile f(index_path, O_RDONLY);
    const uint64_t n = f.size();
    if (n > (uint64_t{256} << 20))
      fail(Errc::Format, "'" + index_path + "': " + std::to_string(n) + " bytes, not an index");
    json.resize(n);
    f.read_at(json.data(), n, 0);
  });
  json = broadcast_string(c.comm, json);
  SafetensorsIndex index;
  agree_on(c.comm, [&] {
    try {
      index = parse_safetensors_index(json);
    } catch (const Error& e) {
      fail(e.code(), "'" + index_path + "': " + e.what());
    }
  });
  const std::size_t slash = index_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
  std::map<std::string, std::vector<std::string>> by_file;  // shard -> the tensors named for it
  for (const auto& [name, file] : index.weight_map) {
    if (file.empty() || file.find('/') != std::string::npos)
      fail(Errc::Format, "'" + index_path + "': '" + name + "' maps to '" + file +
                             "', not a file name beside the index");
    by_file[file].push_back(name);
  }
  // Every shard must exist before any is read: the error names the first missing one.
  agree_on(c.comm, [&] {
    if (c.rank != 0) return;
    for (const auto& [file, names] : by_file)
      if (::access(join(dir, file).c_str(), R_OK) != 0)
        fail(Errc::Io, "'" + index_path + "' names shard '" + join(dir, file) + "' (holding '" +
                           names.front() + "'" +
                           (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more"
                                             : std::string()) +
                           "), which cannot be read: " + std::strerror(errno));
  });
  for (const auto& [file, names] : by_file) {
    InFile f;
    f.path = join(dir, file);
    f.header = shared_header(c, f.path, f.size);
    std::set<std::string> held;
    for (const TensorEntry& t : f.header.tensors) held.insert(t.name);
    for (const std::string& n : names)
      if (!held.count(n))
        fail(Errc::Format,
             "'" + index_path + "' puts '" + n + "' in '" + f.path + "', which does not hold it");
    if (held.size() != names.size())
      for (const TensorEntry& t : f.header.tensors)
        if (index.weight_map.find(t.name) == index.weight_map.end() ||
            index.weight_map.at(t.name) != file)
          fail(Errc::Format, "'" + f.path + "' holds '" + t.name + "', which '" + index_path +
                                 "' does not list for it");
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

void export_safetensors(MPI_Comm comm, const std::string& checkpoint, const std::string& out,
                        const SafetensorsOptions& options) {
  const Group c = group_of(comm);
  const Catalog cat = shared_catalog(comm, checkpoint, CatalogSource::Index);
  auto out_type = [&](const DatasetInfo& d) { return options.dtype.value_or(d.dtype); };
  auto out_size = [&](const DatasetInfo& d) { return dtype_size(out_type(d)); };
  // The reference serializer orders tensors by alignment (element size, largest first), then
  // name; with one output dtype that is name order.
  std::vector<const DatasetInfo*> order;
  for (const auto& d : cat.model) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [&](const DatasetInfo* a, const DatasetInfo* b) {
    return out_size(*a) != out_size(*b) ? out_size(*a) > out_size(*b) : a->name < b->name;
  });
  std::vector<uint64_t> bytes;
  uint64_t total = 0;
  for (const DatasetInfo* d : order)
    bytes.push_back(d->numel * out_size(*d)), total += bytes.back();
  const bool sharded = options.max_shard_bytes > 0;
  const auto groups = split(bytes, options.max_shard_bytes);
  std::map<std::string, std::string> meta(cat.metadata.begin(), cat.metadata.end());
  meta.emplace("format", "pt");  // what transformers expects of PyTorch weights
  std::vector<OutFile> files(groups.size());
  std::map<std::string, std::string> weight_map;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    OutFile& f = files[k];
    f.name = !sharded ? out : groups.size() == 1 ? kSingleFile : shard_name(k, groups.size());
    f.path = sharded ? join(out, f.name) : out;
    f.tensors = groups[k];
    uint64_t at = 0;
    for (std::size_t i : f.tensors) {
      const DatasetInfo& d = *order[i];
      TensorEntry t;
      t.name = d.name, t.dtype = safetensors_dtype(out_type(d)), t.shape = d.shape;
      t.begin = at, t.end = at + bytes[i], at = t.end;
      f.entries.push_back(t);
      weight_map[d.name] = f.name;
    }
    f.header = safetensors_header_json(f.entries, meta);
  }
  // Rank 0 creates each temporary file, sized, with its header; then every rank writes its share
  // of every tensor, verifying the checkpoint's checksums as it reads.
  agree_on(comm, [&] {
    if (c.rank != 0) return;
    if (sharded && !is_directory(out) && ::mkdir(out.c_str(), 0755) != 0)
      fail(Errc::Io, "cannot create directory '" + out + "': " + std::strerror(errno));
    for (const OutFile& f : files) {
      PosixFile o(temporary_path(f.path), O_CREAT | O_TRUNC | O_WRONLY);
      unsigned char len[8];
      for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(f.header.size() >> (8 * i));
      o.write_at(len, 8, 0);
      o.write_at(f.header.data(), f.header.size(), 8);
      const uint64_t data = f.entries.empty() ? 0 : f.entries.back().end;
      o.resize(8 + f.header.size() + data);
    }
  });
  std::vector<PartialCrc> partial;
  std::vector<std::pair<std::string, DatasetInfo>> datasets;  // labelled for the checksum check
  for (const DatasetInfo* d : order) datasets.emplace_back("/model/" + d->name, *d);
  std::optional<Error> failure = attempt([&] {
    PosixFile in(checkpoint, O_RDONLY);
    std::vector<char> buf, conv;
    for (const OutFile& f : files) {
      PosixSink o(temporary_path(f.path), false);
      const uint64_t data_start = 8 + f.header.size();
      for (std::size_t k = 0; k < f.tensors.size(); ++k) {
        const std::size_t i = f.tensors[k];
        const DatasetInfo& d = *order[i];
        const auto [lo, hi] = element_share(d.numel, c.rank, c.size);
        const std::size_t es = dtype_size(d.dtype), oes = out_size(d);
        uint32_t crc = 0;
        buf.resize(std::min<uint64_t>(kChunkBytes, (hi - lo) * es + 1));
        for (uint64_t e = lo; e < hi;) {
          const uint64_t n = std::min<uint64_t>(kChunkBytes / es, hi - e);
          in.read_at(buf.data(), n * es, d.offset + e * es);
          crc = crc32c_combine(crc, crc32c(0, buf.data(), n * es), n * es);  // verified here
          const char* src = buf.data();
          if (out_type(d) != d.dtype) {
            conv.resize(n * oes);
            host::convert(conv.data(), out_type(d), buf.data(), d.dtype, n);
            src = conv.data();
          }
          o.write_at(src, n * oes, data_start + f.entries[k].begin + e * oes);
          e += n;
        }
        partial.push_back({i, lo, hi - lo, crc});
      }
      o.sync();
      o.close();
    }
  });
  auto remove_temporaries = [&] {
    if (c.rank == 0)
      for (const OutFile& f : files) std::remove(temporary_path(f.path).c_str());
  };
  try {
    agree_error(comm, failure);
    const auto bad = failed_checksums(comm, datasets, partial);
    if (!bad.empty())
      fail(Errc::Corrupt,
           "'" + checkpoint + "' is corrupt (" + bad.front() + "); nothing exported");
    agree_on(comm, [&] {
      if (c.rank != 0) return;
      for (const OutFile& f : files) commit_rename(temporary_path(f.path), f.path);
      if (sharded && files.size() > 1) {
        const std::string index = join(out, kIndexFile);
        write_text_file(temporary_path(index), safetensors_index_json(total, weight_map));
        commit_rename(temporary_path(index), index);
      }
    });
  } catch (...) {
    remove_temporaries();
    throw;
  }
}

void import_safetensors(MPI_Comm comm, const std::string& in, const std::string& out,
                        const SafetensorsOptions& options) {
  const Group c = group_of(comm);
  if (options.dtype && *options.dtype != DType::Float32 && *options.dtype != DType::Float64)
    fail(Errc::InvalidArgument, std::string("dtype ") + dtype_name(*options.dtype) +
                                    ": checkpoints store float32 or float64 parameters");
  std::vector<InFile> files = input_files(c, in);
  // Names must be unique across the files (an index maps each to one file; shards without an
  // index cannot repeat one either).
  std::set<std::string> names;
  for (const InFile& f : files)
    for (const TensorEntry& t : f.header.tensors)
      if (!names.insert(t.name).second)
        fail(Errc::Format, "'" + f.path + "': tensor '" + t.name + "' appears in two files");
  // Every rank opens every input and reads its share with pread while it writes (never a
  // mapping: a file truncated under the import gives an error, not SIGBUS).
  agree_on(comm, [&] {
    for (InFile& f : files) {
      f.file.emplace(f.path, O_RDONLY);
      if (f.file->size() != f.size)
        fail(Errc::Format, "'" + f.path + "' changed size while being imported");
    }
  });
  // A checkpoint of parameters alone: the root, /model and /metadata (the files' own, then where
  // they came from).
  Catalog imported;
  static_cast<RootInfo&>(imported) =
      this_library_root(c.size, c.size, "imported", broadcast_string(comm, utc_timestamp()), 0);
  std::map<std::string, std::string> metadata;
  for (const InFile& f : files) metadata.insert(f.header.metadata.begin(), f.header.metadata.end());
  imported.metadata.assign(metadata.begin(), metadata.end());
  imported.metadata.emplace_back("imported_from", in);
  FileStructure plan;
  plan.groups = attribute_groups(imported);
  DatasetSpec layout;
  layout.path = kLayoutDataset;
  layout.text = "{\"units\": [], \"imported_from\": \"safetensors\"}";
  plan.datasets.push_back(layout);
  std::vector<WritePiece> pieces;
  for (const InFile& f : files)
    for (const TensorEntry& t : f.header.tensors) {
      const std::optional<DType> src = dtype_of(t.dtype);
      if (!src) {
        if (c.rank == 0)
          std::fprintf(stderr, "libfsdp: import of '%s': skipped '%s' (%s): not floating point\n",
                       f.path.c_str(), t.name.c_str(), t.dtype.c_str());
        continue;
      }
      const DType dst = options.dtype ? *options.dtype : storage_dtype(*src);
      DatasetSpec d;
      d.path = std::string(kModelGroup) + "/" + escape_name(t.name);
      d.dtype = dst;
      d.shape = t.shape;
      d.numel = 1;
      for (int64_t e : t.shape) d.numel *= static_cast<uint64_t>(e);
      plan.datasets.push_back(d);
      const auto [lo, hi] = element_share(d.numel, c.rank, c.size);
      if (hi == lo) continue;
      const std::size_t ses = dtype_size(*src);
      const PosixFile* in_file = &*f.file;
      const uint64_t src_offset = f.header.data_start + t.begin + lo * ses;
      const std::string what = "tensor '" + t.name + "'";
      WritePiece p;
      p.dataset = plan.datasets.size() - 1, p.first = lo, p.count = hi - lo;
      const DType s = *src;
      p.produce = [in_file, src_offset, ses, s, dst, what](uint64_t first, uint64_t count,
                                                           void* o) {
        const uint64_t at = src_offset + first * ses;
        if (s == dst) return in_file->read_at(o, count * ses, at, what);
        std::vector<char> raw(count * ses);
        in_file->read_at(raw.data(), raw.size(), at, what);
        host::convert(o, dst, raw.data(), s, count);
      };
      pieces.push_back(std::move(p));
    }
  MPI_Comm dup;
  MPI_Comm_dup(comm, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  try {
    write_checkpoint({dup, dup}, out, plan, pieces);
  } catch (...) {
    MPI_Comm_free(&dup);
    throw;
  }
  MPI_Comm_free(&dup);
}

}  // namespace fsdp::ckpt
