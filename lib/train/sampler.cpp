#include "train/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "core/random.hpp"
#include "core/text.hpp"

namespace st {

std::vector<int> generate(Model<float>& model, SegmentBuffers<float>& buffers, std::vector<int> context, int count,
                          const Sampling& sampling) {
  const auto window = static_cast<std::size_t>(model.shape().seq_len);
  NormalStream random(sampling.seed, hash_name("sample"));
  std::vector<double> weights;
  std::vector<std::size_t> order;
  // The model sees context[start..]; the first decoded_length() of those are in its cache, which
  // is freed however this returns.
  struct ReleaseCache {
    Model<float>& model;
    ~ReleaseCache() { model.release_decoding(); }
  } release{model};
  std::size_t start = 0;
  model.reset_decoding();
  for (int i = 0; i < count; ++i) {
    if (context.size() - start > window) {
      // Past the last learned position: the window moves, every position changes, and the
      // cache starts again from the window's first token.
      start = context.size() - window;
      model.reset_decoding();
    }
    const std::size_t fed = start + static_cast<std::size_t>(model.decoded_length());
    const auto probs = model.decode(buffers, context.data() + fed, static_cast<int>(context.size() - fed));
    // p^(1/temperature), renormalised: the same as a softmax of logits / temperature.
    weights.assign(probs.size(), 0.0);
    for (std::size_t v = 0; v < probs.size(); ++v)
      weights[v] = std::pow(static_cast<double>(probs[v]), 1.0 / sampling.temperature);
    if (sampling.top_k > 0 && static_cast<std::size_t>(sampling.top_k) < weights.size()) {
      order.resize(weights.size());
      for (std::size_t v = 0; v < order.size(); ++v) order[v] = v;
      const auto k = static_cast<std::ptrdiff_t>(sampling.top_k);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::size_t a, std::size_t b) {
        return weights[a] != weights[b] ? weights[a] > weights[b] : a < b;
      });
      for (auto it = order.begin() + k; it != order.end(); ++it) weights[*it] = 0.0;
    }
    double total = 0;
    for (double w : weights) total += w;
    double draw = random.uniform() * total;
    std::size_t choice = 0;
    while (choice + 1 < weights.size() && draw >= weights[choice]) draw -= weights[choice++];
    context.push_back(static_cast<int>(choice));
  }
  return context;
}

std::string render_text(const std::vector<int>& tokens, const Tokenizer& tokenizer) {
  std::string out;
  std::string bytes;  // the decoded text so far: shown as valid UTF-8, other bytes escaped
  auto flush = [&] {
    out += printable_utf8(bytes);
    bytes.clear();
  };
  std::size_t run = 0;  // start of the current run of ids the tokenizer has
  for (std::size_t i = 0; i <= tokens.size(); ++i) {
    const bool known = i < tokens.size() && tokens[i] >= 0 && tokens[i] < tokenizer.vocab_size();
    if (known) continue;
    bytes += tokenizer.decode(std::span<const int>(tokens.data() + run, i - run));
    if (i < tokens.size()) {
      flush();
      out += '<';
      out += std::to_string(tokens[i]);
      out += '>';
    }
    run = i + 1;
  }
  flush();
  return out;
}

std::string render_ids(const std::vector<int>& tokens) {
  std::string out;
  for (const int t : tokens) {
    if (!out.empty()) out += ' ';
    out += std::to_string(t);
  }
  return out;
}

}  // namespace st
