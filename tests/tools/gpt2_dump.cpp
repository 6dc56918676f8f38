// Writes a small GPT-2's weights, a batch, and the loss and gradients this implementation
// computes, so an independent implementation (tests/e2e/torch_crosscheck.py) can compare.
//   gpt2_dump OUT_DIR
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "core/random.hpp"
#include "model/gpt2.hpp"

namespace {

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gpt2_dump OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const st::ModelShape shape{2, 32, 4, 16, 60, 64};
  const int B = 3, T = 16;
  st::Gpt2<float> model(shape, B);
  std::vector<float> params(model.layout().total());
  model.init_params(params, 5);
  // Perturb everything (biases, norms too) so no gradient path is trivially zero.
  st::NormalStream noise(99, 1);
  for (auto& p : params) p += static_cast<float>(0.05 * noise.next());
  std::vector<float> wte_pad_check(params.begin(), params.end());

  std::vector<int> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
    targets[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
  }
  std::vector<float> grads(params.size(), 0.0f);
  const double loss = model.forward(params, tokens.data(), targets.data(), B, T);
  model.backward(params, grads, 1.0f);

  write(dir + "/params.f32", params);
  write(dir + "/grads.f32", grads);
  write(dir + "/tokens.i32", tokens);
  write(dir + "/targets.i32", targets);
  nlohmann::ordered_json meta = {{"n_layer", shape.n_layer}, {"d_model", shape.d_model}, {"n_head", shape.n_head},
                                 {"seq_len", shape.seq_len}, {"vocab_size", shape.vocab_size},
                                 {"padded_vocab", shape.padded_vocab}, {"B", B}, {"T", T}, {"loss", loss},
                                 {"tensors", nlohmann::ordered_json::array()}};
  for (const auto* t : model.layout().all_tensors())
    meta["tensors"].push_back({{"name", t->name}, {"offset", t->offset}, {"shape", t->shape}});
  std::ofstream out(dir + "/meta.json");
  out << st::json_text(meta) << '\n';
  return out ? 0 : 1;
}
