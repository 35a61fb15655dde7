#include "checkpoint/load_match.hpp"

#include <algorithm>
#include <set>

#include "checkpoint/names.hpp"
#include "checkpoint/schema.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "optim/optimizer.hpp"

namespace fsdp::ckpt {

bool Target::in_piece() const {
  return optimizer < 0 ? unit->master_in_piece(param) : true;
}

namespace {

void note(Match& m, const std::string& line, bool fatal) {
  m.report.details += line + "\n";
  if (fatal) m.problems.push_back(line);
}

void match_model(Context& ctx, const Catalog& c, bool convert, Match& m) {
  std::set<std::string> model_names;
  for (Unit* u : ctx.units()) {
    for (std::size_t i = 0; i < u->layout().num_params(); ++i) {
      const ParamSpec& p = u->layout().param(i);
      model_names.insert(p.name);
      const DatasetInfo* d = c.find_param(p.name);
      if (!d) {
        ++m.report.missing;
        note(m, "missing: " + p.name + " (in the model, not in the file)", true);
        continue;
      }
      if (d->shape != p.shape) {
        ++m.report.mismatched;
        note(m,
             "shape: " + p.name + " is " + shape_text(p.shape) + " in the model, " +
                 shape_text(d->shape) + " in the file",
             true);
        continue;
      }
      if (d->dtype != p.dtype && !convert) {
        ++m.report.mismatched;
        note(m,
             std::string("dtype: ") + p.name + " is " + dtype_name(p.dtype) + " in the model, " +
                 dtype_name(d->dtype) + " in the file (FSDP_LOAD_CONVERT_DTYPE converts)",
             true);
        continue;
      }
      ++m.report.loaded;
      m.targets.push_back({d, u, i});
    }
  }
  for (const DatasetInfo& d : c.model)
    if (!model_names.count(d.name)) {
      ++m.report.unexpected;
      note(m, "unexpected: " + d.name + " (in the file, not in the model)", true);
    }
}

OptimizerMatch pair_optimizer(Optimizer& o, const OptimizerInfo& f) {
  OptimizerMatch om{&o, &f, f.kind == kind_name(o.kind()), false};
  om.same_groups = static_cast<int>(f.groups.size()) == o.num_groups();
  for (int g = 0; om.same_groups && g < o.num_groups(); ++g)
    om.same_groups = f.groups[static_cast<std::size_t>(g)].pattern == o.pattern(g);
  return om;
}

// The state of optimizer k's units: targets for its buffers and each unit's step counts.
void match_optimizer_state(const Catalog& c, bool convert, int k, const OptimizerMatch& om,
                           Match& m) {
  const OptimizerInfo& fo = *om.file;
  const std::string who = "optimizer " + std::to_string(k);
  for (const Unit* cu : om.optimizer->units()) {
    Unit* u = const_cast<Unit*>(cu);
    const auto file_state = [&](std::size_t b, const ParamSpec& p) {
      return p.requires_grad && c.find_param(p.name) ? find_dataset(fo.states[b], p.name) : nullptr;
    };
    UnitSteps us{std::vector<int64_t>(u->layout().num_params(), -2), {}};
    std::vector<std::size_t> buffers;
    for (std::size_t b = 0; b < fo.states.size(); ++b) {
      bool held = false;
      for (std::size_t i = 0; i < u->layout().num_params() && !held; ++i)
        held = file_state(b, u->layout().param(i)) != nullptr;
      if (!held && state_optional(fo.kind, b))
        us.absent_buffers.push_back(static_cast<int>(b));
      else
        buffers.push_back(b);
    }
    bool consistent = true, with_state = false, without_state = false;
    for (std::size_t i = 0; i < u->layout().num_params(); ++i) {
      const ParamSpec& p = u->layout().param(i);
      if (!p.requires_grad || !c.find_param(p.name)) continue;
      for (std::size_t n = 0; n < buffers.size(); ++n) {
        const DatasetInfo* d = file_state(buffers[n], p);
        const int64_t s = d ? d->step : -1;
        if (n == 0) us.steps[i] = s;
        if (s != us.steps[i]) consistent = false;  // one parameter's buffers at two counts
        (s < 0 ? without_state : with_state) = true;
        if (d && d->shape == p.shape && (d->dtype == p.dtype || convert))
          m.targets.push_back({d, u, i, k, static_cast<int>(buffers[n])});
      }
    }
    if (!consistent || (with_state && without_state)) {
      note(m,
           who + ": " + u->label() +
               " mixes parameters saved with and without state (or one parameter's buffers "
               "at different step counts): they cannot share one unit's state",
           true);
      continue;
    }
    m.steps[{k, u}] = std::move(us);
  }
}

}  // namespace

Match match(Context& ctx, const Catalog& c, const LoadRequest& r) {
  Match m;
  match_model(ctx, c, r.convert, m);
  if (r.model_only) return m;
  if (r.optimizers.size() > c.optimizers.size())
    note(m,
         "optimizers: " + std::to_string(r.optimizers.size()) + " given, the file has " +
             std::to_string(c.optimizers.size()),
         true);
  for (std::size_t k = 0; k < r.optimizers.size() && k < c.optimizers.size(); ++k) {
    const OptimizerMatch om = pair_optimizer(*r.optimizers[k], c.optimizers[k]);
    m.optimizers.push_back(om);
    const std::string who = "optimizer " + std::to_string(k);
    if (!om.same_kind) {
      note(m,
           who + ": the file's is " + om.file->kind + ", this one " +
               kind_name(om.optimizer->kind()),
           true);
      continue;
    }
    if (!om.same_groups) note(m, who + ": hyperparameter groups differ (count or patterns)", true);
    match_optimizer_state(c, r.convert, static_cast<int>(k), om, m);
  }
  if (r.scaler && !c.scaler.present) note(m, "grad_scaler: the file has none", true);
  return m;
}

std::string problem_list(const std::vector<std::string>& p) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(p.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) s += "\n  " + p[i];
  if (p.size() > shown) s += "\n  ... and " + std::to_string(p.size() - shown) + " more";
  return s;
}

}  // namespace fsdp::ckpt
