#include "ckpt/inspect.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/verify.hpp"
#include "core/error.hpp"
#include "deck/parse.hpp"

namespace st {

namespace {
// How the run that wrote a checkpoint split its layers (its settings' parallel.tensor): ", each
// layer split over 2 ranks (parallel.tensor, with sequence parallelism)", or "" (whole layers, or
// settings this version does not read). The file holds the whole model either way.
std::string tensor_split_of(const CheckpointInfo& info) {
  try {
    const Config config = parse_deck(info.settings_or_deck(), "the checkpoint's settings", {});
    if (config.parallel.tensor <= 1) return "";
    return ", each layer split over " + std::to_string(config.parallel.tensor) + " ranks (parallel.tensor" +
           (config.parallel.sequence_parallel ? ", with sequence parallelism)" : ")");
  } catch (const Error&) {
    return "";
  }
}
}  // namespace

std::string inspect_checkpoint(const std::string& path) {
  // Verified as a resume verifies it, chunk by chunk, so a damaged file is named as a resume names it.
  const VerifiedCheckpoint verified = verify_checkpoint(path, MPI_COMM_SELF);
  try {
    const CheckpointInfo& info = verified.info;
    const ModelShape& s = info.shape;
    const std::uint64_t elements = make_layout(s).total();
    std::ostringstream os;
    os << path << "\n"
       << "  format " << info.format_version << ", step " << info.step << ", tokens seen " << info.tokens_seen
       << ", data position " << info.data_position << ", seed " << info.seed << "\n"
       << (info.data_shard.empty() ? std::string("  data: no file position (written before it was recorded)")
                                   : "  data: " + info.data_order + " order, next batch at token " +
                                         std::to_string(info.data_shard_offset) + " of " + info.data_shard + ", epoch " +
                                         std::to_string(info.data_epoch))
       << "\n"
       << "  written by " << info.world_size << " rank(s) with strategy " << info.strategy << " ("
       << info.precision << (info.strategy == "hsdp" ? ", groups of " + std::to_string(info.shard_group) : "")
       << ")" << tensor_split_of(info) << ", " << info.created_by << (info.run_id.empty() ? "" : ", run " + info.run_id) << "\n"
       << "  model: " << model_summary(s) << ", " << elements << " parameters\n";
    h5::Handle file = h5::open_file_serial(path);
    const auto names = h5::read_strings(h5::open_group(file.get(), "layout").get(), "names");
    file.close("closing " + path);
    os << "  " << names.size() << " tensors in /layout\n";
    for (std::size_t k = 0; k < 3; ++k) {
      char line[160];
      std::snprintf(line, sizeof line, "  /%-7s %llu x float32, Fletcher32 verified, L2 norm %.6g\n", kStateDatasets[k],
                    static_cast<unsigned long long>(elements), std::sqrt(verified.sum_squares[k]));
      os << line;
    }
    // The run's own settings where the checkpoint has them (deck and --set), else its deck file.
    os << (info.settings.empty() ? "  deck (the file the run started with; --set values are not recorded in "
                                   "checkpoints this old):\n"
                                 : "  settings of the run (deck and --set; defaults commented out):\n");
    std::istringstream deck(info.settings_or_deck());
    for (std::string line; std::getline(deck, line);) os << "    " << line << "\n";
    return os.str();
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

}  // namespace st
