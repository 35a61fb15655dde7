// cuda_api.hpp in a build without CUDA: no device, and every request for one is refused.
#include "base/error.hpp"
#include "memory/cuda/cuda_api.hpp"

namespace fsdp::cuda {
namespace {

[[noreturn]] void not_built() {
  fail(Errc::Unsupported,
       "this libfsdp was built without CUDA (configure with FSDP_ENABLE_CUDA=ON and a CUDA "
       "toolkit)");
}

}  // namespace

bool built_with_cuda() {
  return false;
}
bool built_with_nccl() {
  return false;
}
int device_count() noexcept {
  return 0;
}
std::array<unsigned char, 16> device_uuid(int) {
  not_built();
}
std::unique_ptr<MemorySpace> make_device_memory(int) {
  not_built();
}
std::unique_ptr<MemorySpace> make_pinned_memory(int) {
  not_built();
}
void set_caller_stream(MemorySpace&, void*) {
  not_built();
}
bool mpi_supports_cuda() {
  return false;
}

}  // namespace fsdp::cuda
