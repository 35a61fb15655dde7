#include "checkpoint/posix_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace fsdp::ckpt {
namespace {

// One call moves at most 1 GiB: Linux transfers at most 2 GiB - 4 KiB per call anyway, and a
// bound that is a multiple of 4 KiB keeps a direct transfer's continuation aligned.
constexpr uint64_t kMaxCall = uint64_t{1} << 30;

// pwrite until every byte is written. With `refusable`, EINVAL returns false instead of throwing.
bool write_range(int fd, const std::string& path, const char* p, uint64_t bytes, uint64_t offset,
                 bool refusable) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min(bytes, kMaxCall), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && refusable) return false;
    if (n <= 0)
      fail(Errc::Io, "writing '" + path + "': " + (n < 0 ? std::strerror(errno) : "short write"));
    p += n, offset += static_cast<uint64_t>(n), bytes -= static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

PosixFile::PosixFile(const std::string& path, int flags, mode_t mode) : path_(path) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd_ < 0) fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
}

std::optional<PosixFile> PosixFile::open_direct(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) return std::nullopt;
  if (fd < 0) fail(Errc::Io, "cannot open '" + path + "': " + std::strerror(errno));
  return PosixFile(Opened{}, path, fd);
}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

PosixFile::PosixFile(PosixFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

PosixFile& PosixFile::operator=(PosixFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

uint64_t PosixFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(Errc::Io, "stat of '" + path_ + "': " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

void PosixFile::read_at(void* out, uint64_t bytes, uint64_t offset, const std::string& what) const {
  char* p = static_cast<char*>(out);
  const std::string of = what.empty() ? std::string() : what + " from ";
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, std::min(bytes, kMaxCall), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Errc::Io, "reading " + of + "'" + path_ + "': " + std::strerror(errno));
    if (n == 0)
      fail(Errc::Corrupt, "'" + path_ + "': " + (what.empty() ? "a read" : what) +
                              " runs past the end of the file at byte " + std::to_string(offset) +
                              " (truncated file)");
    p += n, offset += static_cast<uint64_t>(n), bytes -= static_cast<uint64_t>(n);
  }
}

void PosixFile::write_at(const void* in, uint64_t bytes, uint64_t offset) const {
  write_range(fd_, path_, static_cast<const char*>(in), bytes, offset, false);
}

bool PosixFile::write_direct_at(const void* in, uint64_t bytes, uint64_t offset) const {
  return write_range(fd_, path_, static_cast<const char*>(in), bytes, offset, true);
}

void PosixFile::resize(uint64_t bytes) const {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    fail(Errc::Io, "sizing '" + path_ + "': " + std::strerror(errno));
}

void PosixFile::sync() const {
  if (::fsync(fd_) != 0) fail(Errc::Io, "fsync of '" + path_ + "': " + std::strerror(errno));
}

void PosixFile::advise_sequential() const {
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

void PosixFile::start_writeback(uint64_t offset, uint64_t bytes) const {
#if defined(__linux__)
  ::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(bytes),
                    SYNC_FILE_RANGE_WRITE);
#else
  (void)offset, (void)bytes;
#endif
}

}  // namespace fsdp::ckpt
