// Fuzz target: the safetensors header parser (fsdp-ckpt import). Input: 8 bytes of file size
// (little-endian), then the header's JSON text. Besides crashes, it checks what the parser
// promises of a header it accepts: every shape and offset fits the file, and the tensors cover
// the byte buffer exactly. Any exception other than fsdp::Error(Format) is a bug.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.hpp"
#include "checkpoint/safetensors_format.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: accepted header breaks a promise: %s\n", what);
  std::abort();
}

void check_accepted(const fsdp::ckpt::SafetensorsHeader& h, uint64_t file_size) {
  unsigned __int128 covered = 0;
  for (const auto& t : h.tensors) {
    const std::size_t es = fsdp::ckpt::safetensors_dtype_size(t.dtype);
    if (es == 0) broken("unknown dtype");
    unsigned __int128 n = es;
    for (int64_t e : t.shape) {
      if (e < 0) broken("negative extent");
      n *= static_cast<uint64_t>(e);
      if (n > file_size) broken("a tensor larger than the file");
    }
    if (t.begin != covered || t.end < t.begin || t.end - t.begin != n)
      broken("offsets inconsistent with shape or order");
    covered = t.end;
  }
  if (h.data_start + covered != file_size) broken("buffer not covered exactly");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  uint64_t file_size = 0;
  for (int b = 0; b < 8; ++b) file_size |= uint64_t(data[b]) << (8 * b);
  const std::string json(reinterpret_cast<const char*>(data + 8), size - 8);
  try {
    check_accepted(fsdp::ckpt::parse_safetensors(json, file_size), file_size);
  } catch (const fsdp::Error& e) {
    if (e.code() != fsdp::Errc::Format) broken("an error other than Format");
  }
  return 0;
}
