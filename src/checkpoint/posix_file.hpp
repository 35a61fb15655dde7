// A file descriptor for positioned reads and writes that fail with an fsdp::Error naming the file
// (short reads, EINTR and partial writes handled), closed when it goes.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.hpp"

namespace fsdp::ckpt {

class PosixFile {
 public:
  PosixFile(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    fd_ = ::open(path.c_str(), flags, mode);
    if (fd_ < 0) fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
  }
  ~PosixFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  void read_at(void* out, uint64_t bytes, uint64_t offset) const {
    char* p = static_cast<char*>(out);
    while (bytes) {
      const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        fail(n == 0 ? Errc::Corrupt : Errc::Io,
             "reading '" + path_ +
                 "': " + (n == 0 ? "unexpected end of file" : std::strerror(errno)));
      p += n, bytes -= static_cast<uint64_t>(n), offset += static_cast<uint64_t>(n);
    }
  }
  void write_at(const void* in, uint64_t bytes, uint64_t offset) const {
    const char* p = static_cast<const char*>(in);
    while (bytes) {
      const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(Errc::Io, "writing '" + path_ + "': " + std::strerror(errno));
      p += n, bytes -= static_cast<uint64_t>(n), offset += static_cast<uint64_t>(n);
    }
  }
  void sync() const {
    if (::fsync(fd_) != 0) fail(Errc::Io, "fsync of '" + path_ + "': " + std::strerror(errno));
  }
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(Errc::Io, "stat of '" + path_ + "': " + std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace fsdp::ckpt
