#include "diag/trace.hpp"

#include <cstdio>
#include <cstdlib>

#include "base/environment.hpp"

namespace fsdp {
namespace {

// Unit names come from the caller: escape what JSON strings cannot hold.
std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Trace::Trace(int rank) : rank_(rank), origin_(std::chrono::steady_clock::now()) {
  const char* dir = env(Env::Trace);
  if (!dir) return;
  enabled_ = true;
  path_ = std::string(dir) + "/fsdp-trace-rank" + std::to_string(rank) + ".json";
}

int64_t Trace::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               origin_)
      .count();
}

void Trace::record(const char* name, const std::string& unit, std::size_t bytes, int64_t start_us,
                   int64_t end_us, int thread) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, unit, bytes, start_us, end_us - start_us, thread});
}

Trace::~Trace() {
  if (!enabled_) return;
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "libfsdp: FSDP_TRACE: cannot write %s\n", path_.c_str());
    return;
  }
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  std::fprintf(f,
               "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
               "\"rank %d\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
               "{\"name\": \"caller\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": "
               "{\"name\": \"progress\"}}",
               rank_, rank_, rank_, rank_);
  for (const Event& e : events_)
    std::fprintf(
        f,
        ",\n{\"name\": \"%s\", \"cat\": \"fsdp\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
        "\"ts\": %lld, \"dur\": %lld, \"args\": {\"unit\": \"%s\", \"bytes\": %zu}}",
        e.name, rank_, e.thread, static_cast<long long>(e.start_us),
        static_cast<long long>(e.dur_us), json_escape(e.unit).c_str(), e.bytes);
  std::fprintf(f, "\n]}\n");
  if (std::fclose(f) != 0)
    std::fprintf(stderr, "libfsdp: FSDP_TRACE: writing %s failed\n", path_.c_str());
}

}  // namespace fsdp
