// The POSIX sink (checkpoint/sink.hpp): one rank's ranges of a file through a buffered descriptor
// and, when asked and while the filesystem takes direct I/O, an O_DIRECT one. A write's 4 KiB-
// aligned bulk goes direct (straight from memory when it is aligned as the device needs, else
// through two aligned 32 MiB buffers, one written on a second thread while the next is filled),
// its unaligned head and tail buffered; buffered writes ask the kernel every 64 MiB to start
// writing back, so that the fsync finds little left. Where the filesystem refuses direct I/O (at
// open or at a write), that write and every later one go buffered.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/posix_file.hpp"
#include "checkpoint/sink.hpp"

namespace fsdp::ckpt {

class PosixSink : public Sink {
 public:
  // Opens the existing file at `path` for writing. Throws Errc::Io.
  PosixSink(const std::string& path, bool direct);

  void write_at(const void* data, uint64_t bytes, uint64_t offset) override;
  void write(std::vector<IoPiece>& pieces) override;  // in file order
  // One fsync of the file covers both descriptors: the direct writes' allocations and the
  // buffered bytes.
  void sync() override;
  void close() override;

 private:
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;
  struct Pending {
    const char* data = nullptr;
    uint64_t bytes = 0, offset = 0;
  };

  void write_piece(const IoPiece& p);
  void write_buffered(const IoPiece& p, uint64_t first, uint64_t bytes);
  void write_direct(const IoPiece& p, uint64_t first, uint64_t bytes);
  bool direct_write(const char* data, uint64_t bytes, uint64_t offset) const;
  void fallback(const char* data, uint64_t bytes, uint64_t offset);
  void wait();

  std::optional<PosixFile> buffered_;
  std::optional<PosixFile> direct_;
  uint64_t memory_alignment_;
  bool refuse_writes_ = false;
  std::vector<char> produced_;
  AlignedBuffer stage_[2];
  int next_ = 0;
  Pending pending_;
  std::future<bool> inflight_;  // last: waited for before the buffers and descriptors go
};

}  // namespace fsdp::ckpt
