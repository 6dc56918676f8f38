// Writes a small model's weights, a batch, and the loss, logits and gradients this implementation
// computes, so an independent implementation (tests/e2e/torch_crosscheck.py, torch_llama.py) can
// compare.
//   model_dump OUT_DIR                                        GPT-2
//   model_dump OUT_DIR llama N_KV_HEAD TIED(0|1) ROPE_THETA   Llama (4 heads)
//   model_dump OUT_DIR llama N_KV_HEAD TIED(0|1) ROPE_THETA FACTOR LOW HIGH ORIGINAL
//                                                             ... with rope_scaling llama3
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "core/random.hpp"
#include "model/model.hpp"

namespace {

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !((argc == 6 || argc == 10) && std::string(argv[2]) == "llama")) {
    std::fprintf(stderr, "usage: model_dump OUT_DIR [llama N_KV_HEAD TIED(0|1) ROPE_THETA [FACTOR LOW HIGH ORIGINAL]]\n");
    return 2;
  }
  const std::string dir = argv[1];
  st::ModelShape shape{2, 32, 4, 16, 60, 64};
  if (argc >= 6) {
    shape.arch = st::Arch::llama;
    shape.n_kv_head = std::stoi(argv[3]);
    shape.ffn_dim = 56;
    shape.tie_embeddings = std::string(argv[4]) == "1";
    shape.rope_theta = std::stod(argv[5]);
  }
  if (argc == 10) {
    shape.rope_scaling = st::RopeScaling::llama3;
    shape.rope_factor = std::stod(argv[6]);
    shape.rope_low_freq_factor = std::stod(argv[7]);
    shape.rope_high_freq_factor = std::stod(argv[8]);
    shape.rope_original_positions = std::stoll(argv[9]);
  }
  const int B = 3, T = 16;
  const std::unique_ptr<st::Model<float>> owned = st::make_model<float>(shape, B);
  st::Model<float>& model = *owned;
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
  write(dir + "/logits.f32", model.logits(params, tokens.data(), B, T));
  const double loss = model.forward(params, tokens.data(), targets.data(), B, T);
  model.backward(params, grads, 1.0f);

  write(dir + "/params.f32", params);
  write(dir + "/grads.f32", grads);
  write(dir + "/tokens.i32", tokens);
  write(dir + "/targets.i32", targets);
  nlohmann::ordered_json meta = {{"n_layer", shape.n_layer}, {"d_model", shape.d_model}, {"n_head", shape.n_head},
                                 {"seq_len", shape.seq_len}, {"vocab_size", shape.vocab_size},
                                 {"padded_vocab", shape.padded_vocab}, {"arch", st::arch_name(shape.arch)},
                                 {"n_kv_head", shape.kv_heads()}, {"ffn_dim", shape.hidden()},
                                 {"tie_embeddings", shape.tie_embeddings}, {"rope_theta", shape.rope_theta},
                                 {"norm_eps", shape.norm_eps},
                                 {"rope_scaling", st::rope_scaling_name(shape.rope_scaling)},
                                 {"rope_factor", shape.rope_factor},
                                 {"rope_low_freq_factor", shape.rope_low_freq_factor},
                                 {"rope_high_freq_factor", shape.rope_high_freq_factor},
                                 {"rope_original_positions", shape.rope_original_positions}, {"B", B}, {"T", T},
                                 {"loss", loss},
                                 {"tensors", nlohmann::ordered_json::array()}};
  for (const auto* t : model.layout().all_tensors())
    meta["tensors"].push_back({{"name", t->name}, {"offset", t->offset}, {"shape", t->shape}});
  std::ofstream out(dir + "/meta.json");
  out << st::json_text(meta) << '\n';
  return out ? 0 : 1;
}
