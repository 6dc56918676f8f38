#include "train/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "core/random.hpp"
#include "core/text.hpp"

namespace st {

std::vector<int> generate(Gpt2<float>& model, SegmentBuffers<float>& buffers, std::vector<int> context, int count,
                          double temperature, std::uint64_t seed) {
  const auto window = static_cast<std::size_t>(model.shape().seq_len);
  NormalStream random(seed, hash_name("sample"));
  std::vector<double> weights;
  for (int i = 0; i < count; ++i) {
    const std::size_t start = context.size() > window ? context.size() - window : 0;
    const int T = static_cast<int>(context.size() - start);
    model.forward(buffers, context.data() + start, nullptr, 1, T);
    const auto probs = model.probs(0, T - 1);
    // p^(1/temperature), renormalised: the same as a softmax of logits / temperature.
    weights.assign(probs.size(), 0.0);
    double total = 0;
    for (std::size_t v = 0; v < probs.size(); ++v) total += weights[v] = std::pow(static_cast<double>(probs[v]), 1.0 / temperature);
    double draw = random.uniform() * total;
    std::size_t choice = 0;
    while (choice + 1 < weights.size() && draw >= weights[choice]) draw -= weights[choice++];
    context.push_back(static_cast<int>(choice));
  }
  return context;
}

std::string render_tokens(const std::vector<int>& tokens, bool byte_level) {
  std::string out;
  if (byte_level) {
    // A model of bytes writes any bytes, valid UTF-8 or not: what reaches the terminal and
    // train.log is valid UTF-8, with the rest escaped.
    for (int t : tokens) out += static_cast<char>(static_cast<unsigned char>(t));
    return printable_utf8(out);
  }
  for (int t : tokens) {
    if (!out.empty()) out += ' ';
    out += std::to_string(t);
  }
  return out;
}

}  // namespace st
