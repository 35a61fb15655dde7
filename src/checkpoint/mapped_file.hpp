// A checkpoint file mapped read-only: loads checksum and copy the values straight out of the page
// cache. Compared with reading into a staging copy of the destination, this needs no second
// shard-sized allocation (a load fits wherever the model fits) and one memory pass fewer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::ckpt {

class MappedFile {
 public:
  // Throws Errc::Io naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Starts reading these byte ranges from the disk in the background (readahead), so that the
  // pass over the previous ranges overlaps the I/O of these.
  struct Range {
    uint64_t offset, bytes;
  };
  void prefetch(const std::vector<Range>& ranges) const;

 private:
  std::string path_;
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace fsdp::ckpt
