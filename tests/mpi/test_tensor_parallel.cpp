// A tensor-parallel model against the whole model, for GPT-2 and Llama (its LM head untied and
// tied): the world split into consecutive groups of 2 (and 4, where the world allows) ranks,
// each rank building its slice of the model from the same whole parameters, and every rank also
// building the whole model alone (on MPI_COMM_SELF's terms: no group). One forward and backward
// under each recomputation: the loss and the gradients, the group's slices put back together,
// equal the whole model's. decode() fed a prompt and then a few tokens at a time, logits() and
// probs(): the same probabilities and logits as the whole model's. The same on the fused
// classifier's path (bf16 logits, the vocabulary-parallel fused cross-entropy: a device's in
// bf16), run on the host through its reference (tests/unit/fused_classifier_exec.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "comm/mpi_check.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/world.hpp"
#include "../unit/fused_classifier_exec.hpp"
#include "core/error.hpp"
#include "model/model.hpp"

namespace st {
void PrintTo(Recompute recompute, std::ostream* out) { *out << recompute_name(recompute); }

namespace {

// Heads, key/value heads, MLP width and padded vocabulary divide by 2 and 4; the 11 real tokens
// fill 2.75 of 4 vocabulary slices, so one slice holds padding only.
const ModelShape kGpt2Shape{2, 16, 4, 7, 11, 16};
ModelShape llama_shape(bool tied) {
  ModelShape s{2, 32, 8, 7, 11, 16};
  s.arch = Arch::llama;
  s.n_kv_head = 4;  // a rank of 4 holds 2 query heads and the key/value head they share
  s.ffn_dim = 24;
  s.tie_embeddings = tied;
  return s;
}

// *_sequence_parallel: the rows between split layers split over the group too. *_one_sequence:
// the same with micro-batches of one sequence, whose rows split within it (on 4 ranks one row
// each, so decoding's prompt goes through in pieces).
enum class Variant {
  gpt2,
  gpt2_sequence_parallel,
  gpt2_one_sequence,
  llama,
  llama_tied,
  llama_sequence_parallel,
  llama_one_sequence
};
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::gpt2: return "gpt2";
    case Variant::gpt2_sequence_parallel: return "gpt2_sequence_parallel";
    case Variant::gpt2_one_sequence: return "gpt2_one_sequence";
    case Variant::llama: return "llama";
    case Variant::llama_tied: return "llama_tied";
    case Variant::llama_sequence_parallel: return "llama_sequence_parallel";
    case Variant::llama_one_sequence: return "llama_one_sequence";
  }
  return "?";
}
bool is_gpt2(Variant v) {
  return v == Variant::gpt2 || v == Variant::gpt2_sequence_parallel || v == Variant::gpt2_one_sequence;
}
bool one_sequence(Variant v) { return v == Variant::gpt2_one_sequence || v == Variant::llama_one_sequence; }
bool sequence_parallel(Variant v) {
  return v == Variant::gpt2_sequence_parallel || v == Variant::llama_sequence_parallel || one_sequence(v);
}
ModelShape shape_of(Variant v) { return is_gpt2(v) ? kGpt2Shape : llama_shape(v == Variant::llama_tied); }
// The sequences of a micro-batch.
int batch_of(Variant v) { return one_sequence(v) ? 1 : 2; }
// The positions a training pass covers: the whole context, or with rows split 6 of its 7, so
// that the 2 x 6 rows divide by 2 and 4 (of one sequence, 4 of its 7).
int pass_length(Variant v) {
  if (one_sequence(v)) return 4;
  return sequence_parallel(v) ? 6 : static_cast<int>(shape_of(v).seq_len);
}
// Test names and messages show the variant and the recomputation by name.
void PrintTo(Variant v, std::ostream* out) { *out << variant_name(v); }

constexpr std::uint64_t kSeed = 99;

// Consecutive groups of `degree` ranks of the world, this rank's group's communicator.
struct Group {
  Group(int degree, bool sequence_parallel) : comm(split(degree)), tensor(comm.get(), TrafficLevel::intra) {
    int rank = 0;
    ST_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    group = TensorGroup{{degree, rank % degree}, &tensor, sequence_parallel};
  }
  static OwnedComm split(int degree) {
    int rank = 0;
    ST_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_Comm out = MPI_COMM_NULL;
    ST_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank / degree, rank, &out));
    return OwnedComm(out);
  }
  OwnedComm comm;
  MpiCommunicator tensor;
  TensorGroup group;
};

// The degrees the world splits into: 2 and 4 where they divide the ranks.
std::vector<int> degrees() {
  int size = 0;
  ST_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<int> out;
  for (const int d : {2, 4})
    if (size % d == 0) out.push_back(d);
  return out;
}

// Tokens covering every vocabulary slice (the real ones: 0..10), targets the next ones.
void fill_batch(std::vector<int>& tokens, std::vector<int>& targets, int B, int T, int V) {
  tokens.resize(static_cast<std::size_t>(B * T));
  targets.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>((5 * i + i / 3) % static_cast<std::size_t>(V));
    targets[i] = (tokens[i] * 7 + 2) % V;
  }
}

double worst_difference(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

class TensorParallelModel : public ::testing::TestWithParam<std::tuple<Variant, Recompute>> {
 protected:
  Variant variant() const { return std::get<0>(GetParam()); }
  Recompute recompute() const { return std::get<1>(GetParam()); }
};

TEST_P(TensorParallelModel, LossAndGradientsEqualTheWholeModel) {
  const ModelShape shape = shape_of(variant());
  const int B = batch_of(variant());
  const std::unique_ptr<Model<float>> whole = make_model<float>(shape, B, host_exec(), recompute());
  std::vector<float> params(whole->whole_layout().total());
  whole->init_params(params, kSeed);
  std::vector<int> tokens, targets;
  const int T = pass_length(variant());
  fill_batch(tokens, targets, B, T, static_cast<int>(shape.vocab_size));
  std::vector<float> whole_grads(params.size(), 0.0f);
  const double whole_loss = whole->forward(std::span<const float>(params), tokens.data(), targets.data(), B, T);
  whole->backward(std::span<const float>(params), std::span<float>(whole_grads), 1.0f);
  // The gradients are not all near zero: the comparison below compares something.
  double largest = 0;
  for (const float g : whole_grads) largest = std::max(largest, double(std::fabs(g)));
  EXPECT_GT(largest, 1e-3);

  for (const int degree : degrees()) {
    Group g(degree, sequence_parallel(variant()));
    const std::unique_ptr<Model<float>> model = make_model<float>(shape, B, host_exec(), recompute(), g.group);
    EXPECT_LT(model->layout().total(), params.size());
    const std::vector<float> slice = model->slice_of(params);
    std::vector<float> grads(slice.size(), 0.0f);
    const double loss = model->forward(std::span<const float>(slice), tokens.data(), targets.data(), B, T);
    model->backward(std::span<const float>(slice), std::span<float>(grads), 1.0f);
    EXPECT_NEAR(loss, whole_loss, 1e-5) << "tensor " << degree;
    const std::vector<float> gathered = model->whole_from_slices(grads);
    EXPECT_LT(worst_difference(gathered, whole_grads), 1e-5) << "tensor " << degree;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, TensorParallelModel,
                         ::testing::Combine(::testing::Values(Variant::gpt2, Variant::gpt2_sequence_parallel,
                                                              Variant::gpt2_one_sequence, Variant::llama,
                                                              Variant::llama_tied, Variant::llama_sequence_parallel,
                                                              Variant::llama_one_sequence),
                                            ::testing::Values(Recompute::none, Recompute::selective,
                                                              Recompute::full)),
                         [](const auto& param_info) {
                           return std::string(variant_name(std::get<0>(param_info.param))) + "_" +
                                  recompute_name(std::get<1>(param_info.param));
                         });

class TensorParallelDecode : public ::testing::TestWithParam<Variant> {};

TEST_P(TensorParallelDecode, ProbabilitiesAndLogitsEqualTheWholeModel) {
  const ModelShape shape = shape_of(GetParam());
  const int B = batch_of(GetParam());
  const std::unique_ptr<Model<float>> whole = make_model<float>(shape, B, host_exec());
  std::vector<float> params(whole->whole_layout().total());
  whole->init_params(params, kSeed);
  const int T = static_cast<int>(shape.seq_len), V = static_cast<int>(shape.vocab_size);
  std::vector<int> tokens, targets;
  fill_batch(tokens, targets, B, T, V);
  // A prompt of 3 tokens (the causal block from position 0), then 1, then 2, then 1: positions 0..6.
  const std::vector<int> feeds{3, 1, 2, 1};

  FlatBuffers<float> whole_flat(whole->layout(), params);
  std::vector<std::vector<float>> expected;
  int at = 0;
  for (const int count : feeds) {
    const std::span<const float> p = whole->decode(whole_flat, tokens.data() + at, count);
    expected.emplace_back(p.begin(), p.end());
    at += count;
  }
  // Whole passes (with rows split, of a length the group divides).
  const int Tp = pass_length(GetParam());
  const std::vector<float> whole_logits = whole->logits(params, tokens.data(), B, Tp);
  whole->forward(std::span<const float>(params), tokens.data(), nullptr, B, Tp);
  const std::vector<float> last_probs(whole->probs(B - 1, Tp - 1).begin(), whole->probs(B - 1, Tp - 1).end());
  const std::vector<float> first_probs(whole->probs(0, 2).begin(), whole->probs(0, 2).end());

  for (const int degree : degrees()) {
    Group g(degree, sequence_parallel(GetParam()));
    const std::unique_ptr<Model<float>> model = make_model<float>(shape, B, host_exec(), Recompute::none, g.group);
    const std::vector<float> slice = model->slice_of(params);
    FlatBuffers<float> flat(model->layout(), slice);
    at = 0;
    for (std::size_t i = 0; i < feeds.size(); ++i) {
      const std::span<const float> p = model->decode(flat, tokens.data() + at, feeds[i]);
      ASSERT_EQ(p.size(), static_cast<std::size_t>(V));
      EXPECT_LT(worst_difference(p, expected[i]), 1e-5) << "tensor " << degree << ", feed " << i;
      at += feeds[i];
    }
    EXPECT_EQ(model->decoded_length(), T);
    // The probabilities are a distribution over the whole vocabulary, not one slice's.
    double sum = 0;
    for (const float x : expected.back()) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-5);

    const std::vector<float> logits = model->logits(slice, tokens.data(), B, Tp);
    ASSERT_EQ(logits.size(), static_cast<std::size_t>(B * Tp * V));
    EXPECT_LT(worst_difference(logits, whole_logits), 1e-5) << "tensor " << degree;
    model->forward(std::span<const float>(slice), tokens.data(), nullptr, B, Tp);
    EXPECT_LT(worst_difference(model->probs(B - 1, Tp - 1), last_probs), 1e-5) << "tensor " << degree;
    EXPECT_LT(worst_difference(model->probs(0, 2), first_probs), 1e-5) << "tensor " << degree;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, TensorParallelDecode,
                         ::testing::Values(Variant::gpt2, Variant::gpt2_sequence_parallel, Variant::gpt2_one_sequence,
                                           Variant::llama, Variant::llama_tied, Variant::llama_sequence_parallel,
                                           Variant::llama_one_sequence),
                         [](const auto& param_info) { return std::string(variant_name(param_info.param)); });

// The fused classifier split over the vocabulary: each slice's statistics from its bf16 logits,
// the group's combined, then each slice's d(loss)/d(logits) in place, and the head's backward
// with the loss's scale in its products. Against the whole model on the same path: the same
// loss (1e-5), and gradients within 1e-3 of the largest (a slice's product may round a logit or
// a gradient of it to the neighbouring bf16 value where the whole one does not: measured below
// 1e-4), and decoding's and probs()' probabilities likewise.
class TensorParallelFusedClassifier : public ::testing::TestWithParam<Variant> {};

TEST_P(TensorParallelFusedClassifier, LossGradientsAndProbabilitiesEqualTheWholeModel) {
  const ModelShape shape = shape_of(GetParam());
  const int B = batch_of(GetParam());
  testing_support::FusedClassifierExec exec;
  const std::unique_ptr<Model<float>> whole = make_model<float>(shape, B, exec);
  ASSERT_TRUE(whole->bf16_logits());
  std::vector<float> params(whole->whole_layout().total());
  whole->init_params(params, kSeed);
  std::vector<int> tokens, targets;
  const int T = pass_length(GetParam()), V = static_cast<int>(shape.vocab_size);
  fill_batch(tokens, targets, B, T, V);
  std::vector<float> whole_grads(params.size(), 0.0f);
  const double whole_loss = whole->forward(std::span<const float>(params), tokens.data(), targets.data(), B, T);
  whole->backward(std::span<const float>(params), std::span<float>(whole_grads), 0.5f);
  double largest = 0;
  for (const float g : whole_grads) largest = std::max(largest, double(std::fabs(g)));
  EXPECT_GT(largest, 1e-3);
  FlatBuffers<float> whole_flat(whole->layout(), params);
  const std::span<const float> p = whole->decode(whole_flat, tokens.data(), 3);
  const std::vector<float> expected(p.begin(), p.end());
  whole->forward(std::span<const float>(params), tokens.data(), nullptr, B, T);
  // One call: each probs() refills the row it returns (the bf16 logits widened on the host).
  const std::span<const float> row = whole->probs(B - 1, T - 1);
  const std::vector<float> last_probs(row.begin(), row.end());

  for (const int degree : degrees()) {
    Group g(degree, sequence_parallel(GetParam()));
    const std::unique_ptr<Model<float>> model = make_model<float>(shape, B, exec, Recompute::none, g.group);
    const std::vector<float> slice = model->slice_of(params);
    std::vector<float> grads(slice.size(), 0.0f);
    const double loss = model->forward(std::span<const float>(slice), tokens.data(), targets.data(), B, T);
    model->backward(std::span<const float>(slice), std::span<float>(grads), 0.5f);
    EXPECT_NEAR(loss, whole_loss, 1e-5) << "tensor " << degree;
    EXPECT_LT(worst_difference(model->whole_from_slices(grads), whole_grads), 1e-3 * largest) << "tensor " << degree;
    FlatBuffers<float> flat(model->layout(), slice);
    EXPECT_LT(worst_difference(model->decode(flat, tokens.data(), 3), expected), 1e-3) << "tensor " << degree;
    model->forward(std::span<const float>(slice), tokens.data(), nullptr, B, T);
    EXPECT_LT(worst_difference(model->probs(B - 1, T - 1), last_probs), 1e-3) << "tensor " << degree;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, TensorParallelFusedClassifier,
                         ::testing::Values(Variant::gpt2, Variant::gpt2_sequence_parallel, Variant::gpt2_one_sequence,
                                           Variant::llama, Variant::llama_tied, Variant::llama_sequence_parallel,
                                           Variant::llama_one_sequence),
                         [](const auto& param_info) { return std::string(variant_name(param_info.param)); });

}  // namespace
}  // namespace st
