// CRC-32C (Castagnoli, the iSCSI / ext4 / Btrfs checksum): the per-dataset content checksum of
// checkpoints. Chosen because it is standard (any crc32c tool verifies a dataset's bytes), runs
// at several GB/s with the SSE4.2 instruction, and combines: the CRC of a concatenation follows
// from the parts' CRCs and the second part's length, so ranks checksum their own ranges and one
// combination gives the whole dataset's without moving data. Debug mode also checksums node-shared
// parameters while a rank holds them (SealedRegion), to catch a node peer writing into them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp {

// Continues `crc` (0 to start) over n bytes.
uint32_t crc32c(uint32_t crc, const void* data, std::size_t n);

// The CRC of A followed by B, from crc(A), crc(B) and B's length in bytes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace fsdp
