#include "checkpoint/posix_sink.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/environment.hpp"
#include "base/error.hpp"

namespace fsdp::ckpt {
namespace {

// Direct transfers start, end and read memory at multiples of this: the page size, what every
// Linux filesystem that takes O_DIRECT accepts (most need only the device's 512-byte sectors).
constexpr uint64_t kDirectAlign = 4096;
// The two staging buffers of direct writes from memory that is not aligned like the file, or of
// produced pieces: one is filled while the other is written.
constexpr uint64_t kStageBytes = uint64_t{32} << 20;
// Buffered writes: the kernel is asked to start writing back after every this many bytes.
constexpr uint64_t kWriteback = uint64_t{64} << 20;

uint64_t align_up(uint64_t x) {
  return (x + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}
uint64_t align_down(uint64_t x) {
  return x / kDirectAlign * kDirectAlign;
}

// The alignment direct writes need of memory: what the kernel reports (statx, Linux 6.1; 512 bytes
// for most devices), else a page. Shards aligned to it are written without a copy.
uint64_t direct_memory_alignment(const PosixFile& f) {
#ifdef STATX_DIOALIGN
  struct statx st {};
  if (::statx(f.fd(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) == 0 &&
      (st.stx_mask & STATX_DIOALIGN) && st.stx_dio_mem_align > 0 &&
      kDirectAlign % st.stx_dio_mem_align == 0)
    return st.stx_dio_mem_align;
#endif
  (void)f;
  return kDirectAlign;
}

// Testing hook, compiled only with FSDP_TEST_HOOKS: FSDP_CKPT_TEST_REFUSE_DIRECT=open|write makes
// this rank behave as on a filesystem that refuses O_DIRECT when the file is opened, or at the
// first direct write (tests/internal/test_piece_writer.cpp: the fall-back to buffered writes).
enum class Refusal { None, Open, Write };
Refusal refusal_for_test() {
#ifdef FSDP_TEST_HOOKS
  const int i = env_choice(Env::CkptTestRefuseDirect, {"open", "write"});
  return i < 0 ? Refusal::None : static_cast<Refusal>(i + 1);
#else
  return Refusal::None;
#endif
}

}  // namespace

void PosixSink::FreeDeleter::operator()(char* p) const {
  std::free(p);
}

PosixSink::PosixSink(const std::string& path, bool direct)
    : buffered_(std::in_place, path, O_WRONLY), memory_alignment_(kDirectAlign) {
  const Refusal r = direct ? refusal_for_test() : Refusal::None;
  if (direct && r != Refusal::Open) direct_ = PosixFile::open_direct(path, O_WRONLY);
  if (direct_) memory_alignment_ = direct_memory_alignment(*direct_);
  refuse_writes_ = r == Refusal::Write;
}

void PosixSink::write_at(const void* data, uint64_t bytes, uint64_t offset) {
  write_piece(IoPiece{offset, bytes, data, {}});
}

void PosixSink::write(std::vector<IoPiece>& pieces) {
  std::sort(pieces.begin(), pieces.end(),
            [](const IoPiece& a, const IoPiece& b) { return a.file_offset < b.file_offset; });
  for (const IoPiece& p : pieces)
    if (p.bytes > 0) write_piece(p);
}

void PosixSink::sync() {
  wait();
  buffered_->sync();
}

void PosixSink::close() {
  wait();
  direct_.reset();
  buffered_.reset();
}

void PosixSink::write_piece(const IoPiece& p) {
  const uint64_t begin = p.file_offset, end = begin + p.bytes;
  const uint64_t a = align_up(begin), b = align_down(end);
  if (!direct_ || a >= b) return write_buffered(p, 0, p.bytes);
  write_buffered(p, 0, a - begin);
  write_direct(p, a - begin, b - a);
  write_buffered(p, b - begin, end - b);
}

// Bytes [first, first + bytes) of the piece, through the page cache.
void PosixSink::write_buffered(const IoPiece& p, uint64_t first, uint64_t bytes) {
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kWriteback, bytes - done);
    const char* data = static_cast<const char*>(p.memory) + first + done;
    if (p.produce) {
      if (produced_.size() < n) produced_.resize(n);
      p.produce(first + done, n, produced_.data());
      data = produced_.data();
    }
    buffered_->write_at(data, n, p.file_offset + first + done);
    buffered_->start_writeback(p.file_offset + first + done, n);
    done += n;
  }
}

// Bytes [first, first + bytes) of the piece, aligned in the file, with O_DIRECT: from memory
// when it is aligned as the device needs, else through the staging buffers, one written on a
// second thread while the next is filled.
void PosixSink::write_direct(const IoPiece& p, uint64_t first, uint64_t bytes) {
  const char* memory = p.produce ? nullptr : static_cast<const char*>(p.memory) + first;
  if (memory && reinterpret_cast<uintptr_t>(memory) % memory_alignment_ == 0) {
    wait();
    if (!direct_ || !direct_write(memory, bytes, p.file_offset + first))
      fallback(memory, bytes, p.file_offset + first);
    return;
  }
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kStageBytes, bytes - done);
    if (!stage_[next_]) {
      void* buf = nullptr;
      if (posix_memalign(&buf, kDirectAlign, kStageBytes) != 0)
        fail(Errc::OutOfMemory,
             "checkpoint write: " + std::to_string(kStageBytes) + " bytes of staging");
      stage_[next_].reset(static_cast<char*>(buf));
    }
    char* buf = stage_[next_].get();
    if (memory)
      std::memcpy(buf, memory + done, n);
    else
      p.produce(first + done, n, buf);
    wait();
    const uint64_t offset = p.file_offset + first + done;
    if (direct_) {
      pending_ = {buf, n, offset};
      inflight_ = std::async(std::launch::async,
                             [this, buf, n, offset] { return direct_write(buf, n, offset); });
    } else {
      fallback(buf, n, offset);
    }
    next_ ^= 1, done += n;
  }
}

bool PosixSink::direct_write(const char* data, uint64_t bytes, uint64_t offset) const {
  return !refuse_writes_ && direct_->write_direct_at(data, bytes, offset);
}

// The filesystem refused a direct write: this range and all the rest go through the page cache.
void PosixSink::fallback(const char* data, uint64_t bytes, uint64_t offset) {
  direct_.reset();
  buffered_->write_at(data, bytes, offset);
}

// The direct write in flight done (its error thrown here; a refused one written buffered).
void PosixSink::wait() {
  if (!inflight_.valid()) return;
  if (!inflight_.get()) fallback(pending_.data, pending_.bytes, pending_.offset);
}

}  // namespace fsdp::ckpt
