#include "diag/call_log.hpp"

#include <cstdio>

#include "base/dtype.hpp"

namespace fsdp {

std::string CallInfo::text() const {
  std::string s = std::string(call) + "(";
  const char* sep = "";
  if (unit_id != kNoUnit) {
    s += unit.empty() ? "unit " + std::to_string(unit_id) : unit;
    sep = ", ";
  }
  if (bytes) {
    s += sep + std::to_string(bytes) + " bytes";
    if (dtype >= 0) s += std::string(" ") + dtype_name(static_cast<DType>(dtype));
  }
  return s + ")";
}

uint64_t CallLog::begin(const CallInfo& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back({++next_, call, Clock::now(), {}, false});
  // Forget the oldest finished calls beyond kKept (calls in progress stay whatever their age).
  std::size_t finished = 0;
  for (const Entry& e : entries_) finished += e.done;
  for (auto it = entries_.begin(); finished > kKept && it != entries_.end();)
    if (it->done) {
      it = entries_.erase(it);
      --finished;
    } else {
      ++it;
    }
  return next_;
}

void CallLog::end(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->seq == seq) {
      it->done = true;
      it->stop = Clock::now();
      return;
    }
}

std::optional<CallLog::Overdue> CallLog::overdue(std::chrono::duration<double> age) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  for (const Entry& e : entries_)
    if (!e.done && now - e.start >= age)
      return Overdue{e.seq, e.call.text(), std::chrono::duration<double>(now - e.start).count()};
  return std::nullopt;
}

bool CallLog::in_progress(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& e : entries_)
    if (e.seq == seq) return !e.done;
  return false;
}

std::string CallLog::recent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  std::string s;
  char buf[96];
  for (const Entry& e : entries_) {
    if (e.done)
      std::snprintf(buf, sizeof buf, " done in %.3f ms",
                    std::chrono::duration<double, std::milli>(e.stop - e.start).count());
    else
      std::snprintf(buf, sizeof buf, " in progress for %.3f s",
                    std::chrono::duration<double>(now - e.start).count());
    s += "  #" + std::to_string(e.seq) + " " + e.call.text() + buf + "\n";
  }
  return s;
}

}  // namespace fsdp
