#include "checkpoint/range_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace fsdp::ckpt {

RangeReader::RangeReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail(Errc::Io, "cannot stat '" + path + "': " + std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // a larger read-ahead window; advice only
}

RangeReader::~RangeReader() {
  if (fd_ >= 0) ::close(fd_);
}

void RangeReader::read(uint64_t offset, uint64_t bytes, void* dst, const std::string& what) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Errc::Io, "reading " + what + " from '" + path_ + "': " + std::strerror(errno));
    if (n == 0)
      fail(Errc::Corrupt, "'" + path_ + "': " + what + " runs past the end of the file at byte " +
                              std::to_string(offset) + " (truncated file)");
    p += n, offset += static_cast<uint64_t>(n), bytes -= static_cast<uint64_t>(n);
  }
}

}  // namespace fsdp::ckpt
