// make_nccl_transport in a build without NCCL.
#include "base/error.hpp"
#include "transport/nccl/nccl_factory.hpp"

namespace fsdp::cuda {

std::unique_ptr<Transport> make_nccl_transport(MemorySpace&, const std::vector<const Group*>&) {
  fail(Errc::Unsupported, "this libfsdp was built without NCCL");
}

}  // namespace fsdp::cuda
