// A read-only memory mapping of a whole checkpoint file, for loads: the verified ranges are
// copied into the shards from the page cache with memcpy, which on Linux runs 2-3x faster than
// pread's copy (bench numbers in doc/checkpoint-format.md), and ranges already in the page cache
// are checksummed in place.
//
// A mapping turns a file that is truncated or fails under it into SIGBUS. Every access through
// this class runs inside `guarded`, which catches the fault of its own thread (a SIGBUS handler
// installed while any mapping lives, passing other threads' and other addresses' signals on to the
// handler it replaced) and throws Errc::Io naming the file instead: no access ends the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fsdp::ckpt {

class PosixFile;

class FileMapping {
 public:
  // Maps [0, file.size()) of a file opened for reading. Throws Errc::Io naming the file.
  explicit FileMapping(const PosixFile& file);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  uint64_t size() const { return size_; }
  // Whether every page of [offset, offset + bytes) is in the page cache now (mincore): reading
  // it through the mapping costs no disk wait. Advice only: false when the kernel cannot say.
  bool resident(uint64_t offset, uint64_t bytes) const;
  // Hands `fn` the bytes [offset, offset + bytes) (inside the file: the caller checked) and runs it
  // with this thread's SIGBUS caught: a fault inside it throws Errc::Io naming the file and `what`.
  // `fn` must not own anything that needs destroying (it is left by a jump on a fault): a checksum
  // or a copy of plain bytes.
  template <class Fn>
  void guarded(uint64_t offset, uint64_t bytes, const std::string& what, Fn&& fn) const {
    const char* p = base_ + offset;
    if (!run_guarded(&call<Fn>, &fn, p, bytes)) fault(what);
  }

 private:
  template <class Fn>
  static void call(void* fn, const char* p, uint64_t bytes) {
    (*static_cast<Fn*>(fn))(p, bytes);
  }
  // False when a SIGBUS interrupted fn.
  static bool run_guarded(void (*call)(void*, const char*, uint64_t), void* fn, const char* p,
                          uint64_t bytes);
  [[noreturn]] void fault(const std::string& what) const;

  std::string path_;
  const char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace fsdp::ckpt
