#pragma once
// The subcommands of the shardtrain executable.
#include <cstdint>
#include <string>
#include <vector>

#include "app/planning.hpp"
#include "comm/world.hpp"

namespace st::app {

struct DeckRequest {
  std::string deck_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string save_params;             // run --save-params FILE
  MachineOptions machine;              // --node-mem-gb, and plan's machine options
};

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

// `shardtrain tokenize IN OUT`: encode a text with GPT-2's tokenizer into llm.c token files,
// the ranks sharing the text; the files are the same on any number of ranks.
struct TokenizeRequest {
  std::string input, output;
  std::vector<std::string> tokenizer_files;  // empty: the GPT-2 files tools/setup.sh installs
  std::uint64_t shard_tokens = 0;            // 0: one file
  std::string separator;                     // "": the text is one stream
};
int tokenize_command(const TokenizeRequest& request, World& world);
// Where tools/setup.sh puts GPT-2's encoder.json and vocab.bpe in this source tree.
std::string default_gpt2_files();

// Parses argv and dispatches; every rank parses the same command line.
int main_with_mpi(int argc, char** argv);

}  // namespace st::app
