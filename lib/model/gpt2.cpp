#include "model/gpt2.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"
#include "core/random.hpp"

namespace st {


template <class Real, class S>
Gpt2<Real, S>::Gpt2(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute, TensorGroup tensor,
                 ModelPart part)
    : Model<Real, S>(shape, exec, recompute, tensor, part),
      k_(layer_kernels_of<Real, S>(exec)),
      max_batch_(max_batch),
      heads_(static_cast<int>(shape.n_head) / tensor.split.degree),
      attn_width_(static_cast<int>(shape.d_model) / tensor.split.degree),
      mlp_width_(4 * static_cast<int>(shape.d_model) / tensor.split.degree),
      heads_at_once_(k_.attention_heads_at_once(max_batch, heads_)),
      flash_(k_.attention_uses_flash(attn_width_ / heads_)) {
  ST_REQUIRE(shape.d_model % shape.n_head == 0, "d_model must be divisible by n_head");
  ST_REQUIRE(shape.padded_vocab >= shape.vocab_size, "padded vocabulary smaller than vocabulary");
  const auto& segments = layout_.segments();
  const bool ends_model = part.heads(shape);
  if (part.holds_embeddings(shape)) {
    wte_ = layout_.tensor("wte").offset - segments.front().offset;
    wpe_ = layout_.tensor("wpe").offset - segments.front().offset;
  }
  if (ends_model) {
    lnfw_ = layout_.tensor("lnf.w").offset - segments.back().offset;
    lnfb_ = layout_.tensor("lnf.b").offset - segments.back().offset;
  }
  for (std::int64_t l = 0; l < part.blocks(shape); ++l) {
    const std::string p = "block" + std::to_string(part.first_block + l) + ".";
    const std::size_t base = segments[this->block_segment(static_cast<std::size_t>(l))].offset;
    auto at = [&](const char* n) { return layout_.tensor(p + n).offset - base; };
    blocks_.push_back({at("ln1.w"), at("ln1.b"), at("attn.qkv.w"), at("attn.qkv.b"), at("attn.proj.w"),
                       at("attn.proj.b"), at("ln2.w"), at("ln2.b"), at("mlp.fc.w"), at("mlp.fc.b"), at("mlp.proj.w"),
                       at("mlp.proj.b")});
  }

  // Carved by the sizes activation_sizes counts (the blocks' own, the working set, the rest); the
  // check at the end ties the two together.
  const bool split_rows_ever = tensor.active() && tensor.sequence_parallel;
  const ActivationSizes sizes = activation_sizes(shape, max_batch, recompute, heads_at_once_,
                                                 exec.space() != MemorySpace::host, tensor.split.degree,
                                                 split_rows_ever, flash_, this->bf16_logits())
                                      .of_part(part, shape);
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = shape.d_model;
  // Rows kept between the split layers: all of them, or under sequence parallelism this rank's.
  const std::size_t R = split_rows(N, tensor.split.degree, split_rows_ever);
  const std::size_t A = static_cast<std::size_t>(attn_width_), H = static_cast<std::size_t>(mlp_width_);
  const std::size_t T = shape.seq_len;
  const std::size_t kept_probs = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(heads_) * T * T;
  const std::size_t heads = static_cast<std::size_t>(heads_at_once_) * T * T;
  const std::size_t lse_rows = flash_rows(static_cast<std::size_t>(max_batch), T, heads_);  // flash attention's
  acts_ = exec.allocate(sizes.bytes(sizeof(S), sizeof(Real)));
  ActivationCarver<Real, S> take(acts_, sizes.all());
  // Everything a block computes, in one place.
  auto whole_block = [&](BlockActs& a, bool keep_probs) {
    a.ln1 = take.values(R * C);
    a.ln1_mean = take.stats(R);
    a.ln1_rstd = take.stats(R);
    a.qkv = take.values(3 * N * A);
    a.att = keep_probs && !flash_ ? take.stats(kept_probs) : nullptr;
    a.lse = flash_ ? take.stats(lse_rows) : nullptr;  // whatever the recomputation: flash's backward needs it
    a.atty = take.values(N * A);
    a.res2 = take.values(R * C);
    a.ln2 = take.values(R * C);
    a.ln2_mean = take.stats(R);
    a.ln2_rstd = take.stats(R);
    a.fch = take.values(N * H);
  };
  block_acts_.resize(static_cast<std::size_t>(part.blocks(shape)));
  for (BlockActs& a : block_acts_) {
    if (recompute != Recompute::full) whole_block(a, recompute == Recompute::none);
    a.fch_gelu = recompute == Recompute::none ? take.values(N * H) : nullptr;
    a.res3 = take.values(R * C);
  }
  if (recompute == Recompute::full) {
    BlockActs working{};
    whole_block(working, false);
    for (BlockActs& a : block_acts_) {
      S* output = a.res3;
      a = working;
      a.res3 = output;
    }
  }
  if (recompute != Recompute::none && !flash_) probs_ = take.stats(heads);
  x0_ = take.values(R * C);
  if (ends_model) {  // the head's (ActivationSizes::head)
    lnf_ = take.values(R * C);
    lnf_mean_ = take.stats(R);
    lnf_rstd_ = take.stats(R);
    logits_ = this->carve_logits(take, N);
    losses_ = take.stats(N);
    const std::size_t scratch = logit_slice_scratch(N, tensor.split.degree);
    cross_entropy_scratch_ = scratch ? take.stats(scratch) : nullptr;
  }
  tmp_ = take.values(N * C);
  dres_ = take.values(R * C);
  dtmp_ = take.values(N * C);
  datty_ = take.values(N * A);
  dqkv_ = take.values(3 * N * A);
  if (flash_) row_dots_ = take.stats(lse_rows);
  else dprobs_ = take.stats(heads);
  d4c_a_ = take.values(N * H);
  d4c_b_ = take.values(N * H);
  if (split_rows_ever) rows_.carve(take, N, R, C, 4 * C);
  // Not kept, the GELU output goes where backward needs it next, the MLP's second scratch.
  for (BlockActs& a : block_acts_)
    if (!a.fch_gelu) a.fch_gelu = d4c_b_;
  ST_REQUIRE(take.exact(), "activation buffer accounting is off");
  decode_rows_ = static_cast<int>(R);  // whole rows go where the split ones are kept
  this->allocate_batch(N);
  this->reserve_kernel_scratch(k_, max_batch);
}

template <class Real, class S>
Gpt2<Real, S>::~Gpt2() = default;

template <class Real, class S>
void Gpt2<Real, S>::init_params(std::span<Real> params, std::uint64_t seed) const {
  const ParamLayout& layout = this->whole_layout();
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(shape_.n_layer));
  for (const TensorSlot* t : layout.all_tensors()) {
    Real* p = params.data() + t->offset;
    // Each tensor draws from its own stream, so adding a tensor does not change the others.
    NormalStream normal(seed, hash_name(t->name));
    const bool is_residual_projection =
        t->name.ends_with("attn.proj.w") || t->name.ends_with("mlp.proj.w");
    switch (t->role) {
      case TensorRole::matrix:
      case TensorRole::embedding: {
        const double std = is_residual_projection ? residual_std : 0.02;
        for (std::size_t i = 0; i < t->size; ++i) p[i] = static_cast<Real>(std * normal.next());
        break;
      }
      case TensorRole::bias:
        std::fill(p, p + t->size, Real(0));
        break;
      case TensorRole::norm:
        std::fill(p, p + t->size, t->name.ends_with(".w") ? Real(1) : Real(0));
        break;
    }
  }
  // Padded vocabulary rows are never looked up or predicted.
  Real* wte = params.data() + layout.tensor("wte").offset;
  std::fill(wte + shape_.vocab_size * shape_.d_model, wte + shape_.padded_vocab * shape_.d_model, Real(0));
}

template <class Real, class S>
void Gpt2<Real, S>::forward_into(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T,
                             double* loss_sum) {
  forward_to_logits(buffers, tokens, targets, B, T);
  if (!part_.heads(shape_)) return;
  const int N = B * T;
  this->cross_entropy(logits_, losses_, targets ? targets_at_ : nullptr, N, cross_entropy_scratch_, {loss_sum, double(N)});
}

template <class Real, class S>
std::vector<Real> Gpt2<Real, S>::logits(std::span<const S> params, const int* tokens, int B, int T) {
  ST_REQUIRE(part_.whole(shape_), "logits() needs the whole model");
  FlatBuffers<Real, S> flat(layout_, params);
  forward_to_logits(flat, tokens, nullptr, B, T);
  return this->whole_logits_on_host(logits_, static_cast<std::size_t>(B) * T);
}

template <class Real, class S>
void Gpt2<Real, S>::forward_to_logits(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B,
                                   int T) {
  ST_REQUIRE(B >= 1 && B <= max_batch_ && T >= 1 && T <= shape_.seq_len, "batch shape exceeds the model's buffers");
  B_ = B;
  T_ = T;
  const int N = B * T, C = static_cast<int>(shape_.d_model);
  const S* E = this->begin_pass(buffers, tokens, targets, N);
  const int Nr = this->local_rows(N);
  const bool embeds = part_.embeds(), heads = part_.heads(shape_);
  if (embeds) {
    // A vocabulary slice looks up the tokens it holds; the group sums the slices' rows, the
    // positions added once (with rows split, each rank keeps its share of the sum).
    S* looked_up = rows_split_ ? tmp_ : x0_;
    k_.encoder_forward(looked_up, tokens_at_, E + wte_, row_parallel_bias(E + wpe_), B, T, C);
    this->sum_rows(looked_up, x0_, static_cast<std::size_t>(N), static_cast<std::size_t>(C));
    if (!heads) buffers.after_forward(0);
  }
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const std::size_t segment = this->block_segment(l);
    buffers.before_forward(segment);
    block_forward(l, buffers.params(segment), l == 0 ? x0_ : block_acts_[l - 1].res3, block_acts_[l], true, B, T);
    buffers.after_forward(segment);
  }
  if (!heads) return;
  const std::size_t last = this->final_norm_segment();
  buffers.before_forward(last);
  const S* F = buffers.params(last);
  const S* top = blocks_.empty() ? x0_ : block_acts_.back().res3;
  k_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, top, F + lnfw_, F + lnfb_, Nr, C);
  buffers.after_forward(last);
  // LM head tied to the token embedding (this rank's slice of the vocabulary), on every row.
  const S* normed = this->gather_rows(lnf_, rows_.gathered, static_cast<std::size_t>(N), static_cast<std::size_t>(C));
  this->lm_head(logits_, normed, E + wte_, N, C);
  buffers.after_forward(0);
}

template <class Real, class S>
void Gpt2<Real, S>::backward(SegmentBuffers<Real, S>& buffers, Real loss_scale) {
  ST_REQUIRE(!targets_.empty(), "backward needs a forward pass with targets");
  const int B = B_, T = T_, N = B * T, C = static_cast<int>(shape_.d_model), NH = heads_;
  const int A = attn_width_, H = mlp_width_, Nr = this->local_rows(N);
  const std::size_t NH4 = static_cast<std::size_t>(N) * H, rows = static_cast<std::size_t>(N);
  const auto width = static_cast<std::size_t>(C);
  const bool split = this->rows_split();
  const bool embeds = part_.embeds(), heads = part_.heads(shape_);

  // The embeddings: the LM head now, the encoder at the very end. A part that does not end the
  // model finds d(loss)/d(its output) in dres_ (part_grad()) instead.
  const S* E = nullptr;
  Real* GE = nullptr;
  const S* d = nullptr;
  if (heads) {
    buffers.before_backward(0);
    E = buffers.params(0);
    GE = buffers.grads(0);
    // Under tensor parallelism every input gradient of a split layer is a partial sum over the
    // group's slices: summed before the replicated layer below it uses it (with rows split, each
    // rank keeping its rows of the sum). A split layer's input is gathered again for its weights'
    // gradient rather than kept whole. The loss is the mean over N tokens.
    this->lm_head_backward(dtmp_, GE + wte_, logits_, this->gather_rows(lnf_, rows_.gathered, rows, width), E + wte_,
                           targets_at_, N, C, loss_scale / static_cast<Real>(N));
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    const std::size_t last = this->final_norm_segment();
    buffers.before_backward(last);
    const S* F = buffers.params(last);
    Real* GF = buffers.grads(last);
    exec_.zero(dres_, static_cast<std::size_t>(Nr) * C * sizeof(S));
    const S* top = blocks_.empty() ? x0_ : block_acts_.back().res3;
    // With rows split, a norm's gradient is this rank's rows' share: summed over the group.
    Real* dlnf = split ? rows_.norm_grads : GF + lnfw_;
    if (split) exec_.zero(rows_.norm_grads, 2 * width * sizeof(Real));
    k_.layernorm_backward(dres_, dlnf, dlnf + (split ? width : lnfb_ - lnfw_), d, top, F + lnfw_, lnf_mean_, lnf_rstd_,
                          Nr, C);
    if (split) this->add_split_row_gradients(GF, {lnfw_, lnfb_}, rows_.norm_grads, width);
    buffers.grad_ready(last);
  }

  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const std::size_t segment = this->block_segment(l);
    buffers.before_backward(segment);
    const S* P = buffers.params(segment);
    Real* G = buffers.grads(segment);
    const BlockOffsets& o = blocks_[l];
    const BlockActs& a = block_acts_[l];
    const S* in = l == 0 ? x0_ : block_acts_[l - 1].res3;
    // What the block did not keep, recomputed by the same kernels from what it kept (the
    // parameters are those before_backward gathered anyway): its whole forward but the output,
    // or only the GELU output. The attention probabilities come back inside attention_backward.
    if (recompute_ == Recompute::full) block_forward(l, P, in, a, false, B, T);
    else if (recompute_ == Recompute::selective) k_.gelu_forward(a.fch_gelu, a.fch, NH4);
    // The norms' gradients: the block's own (whole rows), or this rank's rows' share in scratch.
    Real* dln1 = split ? rows_.norm_grads : G + o.ln1w;
    Real* dln2 = split ? rows_.norm_grads + 2 * width : G + o.ln2w;
    const std::size_t bias_at = split ? width : o.ln1b - o.ln1w;  // the bias after the weight
    if (split) exec_.zero(rows_.norm_grads, 4 * width * sizeof(Real));
    // dres holds d(res3); the residual passes it to res2 unchanged, the MLP adds its part.
    // Through the output projection and the GELU into d4c_b (which may be fch_gelu's memory:
    // read first), by way of d4c_a.
    k_.linear_backward_gelu(d4c_b_, d4c_a_, G + o.fcprojw, G + o.fcprojb,
                            this->gather_rows(dres_, rows_.gathered, rows, width), a.fch_gelu, a.fch, P + o.fcprojw, N,
                            H, C);
    k_.linear_backward(dtmp_, G + o.fcw, G + o.fcb, d4c_b_, this->gather_rows(a.ln2, rows_.gathered, rows, width),
                       P + o.fcw, N, C, H, false);
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    k_.layernorm_backward(dres_, dln2, dln2 + (split ? width : o.ln2b - o.ln2w), d, a.res2, P + o.ln2w, a.ln2_mean,
                          a.ln2_rstd, Nr, C);
    // dres now holds d(res2); likewise through attention to the block's input.
    k_.linear_backward(datty_, G + o.projw, G + o.projb, this->gather_rows(dres_, rows_.gathered, rows, width), a.atty,
                       P + o.projw, N, A, C, false);
    k_.attention_backward(dqkv_, attention_probs(a), datty_, a.qkv, B, T, A, NH, NH);
    k_.linear_backward(dtmp_, G + o.qkvw, G + o.qkvb, dqkv_, this->gather_rows(a.ln1, rows_.gathered, rows, width),
                       P + o.qkvw, N, C, 3 * A, false);
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    k_.layernorm_backward(dres_, dln1, dln1 + bias_at, d, in, P + o.ln1w, a.ln1_mean, a.ln1_rstd, Nr, C);
    if (split) this->add_split_row_gradients(G, {o.ln1w, o.ln1b, o.ln2w, o.ln2b}, rows_.norm_grads, width);
    buffers.grad_ready(segment);
  }
  if (embeds) {
    if (!heads) {
      buffers.before_backward(0);
      GE = buffers.grads(0);
    }
    // The embedding's gradient from every row (the rows' shares gathered).
    k_.encoder_backward(GE + wte_, GE + wpe_, this->gather_rows(dres_, rows_.gathered, rows, width), tokens_at_, B, T, C);
  }
  // A part that does not embed leaves d(loss)/d(its input) in dres_ (part_grad()).
  if (part_.holds_embeddings(shape_)) buffers.grad_ready(0);
  targets_.clear();  // logits now hold gradients: a second backward would be wrong
}

template <class Real, class S>
void Gpt2<Real, S>::block_forward(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int B,
                               int T) {
  const int N = B * T, C = static_cast<int>(shape_.d_model), A = attn_width_;
  const BlockOffsets& o = blocks_[l];
  k_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, in, P + o.ln1w, P + o.ln1b, this->local_rows(N), C);
  k_.linear_forward(a.qkv, this->gather_rows(a.ln1, rows_.gathered, static_cast<std::size_t>(N), static_cast<std::size_t>(C)),
                    P + o.qkvw, P + o.qkvb, N, C, 3 * A);
  k_.attention_forward(a.atty, attention_probs(a), a.qkv, B, T, A, heads_, heads_);
  block_after_attention(l, P, in, a, output, N);
}

template <class Real, class S>
void Gpt2<Real, S>::block_after_attention(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output,
                                       int N) {
  const int C = static_cast<int>(shape_.d_model), A = attn_width_, H = mlp_width_, Nr = this->local_rows(N);
  const std::size_t kept = static_cast<std::size_t>(Nr) * C, rows = static_cast<std::size_t>(N);
  const auto width = static_cast<std::size_t>(C);
  const BlockOffsets& o = blocks_[l];
  // The row-parallel projections' partial products are summed over the group (with rows split,
  // each rank keeping its rows of the sum); the column-parallel ones read every row.
  k_.linear_forward(tmp_, a.atty, P + o.projw, row_parallel_bias(P + o.projb), N, A, C);
  k_.residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, in,
                                this->sum_rows(tmp_, rows_.tmp_rows, rows, width), P + o.ln2w, P + o.ln2b, Nr, C);
  const S* ln2 = this->gather_rows(a.ln2, rows_.gathered, rows, width);
  if (recompute_ == Recompute::selective) {
    // Backward recomputes the GELU output with gelu_forward: the forward makes it the same way,
    // so the weight gradient reads the same values (a fused GELU may round differently).
    k_.linear_forward(a.fch, ln2, P + o.fcw, P + o.fcb, N, C, H);
    k_.gelu_forward(a.fch_gelu, a.fch, static_cast<std::size_t>(N) * H);
  } else {
    k_.linear_gelu_forward(a.fch_gelu, a.fch, ln2, P + o.fcw, P + o.fcb, N, C, H);
  }
  if (!output) return;
  k_.linear_forward(tmp_, a.fch_gelu, P + o.fcprojw, row_parallel_bias(P + o.fcprojb), N, H, C);
  k_.add(a.res3, a.res2, this->sum_rows(tmp_, rows_.tmp_rows, rows, width), kept);
}

template <class Real, class S>
std::span<const Real> Gpt2<Real, S>::decode_piece(SegmentBuffers<Real, S>& buffers, const int* tokens, int count) {
  const int first = decoded_, C = static_cast<int>(shape_.d_model);
  ST_REQUIRE(part_.whole(shape_), "decode needs the whole model");
  ST_REQUIRE(count >= 1, "decode: no tokens to feed");
  ST_REQUIRE(first + count <= shape_.seq_len,
             "decode: " + std::to_string(first) + " positions cached + " + std::to_string(count) +
                 " new exceed the model's " + std::to_string(shape_.seq_len));
  const std::size_t layer_rows = static_cast<std::size_t>(shape_.seq_len) * 3 * attn_width_;
  if (decode_cache_.bytes() == 0) decode_cache_ = exec_.allocate(blocks_.size() * layer_rows * sizeof(S));
  // Not a training pass: a backward after this would read activations of other positions.
  targets_.clear();
  B_ = 0;
  T_ = 0;
  rows_split_ = false;  // whole rows: a few at a time
  this->upload_slice_tokens(tokens_at_, tokens, count);

  buffers.before_forward(0);
  const S* E = buffers.params(0);
  // Positions first.. : the position table from row `first` on.
  k_.encoder_forward(x0_, tokens_at_, E + wte_, row_parallel_bias(E + wpe_ + static_cast<std::size_t>(first) * C), 1,
                     count, C);
  this->sum_over_tensor_group(x0_, static_cast<std::size_t>(count) * C);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    buffers.before_forward(l + 1);
    block_decode(l, buffers.params(l + 1), l == 0 ? x0_ : block_acts_[l - 1].res3, block_acts_[l], count);
    buffers.after_forward(l + 1);
  }
  // Only the last position's next token is wanted: the final norm and the LM head on one row.
  const std::size_t last = layout_.segments().size() - 1;
  buffers.before_forward(last);
  const S* F = buffers.params(last);
  const S* top = (blocks_.empty() ? x0_ : block_acts_.back().res3) + static_cast<std::size_t>(count - 1) * C;
  k_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, top, F + lnfw_, F + lnfb_, 1, C);
  buffers.after_forward(last);
  this->lm_head(logits_, lnf_, E + wte_, 1, C);
  buffers.after_forward(0);
  this->cross_entropy(logits_, losses_, nullptr, 1, cross_entropy_scratch_);
  decoded_ = first + count;
  return this->whole_row_on_host(logits_, 0);
}

template <class Real, class S>
void Gpt2<Real, S>::block_decode(std::size_t l, const S* P, const S* in, const BlockActs& a, int count) {
  const int C = static_cast<int>(shape_.d_model), A = attn_width_, NH = heads_;
  const BlockOffsets& o = blocks_[l];
  const std::size_t row = 3 * static_cast<std::size_t>(A);
  S* cache = decode_cache_.template as<S>().data() + l * static_cast<std::size_t>(shape_.seq_len) * row;
  k_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, in, P + o.ln1w, P + o.ln1b, count, C);
  k_.linear_forward(cache + static_cast<std::size_t>(decoded_) * row, a.ln1, P + o.qkvw, P + o.qkvb, count, C,
                    3 * A);
  if (decoded_ == 0) {
    // A prompt from position 0 is a causal block like training's: its banded matmul kernel.
    k_.attention_forward(a.atty, attention_probs(a), cache, 1, count, A, NH, NH);
  } else {
    k_.attention_rows(a.atty, cache, decoded_, count, A, NH, NH);
  }
  block_after_attention(l, P, in, a, true, count);
}

template <class Real, class S>
std::span<const Real> Gpt2<Real, S>::probs(int b, int t) const {
  ST_REQUIRE(b < B_ && t < T_, "probs() outside the last forward's batch");
  return this->whole_row_on_host(logits_, static_cast<std::size_t>(b) * T_ + t);
}

template class Gpt2<float>;
template class Gpt2<double>;
template class Gpt2<float, Bf16>;

}  // namespace st
