// Internal: the checkpoint writer's rounds (checkpoint/piece_writer.cpp, write_pieces), on 1 to 3
// ranks in each I/O mode and for round sizes from 1 byte to more than the file: every rank's
// pieces, given out of file order, some from memory and some produced on the fly, land at their
// offsets (the file equals a byte pattern computed from the offset alone); a piece's produced
// blocks tile it in order, each at most one round in the MPI-IO modes (direct and posix stage in
// blocks of their own); a rank with no pieces takes part.
//   test_round_planning <scratch dir>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "check.hpp"
#include "checkpoint/piece_writer.hpp"

using fsdp::ckpt::IoMode;
using fsdp::ckpt::IoOptions;
using fsdp::ckpt::IoPiece;

namespace {

char pattern(uint64_t offset) {
  return static_cast<char>((offset * 31 + 7) & 0xFF);
}

// One produced piece's calls: (first, bytes) in call order.
struct Calls {
  std::vector<std::pair<uint64_t, uint64_t>> made;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2) return std::fprintf(stderr, "usage: test_round_planning <dir>\n"), 2;
  const std::string path =
      std::string(argv[1]) + "/round-planning-np" + std::to_string(size) + ".bin";
  // The file: segments of awkward lengths, dealt to the ranks but never to the last one when
  // there are several (a rank with nothing to write still joins every collective round).
  const std::vector<uint64_t> lengths = {1, 7, 64, 65, 200, 3, 129, 1000, 2, 511, 4096, 33};
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (uint64_t n : lengths) offsets.push_back(total), total += n;
  const int writers = size > 1 ? size - 1 : 1;
  std::vector<char> reference(total);
  for (uint64_t o = 0; o < total; ++o) reference[o] = pattern(o);

  const IoMode modes[] = {IoMode::Direct, IoMode::Posix, IoMode::Collective, IoMode::Independent};
  const char* mode_names[] = {"direct", "posix", "collective", "independent"};
  for (int m = 0; m < 4; ++m)
    for (uint64_t round : {uint64_t{1}, uint64_t{7}, uint64_t{64}, uint64_t{1000}, total + 1}) {
      const std::string at = std::string(mode_names[m]) + ", rounds of " + std::to_string(round);
      if (rank == 0) {  // an existing file of the right size, of other bytes
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f << std::string(total, '\xEE');
      }
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<IoPiece> pieces;
      std::vector<Calls> calls(lengths.size());
      for (std::size_t s = lengths.size(); s-- > 0;) {  // out of file order on purpose
        if (static_cast<int>(s % static_cast<std::size_t>(writers)) != rank) continue;
        IoPiece p;
        p.file_offset = offsets[s], p.bytes = lengths[s];
        if (s % 2) {
          p.memory = reference.data() + offsets[s];
        } else {
          const uint64_t base = offsets[s];
          Calls* record = &calls[s];
          p.produce = [base, record](uint64_t first, uint64_t bytes, void* out) {
            record->made.emplace_back(first, bytes);
            for (uint64_t b = 0; b < bytes; ++b)
              static_cast<char*>(out)[b] = pattern(base + first + b);
          };
        }
        pieces.push_back(std::move(p));
      }
      try {
        fsdp::ckpt::write_pieces(MPI_COMM_WORLD, path, pieces, IoOptions{modes[m], round});
      } catch (const fsdp::Error& e) {
        check(false, at + ": write_pieces threw: " + e.what());
      }
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        if (calls[s].made.empty()) continue;
        uint64_t next = 0;
        for (const auto& [first, bytes] : calls[s].made) {
          const bool rounds_bound =
              modes[m] == IoMode::Collective || modes[m] == IoMode::Independent;
          check(first == next && bytes > 0 && (!rounds_bound || bytes <= round),
                at + ": segment " + std::to_string(s) + " produced [" + std::to_string(first) +
                    ", +" + std::to_string(bytes) + ") after " + std::to_string(next));
          next = first + bytes;
        }
        check(next == lengths[s], at + ": segment " + std::to_string(s) + " produced in full");
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        std::ifstream f(path, std::ios::binary);
        std::vector<char> got(total + 1);
        f.read(got.data(), static_cast<std::streamsize>(got.size()));
        check(static_cast<uint64_t>(f.gcount()) == total, at + ": file size");
        got.resize(total);
        check(got == reference, at + ": file contents");
      }
    }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s: round planning on %d rank(s)\n", all ? "FAILED" : "PASS", size);
  MPI_Finalize();
  return all ? 1 : 0;
}
