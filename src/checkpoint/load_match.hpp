// A load's plan, before any byte is read: the file's catalog matched with the model and the
// optimizers (which dataset goes where, what is missing, unexpected or mismatched). A pure
// function of both, so every rank reaches the same verdict.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/catalog.hpp"
#include "checkpoint/checkpoint_service.hpp"

namespace fsdp {
class Context;
class Unit;
class Optimizer;
}  // namespace fsdp

namespace fsdp::ckpt {

// One dataset to read: where it goes (a unit's parameter, or its optimizer state), and this
// rank's range of it.
struct Target {
  const DatasetInfo* file = nullptr;
  Unit* unit = nullptr;
  std::size_t param = 0;
  int optimizer = -1, buffer = -1;  // -1: the parameter itself
  // Under HFSDP: whether this rank's range of it is one of the whole job's (optimizer state, and
  // split masters' pieces) rather than one of its shard group's.
  bool in_piece() const;
};

// One of the request's optimizers against the file's optimizer at its position.
struct OptimizerMatch {
  Optimizer* optimizer = nullptr;
  const OptimizerInfo* file = nullptr;
  bool same_kind = false;
  // The same hyperparameter groups (count and patterns): the file's hyperparameters apply.
  bool same_groups = false;
};

// What a unit's optimizer state becomes.
struct UnitSteps {
  // Per parameter, the update count its state was saved at (-1: no state in the file; -2: not
  // in the file, or frozen). Every parameter in the file has state, or none.
  std::vector<int64_t> steps;
  // Optional buffers (schema.hpp StateRow) the file holds for none of the unit's parameters.
  std::vector<int> absent_buffers;
};

// The catalog against the model and optimizers. A pure function of both, so every rank reaches
// the same verdict.
struct Match {
  std::vector<Target> targets;
  LoadReport report;
  std::vector<std::string> problems;  // strict: any is fatal
  std::vector<OptimizerMatch> optimizers;
  std::map<std::pair<int, const Unit*>, UnitSteps> steps;  // by optimizer and unit
};

Match match(Context& ctx, const Catalog& c, const LoadRequest& r);

// The first problems of a failed match, one per line, for the error message.
std::string problem_list(const std::vector<std::string>& p);

}  // namespace fsdp::ckpt
