#pragma once
// The subcommands of the shardtrain executable.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "deck/config.hpp"
#include "plan/job_machine.hpp"

namespace st::app {

struct DeckRequest {
  std::string deck_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string save_params;             // run --save-params FILE
  MachineOptions machine;              // --node-mem-gb, and plan's machine options
};

// The deck of the request, read by rank 0 and parsed on every rank, with model.init_from's shape
// resolved (collective).
Config load_config(const DeckRequest& request, World& world);

// `shardtrain run DECK`: train. Returns the exit code.
int run_deck(const DeckRequest& request, World& world);
// `shardtrain check DECK`: validate the deck and its data, print the resolved settings and the
// figures the run would have on `ranks` ranks (0: this job's size).
int check_deck(const DeckRequest& request, World& world, int ranks);
// `shardtrain deck-doc`: the deck reference (docs/deck.md).
int print_deck_doc();

// `shardtrain topo [--topology FILE]`: the node's wiring and what follows for the strategy.
int topo_command(const std::string& file, World& world);
// `shardtrain plan DECK`: every strategy's memory and step time on the machine, and the choice.
int plan_command(const DeckRequest& request, const MachineOptions& options, int ranks, World& world);
// `shardtrain doctor`: checks the setup, one line per check.
int doctor_command(World& world);

// `shardtrain tokenize IN OUT`: encode a text with a tokenizer (GPT-2's by default) into llm.c
// token files (uint16, or uint32 for vocabularies beyond 65536), the ranks sharing the text;
// the files are the same on any number of ranks.
struct TokenizeRequest {
  std::string input, output;
  std::string tokenizer = "gpt2";            // as data.tokenizer: gpt2, hf or tiktoken
  std::string pattern = "auto";              // as data.tokenizer_pattern
  std::vector<std::string> tokenizer_files;  // empty: the GPT-2 files tools/setup.sh installs (gpt2 only)
  std::uint64_t shard_tokens = 0;            // 0: one file
  std::string separator;                     // "": the text is one stream
};
int tokenize_command(const TokenizeRequest& request, World& world);
// Where tools/setup.sh puts GPT-2's encoder.json and vocab.bpe in this source tree.
std::string default_gpt2_files();

// `shardtrain ckpt inspect FILE` and `shardtrain ckpt export [--format F] [--dtype D] FILE OUT`.
struct CkptRequest {
  std::string action;  // "inspect" or "export"
  std::string file, out;
  std::string format = "hdf5";  // export: hdf5, llmc or safetensors
  std::string dtype = "fp32";   // export: fp32 or bf16 (llmc, safetensors)
  bool force = false;           // export: replace an existing output (never a checkpoint)
  std::string max_shard_size = "5GB";  // export --format safetensors of a Llama: shards above this
};
int ckpt_command(const CkptRequest& request, World& world);
// `shardtrain weights inspect FILE` and `shardtrain weights convert --format F [--dtype D] IN OUT`.
struct WeightsRequest {
  std::string action;  // "inspect" or "convert"
  std::string file, out;
  std::string format, dtype = "fp32";
  std::int64_t vocab_pad_to = 0;  // convert: pad the token table to a multiple of this (0: the file's padding)
  bool force = false;             // convert: replace an existing output (never a checkpoint)
  std::string max_shard_size = "5GB";  // convert to safetensors, a Llama: shards above this
};
int weights_command(const WeightsRequest& request, World& world);

// Runs `work` on rank 0 only (a one-process tool); every rank returns its verdict, so the job
// ends together: kExitOk, or kExitUsage after rank 0 printed the Error.
template <class Work>
int on_root(World& world, Work work) {
  try {
    agreed_on_root(world.comm(), work);
  } catch (const Error& e) {
    if (e.scope() != ErrorScope::all_ranks) throw;  // a failed MPI call, not the work's verdict
    if (world.is_root()) std::cerr << "shardtrain: error: " << e.what() << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

// Parses argv and dispatches; every rank parses the same command line.
int main_with_mpi(int argc, char** argv);

}  // namespace st::app
