#include "plan/model_sources.hpp"

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/json_reader.hpp"
#include "checkpoint/catalog_reader.hpp"

namespace fsdp::plan {
namespace {

using json::Value;

// A decoder's widths and counts are at most 2^24 (a parameter, the product of two, then stays far
// below the library's 2^62 bytes), its layers at most 2^16 (each a unit).
constexpr int kMaxDimension = 1 << 24;
constexpr int kMaxLayers = 1 << 16;

// A value of a document with its place in it ("units[1].params[0].shape"), so that every check
// names the file and the field.
class Field {
 public:
  Field(const Value& v, const std::string& where, std::string path)
      : v_(v), where_(where), path_(std::move(path)) {}

  Field operator[](const std::string& key) const {
    return Field(v_[key], where_, path_.empty() ? key : path_ + "." + key);
  }
  Field at(std::size_t i) const {
    return Field(v_.items[i], where_, path_ + "[" + std::to_string(i) + "]");
  }
  bool present() const { return v_.kind != Value::Kind::Null; }
  const std::string& path() const { return path_; }

  [[noreturn]] void bad(const std::string& why, Errc code = Errc::Format) const {
    fail(code, where_ + ": " + (path_.empty() ? "the document" : path_) + why);
  }
  void expect(Value::Kind k) const {
    if (!present()) bad(": missing (a required field)");
    if (v_.kind != k)
      bad(std::string(": expected ") + json::kind_name(k) + ", got " + json::kind_name(v_.kind));
  }
  std::size_t size() const {
    expect(Value::Kind::Array);
    return v_.items.size();
  }
  std::string text() const {
    expect(Value::Kind::String);
    if (v_.text.empty()) bad(": empty");
    return v_.text;
  }
  // An optional label: "" when absent (units may be unnamed, as fsdp_unit_create's).
  std::string label() const {
    if (!present()) return {};
    expect(Value::Kind::String);
    return v_.text;
  }
  bool flag(bool absent) const {
    if (!present()) return absent;
    expect(Value::Kind::Bool);
    return v_.boolean;
  }
  // A whole number in [low, high], exactly as written (JSON numbers are doubles here).
  int64_t integer(int64_t low, int64_t high) const {
    expect(Value::Kind::Number);
    const double x = v_.number;
    if (x != std::floor(x) || x < static_cast<double>(low) || x > static_cast<double>(high))
      bad(" = " + number_text(x) + ": expected a whole number from " + std::to_string(low) +
          " to " + std::to_string(high));
    return static_cast<int64_t>(x);
  }
  // A decoder's dimension: a positive whole number up to `most`.
  int dimension(int most = kMaxDimension) const { return static_cast<int>(integer(1, most)); }
  // An index into a list of n, or the position of a name in it.
  template <class NameOf>
  std::size_t index_or_name(std::size_t n, NameOf name_of, const std::string& what) const {
    if (v_.kind == Value::Kind::String) {
      for (std::size_t i = 0; i < n; ++i)
        if (name_of(i) == v_.text) return i;
      bad(" = '" + v_.text + "': no " + what + " of that name");
    }
    if (present() && v_.kind != Value::Kind::Number) bad(": expected an index or a name");
    return static_cast<std::size_t>(integer(0, static_cast<int64_t>(n) - 1));
  }

 private:
  static std::string number_text(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const Value& v_;
  const std::string& where_;
  std::string path_;
};

// Extents are kept below 2^53 (exact as JSON doubles) and a parameter below 2^59 elements (2^62
// bytes in any dtype, the library's limit), so sizes never overflow; the limits on a unit are the
// C API's (fsdp_plan_add_unit's) to enforce.
constexpr int64_t kMaxExtent = int64_t(1) << 53;
constexpr uint64_t kMaxNumel = uint64_t(1) << 59;

ParamSpec param(std::string name, std::vector<int64_t> shape, DType dtype, bool requires_grad) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.requires_grad = requires_grad;
  p.numel = 1;
  for (const int64_t e : p.shape) p.numel *= static_cast<std::size_t>(e);
  return p;
}

// The dtype the library names `name` (base/dtype.hpp's names), which parameters are stored in.
DType stored_dtype(const Field& f) {
  const std::string name = f.text();
  std::string known;
  for (int k = 0; k < kDTypeCount; ++k) {
    const auto t = static_cast<DType>(k);
    if (name == dtype_name(t)) {
      if (!dtype_storable(t))
        f.bad(" = '" + name +
              "': parameters are stored in float32 or float64; a job's param_dtype says what "
              "they compute in");
      return t;
    }
    known += std::string(k ? ", " : "") + dtype_name(t);
  }
  f.bad(" = '" + name + "': unknown dtype (the library's are " + known + ")");
}

// Checks that hold for any unit, whatever file it came from: a unit has parameters, their names
// are unique in it and they share one dtype (as fsdp_unit_create requires).
void check_unit(const PlanUnit& u, const Field& f) {
  if (u.params.empty()) f["params"].bad(": a unit needs at least one parameter");
  std::set<std::string> names;
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    const Field p = f["params"].at(i);
    const std::string who = " ('" + u.params[i].name + "')";
    if (!names.insert(u.params[i].name).second)
      p.bad(who + ": the name is already a parameter of unit '" + u.name + "'");
    if (u.params[i].dtype != u.params[0].dtype)
      p.bad(who + " is " + dtype_name(u.params[i].dtype) + " but '" + u.params[0].name + "' is " +
            dtype_name(u.params[0].dtype) + ": all parameters of a unit share one dtype");
  }
}

// ---- Layout JSON ----------------------------------------------------------------------------

PlanUnit layout_unit(const Field& f) {
  PlanUnit u;
  u.name = f["name"].label();
  const Field params = f["params"];
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Field p = params.at(i);
    std::vector<int64_t> shape;
    const Field extents = p["shape"];
    uint64_t numel = 1;
    for (std::size_t k = 0; k < extents.size(); ++k) {
      shape.push_back(extents.at(k).integer(1, kMaxExtent));
      if (static_cast<uint64_t>(shape.back()) > kMaxNumel / numel)
        extents.bad(": the parameter is too large (2^59 elements at most)");
      numel *= static_cast<uint64_t>(shape.back());
    }
    const Field dtype = p["dtype"];
    u.params.push_back(param(p["name"].text(), std::move(shape),
                             dtype.present() ? stored_dtype(dtype) : DType::Float32,
                             p["requires_grad"].flag(true)));
  }
  check_unit(u, f);
  return u;
}

// A tie of unit `user` (its field `f`), to a unit and parameter given by index or name.
PlanTie layout_tie(const PlanModel& m, std::size_t user, const Field& f) {
  PlanTie t;
  t.alias = f["alias"].text();
  const PlanUnit& u = m.units[user];
  for (const ParamSpec& p : u.params)
    if (p.name == t.alias) f["alias"].bad(" = '" + t.alias + "': already a parameter of the unit");
  for (const PlanTie& earlier : u.ties)
    if (earlier.alias == t.alias) f["alias"].bad(" = '" + t.alias + "': already a tie of the unit");
  const Field owner = f["owner_unit"];
  t.owner_unit = owner.index_or_name(
      m.units.size(), [&](std::size_t i) { return m.units[i].name; }, "unit");
  if (t.owner_unit == user)
    owner.bad(": the unit itself; a parameter used twice in one unit needs no tie");
  const PlanUnit& o = m.units[t.owner_unit];
  t.owner_param = f["owner_param"].index_or_name(
      o.params.size(), [&](std::size_t i) { return o.params[i].name; },
      "parameter of unit '" + o.name + "'");
  return t;
}

// A tie's owner must store the parameter itself (fsdp_unit_tie refuses an owner with ties).
void check_owners(const PlanModel& m, const Field& units) {
  for (std::size_t u = 0; u < m.units.size(); ++u)
    for (std::size_t t = 0; t < m.units[u].ties.size(); ++t)
      if (!m.units[m.units[u].ties[t].owner_unit].ties.empty())
        units.at(u)["ties"].at(t)["owner_unit"].bad(
            ": unit '" + m.units[m.units[u].ties[t].owner_unit].name +
            "' uses ties itself; tie to the unit that stores the parameter");
}

// ---- Hugging Face config.json ---------------------------------------------------------------

// The decoder's parameters are float32 (stored so whatever torch_dtype says: bfloat16 weights
// are a job's param_dtype).
ParamSpec weight(const std::string& name, std::vector<int64_t> shape) {
  return param(name, std::move(shape), DType::Float32, true);
}

// GPT-2 (transformers' GPT2LMHeadModel): Conv1D weights are [in, out]; every LayerNorm and
// linear layer has a bias.
PlanModel gpt2(const Field& c) {
  if (c["add_cross_attention"].flag(false))
    c["add_cross_attention"].bad(": an encoder-decoder GPT-2 is not supported", Errc::Unsupported);
  TransformerShape s;
  s.layers = c["n_layer"].dimension(kMaxLayers);
  s.hidden = c["n_embd"].dimension();
  s.heads = c["n_head"].dimension();
  s.kv_heads = s.heads;
  s.vocab = c["vocab_size"].dimension();
  s.max_sequence = c["n_positions"].dimension();
  s.ffn = c["n_inner"].present() ? c["n_inner"].dimension() : 4 * s.hidden;
  if (s.hidden % s.heads != 0)
    c["n_embd"].bad(" = " + std::to_string(s.hidden) +
                    ": not a multiple of n_head = " + std::to_string(s.heads));
  const int64_t h = s.hidden, f = s.ffn;
  PlanModel m;
  PlanUnit root{"root", {}, {}};
  root.params.push_back(weight("transformer.wte.weight", {s.vocab, h}));
  root.params.push_back(weight("transformer.wpe.weight", {s.max_sequence, h}));
  root.params.push_back(weight("transformer.ln_f.weight", {h}));
  root.params.push_back(weight("transformer.ln_f.bias", {h}));
  // Untied, the head is a parameter of its own; tied, it is wte used twice in the root unit.
  if (!c["tie_word_embeddings"].flag(true))
    root.params.push_back(weight("lm_head.weight", {s.vocab, h}));
  m.units.push_back(std::move(root));
  for (int i = 0; i < s.layers; ++i) {
    const std::string b = "transformer.h." + std::to_string(i);
    PlanUnit u{b, {}, {}};
    u.params = {weight(b + ".ln_1.weight", {h}),
                weight(b + ".ln_1.bias", {h}),
                weight(b + ".attn.c_attn.weight", {h, 3 * h}),
                weight(b + ".attn.c_attn.bias", {3 * h}),
                weight(b + ".attn.c_proj.weight", {h, h}),
                weight(b + ".attn.c_proj.bias", {h}),
                weight(b + ".ln_2.weight", {h}),
                weight(b + ".ln_2.bias", {h}),
                weight(b + ".mlp.c_fc.weight", {h, f}),
                weight(b + ".mlp.c_fc.bias", {f}),
                weight(b + ".mlp.c_proj.weight", {f, h}),
                weight(b + ".mlp.c_proj.bias", {h})};
    m.units.push_back(std::move(u));
  }
  m.transformer = s;
  return m;
}

// The Llama family (transformers' LlamaForCausalLM and the models that copy it): RMSNorm weights
// only, nn.Linear weights [out, in], grouped-query attention. They differ in their biases.
struct LlamaFamily {
  const char* model_type;
  bool bias_flags;  // reads attention_bias and mlp_bias (llama); else no such field
  bool qkv_bias;    // q, k and v projections always have a bias (qwen2)
};

PlanModel llama(const Field& c, const LlamaFamily& family) {
  TransformerShape s;
  s.layers = c["num_hidden_layers"].dimension(kMaxLayers);
  s.hidden = c["hidden_size"].dimension();
  s.ffn = c["intermediate_size"].dimension();
  s.heads = c["num_attention_heads"].dimension();
  s.kv_heads = c["num_key_value_heads"].present() ? c["num_key_value_heads"].dimension() : s.heads;
  s.vocab = c["vocab_size"].dimension();
  s.max_sequence = c["max_position_embeddings"].dimension();
  if (s.heads % s.kv_heads != 0)
    c["num_key_value_heads"].bad(
        " = " + std::to_string(s.kv_heads) +
        ": does not divide num_attention_heads = " + std::to_string(s.heads));
  int head_dim = 0;
  if (c["head_dim"].present()) {
    head_dim = c["head_dim"].dimension();
  } else {
    if (s.hidden % s.heads != 0)
      c["hidden_size"].bad(" = " + std::to_string(s.hidden) +
                           ": not a multiple of num_attention_heads = " + std::to_string(s.heads) +
                           " (and no head_dim)");
    head_dim = s.hidden / s.heads;
  }
  if (int64_t(s.heads) * head_dim > kMaxDimension)
    c["num_attention_heads"].bad(" * head_dim = " + std::to_string(int64_t(s.heads) * head_dim) +
                                 ": more than " + std::to_string(kMaxDimension));
  const bool attention_bias = family.bias_flags && c["attention_bias"].flag(false);
  const bool qkv_bias = family.qkv_bias || attention_bias;
  const bool mlp_bias = family.bias_flags && c["mlp_bias"].flag(false);
  const int64_t h = s.hidden, f = s.ffn, q = int64_t(s.heads) * head_dim,
                kv = int64_t(s.kv_heads) * head_dim;

  PlanModel m;
  PlanUnit root{"root", {}, {}};
  root.params.push_back(weight("model.embed_tokens.weight", {s.vocab, h}));
  root.params.push_back(weight("model.norm.weight", {h}));
  if (!c["tie_word_embeddings"].flag(false))
    root.params.push_back(weight("lm_head.weight", {s.vocab, h}));
  m.units.push_back(std::move(root));
  for (int i = 0; i < s.layers; ++i) {
    const std::string b = "model.layers." + std::to_string(i);
    PlanUnit u{b, {}, {}};
    auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
      u.params.push_back(weight(b + name + ".weight", {out, in}));
      if (bias) u.params.push_back(weight(b + name + ".bias", {out}));
    };
    linear(".self_attn.q_proj", q, h, qkv_bias);
    linear(".self_attn.k_proj", kv, h, qkv_bias);
    linear(".self_attn.v_proj", kv, h, qkv_bias);
    linear(".self_attn.o_proj", h, q, attention_bias);
    linear(".mlp.gate_proj", f, h, mlp_bias);
    linear(".mlp.up_proj", f, h, mlp_bias);
    linear(".mlp.down_proj", h, f, mlp_bias);
    u.params.push_back(weight(b + ".input_layernorm.weight", {h}));
    u.params.push_back(weight(b + ".post_attention_layernorm.weight", {h}));
    m.units.push_back(std::move(u));
  }
  m.transformer = s;
  return m;
}

const LlamaFamily kLlamaFamily[] = {
    {"llama", true, false},
    {"mistral", false, false},
    {"qwen2", false, true},
};

// ---- Checkpoint -----------------------------------------------------------------------------

PlanUnit checkpoint_unit(const ckpt::Catalog& c, const Field& f) {
  PlanUnit u;
  u.name = f["name"].label();
  const Field params = f["params"];
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string name = params.at(i).text();
    const ckpt::DatasetInfo* d = c.find_param(name);
    if (!d)
      params.at(i).bad(" = '" + name + "': the checkpoint has no dataset of that parameter",
                       Errc::Corrupt);
    u.params.push_back(param(name, d->shape, d->dtype, true));
  }
  check_unit(u, f);
  return u;
}

}  // namespace

PlanModel model_from_layout_json(const std::string& text, const std::string& where) {
  const Value doc = json::parse(text, where);
  const Field root(doc, where, "");
  root.expect(Value::Kind::Object);
  const Field units = root["units"];
  if (units.size() == 0) units.bad(": no units");
  PlanModel m;
  for (std::size_t u = 0; u < units.size(); ++u) m.units.push_back(layout_unit(units.at(u)));
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Field ties = units.at(u)["ties"];
    if (!ties.present()) continue;
    for (std::size_t t = 0; t < ties.size(); ++t)
      m.units[u].ties.push_back(layout_tie(m, u, ties.at(t)));
  }
  check_owners(m, units);
  return m;
}

PlanModel model_from_hf_config(const std::string& text, const std::string& where) {
  const Value doc = json::parse(text, where);
  const Field root(doc, where, "");
  root.expect(Value::Kind::Object);
  const std::string type = root["model_type"].text();
  if (type == "gpt2") return gpt2(root);
  std::string known = "gpt2";
  for (const LlamaFamily& f : kLlamaFamily) {
    if (type == f.model_type) return llama(root, f);
    known += std::string(", ") + f.model_type;
  }
  root["model_type"].bad(" = '" + type + "': not a decoder this planner understands (" + known +
                             "); describe its units in a layout JSON instead",
                         Errc::Unsupported);
}

PlanModel model_from_checkpoint(const std::string& path) {
  const ckpt::Catalog c = ckpt::read_catalog(path);
  const std::string where = path + " (/layout)";
  if (c.layout.empty()) fail(Errc::Format, where + ": the checkpoint records no unit layout");
  const Value doc = json::parse(c.layout, where);
  const Field root(doc, where, "");
  root.expect(Value::Kind::Object);
  const Field units = root["units"];
  if (units.size() == 0)
    units.bad(
        ": no units (a checkpoint imported from safetensors has none: describe the "
        "model's units in a layout JSON instead)");
  PlanModel m;
  for (std::size_t u = 0; u < units.size(); ++u) m.units.push_back(checkpoint_unit(c, units.at(u)));
  // /layout names a tie's parameter, not its unit: parameter names are unique across a saved
  // context's units (a save refuses a model where they are not).
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Field ties = units.at(u)["ties"];
    if (!ties.present()) continue;
    for (std::size_t t = 0; t < ties.size(); ++t) {
      PlanTie tie;
      tie.alias = ties.at(t)["alias"].text();
      const Field owner = ties.at(t)["param"];
      const std::string name = owner.text();
      bool found = false;
      for (std::size_t o = 0; o < m.units.size() && !found; ++o)
        for (std::size_t i = 0; i < m.units[o].params.size() && !found; ++i)
          if (m.units[o].params[i].name == name)
            tie.owner_unit = o, tie.owner_param = i, found = true;
      if (!found) owner.bad(" = '" + name + "': no unit has that parameter", Errc::Corrupt);
      m.units[u].ties.push_back(std::move(tie));
    }
  }
  return m;
}

}  // namespace fsdp::plan
