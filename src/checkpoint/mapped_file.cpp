#include "checkpoint/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace fsdp::ckpt {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(Errc::Io, "cannot stat '" + path + "': " + std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int e = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(Errc::Io, "cannot map '" + path + "': " + std::strerror(e));
    }
    data_ = static_cast<char*>(p);
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void MappedFile::prefetch(const std::vector<Range>& ranges) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const Range& r : ranges) {
    if (r.bytes == 0 || r.offset >= size_) continue;
    const uint64_t begin = r.offset / page * page;
    const uint64_t end = std::min(size_, r.offset + r.bytes);
    // Advice only: a failure costs speed, never correctness.
    ::madvise(data_ + begin, end - begin, MADV_WILLNEED);
  }
}

}  // namespace fsdp::ckpt
