#include "placement/table_backend.hpp"

namespace fsdp {

TableBackend::~TableBackend() {
  storage_.reset();
  pool_.reset();  // before the memory spaces its buffers came from
  try {
    memory_.buffers->synchronize();  // nothing queued may outlive the memory it uses
  } catch (...) {
  }
  stack_.reset();
}

}  // namespace fsdp
