// Where a buffer is, for a transport that may read it from other processes in place: handed out
// with the buffer by whoever lent it (runtime/lease.hpp), never looked up from its address.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp {

struct Where {
  enum class Kind {
    Private,    // this process's memory alone
    NodeCopy,   // the node's one copy (a node slot): every team rank writes its blocks in place
    NodeArena,  // this rank's buffer in node-shared windows: team peers read it at (window, offset)
  };
  Kind kind = Kind::Private;
  uint64_t window = 0;  // NodeArena: the window's index in its arena
  uint64_t offset = 0;  // NodeArena: bytes into this rank's segment of the window
};

// A buffer and where it is.
struct Located {
  void* data = nullptr;
  Where where;
  // The same memory `bytes` further on.
  Located at(std::size_t bytes) const {
    Located l{static_cast<char*>(data) + bytes, where};
    if (where.kind == Where::Kind::NodeArena) l.where.offset += bytes;
    return l;
  }
  // Memory only this process knows of (scratch, a caller's array).
  static Located private_memory(void* p) { return Located{p, Where{}}; }
};

}  // namespace fsdp
