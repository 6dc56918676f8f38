#include "train/run_data.hpp"

#include <climits>
#include <optional>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "data/data_paths.hpp"
#include "data/mapped_file.hpp"
#include "data/text_encoding.hpp"

namespace st {
namespace {

// Every rank checks that it can map every file before any collective reading starts: a file
// missing on one rank's node must not leave the others waiting.
void require_readable(const std::vector<std::string>& files, MPI_Comm comm) {
  agreed(comm, [&] {
    for (const std::string& f : files) MappedFile probe(f);
  });
}

// Token ids at or above model.vocab_size: the ranks scan one part of the data each.
void require_ids_fit(const TokenDataset& data, std::int64_t vocab_size, MPI_Comm comm) {
  const int rank = group_rank(comm), ranks = group_size(comm);
  const std::size_t n = data.size(), r = static_cast<std::size_t>(rank), k = static_cast<std::size_t>(ranks);
  const std::size_t begin = n / k * r + n % k * r / k, end = n / k * (r + 1) + n % k * (r + 1) / k;
  const int largest = max_over(begin < end ? data.max_token(begin, end) : 0, comm);
  if (largest < vocab_size) return;
  // Where the largest id first occurs, to name the file.
  const std::optional<std::size_t> here = data.first_token_at_least(largest, begin, end);
  const unsigned long long first = min_over<unsigned long long>(here ? *here : ULLONG_MAX, comm);
  const DataShard& shard = data.shards()[data.shard_of(static_cast<std::size_t>(first))];
  throw Error("data file '" + shard.path + "' holds token id " + std::to_string(largest) +
                  " but model.vocab_size = " + std::to_string(vocab_size) + " (at token " +
                  std::to_string(first - shard.begin) + " of the file); set model.vocab_size to at least " +
                  std::to_string(largest + 1) + (data.byte_level() ? " (byte-level text: 256)" : ""),
              ErrorScope::all_ranks);
}

}  // namespace

RunData open_run_data(const Config& config, MPI_Comm comm, bool whole_for_validation) {
  const DataConfig& d = config.data;
  RunData run;
  agreed(comm, [&] { run.tokenizer = make_tokenizer(d.tokenizer, d.tokenizer_files, d.tokenizer_pattern); });
  // The byte tokenizer is checked by the data's own ids (token files may use fewer than 256).
  if (d.tokenizer != TokenizerKind::byte && run.tokenizer->vocab_size() > config.model.vocab_size)
    throw Error(config.deck_path + ": data.tokenizer = \"" + name_of(d.tokenizer) + "\" has " +
                    std::to_string(run.tokenizer->vocab_size()) + " tokens but model.vocab_size = " +
                    std::to_string(config.model.vocab_size) + "; set model.vocab_size = " +
                    std::to_string(run.tokenizer->vocab_size()) +
                    (d.tokenizer == TokenizerKind::gpt2
                         ? " (and model.vocab_pad_to = 128 for an embedding of 50304 rows)"
                         : ""),
                ErrorScope::all_ranks);

  const std::vector<std::string> train_files = expand_data_paths(d.path, "data.path", comm);
  const std::vector<std::string> val_files =
      d.val_path.empty() ? std::vector<std::string>{} : expand_data_paths(d.val_path, "data.val_path", comm);
  require_readable(train_files, comm);
  require_readable(val_files, comm);

  TokenDataset::TextEncoder encoder;
  if (d.tokenizer != TokenizerKind::byte) {
    Tokenizer* tokenizer = run.tokenizer.get();
    encoder = [tokenizer, comm](std::string_view text, const std::string& path) {
      return encode_text_over_ranks(text, "", *tokenizer, comm, path);
    };
  }
  agreed(comm, [&] {
    run.train = std::make_unique<TokenDataset>(TokenDataset::open(train_files, d.format, encoder));
    if (!val_files.empty()) run.val = std::make_unique<TokenDataset>(TokenDataset::open(val_files, d.format, encoder));
  });
  if (whole_for_validation) {
    run.val.reset();
    run.splits = separate_splits(*run.train, *run.train, config.model.seq_len);
  } else {
    run.splits = run.val ? separate_splits(*run.train, *run.val, config.model.seq_len)
                         : split_data(*run.train, d.val_fraction, config.model.seq_len);
  }
  require_ids_fit(*run.train, config.model.vocab_size, comm);
  if (run.val) require_ids_fit(*run.val, config.model.vocab_size, comm);
  run.text_samples = d.tokenizer != TokenizerKind::byte || run.train->byte_level();
  return run;
}

std::string describe_data(const RunData& data) {
  auto count = [](const TokenDataset& d, std::size_t n) {
    return std::to_string(n) + (d.byte_level() ? " bytes" : " tokens");
  };
  const Split& t = data.splits.train;
  const Split& v = data.splits.val;
  if (!data.val) return t.data->name() + ": " + count(*t.data, t.data->size()) + ", train " + std::to_string(t.size()) +
                        ", val " + std::to_string(v.size());
  return "train " + t.data->name() + ": " + count(*t.data, t.size()) + "; val " + v.data->name() + ": " +
         count(*v.data, v.size());
}

}  // namespace st
