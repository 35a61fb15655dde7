#include "checkpoint/file_mapping.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/error.hpp"
#include "checkpoint/posix_file.hpp"

namespace fsdp::ckpt {
namespace {

// The jump target of the thread inside run_guarded, null elsewhere.
thread_local sigjmp_buf* t_guard = nullptr;

// The handler is installed while any mapping lives (counted), the previous one kept to pass on
// the signals that are not a guarded access's.
std::mutex g_install;
int g_mappings = 0;
struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* target = t_guard) {
    t_guard = nullptr;
    siglongjmp(*target, 1);
  }
  // Not a guarded access: what the previous disposition does. For the default action, restore it
  // and return: the faulting instruction runs again and the signal ends the process as it would
  // have without this handler.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);
}

void install() {
  std::lock_guard<std::mutex> lock(g_install);
  if (g_mappings++ > 0) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

void uninstall() {
  std::lock_guard<std::mutex> lock(g_install);
  if (--g_mappings > 0) return;
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

}  // namespace

FileMapping::FileMapping(const PosixFile& file) : path_(file.path()), size_(file.size()) {
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, file.fd(), 0);
  if (p == MAP_FAILED) fail(Errc::Io, "cannot map '" + path_ + "': " + std::strerror(errno));
  base_ = static_cast<const char*>(p);
  install();
}

FileMapping::~FileMapping() {
  if (!base_) return;
  ::munmap(const_cast<char*>(base_), size_);
  uninstall();
}

bool FileMapping::resident(uint64_t offset, uint64_t bytes) const {
  if (bytes == 0) return true;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = offset / page * page, end = offset + bytes;
  std::vector<unsigned char> in((end - first + page - 1) / page);
  if (::mincore(const_cast<char*>(base_ + first), end - first, in.data()) != 0) return false;
  for (unsigned char v : in)
    if (!(v & 1)) return false;
  return true;
}

bool FileMapping::run_guarded(void (*call)(void*, const char*, uint64_t), void* fn, const char* p,
                              uint64_t bytes) {
  sigjmp_buf target;
  if (sigsetjmp(target, 1) != 0) return false;  // the mask restored; the handler cleared t_guard
  t_guard = &target;
  call(fn, p, bytes);
  t_guard = nullptr;
  return true;
}

void FileMapping::fault(const std::string& what) const {
  fail(Errc::Io, "reading " + (what.empty() ? std::string() : what + " from ") + "'" + path_ +
                     "': the file was truncated or failed while it was being loaded (SIGBUS)");
}

}  // namespace fsdp::ckpt
