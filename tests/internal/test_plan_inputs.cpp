// The planner's model sources (plan/model_sources.hpp): a layout JSON, Hugging Face config.json
// files (GPT-2 small, Llama-2-7B, Mistral-7B, Qwen2-0.5B) and a checkpoint the library writes
// here, read back as models; parameter counts against the published ones and against closed
// formulas over the configs' numbers; bad files and fields refused with the file and the field
// named. The same program prints a config's units for tests/check_plan_hf.py, which compares
// them with transformers' own model (test_plan_inputs_transformers).
// Usage: test_plan_inputs DATA_DIR WORK_DIR       (the tests; under mpiexec, 1 rank)
//        test_plan_inputs units CONFIG.json       (print the units; no MPI)
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "check.hpp"
#include "checkpoint/catalog_reader.hpp"
#include "fsdp.h"
#include "plan/model_sources.hpp"

namespace {

using fsdp::DType;
using fsdp::Errc;
using fsdp::ParamSpec;
using fsdp::plan::model_from_checkpoint;
using fsdp::plan::model_from_hf_config;
using fsdp::plan::model_from_layout_json;
using fsdp::plan::PlanModel;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t total_numel(const PlanModel& m) {
  uint64_t n = 0;
  for (const auto& u : m.units)
    for (const ParamSpec& p : u.params) n += p.numel;
  return n;
}

// The parameter named `name`, or nullptr.
const ParamSpec* find(const PlanModel& m, const std::string& name) {
  for (const auto& u : m.units)
    for (const ParamSpec& p : u.params)
      if (p.name == name) return &p;
  return nullptr;
}

bool has_shape(const PlanModel& m, const std::string& name, std::vector<int64_t> shape) {
  const ParamSpec* p = find(m, name);
  return p && p->shape == shape;
}

// `read` fails with `code` and a message holding every one of `words`.
void refused(const std::string& what, Errc code, const std::vector<std::string>& words,
             const std::function<void()>& read) {
  try {
    read();
    check(false, what + ": accepted");
  } catch (const fsdp::Error& e) {
    const std::string m = e.what();
    check(e.code() == code, what + ": status " + std::to_string(static_cast<int>(e.code())) +
                                ", expected " + std::to_string(static_cast<int>(code)) + " (" + m +
                                ")");
    for (const std::string& w : words)
      check(m.find(w) != std::string::npos, what + ": message lacks '" + w + "': " + m);
  }
}

void refused_layout(const std::string& what, const std::string& text,
                    const std::vector<std::string>& words) {
  refused(what, Errc::Format, words, [&] { model_from_layout_json(text, "t.json"); });
}

void layout(const std::string& data) {
  const PlanModel m = model_from_layout_json(read_file(data + "/layout.json"), "layout.json");
  check(m.units.size() == 4, "layout.json: 4 units");
  if (m.units.size() != 4) return;
  check(m.units[0].name == "embed" && m.units[1].name == "block.0" && m.units[3].name.empty(),
        "layout.json: unit names, the last unnamed");
  const auto& b = m.units[1].params;
  check(b.size() == 3 && b[2].name == "block.0.frozen" && !b[2].requires_grad &&
            b[0].requires_grad && b[2].shape == std::vector<int64_t>{3, 5} && b[2].numel == 15,
        "layout.json: block.0's parameters, the frozen one");
  check(m.units[3].params.size() == 1 && m.units[3].params[0].shape.empty() &&
            m.units[3].params[0].numel == 1 && m.units[3].params[0].dtype == DType::Float64,
        "layout.json: a float64 scalar");
  check(m.units[0].params[0].dtype == DType::Float32, "layout.json: dtype defaults to float32");
  check(m.units[2].ties.size() == 1 && m.units[2].ties[0].alias == "head.weight" &&
            m.units[2].ties[0].owner_unit == 0 && m.units[2].ties[0].owner_param == 0,
        "layout.json: head.weight tied to embed.weight");
  check(total_numel(m) == 1600 + 256 + 16 + 15 + 100 + 1, "layout.json: element count");
  check(!m.transformer, "layout.json: no transformer shape");

  refused("bad-syntax.json", Errc::Format, {"bad-syntax.json", "expected '}'", "line 2"},
          [&] { model_from_layout_json(read_file(data + "/bad-syntax.json"), "bad-syntax.json"); });
  refused("bad-negative.json", Errc::Format,
          {"bad-negative.json", "units[0].params[0].shape[1] = -8", "whole number from 1"}, [&] {
            model_from_layout_json(read_file(data + "/bad-negative.json"), "bad-negative.json");
          });
  refused("bad-dtype.json", Errc::Format,
          {"bad-dtype.json", "units[0].params[0].dtype = 'float8'", "unknown dtype", "bfloat16"},
          [&] { model_from_layout_json(read_file(data + "/bad-dtype.json"), "bad-dtype.json"); });
  const std::string w = R"({"name": "w", "shape": [4, 8]})";
  refused_layout("no units", R"({"units": []})", {"t.json: units: no units"});
  refused_layout("units missing", R"({"unit": []})", {"units: missing"});
  refused_layout("not an object", "[1, 2]", {"the document: expected an object, got an array"});
  refused_layout("a name missing", R"({"units": [{"params": [{"shape": [2]}]}]})",
                 {"units[0].params[0].name: missing"});
  refused_layout("a fractional extent",
                 R"({"units": [{"params": [{"name": "w", "shape": [2.5]}]}]})",
                 {"units[0].params[0].shape[0] = 2.5"});
  refused_layout("a zero extent", R"({"units": [{"params": [{"name": "w", "shape": [0]}]}]})",
                 {"units[0].params[0].shape[0] = 0"});
  refused_layout("shape a string", R"({"units": [{"params": [{"name": "w", "shape": "2"}]}]})",
                 {"units[0].params[0].shape: expected an array, got a string"});
  refused_layout("no parameters", R"({"units": [{"name": "a", "params": []}]})",
                 {"units[0].params: a unit needs at least one parameter"});
  refused_layout("a 16-bit parameter",
                 R"({"units": [{"params": [{"name": "w", "shape": [2], "dtype": "bfloat16"}]}]})",
                 {"units[0].params[0].dtype = 'bfloat16'", "float32 or float64"});
  refused_layout(
      "two dtypes in a unit",
      R"({"units": [{"params": [)" + w + R"(, {"name": "v", "shape": [2], "dtype": "float64"}]}]})",
      {"units[0].params[1] ('v')", "share one dtype"});
  refused_layout("a name twice", R"({"units": [{"name": "a", "params": [)" + w + ", " + w + "]}]}",
                 {"units[0].params[1] ('w')", "already a parameter of unit 'a'"});
  refused_layout("requires_grad a number",
                 R"({"units": [{"params": [{"name": "w", "shape": [2], "requires_grad": 1}]}]})",
                 {"units[0].params[0].requires_grad: expected a boolean, got a number"});
  const std::string two = R"({"units": [{"name": "a", "params": [)" + w +
                          R"(]}, {"name": "b", "params": [{"name": "v", "shape": [2]}], "ties": [)";
  refused_layout("a tie to itself",
                 two + R"({"alias": "x", "owner_unit": 1, "owner_param": 0}]}]})",
                 {"units[1].ties[0].owner_unit: the unit itself"});
  refused_layout("a tie to no unit",
                 two + R"({"alias": "x", "owner_unit": "c", "owner_param": 0}]}]})",
                 {"units[1].ties[0].owner_unit = 'c': no unit of that name"});
  refused_layout("a tie past the parameters",
                 two + R"({"alias": "x", "owner_unit": 0, "owner_param": 1}]}]})",
                 {"units[1].ties[0].owner_param = 1", "from 0 to 0"});
  refused_layout("a tie to no parameter",
                 two + R"({"alias": "x", "owner_unit": "a", "owner_param": "q"}]}]})",
                 {"units[1].ties[0].owner_param = 'q': no parameter of unit 'a' of that name"});
  refused_layout("an alias taken", two + R"({"alias": "v", "owner_unit": 0, "owner_param": 0}]}]})",
                 {"units[1].ties[0].alias = 'v': already a parameter"});
  refused_layout("a tie to a unit with ties",
                 R"({"units": [{"name": "a", "params": [)" + w +
                     R"(], "ties": [{"alias": "y", "owner_unit": 2, "owner_param": 0}]},
                      {"name": "b", "params": [{"name": "v", "shape": [2]}],
                       "ties": [{"alias": "x", "owner_unit": 0, "owner_param": 0}]},
                      {"name": "c", "params": [{"name": "u", "shape": [2]}]}]})",
                 {"units[1].ties[0].owner_unit: unit 'a' uses ties itself"});
  refused_layout("text after the document", R"({"units": []} x)", {"text after the document"});
  refused_layout("a bad number", R"({"units": [{"params": [{"name": "w", "shape": [+2]}]}]})",
                 {"not a JSON value", "column 48"});
  refused_layout("deep nesting", std::string(300, '['), {"nesting deeper than 256"});
  const PlanModel escaped = model_from_layout_json(
      R"({"units": [{"name": "\u00e9\ud83d\ude00\n", "params": [{"name": "w", "shape": [1]}]}]})",
      "t.json");
  check(escaped.units[0].name == "\xc3\xa9\xf0\x9f\x98\x80\n",
        "\\u escapes as UTF-8, a surrogate pair as one code point");
  refused_layout("a lone high surrogate", R"({"units": [{"name": "\ud83d"}]})",
                 {"a lone high surrogate"});
  refused_layout("a lone low surrogate", R"({"units": [{"name": "\ude00"}]})",
                 {"a lone low surrogate"});
  refused_layout("an unterminated string", R"({"units": [{"name": "a)", {"unterminated string"});
}

// ---- Hugging Face configs -------------------------------------------------------------------

struct Decoder {
  int64_t layers, hidden, heads, kv, ffn, vocab, positions, head_dim;
  bool tied, qkv_bias, o_bias, mlp_bias;
};

// Parameters of a GPT-2, from its config's numbers: embeddings, positions, the final LayerNorm;
// per block two LayerNorms (2h each), c_attn (h x 3h + 3h), c_proj (h x h + h), c_fc (h x f + f)
// and the MLP's c_proj (f x h + h).
uint64_t gpt2_count(const Decoder& d) {
  const uint64_t h = d.hidden, f = d.ffn;
  const uint64_t block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
  return d.vocab * h + d.positions * h + 2 * h + d.layers * block + (d.tied ? 0 : d.vocab * h);
}

// Parameters of a Llama-style decoder: embeddings, the final RMSNorm, the head unless tied; per
// layer q, k, v, o, gate, up, down and two RMSNorms (weights only).
uint64_t llama_count(const Decoder& d) {
  const uint64_t h = d.hidden, f = d.ffn, q = d.heads * d.head_dim, kv = d.kv * d.head_dim;
  const uint64_t attention =
      h * q + 2 * h * kv + q * h + (d.qkv_bias ? q + 2 * kv : 0) + (d.o_bias ? h : 0);
  const uint64_t mlp = 3 * h * f + (d.mlp_bias ? 2 * f + h : 0);
  return d.vocab * h * (d.tied ? 1 : 2) + h + d.layers * (attention + mlp + 2 * h);
}

void check_shape(const PlanModel& m, const std::string& file, const Decoder& d) {
  check(m.transformer.has_value(), file + ": a transformer shape");
  if (!m.transformer) return;
  const auto& s = *m.transformer;
  check(s.layers == d.layers && s.hidden == d.hidden && s.heads == d.heads && s.kv_heads == d.kv &&
            s.ffn == d.ffn && s.vocab == d.vocab && s.max_sequence == d.positions,
        file + ": the transformer shape");
  check(m.units.size() == static_cast<std::size_t>(d.layers) + 1 && m.units[0].name == "root",
        file + ": one unit per block and a root unit first");
  for (const auto& u : m.units) {
    check(u.ties.empty(), file + ": no ties (a tied head is the embedding, in the root unit)");
    for (const ParamSpec& p : u.params)
      check(p.dtype == DType::Float32 && p.requires_grad,
            file + ": " + p.name + " float32, trained");
  }
}

void hf(const std::string& data) {
  auto read = [&](const std::string& name) {
    return model_from_hf_config(read_file(data + "/" + name), name);
  };
  const PlanModel g = read("gpt2.json");
  const Decoder gd{12, 768, 12, 12, 3072, 50257, 1024, 64, true, false, false, false};
  check_shape(g, "gpt2.json", gd);
  check(total_numel(g) == 124439808ull, "gpt2.json: 124,439,808 parameters (published, tied)");
  check(total_numel(g) == gpt2_count(gd), "gpt2.json: parameters by the closed formula");
  check(has_shape(g, "transformer.h.0.attn.c_attn.weight", {768, 2304}) &&
            has_shape(g, "transformer.h.11.mlp.c_proj.weight", {3072, 768}) &&
            has_shape(g, "transformer.h.0.ln_1.weight", {768}) &&
            has_shape(g, "transformer.wpe.weight", {1024, 768}) && !find(g, "lm_head.weight"),
        "gpt2.json: Conv1D shapes, positions, no separate head");
  check(g.units[1].name == "transformer.h.0" && g.units[1].params.size() == 12,
        "gpt2.json: block 0 is a unit of 12 parameters");

  const PlanModel gu = read("tiny-gpt2-untied.json");
  const Decoder gud{2, 64, 4, 4, 96, 100, 32, 16, false, false, false, false};
  check_shape(gu, "tiny-gpt2-untied.json", gud);
  check(total_numel(gu) == gpt2_count(gud) && has_shape(gu, "lm_head.weight", {100, 64}) &&
            has_shape(gu, "transformer.h.1.mlp.c_fc.weight", {64, 96}),
        "tiny-gpt2-untied.json: n_inner, an untied head");

  const PlanModel l = read("llama-2-7b.json");
  const Decoder ld{32, 4096, 32, 32, 11008, 32000, 4096, 128, false, false, false, false};
  check_shape(l, "llama-2-7b.json", ld);
  check(total_numel(l) == 6738415616ull, "llama-2-7b.json: 6,738,415,616 parameters (published)");
  check(total_numel(l) == llama_count(ld), "llama-2-7b.json: parameters by the closed formula");
  check(has_shape(l, "model.layers.0.self_attn.q_proj.weight", {4096, 4096}) &&
            has_shape(l, "model.layers.31.mlp.down_proj.weight", {4096, 11008}) &&
            has_shape(l, "model.layers.0.input_layernorm.weight", {4096}) &&
            has_shape(l, "lm_head.weight", {32000, 4096}) && !find(l, "model.norm.bias"),
        "llama-2-7b.json: [out, in] shapes, an untied head, RMSNorm weights only");
  check(l.units[32].name == "model.layers.31" && l.units[32].params.size() == 9,
        "llama-2-7b.json: layer 31 is a unit of 9 parameters");

  const PlanModel mi = read("mistral-7b.json");
  const Decoder md{32, 4096, 32, 8, 14336, 32000, 32768, 128, false, false, false, false};
  check_shape(mi, "mistral-7b.json", md);
  check(total_numel(mi) == 7241732096ull && total_numel(mi) == llama_count(md) &&
            has_shape(mi, "model.layers.0.self_attn.k_proj.weight", {1024, 4096}),
        "mistral-7b.json: 7,241,732,096 parameters, grouped-query k_proj");

  const PlanModel q = read("qwen2-0.5b.json");
  const Decoder qd{24, 896, 14, 2, 4864, 151936, 131072, 64, true, true, false, false};
  check_shape(q, "qwen2-0.5b.json", qd);
  check(total_numel(q) == 494032768ull && total_numel(q) == llama_count(qd) &&
            has_shape(q, "model.layers.0.self_attn.q_proj.bias", {896}) &&
            !find(q, "model.layers.0.self_attn.o_proj.bias") && !find(q, "lm_head.weight"),
        "qwen2-0.5b.json: 494,032,768 parameters, q/k/v biases, a tied head");

  const PlanModel lb = read("tiny-llama-bias.json");
  const Decoder lbd{2, 64, 4, 2, 160, 100, 128, 24, true, true, true, true};
  check_shape(lb, "tiny-llama-bias.json", lbd);
  check(total_numel(lb) == llama_count(lbd) &&
            has_shape(lb, "model.layers.0.self_attn.q_proj.weight", {96, 64}) &&
            has_shape(lb, "model.layers.0.self_attn.o_proj.bias", {64}) &&
            has_shape(lb, "model.layers.1.mlp.down_proj.bias", {64}),
        "tiny-llama-bias.json: head_dim, attention_bias, mlp_bias");

  refused("bad-arch.json", Errc::Unsupported,
          {"bad-arch.json: model_type = 'bert'", "gpt2, llama, mistral, qwen2"},
          [&] { read("bad-arch.json"); });
  refused("bad-missing.json", Errc::Format,
          {"bad-missing.json: num_hidden_layers: missing (a required field)"},
          [&] { read("bad-missing.json"); });
  auto gpt2_with = [](const std::string& fields) {
    return R"({"model_type": "gpt2", "n_positions": 64, "vocab_size": 100, )" + fields + "}";
  };
  auto refused_config = [](const std::string& what, const std::string& text,
                           const std::vector<std::string>& words, Errc code = Errc::Format) {
    refused(what, code, words, [&] { model_from_hf_config(text, "config.json"); });
  };
  refused_config("heads not dividing the width",
                 gpt2_with(R"("n_layer": 2, "n_embd": 64, "n_head": 7)"),
                 {"config.json: n_embd = 64: not a multiple of n_head = 7"});
  refused_config("negative layers", gpt2_with(R"("n_layer": -1, "n_embd": 64, "n_head": 4)"),
                 {"config.json: n_layer = -1"});
  refused_config("a string for a number", gpt2_with(R"("n_layer": "2", "n_embd": 64, "n_head": 4)"),
                 {"n_layer: expected a number, got a string"});
  refused_config(
      "cross-attention",
      gpt2_with(R"("n_layer": 2, "n_embd": 64, "n_head": 4, "add_cross_attention": true)"),
      {"add_cross_attention"}, Errc::Unsupported);
  refused_config("kv heads not dividing heads",
                 R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                     "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 3,
                     "vocab_size": 100, "max_position_embeddings": 64})",
                 {"num_key_value_heads = 3: does not divide num_attention_heads = 4"});
  refused_config("no model_type", R"({"n_layer": 2})", {"config.json: model_type: missing"});
  refused_config("not JSON", "{\"model_type\": gpt2}", {"config.json", "not a JSON value"});
}

// ---- Checkpoints ----------------------------------------------------------------------------

#define CALL(x)                                                                           \
  do {                                                                                    \
    if ((x) != FSDP_SUCCESS) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, fsdp_last_error()); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

fsdp_unit_t make_unit(fsdp_context_t ctx, const char* name, std::vector<fsdp_param_desc_t> d) {
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.name = name;
  fsdp_unit_t u = nullptr;
  CALL(fsdp_unit_create_ex(ctx, static_cast<int>(d.size()), d.data(), nullptr, &o, &u));
  return u;
}

void checkpoints(const std::string& data, const std::string& work) {
  // Written by the library: three units, a frozen parameter, a tie, float64 in one unit.
  const std::string path = work + "/plan_inputs.h5";
  fsdp_context_t ctx = nullptr;
  CALL(fsdp_init(MPI_COMM_WORLD, nullptr, &ctx));
  const int64_t e[] = {10, 4}, w[] = {4, 4}, b[] = {4}, f[] = {3}, s[] = {10};
  fsdp_unit_t embed = make_unit(ctx, "embed", {{"embed.weight", 2, e, FSDP_FLOAT32, 1}});
  fsdp_unit_t block = make_unit(ctx, "block",
                                {{"block.w", 2, w, FSDP_FLOAT64, 1},
                                 {"block.b", 1, b, FSDP_FLOAT64, 1},
                                 {"block.frozen", 1, f, FSDP_FLOAT64, 0}});
  fsdp_unit_t head = make_unit(ctx, nullptr, {{"head.bias", 1, s, FSDP_FLOAT32, 1}});
  CALL(fsdp_unit_tie(head, "head.weight", embed, 0, nullptr));
  CALL(fsdp_checkpoint_save(ctx, path.c_str(), nullptr));
  CALL(fsdp_unit_destroy(&head));
  CALL(fsdp_unit_destroy(&block));
  CALL(fsdp_unit_destroy(&embed));
  CALL(fsdp_finalize(&ctx));

  const PlanModel m = model_from_checkpoint(path);
  check(m.units.size() == 3, "checkpoint: 3 units");
  if (m.units.size() == 3) {
    check(m.units[0].name == "embed" && m.units[1].name == "block" && m.units[2].name.empty(),
          "checkpoint: unit names, the head unnamed");
    const auto& bp = m.units[1].params;
    check(bp.size() == 3 && bp[0].name == "block.w" && bp[0].shape == std::vector<int64_t>{4, 4} &&
              bp[0].dtype == DType::Float64 && bp[2].name == "block.frozen" && bp[2].numel == 3,
          "checkpoint: block's parameters in order, float64");
    check(bp.size() == 3 && bp[2].requires_grad,
          "checkpoint: a frozen parameter reads as trainable (not recorded)");
    check(m.units[0].params.size() == 1 && m.units[0].params[0].dtype == DType::Float32 &&
              m.units[0].params[0].shape == std::vector<int64_t>{10, 4},
          "checkpoint: embed.weight");
    check(m.units[2].ties.size() == 1 && m.units[2].ties[0].alias == "head.weight" &&
              m.units[2].ties[0].owner_unit == 0 && m.units[2].ties[0].owner_param == 0,
          "checkpoint: the tie");
  }

  // Written by libfsdp 0.7.0: its /layout's units (as h5dump shows them), every dataset of the
  // file in exactly one, with the dataset's shape and dtype.
  const std::string old = data + "/../checkpoint-0.7.0-full2.h5";
  const PlanModel o = model_from_checkpoint(old);
  const std::vector<std::vector<std::string>> layout = {{"embed.weight", "layer0.weight"},
                                                        {"layer0.bias", "layer1.weight"},
                                                        {"layer1.bias", "norm.gain", "scale"}};
  for (std::size_t u = 0; u < layout.size() && u < o.units.size(); ++u) {
    std::vector<std::string> names;
    for (const ParamSpec& p : o.units[u].params) names.push_back(p.name);
    check(names == layout[u], "0.7.0 checkpoint: unit " + std::to_string(u) + "'s parameters");
  }
  const fsdp::ckpt::Catalog c = fsdp::ckpt::read_catalog(old);
  std::size_t params = 0;
  for (const auto& u : o.units) params += u.params.size();
  check(o.units.size() == 3 && params == c.model.size(),
        "0.7.0 checkpoint: 3 units, every dataset");
  for (const auto& d : c.model) {
    const ParamSpec* p = find(o, d.name);
    check(p && p->shape == d.shape && p->dtype == d.dtype,
          "0.7.0 checkpoint: " + d.name + " with its dataset's shape and dtype");
  }

  refused("no such checkpoint", Errc::Io, {work + "/absent.h5"},
          [&] { model_from_checkpoint(work + "/absent.h5"); });
  refused("not a checkpoint", Errc::Format, {"gpt2.json"},
          [&] { model_from_checkpoint(data + "/gpt2.json"); });
}

// For tests/check_plan_hf.py: one line per parameter, tie and the transformer shape.
int print_units(const std::string& config) {
  try {
    const PlanModel m = model_from_hf_config(read_file(config), config);
    for (std::size_t u = 0; u < m.units.size(); ++u) {
      for (const ParamSpec& p : m.units[u].params) {
        std::string shape;
        for (std::size_t k = 0; k < p.shape.size(); ++k)
          shape += (k ? "," : "") + std::to_string(p.shape[k]);
        std::printf("param\t%zu\t%s\t%s\t%s\t%d\n", u, m.units[u].name.c_str(), p.name.c_str(),
                    shape.c_str(), p.requires_grad ? 1 : 0);
      }
      for (const auto& t : m.units[u].ties)
        std::printf("tie\t%zu\t%s\t%zu\t%zu\n", u, t.alias.c_str(), t.owner_unit, t.owner_param);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "units") return print_units(argv[2]);
  if (argc != 3) {
    std::fprintf(stderr, "usage: test_plan_inputs DATA_DIR WORK_DIR | units CONFIG.json\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  const std::string data = argv[1], work = argv[2];
  layout(data);
  hf(data);
  checkpoints(data, work);
  MPI_Finalize();
  if (failures == 0) std::printf("PASS: plan inputs\n");
  return failures ? 1 : 0;
}
