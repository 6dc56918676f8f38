#pragma once
// The flat parameter layout: every parameter of the model lives in one buffer, grouped into
// segments (embeddings, one per transformer block, final norm). Gradients, Adam moments and any
// sharded copy use the same layout, so "which bytes are where" has one answer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace st {

struct Gpt2Shape {
  std::int64_t n_layer = 0;
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t seq_len = 0;       // maximum context (rows of the position table)
  std::int64_t vocab_size = 0;    // tokens the model predicts
  std::int64_t padded_vocab = 0;  // rows of the token table (>= vocab_size)
};

enum class TensorRole { matrix, bias, norm, embedding };

struct TensorSlot {
  std::string name;                 // "block0.attn.qkv.w"
  std::size_t offset = 0;           // into the flat buffer
  std::size_t size = 0;             // elements
  std::vector<std::int64_t> shape;  // row-major; matrices are [out, in] as in torch.nn.Linear
  TensorRole role = TensorRole::matrix;
};

struct Segment {
  std::string name;  // "embeddings", "block3", "final_norm"
  std::size_t offset = 0;
  std::size_t size = 0;
  std::vector<TensorSlot> tensors;
};

class ParamLayout {
 public:
  void add_segment(const std::string& name, const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& tensors,
                   const std::vector<TensorRole>& roles);
  const std::vector<Segment>& segments() const { return segments_; }
  std::size_t total() const { return total_; }
  const TensorSlot& tensor(const std::string& name) const;  // throws Error if absent
  std::vector<const TensorSlot*> all_tensors() const;

 private:
  std::vector<Segment> segments_;
  std::size_t total_ = 0;
};

ParamLayout make_gpt2_layout(const Gpt2Shape& shape);

// Matmul-weighted parameter count used for FLOP estimates: block matrices plus the LM head.
std::int64_t gpt2_matmul_params(const Gpt2Shape& shape);
// Training FLOPs per token (forward + backward) for a sequence of length seq: 6 x the matmul
// parameters plus 12 n_layer d_model seq for attention scores and their use (PaLM's count).
double gpt2_train_flops_per_token(const Gpt2Shape& shape, std::int64_t seq);

}  // namespace st
