// A checkpoint file read by byte ranges with pread: what a load checksums and copies. The kernel
// copies from the page cache without a page fault per 4 KiB (a mapping's cost), its read-ahead
// (the file is opened for sequential access) keeps the disk busy while the pieces before are
// checksummed, and a file truncated or failing under a load gives an error, never the SIGBUS a
// mapping would.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp::ckpt {

class RangeReader {
 public:
  // Throws Errc::Io naming the file when it cannot be opened.
  explicit RangeReader(const std::string& path);
  ~RangeReader();
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Reads [offset, offset + bytes) into dst. Throws Errc::Io (a read error, errno's text) or
  // Errc::Corrupt (the file ends first: truncated), naming the file and `what`.
  void read(uint64_t offset, uint64_t bytes, void* dst, const std::string& what) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace fsdp::ckpt
