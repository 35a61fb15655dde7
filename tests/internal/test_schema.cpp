// The checkpoint schema (src/checkpoint/schema.hpp) through every encoding it drives: a catalog
// with a value in every field is written as a file (write_checkpoint, the save's writer) and read
// back (read_catalog), broadcast as bytes (serialize/deserialize) and described as JSON; each
// must give back the values set here, which the test lists itself (the reference), and every
// field of every table must survive (a row an encoding drops reads back as its default). Then:
// a field a file lacks (a row with since(...) or kInformative) reads as its default, a required
// one is refused naming it; a file written by libfsdp 0.7.0 reads with the expected values; and
// doc/checkpoint-format.md names every field.
// Usage: test_schema <tests/data/checkpoint-0.7.0-full2.h5> <doc/checkpoint-format.md> <dir>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "check.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/catalog_json.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/writer.hpp"

namespace ck = fsdp::ckpt;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every field of a struct set away from its default, whatever its type: fields added to a table
// later are covered without a change here.
template <class S>
void fill_every_field(const ck::Table<S>& table, S& s, int seed) {
  for (std::size_t i = 0; i < table.size(); ++i) {
    std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(s.*m)>;
          if constexpr (std::is_same_v<T, double>)
            s.*m = 0.125 * static_cast<double>(seed + static_cast<int>(i)) + 1.0 / 3.0;
          else if constexpr (std::is_same_v<T, bool>)
            s.*m = !(S{}.*m);
          else if constexpr (std::is_same_v<T, int64_t>)
            s.*m = 1000 * seed + static_cast<int64_t>(i) + 1;
          else if constexpr (std::is_same_v<T, std::string>)
            s.*m = "v" + std::to_string(seed) + "." + std::to_string(i);
        },
        table[i].member);
  }
}

ck::DatasetInfo dataset(const std::string& name, fsdp::DType t, std::vector<int64_t> shape,
                        int64_t step) {
  ck::DatasetInfo d;
  d.name = name, d.dtype = t, d.shape = std::move(shape), d.step = step;
  d.numel = 1;
  for (int64_t e : d.shape) d.numel *= static_cast<uint64_t>(e);
  return d;
}

// The catalog the test saves: every table's fields set, then some set by name (the reference
// values checked below).
ck::Catalog sample() {
  ck::Catalog c;
  fill_every_field(ck::root_fields(), static_cast<ck::RootInfo&>(c), 1);
  c.format_version = ck::kFormatVersion;
  c.world_size = 1, c.sharding_factor = 1, c.strategy = "full_shard", c.num_units = 3;
  c.library_version = "9.8.7", c.created = "2026-11-26T00:00:00Z";
  c.model = {dataset("a.weight", fsdp::DType::Float32, {2, 3}, -1),
             dataset("b/c", fsdp::DType::Float64, {}, -1)};
  ck::OptimizerInfo sgd;
  sgd.kind = "sgd";
  sgd.groups.emplace_back();
  fill_every_field(ck::optimizer_group_fields(), sgd.groups[0], 2);
  sgd.groups[0].pattern = "";
  sgd.groups[0].lr = 0.25, sgd.groups[0].nesterov = true, sgd.groups[0].momentum = 0.9;
  sgd.states = {{dataset("a.weight", fsdp::DType::Float32, {2, 3}, 5)}};
  ck::OptimizerInfo adamw;
  adamw.kind = "adamw";
  adamw.groups.resize(2);
  fill_every_field(ck::optimizer_group_fields(), adamw.groups[0], 3);
  fill_every_field(ck::optimizer_group_fields(), adamw.groups[1], 4);
  adamw.groups[0].pattern = "", adamw.groups[1].pattern = "*.bias";
  adamw.groups[1].beta2 = 0.95, adamw.groups[1].eps = 1e-6, adamw.groups[1].nesterov = false;
  adamw.states = {{}, {}, {}};  // exp_avg, exp_avg_sq, max_exp_avg_sq
  c.optimizers = {sgd, adamw};
  c.scaler.present = true;
  fill_every_field(ck::scaler_fields(), c.scaler, 5);
  c.scaler.scale = 65536, c.scaler.growth_interval = 100, c.scaler.growth_tracker = 7;
  c.metadata = {{"epoch", "3"}, {"note", "quote \" and \\"}};
  return c;
}

// The sample as a file, through the save's own writer (one rank writes everything).
void save(const ck::Catalog& c, const std::string& path) {
  ck::FileStructure plan;
  plan.groups = ck::attribute_groups(c);
  std::vector<std::vector<double>> values;
  std::vector<ck::WritePiece> pieces;
  const auto add = [&](const std::string& path_in_file, const ck::DatasetInfo& d) {
    ck::DatasetSpec s;
    s.path = path_in_file, s.dtype = d.dtype, s.shape = d.shape, s.numel = d.numel;
    if (d.step >= 0) s.attrs = {ck::Attr::i64(ck::kStepAttr, d.step)};
    plan.datasets.push_back(s);
    values.emplace_back(d.numel, 1.5);  // doubles: room for either dtype
    pieces.push_back({plan.datasets.size() - 1, 0, d.numel, values.back().data(), {}});
  };
  values.reserve(16);
  for (const auto& d : c.model)
    add(std::string(ck::kModelGroup) + "/" + ck::escape_name(d.name), d);
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const auto names = ck::state_names(c.optimizers[k].kind);
    for (std::size_t b = 0; b < c.optimizers[k].states.size(); ++b)
      for (const auto& d : c.optimizers[k].states[b])
        add(ck::state_path(k, names[b]) + "/" + ck::escape_name(d.name), d);
  }
  ck::write_checkpoint({MPI_COMM_WORLD, MPI_COMM_WORLD}, path, plan, pieces);
}

// What every encoding must give back: the values sample() set by name, then every field.
void check_values(const ck::Catalog& got, const ck::Catalog& want, const std::string& via) {
  check(got.format_version == 1 && got.library_version == "9.8.7" && got.world_size == 1 &&
            got.sharding_factor == 1 && got.strategy == "full_shard" && got.num_units == 3 &&
            got.created == "2026-11-26T00:00:00Z",
        via + ": the root attributes");
  check(got.model.size() == 2 && got.model[0].name == "a.weight" &&
            got.model[0].shape == std::vector<int64_t>{2, 3} && got.model[1].name == "b/c" &&
            got.model[1].dtype == fsdp::DType::Float64 && got.model[1].shape.empty() &&
            got.model[1].numel == 1,
        via + ": the parameters");
  check(got.optimizers.size() == 2, via + ": two optimizers");
  if (got.optimizers.size() == 2) {
    const auto& s = got.optimizers[0];
    const auto& a = got.optimizers[1];
    check(s.kind == "sgd" && s.groups.size() == 1 && s.groups[0].lr == 0.25 &&
              s.groups[0].nesterov && s.groups[0].momentum == 0.9 && s.groups[0].pattern.empty(),
          via + ": the sgd group");
    check(s.states.size() == 1 && s.states[0].size() == 1 && s.states[0][0].step == 5,
          via + ": the sgd momentum with its step");
    check(a.kind == "adamw" && a.groups.size() == 2 && a.groups[1].pattern == "*.bias" &&
              a.groups[1].beta2 == 0.95 && a.groups[1].eps == 1e-6 && !a.groups[1].nesterov,
          via + ": the adamw groups");
    check(a.states.size() == 3 && a.states[0].empty() && a.states[1].empty() && a.states[2].empty(),
          via + ": adamw's three state groups, empty");
  }
  check(got.scaler.present && got.scaler.scale == 65536 && got.scaler.growth_interval == 100 &&
            got.scaler.growth_tracker == 7,
        via + ": the scaler");
  check(got.metadata == want.metadata, via + ": the metadata");
  // Every field of every table, through the JSON of both (hidden dataset fields aside).
  check(ck::catalog_json(got) == ck::catalog_json(want),
        via + ": every field:\n  " + ck::catalog_json(got) + "\nvs\n  " + ck::catalog_json(want));
}

void check_json(const ck::Catalog& c) {
  const std::string j = ck::catalog_json(c);
  for (const char* part :
       {"{\"format_version\":1,\"library_version\":\"9.8.7\",\"world_size\":1,",
        "\"num_units\":3,\"params\":[{\"name\":\"a.weight\",\"dtype\":\"float32\",\"shape\":[2,3]}",
        "{\"name\":\"b/c\",\"dtype\":\"float64\",\"shape\":[]}",
        "{\"kind\":\"sgd\",\"groups\":[{\"pattern\":\"\",\"lr\":0.25,", "\"nesterov\":true",
        "\"state\":{\"momentum\":{\"a.weight\":{\"step\":5}}}", "\"pattern\":\"*.bias\"",
        "\"beta2\":0.94999999999999996,\"eps\":9.9999999999999995e-07",
        "\"state\":{\"exp_avg\":{},\"exp_avg_sq\":{},\"max_exp_avg_sq\":{}}", "\"scale\":65536,",
        "\"growth_interval\":100,\"growth_tracker\":7}",
        "\"metadata\":{\"epoch\":\"3\",\"note\":\"quote \\\" and \\\\\"}}"})
    check(contains(j, part), std::string("JSON holds ") + part + "\n  in " + j);
  check(!contains(j, "crc32c") && !contains(j, "offset"), "JSON leaves the hidden fields out");
  ck::OptimizerGroupInfo other = c.optimizers[0].groups[0];
  other.lr = 0.5, other.nesterov = false;
  check(ck::differing_fields(ck::optimizer_group_fields(), c.optimizers[0].groups[0], other) ==
            std::vector<std::string>{"lr: 0.25 vs 0.5", "nesterov: true vs false"},
        "differing_fields names the two changed hyperparameters");
}

void check_wire(const ck::Catalog& c) {
  ck::Catalog with_data = c;
  with_data.model[0].crc = 0xdeadbeef, with_data.model[0].offset = 4096;
  with_data.layout = "{\"units\": []}", with_data.file_size = 123456, with_data.from_index = true;
  const ck::Catalog back = ck::deserialize(ck::serialize(with_data));
  check_values(back, with_data, "broadcast");
  check(back.model[0].crc == 0xdeadbeef && back.model[0].offset == 4096 &&
            back.model[0].numel == 6 && ck::same_datasets(back, with_data),
        "broadcast: the datasets' own fields");
  check(back.layout == with_data.layout && back.file_size == 123456 && back.from_index,
        "broadcast: layout, file size, index flag");
  std::vector<char> bytes = ck::serialize(with_data);
  bytes.resize(bytes.size() / 2);
  bool refused = false;
  try {
    ck::deserialize(bytes);
  } catch (const fsdp::Error& e) {
    refused = e.code() == fsdp::Errc::Internal;
  }
  check(refused, "broadcast: a truncated message is refused");
}

// A row added after 0.7 (since) reads its default from an older file; a required one is refused.
struct Later {
  double kept = 2.5;
  bool flag = false;
  int64_t count = 4;
};

template <class S>
std::string read_error(hid_t obj, const ck::Table<S>& table) {
  S s;
  try {
    ck::read_attrs(obj, table, s, "group");
  } catch (const fsdp::Error& e) {
    return e.code() == fsdp::Errc::Format ? e.what() : "wrong code";
  }
  return "";
}

void check_absent_fields(const std::string& path) {
  const ck::Table<Later> table = {{"kept", &Later::kept},
                                  {"flag", &Later::flag, ck::since("0.10")},
                                  {"count", &Later::count, ck::kInformative}};
  {
    ck::Hid file(H5Fcreate((path + ".attrs").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    ck::Hid older(H5Gcreate2(file, "older", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ck::write_attr_f64(older, "kept", 7.0);
    Later got;
    ck::read_attrs(older, table, got, "older");
    check(got.kept == 7.0 && !got.flag && got.count == 4,
          "absent since(...) and informative fields keep the struct's defaults");
    ck::Hid newer(H5Gcreate2(file, "newer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (const ck::Attr& a : ck::to_attrs(table, Later{7.0, true, 9})) {
      if (a.kind == ck::Attr::Kind::Float64) ck::write_attr_f64(newer, a.name.c_str(), a.real);
      if (a.kind == ck::Attr::Kind::Int64) ck::write_attr_i64(newer, a.name.c_str(), a.integer);
    }
    got = Later{};
    ck::read_attrs(newer, table, got, "newer");
    check(got.kept == 7.0 && got.flag && got.count == 9, "present optional fields are read");
    ck::Hid lacking(H5Gcreate2(file, "lacking", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ck::write_attr_i64(lacking, "flag", 1);
    check(contains(read_error(lacking, table), "'kept'"),
          "a required field absent: Format naming it");
  }
  std::remove((path + ".attrs").c_str());
  // In a real file: num_units is informative, lr is required.
  {
    ck::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ck::Hid root(H5Gopen2(file, "/", H5P_DEFAULT));
    H5Adelete(root, "num_units");
  }
  check(ck::read_catalog(path).num_units == 0, "a file without num_units reads 0");
  {
    ck::Hid file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ck::Hid g(H5Gopen2(file, ck::optimizer_group_path(1, 1).c_str(), H5P_DEFAULT));
    H5Adelete(g, "lr");
  }
  std::string error;
  try {
    ck::read_catalog(path);
  } catch (const fsdp::Error& e) {
    error = e.code() == fsdp::Errc::Format ? e.what() : "wrong code";
  }
  check(contains(error, "/optimizers/1/groups/1") && contains(error, "'lr'"),
        "a file without a required hyperparameter is refused naming it: " + error);
}

// libfsdp 0.7.0's file (tests/CMakeLists.txt, compat_0_7): 2 ranks, AdamW, 7 parameters.
void check_old_file(const std::string& path) {
  for (ck::CatalogSource source : {ck::CatalogSource::Index, ck::CatalogSource::Walk}) {
    const ck::Catalog c = ck::read_catalog(path, source);
    check(c.format_version == 1 && c.library_version == "0.7.0" && c.world_size == 2 &&
              c.strategy == "full_shard" && c.num_units > 0,
          "0.7.0 file: root");
    check(c.model.size() == 7 && c.find_param("embed.weight") &&
              c.find_param("embed.weight")->shape == std::vector<int64_t>{64, 33},
          "0.7.0 file: parameters");
    check(c.optimizers.size() == 1 && c.optimizers[0].kind == "adamw" &&
              c.optimizers[0].groups.size() >= 1 && c.optimizers[0].states.size() == 3 &&
              c.optimizers[0].states[2].empty() && c.optimizers[0].states[0].size() == 6 &&
              c.optimizers[0].states[1].size() == 6 && c.optimizers[0].states[0][0].step == 3,
          "0.7.0 file: the AdamW state, 3 steps");
    check(contains(ck::catalog_json(c), "\"library_version\":\"0.7.0\""), "0.7.0 file: JSON");
  }
}

// The format's specification names every field of every table.
void check_doc(const std::string& doc_path) {
  std::ifstream in(doc_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  check(!doc.empty(), "reading " + doc_path);
  std::vector<std::string> names;
  for (const auto& f : ck::root_fields()) names.push_back(f.name);
  for (const auto& f : ck::optimizer_fields()) names.push_back(f.name);
  for (const auto& f : ck::optimizer_group_fields()) names.push_back(f.name);
  for (const auto& f : ck::scaler_fields()) names.push_back(f.name);
  for (const char* kind : {"sgd", "adamw"})
    for (const std::string& n : ck::state_names(kind)) names.push_back(n);
  for (const std::string& n : names)
    check(contains(doc, "`" + n + "`") || contains(doc, " " + n + " ") ||
              contains(doc, " " + n + ",") || contains(doc, " " + n + ")"),
          doc_path + " does not name the field '" + n + "'");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OLD_0_7.h5 checkpoint-format.md DIR\n", argv[0]);
    return 2;
  }
  const std::string old_file = argv[1], doc = argv[2];
  const std::string path =
      std::string(argv[3]) + "/test_schema." + std::to_string(::getpid()) + ".h5";
  const ck::Catalog c = sample();

  save(c, path);
  for (ck::CatalogSource source : {ck::CatalogSource::Index, ck::CatalogSource::Walk})
    check_values(ck::read_catalog(path, source), c,
                 source == ck::CatalogSource::Index ? "file (index)" : "file (walk)");
  check_json(c);
  check_wire(c);
  check_absent_fields(path);
  std::remove(path.c_str());
  check_old_file(old_file);
  check_doc(doc);
  MPI_Finalize();
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
