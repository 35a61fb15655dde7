// DLPack tensors of the library's buffers (fsdp_dlpack, fsdp_optimizer_state_dlpack): each runs
// the raw call (fsdp_param_data, fsdp_shard_data, fsdp_optimizer_state...) for its pointer and
// describes that memory; what DLPack adds (device, dtype, shape, strides) comes from the memory
// space the context placed the buffer in and from the unit's layout and precision.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/resolved_param.hpp"
#include "third_party/dlpack/dlpack.h"

using fsdp::Errc;
using fsdp::fail;

namespace {

// One allocation per tensor: the struct, then its shape and strides. The deleter frees it and
// nothing else: the memory described is the library's.
struct Owned {
  DLManagedTensorVersioned tensor;
  int64_t shape[FSDP_MAX_NDIM];
  int64_t strides[FSDP_MAX_NDIM];
};

void delete_owned(DLManagedTensorVersioned* self) {
  delete static_cast<Owned*>(self->manager_ctx);
}

DLDevice device_of(const fsdp::MemorySpace& space) {
  const fsdp::Residence r = space.residence();
  switch (r.kind) {
    case fsdp::Residence::Kind::Host: return {kDLCPU, 0};
    case fsdp::Residence::Kind::PinnedHost: return {kDLCUDAHost, 0};
    case fsdp::Residence::Kind::Cuda: return {kDLCUDA, r.device};
  }
  fail(Errc::Internal, "a memory space of no known residence");
}

DLDataType dtype_of(fsdp::DType t) {
  const auto bits = static_cast<uint8_t>(fsdp::dtype_size(t) * 8);
  return {static_cast<uint8_t>(t == fsdp::DType::BFloat16 ? kDLBfloat : kDLFloat), bits, 1};
}

// A C-contiguous tensor of `shape` at `data`: the caller's to delete.
DLManagedTensorVersioned* describe(void* data, DLDevice device, fsdp::DType dtype,
                                   const int64_t* shape, int ndim) {
  auto owned = std::make_unique<Owned>();
  DLManagedTensorVersioned& t = owned->tensor;
  t.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  t.manager_ctx = owned.get();
  t.deleter = delete_owned;
  t.flags = 0;  // writable, as the raw pointer is
  std::copy(shape, shape + ndim, owned->shape);
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    owned->strides[d] = stride;
    stride *= shape[d];
  }
  t.dl_tensor = {data, device, ndim, dtype_of(dtype), owned->shape, owned->strides, 0};
  return &owned.release()->tensor;
}

DLManagedTensorVersioned* describe_1d(void* data, const fsdp::MemorySpace& space, fsdp::DType dtype,
                                      size_t numel) {
  const int64_t shape[1] = {static_cast<int64_t>(numel)};
  return describe(data, device_of(space), dtype, shape, 1);
}

void require_index_zero(int index, fsdp_buffer_t which) {
  if (index != 0)
    fail(Errc::InvalidArgument,
         "index = " + std::to_string(index) + ": must be 0 for which = " +
             (which == FSDP_BUFFER_SHARD ? "FSDP_BUFFER_SHARD" : "FSDP_BUFFER_GRAD_SHARD") +
             " (a unit has one shard and one gradient shard)");
}

// The legacy struct's deleter: frees itself and hands the versioned tensor back to its own.
void delete_unversioned(DLManagedTensor* self) {
  auto* inner = static_cast<DLManagedTensorVersioned*>(self->manager_ctx);
  delete self;
  if (inner->deleter) inner->deleter(inner);
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_dlpack(fsdp::Unit& u, const fsdp_buffer_t& which, int index,
                 DLManagedTensorVersioned** out) {
  void* data = nullptr;
  size_t numel = 0;
  switch (enum_int(which)) {
    case FSDP_BUFFER_PARAM:
    case FSDP_BUFFER_GRAD: {
      if (enum_int(which) == FSDP_BUFFER_PARAM)
        fsdp_param_data(u, index, &data);
      else
        fsdp_grad_data(u, index, &data);
      const ResolvedParam r = resolve_param(u, index);  // a tie's buffer is its owner's
      const std::vector<int64_t>& shape = r.unit->layout().param(r.index).shape;
      *out = describe(data, device_of(r.unit->context().memory()), r.unit->precision().param,
                      shape.data(), static_cast<int>(shape.size()));
      return;
    }
    case FSDP_BUFFER_SHARD:
      require_index_zero(index, which);
      fsdp_shard_data(u, &data, &numel);
      break;
    case FSDP_BUFFER_GRAD_SHARD:
      require_index_zero(index, which);
      fsdp_shard_grad(u, &data, &numel);
      break;
    default:
      fail(Errc::InvalidArgument, "which = " + std::to_string(enum_int(which)) +
                                      ": not an fsdp_buffer_t (0.." +
                                      std::to_string(FSDP_BUFFER_COUNT - 1) + ")");
  }
  *out = describe_1d(data, u.context().shard_memory(), u.precision().storage, numel);
}

void fsdp_optimizer_state_dlpack(fsdp::Optimizer& o, fsdp_unit_t unit, const char* name,
                                 DLManagedTensorVersioned** out) {
  void* data = nullptr;
  size_t numel = 0;
  fsdp_optimizer_state(o, unit, name, &data, &numel);  // checks unit and name
  const fsdp::Unit& u = unit_from(unit, "unit");
  *out = describe_1d(data, o.context().shard_memory(), u.precision().storage, numel);
}

void fsdp_dlpack_unversioned(DLManagedTensorVersioned* tensor, DLManagedTensor** out) {
  if (!tensor) fail(Errc::InvalidArgument, "tensor: NULL");
  if (tensor->version.major != 1)
    fail(Errc::InvalidArgument,
         "tensor: DLPack major version " + std::to_string(tensor->version.major) + ", not 1");
  if (tensor->flags != 0)
    fail(Errc::InvalidArgument, "tensor: flags = " + std::to_string(tensor->flags) +
                                    ": a DLPack tensor before 1.0 cannot carry flags");
  *out = new DLManagedTensor{tensor->dl_tensor, tensor, delete_unversioned};
}

}  // namespace fsdp::capi::body
