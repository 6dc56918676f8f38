// A pipeline's stages compute the model in parts (model/layout.hpp ModelPart): chained, each
// part's output the next one's input and each part's input gradient the previous one's output
// gradient, they give the whole model's loss and gradients, for GPT-2 and Llama, tied and
// untied, whatever the cuts and the recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace st {
namespace {

// What a pipeline stage sends: the boundary rows of one part into the next (host memory).
void copy_boundary(Buffer to, Buffer from) {
  ASSERT_EQ(to.bytes(), from.bytes());
  std::memcpy(to.data, from.data, to.bytes());
}

struct Case {
  const char* name;
  ModelShape shape;
};

std::vector<Case> cases() {
  ModelShape gpt2{4, 16, 4, 8, 40, 48};
  ModelShape llama{4, 16, 4, 8, 40, 48};
  llama.arch = Arch::llama;
  llama.n_kv_head = 2;
  llama.ffn_dim = 24;
  ModelShape untied = llama;
  untied.tie_embeddings = false;
  return {{"gpt2", gpt2}, {"llama_tied", llama}, {"llama_untied", untied}};
}

// The values of `layout`'s tensors, taken by name from a whole model's buffer.
std::vector<double> part_values(const ParamLayout& whole, const std::vector<double>& values, const ParamLayout& layout) {
  std::vector<double> out(layout.total());
  for (const TensorSlot* t : layout.all_tensors()) {
    const TensorSlot& w = whole.tensor(t->name);
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(w.offset), t->size,
                out.begin() + static_cast<std::ptrdiff_t>(t->offset));
  }
  return out;
}

void expect_parts_equal_whole(const ModelShape& shape, const std::vector<std::int64_t>& cuts, Recompute recompute) {
  const int B = 2, T = 8;
  std::vector<int> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[static_cast<std::size_t>(i)] = (i * 7 + 3) % 40;
    targets[static_cast<std::size_t>(i)] = (i * 11 + 5) % 40;
  }
  const auto whole = make_model<double>(shape, B, host_exec(), recompute);
  std::vector<double> params(whole->layout().total()), grads(params.size(), 0.0);
  whole->init_params(params, 5);
  const double loss = whole->forward(std::span<const double>(params), tokens.data(), targets.data(), B, T);
  whole->backward(params, grads, 1.0);

  // The parts between consecutive cuts, each with its share of the parameters.
  std::vector<std::unique_ptr<Model<double>>> parts;
  std::vector<std::vector<double>> part_params, part_grads;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    parts.push_back(make_model<double>(shape, B, host_exec(), recompute, {}, ModelPart{cuts[i], cuts[i + 1]}));
    part_params.push_back(part_values(whole->layout(), params, parts.back()->layout()));
    part_grads.emplace_back(part_params.back().size(), 0.0);
  }
  const std::size_t boundary = parts.front()->part_boundary_elements(B, T);
  double part_loss = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) copy_boundary(parts[i]->part_input(boundary), parts[i - 1]->part_output(boundary));
    part_loss = parts[i]->forward(std::span<const double>(part_params[i]), tokens.data(), targets.data(), B, T);
  }
  EXPECT_NEAR(part_loss, loss, 1e-12 * std::abs(loss));
  for (std::size_t i = parts.size(); i-- > 0;) {
    if (i + 1 < parts.size()) copy_boundary(parts[i]->part_grad(boundary), parts[i + 1]->part_grad(boundary));
    parts[i]->backward(part_params[i], part_grads[i], 1.0);
  }

  // Every tensor's gradient: from the one part that holds it, or, for the embeddings' segment
  // that the first and the last part both hold, the sum of their shares.
  std::map<std::string, std::vector<double>> summed;
  std::map<std::string, int> holders;
  for (std::size_t i = 0; i < parts.size(); ++i)
    for (const TensorSlot* t : parts[i]->layout().all_tensors()) {
      auto& sum = summed[t->name];
      sum.resize(t->size, 0.0);
      for (std::size_t k = 0; k < t->size; ++k) sum[k] += part_grads[i][t->offset + k];
      ++holders[t->name];
    }
  for (const TensorSlot* t : whole->layout().all_tensors()) {
    ASSERT_TRUE(summed.count(t->name)) << t->name << " is in no part";
    EXPECT_EQ(holders[t->name], t->name == "wte" || t->name == "wpe" || t->name == "lm_head.w" ? 2 : 1) << t->name;
    double largest = 0, worst = 0;
    for (std::size_t k = 0; k < t->size; ++k) {
      largest = std::max(largest, std::abs(grads[t->offset + k]));
      worst = std::max(worst, std::abs(grads[t->offset + k] - summed[t->name][k]));
    }
    EXPECT_GT(largest, 0.0) << t->name << ": a gradient of zeros checks nothing";
    EXPECT_LE(worst, 1e-12 * largest) << t->name;
  }
}

TEST(ModelParts, ChainedEqualTheWholeModel) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    expect_parts_equal_whole(c.shape, {0, 2, 4}, Recompute::none);
    expect_parts_equal_whole(c.shape, {0, 1, 3, 4}, Recompute::none);
    expect_parts_equal_whole(c.shape, {0, 1, 2, 3, 4}, Recompute::full);
    expect_parts_equal_whole(c.shape, {0, 3, 4}, Recompute::selective);
  }
}

TEST(ModelParts, LayoutsHoldTheirBlocksAndTheEndsTheirTables) {
  const ModelShape shape = cases()[2].shape;  // untied: the head has a table of its own
  auto names = [&](ModelPart part) {
    std::vector<std::string> out;
    const ParamLayout layout = make_layout(shape, {}, part);
    for (const Segment& s : layout.segments()) out.push_back(s.name);
    return out;
  };
  EXPECT_EQ(names({0, 2}), (std::vector<std::string>{"embeddings", "block0", "block1"}));
  EXPECT_EQ(names({1, 3}), (std::vector<std::string>{"block1", "block2"}));
  EXPECT_EQ(names({3, 4}), (std::vector<std::string>{"embeddings", "block3", "final_norm"}));
  EXPECT_EQ(make_layout(shape, {}, {0, -1}).total(), make_layout(shape).total());
  // A middle part's activations have no logits: less than the ends'.
  const auto middle = make_model<float>(shape, 2, host_exec(), Recompute::none, {}, ModelPart{1, 3});
  const auto last = make_model<float>(shape, 2, host_exec(), Recompute::none, {}, ModelPart{2, 4});
  EXPECT_LT(middle->activation_bytes(), last->activation_bytes());
  EXPECT_EQ(middle->backward_order(), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(last->backward_order(), (std::vector<std::size_t>{0, 3, 2, 1}));
}

}  // namespace
}  // namespace st
