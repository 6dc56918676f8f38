#pragma once
// model.init_from: a run that starts from GPT-2 or Llama weights in a file instead of the random
// initialisation. Rank 0 checks the file first and every rank gets the same answers (collective
// calls), so a bad file stops every rank with one message.
#include <mpi.h>

#include <string>
#include <vector>

#include "deck/config.hpp"
#include "model/layout.hpp"

namespace st {

// Checks model.init_from against the deck, before anything is allocated: with model.from_file
// the model keys the deck leaves at their defaults take the file's values (arch, n_layer, n_head,
// d_model, seq_len, vocab_size; a Llama's n_kv_head, ffn_dim, norm_eps, rope_theta,
// tie_embeddings; an llm.c file's padding sets vocab_pad_to) and those it sets must agree (a
// Llama's seq_len may be shorter); otherwise the first key that differs is named. Does nothing without model.init_from.
// Throws Error (all ranks) naming the file and the problem.
void resolve_init_from(Config& config, MPI_Comm comm);

struct InitialWeights {
  std::vector<float> params;  // laid out by make_layout(shape)
  std::string note;           // "initialised from FILE (llm.c model file, version 3 (fp32)); read in 0.41 s"
};
// Every parameter from the file, after rank 0 has checked it: every rank reads the whole file.
// Collective; a rank that cannot read it is named in the Error every rank throws.
InitialWeights load_initial_weights(const std::string& path, const ModelShape& shape, MPI_Comm comm);

// The smallest vocab_pad_to that pads vocab_size to padded (a power of two where one does).
std::int64_t pad_to_for(std::int64_t vocab_size, std::int64_t padded);

}  // namespace st
