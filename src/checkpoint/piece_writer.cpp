#include "checkpoint/piece_writer.hpp"

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "checkpoint/mpi_sink.hpp"
#include "checkpoint/posix_sink.hpp"

namespace fsdp::ckpt {
namespace {

// The sinks, in IoMode's order: FSDP_CKPT_DATA_IO's name for each, whether every rank opens it
// (an MPI-IO file is opened collectively; a POSIX one only by a rank with bytes to write), and how
// it is made.
struct SinkEntry {
  const char* name;
  bool every_rank;
  std::unique_ptr<Sink> (*open)(MPI_Comm comm, const std::string& path, const IoOptions& o,
                                uint64_t bytes);
};

const SinkEntry kSinks[] = {
    {"direct", false,
     [](MPI_Comm, const std::string& path, const IoOptions& o, uint64_t bytes) {
       return std::unique_ptr<Sink>(new PosixSink(path, bytes >= o.direct_min_bytes));
     }},
    {"posix", false,
     [](MPI_Comm, const std::string& path, const IoOptions&, uint64_t) {
       return std::unique_ptr<Sink>(new PosixSink(path, false));
     }},
    {"collective", true,
     [](MPI_Comm comm, const std::string& path, const IoOptions& o, uint64_t) {
       return std::unique_ptr<Sink>(
           new MpiSink(comm, path, MpiSink::Calls::Collective, o.round_bytes));
     }},
    {"independent", true,
     [](MPI_Comm comm, const std::string& path, const IoOptions& o, uint64_t) {
       return std::unique_ptr<Sink>(
           new MpiSink(comm, path, MpiSink::Calls::Independent, o.round_bytes));
     }},
};

const SinkEntry& entry(IoMode mode) {
  return kSinks[static_cast<int>(mode)];
}

}  // namespace

std::unique_ptr<Sink> open_sink(MPI_Comm comm, const std::string& path, const IoOptions& options,
                                uint64_t bytes) {
  const SinkEntry& e = entry(options.mode);
  if (!e.every_rank && bytes == 0) return nullptr;
  return e.open(comm, path, options, bytes);
}

void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options) {
  uint64_t bytes = 0;
  for (const IoPiece& p : pieces) bytes += p.bytes;
  agree_error(comm, attempt([&] {
                std::unique_ptr<Sink> sink = open_sink(comm, path, options, bytes);
                if (!sink) return;
                sink->write(pieces);
                sink->sync();
                sink->close();
              }));
}

IoOptions io_options_from_environment() {
  IoOptions o;
  const int i =
      env_choice(Env::CkptDataIo, {kSinks[0].name, kSinks[1].name, kSinks[2].name, kSinks[3].name});
  o.mode = i < 0 ? IoMode::Direct : static_cast<IoMode>(i);
  return o;
}

}  // namespace fsdp::ckpt
