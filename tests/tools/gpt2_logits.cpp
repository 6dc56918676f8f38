// Reads GPT-2 or Llama weights through shardtrain's import (the code model.init_from runs) and
// writes the model's logits on a batch, so an independent implementation
// (tests/e2e/weights_torch.py, tests/e2e/llama_weights.py) can compare them.
//   gpt2_logits WEIGHTS TOKENS_I32 B T OUT_F32
// TOKENS_I32: B x T int32 token ids; OUT_F32: B x T x vocab_size float32 logits.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/model.hpp"
#include "weights/gpt2_weights.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: gpt2_logits WEIGHTS TOKENS_I32 B T OUT_F32\n");
    return 2;
  }
  try {
    const int B = std::stoi(argv[3]), T = std::stoi(argv[4]);
    const st::WeightsSource source = st::probe_weights(argv[1]);
    const std::vector<float> params = st::read_weights(source, source.shape);
    std::vector<int> tokens(static_cast<std::size_t>(B) * T);
    std::ifstream in(argv[2], std::ios::binary);
    in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(int)));
    if (!in) throw st::Error(std::string(argv[2]) + ": fewer than B x T int32 tokens");
    const auto model = st::make_model<float>(source.shape, B);
    const std::vector<float> logits = model->logits(params, tokens.data(), B, T);
    std::ofstream out(argv[5], std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw st::Error(std::string(argv[5]) + ": cannot write");
    std::printf("%s: %s, logits %d x %d x %lld\n", source.path.c_str(), source.description.c_str(), B, T,
                static_cast<long long>(source.shape.vocab_size));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_logits: %s\n", e.what());
    return 1;
  }
}
