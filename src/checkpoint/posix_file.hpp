// The one file-I/O class of the checkpoint code: a file descriptor for positioned reads and
// writes of whole ranges (short transfers and EINTR continued), fsync, and errors as fsdp::Error
// naming the file; closed when it goes. A load also maps the file it reads (file_mapping.hpp,
// whose accesses turn SIGBUS into an error).
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fsdp::ckpt {

class PosixFile {
 public:
  // open(2) with `flags` (O_CLOEXEC added). Throws Errc::Io naming the file.
  PosixFile(const std::string& path, int flags, mode_t mode = 0644);
  // The same with O_DIRECT added, or nothing where the filesystem refuses direct I/O (EINVAL:
  // tmpfs before Linux 6.6, some FUSE mounts). Throws Errc::Io for any other failure.
  static std::optional<PosixFile> open_direct(const std::string& path, int flags);
  ~PosixFile();
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  uint64_t size() const;

  // Reads [offset, offset + bytes) into out. Throws Errc::Io (a read error) or Errc::Corrupt (the
  // file ends first: truncated), naming the file and `what` (e.g. the dataset) when given.
  void read_at(void* out, uint64_t bytes, uint64_t offset, const std::string& what = {}) const;
  // Writes every byte of [in, in + bytes) at offset. Throws Errc::Io.
  void write_at(const void* in, uint64_t bytes, uint64_t offset) const;
  // Like write_at, but false (nothing reported) when the kernel refuses the transfer with EINVAL,
  // as a file opened by open_direct may for a buffer, offset or size the device cannot take
  // directly; the caller then writes the same range buffered. A range it refuses part way
  // through is refused whole: nothing before the refusal is relied on.
  bool write_direct_at(const void* in, uint64_t bytes, uint64_t offset) const;
  void resize(uint64_t bytes) const;  // ftruncate
  void sync() const;                  // fsync: the data and the file's size are durable
  // Advice only (no error): the kernel may read ahead further / start writing back these bytes
  // now rather than at the fsync.
  void advise_sequential() const;
  void start_writeback(uint64_t offset, uint64_t bytes) const;

 private:
  struct Opened {};
  PosixFile(Opened, std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace fsdp::ckpt
