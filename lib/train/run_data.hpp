#pragma once
// The data of a run as the deck describes it: the tokenizer, the training data set, the
// validation data set when data.val_path names one, and the parts of them used for each.
#include <mpi.h>

#include <memory>
#include <string>

#include "data/batches.hpp"
#include "data/dataset.hpp"
#include "deck/config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace st {

struct RunData {
  std::unique_ptr<Tokenizer> tokenizer;
  // Held by pointer: the splits point at them, and RunData moves.
  std::unique_ptr<TokenDataset> train, val;  // val: null without data.val_path
  DataSplits splits;
  // Samples are shown as text (decoded by the tokenizer) for text data and for GPT-2 tokens;
  // token files read with the byte tokenizer show token ids.
  bool text_samples = false;
};

// On every rank: reads the tokenizer files, expands data.path and data.val_path (rank 0's
// listing), maps the files, encodes text with a BPE tokenizer (the ranks sharing the work), and
// checks every token id against model.vocab_size (each rank scanning a part). Any rank's
// problem stops every rank with one Error (scope: all ranks) naming the file and the fix.
// whole_for_validation (`shardtrain eval --data`): all of data.path is the validation part, and
// the training part too (nothing trains on it).
RunData open_run_data(const Config& config, MPI_Comm comm, bool whole_for_validation = false);

// "data/x.txt: 2483683 bytes, train 2235315, val 248368" or, with data.val_path,
// "train data/a.bin: N tokens; val data/v.bin: M tokens", for the settings table.
std::string describe_data(const RunData& data);

}  // namespace st
