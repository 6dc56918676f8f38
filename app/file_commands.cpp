// `shardtrain ckpt inspect/export` and `shardtrain weights inspect/convert`: one process reads and
// writes files; the other ranks of the job wait for its verdict.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "app/commands.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "weights/gpt2_weights.hpp"
#include "weights/hf_gpt2.hpp"

namespace st::app {
namespace {

WeightsFormat weights_format(const std::string& name) {
  return name == "llmc" ? WeightsFormat::llmc : WeightsFormat::safetensors;
}

WeightDtype weight_dtype(const std::string& name) { return name == "bf16" ? WeightDtype::bf16 : WeightDtype::fp32; }

// "wrote OUT (llm.c model file, version 5, bf16)", naming config.json where one was written too.
std::string wrote(WeightsFormat format, const std::string& out, WeightDtype dtype) {
  if (format == WeightsFormat::llmc)
    return "wrote " + out + " (llm.c model file, version " + (dtype == WeightDtype::bf16 ? "5" : "3") + ", " +
           dtype_name(dtype) + ")";
  return "wrote " + out + " (Hugging Face GPT-2 safetensors, " + (dtype == WeightDtype::bf16 ? "BF16" : "F32") +
         ") and " + hf_config_path(out);
}

std::string model_text(const Gpt2Shape& s) {
  return "n_layer " + std::to_string(s.n_layer) + ", d_model " + std::to_string(s.d_model) + ", n_head " +
         std::to_string(s.n_head) + ", seq_len " + std::to_string(s.seq_len) + ", vocab " +
         std::to_string(s.vocab_size) + " (padded " + std::to_string(s.padded_vocab) + ")";
}

}  // namespace

int ckpt_command(const CkptRequest& request, World& world) {
  return on_root(world, [&] {
    if (request.action == "inspect") {
      std::cout << inspect_checkpoint(request.file);
      return;
    }
    if (request.format == "hdf5") {
      if (request.dtype != "fp32")
        throw Error("ckpt export: --dtype " + request.dtype + " applies to --format llmc and safetensors; HDF5 exports "
                                                              "are fp32");
      export_checkpoint(request.file, request.out);
      std::cout << "wrote " << request.out << "\n";
      return;
    }
    const CheckpointParams checkpoint = read_checkpoint_params(request.file);
    const WeightsFormat format = weights_format(request.format);
    const WeightDtype dtype = weight_dtype(request.dtype);
    write_weights(format, request.out, checkpoint.info.shape, checkpoint.params, dtype);
    std::cout << wrote(format, request.out, dtype) << " from step " << checkpoint.info.step << " of "
              << request.file << "\n";
  });
}

int weights_command(const WeightsRequest& request, World& world) {
  return on_root(world, [&] {
    const WeightsSource source = probe_weights(request.file);
    Gpt2Shape shape = source.shape;
    if (request.vocab_pad_to > 0)
      shape.padded_vocab = (shape.vocab_size + request.vocab_pad_to - 1) / request.vocab_pad_to * request.vocab_pad_to;
    Stopwatch clock;
    const std::vector<float> params = read_weights(source, shape);
    const double seconds = clock.seconds();
    if (request.action == "convert") {
      const WeightsFormat format = weights_format(request.format);
      const WeightDtype dtype = weight_dtype(request.dtype);
      write_weights(format, request.out, shape, params, dtype);
      std::cout << wrote(format, request.out, dtype) << " from " << source.path << "\n";
      return;
    }
    double sum_squares = 0;
    bool finite = true;
    for (float x : params) {
      sum_squares += static_cast<double>(x) * x;
      finite = finite && std::isfinite(x);
    }
    char line[200];
    std::snprintf(line, sizeof line, "  read in %.3f s; %zu parameters, L2 norm %.6g%s\n", seconds, params.size(),
                  std::sqrt(sum_squares), finite ? "" : " (NOT all finite)");
    std::cout << source.path << "\n  " << source.description << "\n  model: " << model_text(source.shape) << "\n"
              << line << "  deck: [model] init_from = \"" << request.file << "\", from_file = true\n";
  });
}

}  // namespace st::app
