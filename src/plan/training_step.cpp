#include "plan/training_step.hpp"

#include <string>

#include "base/error.hpp"

namespace fsdp::plan {
namespace {

using Kind = StepEvent::Kind;

class StepBuilder {
 public:
  explicit StepBuilder(const PlanModel& m) : m_(m), written_(m.units.size()) {
    users_.resize(m.units.size());
    for (std::size_t u = 0; u < m.units.size(); ++u)
      for (const PlanTie& t : m.units[u].ties) {
        if (t.owner_unit >= m.units.size() || t.owner_param >= m.units[t.owner_unit].params.size())
          fail(Errc::InvalidArgument, "unit " + std::to_string(u) + ", tie '" + t.alias +
                                          "': its owner's parameter is not in the model");
        users_[t.owner_unit].push_back(u);
      }
    done_.assign(m.units.size(), false);
  }

  std::vector<StepEvent> build() {
    const std::size_t n = m_.units.size();
    events_.push_back({Kind::BeginForward, 0});
    for (std::size_t u = 0; u < n; ++u) {
      hold(u);
      release(u);
    }
    events_.push_back({Kind::BeginBackward, 0});
    for (std::size_t k = n; k-- > 0;) {
      hold(k);
      write_grads(k);
      release(k);
      done_[k] = true;
      reduce_if_ready(k);
      for (std::size_t o : owners(k)) reduce_if_ready(o);
    }
    events_.push_back({Kind::OptimizerStep, 0});
    return std::move(events_);
  }

 private:
  // u's tie owners, distinct, in tie order, u itself left out.
  std::vector<std::size_t> owners(std::size_t u) const {
    std::vector<std::size_t> out;
    for (const PlanTie& t : m_.units[u].ties) {
      bool seen = t.owner_unit == u;
      for (std::size_t o : out) seen = seen || o == t.owner_unit;
      if (!seen) out.push_back(t.owner_unit);
    }
    return out;
  }
  void hold(std::size_t u) {
    events_.push_back({Kind::Unshard, u});
    for (std::size_t o : owners(u)) events_.push_back({Kind::Unshard, o});
  }
  void release(std::size_t u) {
    events_.push_back({Kind::Reshard, u});
    for (std::size_t o : owners(u)) events_.push_back({Kind::Reshard, o});
  }
  void write(std::size_t u) {
    written_[u] = true;
    events_.push_back({Kind::GradData, u});
  }
  void write_grads(std::size_t u) {
    for (const ParamSpec& p : m_.units[u].params)
      if (p.requires_grad) {
        write(u);
        break;
      }
    for (const PlanTie& t : m_.units[u].ties)
      if (m_.units[t.owner_unit].params[t.owner_param].requires_grad) write(t.owner_unit);
  }
  void reduce_if_ready(std::size_t u) {
    if (!written_[u] || !done_[u]) return;
    for (std::size_t user : users_[u])
      if (!done_[user]) return;
    written_[u] = false;
    events_.push_back({Kind::Reduce, u});
  }

  const PlanModel& m_;
  std::vector<bool> written_, done_;
  std::vector<std::vector<std::size_t>> users_;
  std::vector<StepEvent> events_;
};

}  // namespace

std::vector<StepEvent> training_step(const PlanModel& model) {
  return StepBuilder(model).build();
}

void mark_secondaries(std::vector<StepEvent>& events, std::size_t units) {
  std::vector<bool> held(units, false), wrote(units, false);
  for (StepEvent& e : events) {
    switch (e.kind) {
      case Kind::Unshard:
        e.node_local = held[e.unit];
        held[e.unit] = wrote[e.unit] = false;
        break;
      case Kind::GradData: wrote[e.unit] = true; break;
      case Kind::Reshard:
        e.node_local = !wrote[e.unit];
        held[e.unit] = e.node_local;
        break;
      case Kind::OptimizerStep: held.assign(units, false); break;
      default: break;
    }
  }
}

}  // namespace fsdp::plan
