#include "checkpoint/mpi_sink.hpp"

#include <algorithm>

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::ckpt {
namespace {

// One independent call moves at most this many bytes (MPI counts are int).
constexpr uint64_t kMaxCall = uint64_t{1} << 30;

struct Block {
  uint64_t file_offset, bytes;
  std::size_t piece;
  uint64_t first;  // byte offset inside the piece
};

// Pieces in file order, cut into blocks of at most round_bytes, grouped into rounds of at most
// round_bytes each.
std::vector<std::vector<Block>> cut_into_rounds(std::vector<IoPiece>& pieces,
                                                uint64_t round_bytes) {
  std::sort(pieces.begin(), pieces.end(),
            [](const IoPiece& a, const IoPiece& b) { return a.file_offset < b.file_offset; });
  std::vector<std::vector<Block>> rounds(1);
  uint64_t in_round = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for (uint64_t first = 0; first < pieces[i].bytes;) {
      if (in_round == round_bytes) rounds.emplace_back(), in_round = 0;
      const uint64_t n = std::min(pieces[i].bytes - first, round_bytes - in_round);
      rounds.back().push_back({pieces[i].file_offset + first, n, i, first});
      first += n, in_round += n;
    }
  }
  if (rounds.back().empty()) rounds.pop_back();
  return rounds;
}

// MPI-IO hints. Each rank's pieces are long contiguous runs, so two-phase collective buffering
// (every byte through a few aggregator ranks) and data sieving (reading whole extents, other
// ranks' bytes included, and read-modify-write) only add copies: both are off unless
// FSDP_CKPT_ROMIO_CB=enable|automatic asks for aggregation (many nodes on a parallel file system
// with few, small pieces per rank may prefer it). Given for whichever MPI-IO layer the MPI uses:
// the MPI standard's `collective_buffering` (Open MPI's OMPIO reads it; automatic leaves it to
// the layer) and ROMIO's own keys (MPICH; Open MPI's ROMIO component). A layer ignores the keys
// it does not know, so the bytes written are the same under any of them.
void set_hints(MPI_Info info) {
  const char* cb = env(Env::CkptRomioCb);
  const std::string mode = cb ? cb : "disable";
  MPI_Info_set(info, "romio_cb_write", mode.c_str());
  MPI_Info_set(info, "romio_ds_write", "disable");
  if (mode != "automatic")
    MPI_Info_set(info, "collective_buffering", mode == "enable" ? "true" : "false");
}

// One round as MPI datatypes: the file blocks (ascending offsets) and the memory blocks.
struct RoundTypes {
  MPI_Datatype file = MPI_BYTE, memory = MPI_BYTE;
  uint64_t bytes = 0;
  ~RoundTypes() {
    if (file != MPI_BYTE) MPI_Type_free(&file);
    if (memory != MPI_BYTE) MPI_Type_free(&memory);
  }
};

void build_types(const std::vector<Block>& blocks, const std::vector<const char*>& memory,
                 RoundTypes& t) {
  if (blocks.empty()) return;
  std::vector<int> lengths;
  std::vector<MPI_Aint> file_disp, mem_disp;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    lengths.push_back(static_cast<int>(blocks[b].bytes));
    file_disp.push_back(static_cast<MPI_Aint>(blocks[b].file_offset));
    MPI_Aint a;
    MPI_Get_address(memory[b], &a);
    mem_disp.push_back(a);
    t.bytes += blocks[b].bytes;
  }
  const int n = static_cast<int>(blocks.size());
  mpi_check(MPI_Type_create_hindexed(n, lengths.data(), file_disp.data(), MPI_BYTE, &t.file),
            "MPI_Type_create_hindexed");
  mpi_check(MPI_Type_commit(&t.file), "MPI_Type_commit");
  mpi_check(MPI_Type_create_hindexed(n, lengths.data(), mem_disp.data(), MPI_BYTE, &t.memory),
            "MPI_Type_create_hindexed");
  mpi_check(MPI_Type_commit(&t.memory), "MPI_Type_commit");
}

}  // namespace

MpiSink::MpiSink(MPI_Comm comm, const std::string& path, Calls calls, uint64_t round_bytes)
    : comm_(comm), path_(path), calls_(calls), round_bytes_(round_bytes) {
  MPI_Info info;
  MPI_Info_create(&info);
  set_hints(info);
  const int rc = MPI_File_open(comm, path.c_str(), MPI_MODE_WRONLY, info, &fh_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) fh_ = MPI_FILE_NULL;
  keep(rc, "MPI_File_open('" + path + "')");
  agree_error(comm, failure_);
}

MpiSink::~MpiSink() {
  if (fh_ != MPI_FILE_NULL) MPI_File_close(&fh_);
}

void MpiSink::keep(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS || failure_) return;
  try {
    mpi_check(rc, what.c_str());
  } catch (const Error& e) {
    failure_ = Error(Errc::Io, e.what());
  }
}

void MpiSink::write_at(const void* data, uint64_t bytes, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  const std::string what = "writing '" + path_ + "'";
  for (uint64_t done = 0; done < bytes && !failure_;) {
    const uint64_t n = std::min(kMaxCall, bytes - done);
    MPI_Status st;
    keep(MPI_File_write_at(fh_, static_cast<MPI_Offset>(offset + done), p + done,
                           static_cast<int>(n), MPI_BYTE, &st),
         what);
    MPI_Count got = 0;
    MPI_Get_elements_x(&st, MPI_BYTE, &got);
    if (!failure_ && static_cast<uint64_t>(got) != n)
      failure_ = Error(Errc::Io, what + ": short write");
    done += n;
  }
}

void MpiSink::write(std::vector<IoPiece>& pieces) {
  auto rounds = cut_into_rounds(pieces, round_bytes_);
  uint64_t nrounds = rounds.size();
  if (calls_ == Calls::Collective) {  // every rank makes as many calls as the busiest
    const uint64_t mine = nrounds;
    mpi_check(MPI_Allreduce(&mine, &nrounds, 1, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce");
  }
  const std::string what = "writing '" + path_ + "'";
  for (uint64_t r = 0; r < nrounds; ++r) {
    const std::vector<Block> none;
    const std::vector<Block>& blocks = r < rounds.size() ? rounds[r] : none;
    std::vector<const char*> memory;
    uint64_t staged = 0;
    for (const Block& b : blocks) {
      const IoPiece& p = pieces[b.piece];
      if (p.produce) {  // staged: produced into this round's buffer
        if (staging_.size() < round_bytes_) staging_.resize(round_bytes_);
        char* out = staging_.data() + staged;
        if (!failure_) failure_ = attempt([&] { p.produce(b.first, b.bytes, out); });
        memory.push_back(out);
        staged += b.bytes;
      } else {
        memory.push_back(static_cast<const char*>(p.memory) + b.first);
      }
    }
    if (calls_ == Calls::Independent) {
      for (std::size_t b = 0; b < blocks.size(); ++b)
        write_at(memory[b], blocks[b].bytes, blocks[b].file_offset);
      continue;
    }
    RoundTypes t;
    if (!failure_) build_types(blocks, memory, t);
    const bool empty = blocks.empty() || failure_.has_value();
    keep(MPI_File_set_view(fh_, 0, MPI_BYTE, empty ? MPI_BYTE : t.file, "native", MPI_INFO_NULL),
         what);
    MPI_Status st;
    keep(MPI_File_write_at_all(fh_, 0, MPI_BOTTOM, empty ? 0 : 1, t.memory, &st), what);
    if (!empty && !failure_) {
      MPI_Count got = 0;
      MPI_Get_elements_x(&st, MPI_BYTE, &got);
      if (static_cast<uint64_t>(got) != t.bytes)
        failure_ = Error(Errc::Io, what + ": short write of " + std::to_string(got) + " of " +
                                       std::to_string(t.bytes) + " bytes");
    }
  }
}

void MpiSink::sync() {
  keep(MPI_File_sync(fh_), "MPI_File_sync('" + path_ + "')");
}

void MpiSink::close() {
  const int rc = MPI_File_close(&fh_);
  fh_ = MPI_FILE_NULL;
  if (rc != MPI_SUCCESS && !failure_) failure_ = Error(Errc::Io, "closing '" + path_ + "' failed");
  if (failure_) throw *failure_;
}

}  // namespace fsdp::ckpt
