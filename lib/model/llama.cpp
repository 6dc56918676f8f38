#include "model/llama.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/random.hpp"
#include "exec/host_llama_kernels.hpp"
#include "model/rope.hpp"

namespace st {

template <class Real, class S>
Llama<Real, S>::Llama(const ModelShape& shape, int max_batch, Exec& exec, Recompute recompute, TensorGroup tensor,
                   ModelPart part)
    : Model<Real, S>(shape, exec, recompute, tensor, part),
      k_(layer_kernels_of<Real, S>(exec)),
      max_batch_(max_batch),
      C_(static_cast<int>(shape.d_model)),
      NH_(static_cast<int>(shape.n_head) / tensor.split.degree),
      NKV_(static_cast<int>(shape.kv_heads()) / tensor.split.degree),
      hs_(static_cast<int>(shape.head_dim())),
      A_(static_cast<int>(shape.d_model) / tensor.split.degree),
      W_(static_cast<int>(shape.qkv_width()) / tensor.split.degree),
      F_(static_cast<int>(shape.hidden()) / tensor.split.degree),
      heads_at_once_(k_.attention_heads_at_once(max_batch, NH_)),
      flash_(k_.attention_uses_flash(hs_)) {
  // The base class's layout has already checked that the group's degree divides the heads, the
  // key/value heads, the MLP width and the padded vocabulary (tensor_split_problem). A rank's
  // query heads h0.. read the key/value heads h0 / group..: its share of q, k and v keeps the
  // whole model's ratio of query to key/value heads, so attention runs on them unchanged.
  ST_REQUIRE(shape.arch == Arch::llama, "Llama built from a shape of another architecture");
  ST_REQUIRE(shape.d_model % shape.n_head == 0, "d_model must be divisible by n_head");
  ST_REQUIRE(shape.n_head % shape.kv_heads() == 0, "n_kv_head must divide n_head");
  ST_REQUIRE(hs_ % 2 == 0, "the head width must be even (rotary embeddings rotate pairs)");
  ST_REQUIRE(shape.padded_vocab >= shape.vocab_size, "padded vocabulary smaller than vocabulary");
  {
    // Computed on the host in double, then copied to where the kernels run: cosines, then sines.
    const kernels::RopeTable<Real> table =
        kernels::rope_table<Real>(static_cast<int>(shape.seq_len), rope_inverse_frequencies(shape));
    const std::size_t n = table.cos.size();
    rope_memory_ = exec.allocate(2 * n * sizeof(Real));
    Real* at = rope_memory_.as<Real>().data();
    exec.upload(at, table.cos.data(), n * sizeof(Real));
    exec.upload(at + n, table.sin.data(), n * sizeof(Real));
    rope_cos_ = at;
    rope_sin_ = at + n;
  }
  const auto& segments = layout_.segments();
  const bool ends_model = part.heads(shape);
  if (part.holds_embeddings(shape)) {
    wte_ = layout_.tensor("wte").offset - segments.front().offset;
    head_ = shape.tie_embeddings ? wte_ : layout_.tensor("lm_head.w").offset - segments.front().offset;
  }
  if (ends_model) lnf_w_ = layout_.tensor("lnf.w").offset - segments.back().offset;
  for (std::int64_t l = 0; l < part.blocks(shape); ++l) {
    const std::string p = "block" + std::to_string(part.first_block + l) + ".";
    const std::size_t base = segments[this->block_segment(static_cast<std::size_t>(l))].offset;
    auto at = [&](const char* n) { return layout_.tensor(p + n).offset - base; };
    blocks_.push_back({at("attn_norm.w"), at("attn.qkv.w"), at("attn.proj.w"), at("mlp_norm.w"), at("mlp.gate_up.w"),
                       at("mlp.down.w")});
  }

  // Carved by the sizes activation_sizes counts; the check at the end ties the two together.
  const bool device = exec.space() != MemorySpace::host;
  const bool split_rows_ever = tensor.active() && tensor.sequence_parallel;
  const ActivationSizes sizes =
      activation_sizes(shape, max_batch, recompute, heads_at_once_, device, tensor.split.degree, split_rows_ever, flash_,
                       this->bf16_logits())
          .of_part(part, shape);
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len, C = C_, A = A_, W = W_, F = F_;
  // Rows kept between the split layers: all of them, or under sequence parallelism this rank's.
  const std::size_t R = split_rows(N, tensor.split.degree, split_rows_ever);
  const std::size_t T = shape.seq_len;
  const std::size_t kept_probs = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(NH_) * T * T;
  const std::size_t heads = static_cast<std::size_t>(heads_at_once_) * T * T;
  const std::size_t lse_rows = flash_rows(static_cast<std::size_t>(max_batch), T, NH_);  // flash attention's
  acts_ = exec.allocate(sizes.bytes(sizeof(S), sizeof(Real)));
  ActivationCarver<Real, S> take(acts_, sizes.all());
  auto whole_block = [&](BlockActs& a, bool keep_probs) {
    a.ln1 = take.values(R * C);
    a.ln1_rstd = take.stats(R);
    a.qkv = take.values(N * W);
    a.att = keep_probs && !flash_ ? take.stats(kept_probs) : nullptr;
    a.lse = flash_ ? take.stats(lse_rows) : nullptr;  // whatever the recomputation: flash's backward needs it
    a.atty = take.values(N * A);
    a.res2 = take.values(R * C);
    a.ln2 = take.values(R * C);
    a.ln2_rstd = take.stats(R);
    a.gate_up = take.values(2 * N * F);
  };
  block_acts_.resize(static_cast<std::size_t>(part.blocks(shape)));
  for (BlockActs& a : block_acts_) {
    if (recompute != Recompute::full) whole_block(a, recompute == Recompute::none);
    a.act = recompute == Recompute::none ? take.values(N * F) : nullptr;
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
  dqkv_ = take.values(N * W);
  if (flash_) row_dots_ = take.stats(lse_rows);
  else dprobs_ = take.stats(heads);
  dff_a_ = take.values(2 * N * F);
  dff_b_ = take.values(2 * N * F);
  // Flash attention sums each group in its kernels: nothing to fold.
  if (const std::size_t n = grouped_gradient_elements(device || flash_, N, A, NH_, NKV_); n > 0)
    grouped_gradient_ = take.stats(n);
  if (split_rows_ever) rows_.carve(take, N, R, C, 2 * C);
  // Not kept, the SwiGLU product goes where backward needs it next, the MLP's second scratch.
  for (BlockActs& a : block_acts_)
    if (!a.act) a.act = dff_b_;
  ST_REQUIRE(take.exact(), "activation buffer accounting is off");
  decode_rows_ = static_cast<int>(R);  // whole rows go where the split ones are kept
  this->allocate_batch(N);
  this->reserve_kernel_scratch(k_, max_batch);
}

template <class Real, class S>
Llama<Real, S>::~Llama() = default;

template <class Real, class S>
void Llama<Real, S>::init_params(std::span<Real> params, std::uint64_t seed) const {
  const ParamLayout& layout = this->whole_layout();
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  for (const TensorSlot* t : layout.all_tensors()) {
    Real* p = params.data() + t->offset;
    NormalStream normal(seed, hash_name(t->name));  // each tensor its own stream
    if (t->role == TensorRole::norm) {
      std::fill(p, p + t->size, Real(1));
    } else {
      for (std::size_t i = 0; i < t->size; ++i) p[i] = static_cast<Real>(0.02 * normal.next());
    }
  }
  // Padded vocabulary rows are never looked up or predicted.
  const std::size_t used = static_cast<std::size_t>(shape_.vocab_size * shape_.d_model);
  const std::size_t rows = static_cast<std::size_t>(shape_.padded_vocab * shape_.d_model);
  std::vector<std::size_t> tables{layout.tensor("wte").offset};
  if (!shape_.tie_embeddings) tables.push_back(layout.tensor("lm_head.w").offset);
  for (std::size_t offset : tables) std::fill(params.data() + offset + used, params.data() + offset + rows, Real(0));
}

template <class Real, class S>
void Llama<Real, S>::forward_into(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T,
                             double* loss_sum) {
  forward_to_logits(buffers, tokens, targets, B, T);
  if (!part_.heads(shape_)) return;
  const int N = B * T;
  this->cross_entropy(logits_, losses_, targets ? targets_at_ : nullptr, N, cross_entropy_scratch_, {loss_sum, double(N)});
}

template <class Real, class S>
std::vector<Real> Llama<Real, S>::logits(std::span<const S> params, const int* tokens, int B, int T) {
  ST_REQUIRE(part_.whole(shape_), "logits() needs the whole model");
  FlatBuffers<Real, S> flat(layout_, params);
  forward_to_logits(flat, tokens, nullptr, B, T);
  return this->whole_logits_on_host(logits_, static_cast<std::size_t>(B) * T);
}

template <class Real, class S>
void Llama<Real, S>::forward_to_logits(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B,
                                    int T) {
  ST_REQUIRE(B >= 1 && B <= max_batch_ && T >= 1 && T <= shape_.seq_len, "batch shape exceeds the model's buffers");
  B_ = B;
  T_ = T;
  const int N = B * T;
  const S* E = this->begin_pass(buffers, tokens, targets, N);
  const bool embeds = part_.embeds(), heads = part_.heads(shape_);
  if (embeds) {
    // A vocabulary slice looks up the tokens it holds (zeros for the others); the group sums
    // them (with rows split, each rank keeps its share of the sum).
    S* looked_up = rows_split_ ? tmp_ : x0_;
    k_.encoder_forward(looked_up, tokens_at_, E + wte_, nullptr, B, T, C_);
    this->sum_rows(looked_up, x0_, static_cast<std::size_t>(N), static_cast<std::size_t>(C_));
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
  const S* top = blocks_.empty() ? x0_ : block_acts_.back().res3;
  k_.rmsnorm_forward(lnf_, lnf_rstd_, top, buffers.params(last) + lnf_w_, this->local_rows(N), C_, shape_.norm_eps);
  buffers.after_forward(last);
  // This rank's slice of the vocabulary, on every row.
  const S* normed = this->gather_rows(lnf_, rows_.gathered, static_cast<std::size_t>(N), static_cast<std::size_t>(C_));
  this->lm_head(logits_, normed, E + head_, N, C_);
  buffers.after_forward(0);
}

template <class Real, class S>
void Llama<Real, S>::block_forward(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int B,
                                int T) {
  const int N = B * T;
  const BlockOffsets& o = blocks_[l];
  k_.rmsnorm_forward(a.ln1, a.ln1_rstd, in, P + o.attn_norm, this->local_rows(N), C_, shape_.norm_eps);
  k_.linear_forward(a.qkv, this->gather_rows(a.ln1, rows_.gathered, static_cast<std::size_t>(N), static_cast<std::size_t>(C_)),
                    P + o.qkv, static_cast<const S*>(nullptr), N, C_, W_);
  // q's and k's heads lead each row: rotated in place, attention and its backward read them so.
  k_.rope(a.qkv, rope_cos_, rope_sin_, B, T, 0, W_, NH_ + NKV_, hs_, false);
  k_.attention_forward(a.atty, attention_probs(a), a.qkv, B, T, A_, NH_, NKV_);
  block_after_attention(l, P, in, a, output, N);
}

template <class Real, class S>
void Llama<Real, S>::block_after_attention(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output,
                                        int N) {
  const int Nr = this->local_rows(N);
  const std::size_t kept = static_cast<std::size_t>(Nr) * C_, rows = static_cast<std::size_t>(N);
  const auto width = static_cast<std::size_t>(C_);
  const BlockOffsets& o = blocks_[l];
  const S* none = nullptr;
  // The row-parallel projections' partial products are summed over the group (with rows split,
  // each rank keeping its rows of the sum); the column-parallel ones read every row.
  k_.linear_forward(tmp_, a.atty, P + o.proj, none, N, A_, C_);
  k_.residual_rmsnorm_forward(a.res2, a.ln2, a.ln2_rstd, in, this->sum_rows(tmp_, rows_.tmp_rows, rows, width),
                              P + o.mlp_norm, Nr, C_, shape_.norm_eps);
  k_.linear_forward(a.gate_up, this->gather_rows(a.ln2, rows_.gathered, rows, width), P + o.gate_up, none, N, C_, 2 * F_);
  k_.swiglu_forward(a.act, a.gate_up, N, F_);
  if (!output) return;
  k_.linear_forward(tmp_, a.act, P + o.down, none, N, F_, C_);
  k_.add(a.res3, a.res2, this->sum_rows(tmp_, rows_.tmp_rows, rows, width), kept);
}

template <class Real, class S>
void Llama<Real, S>::backward(SegmentBuffers<Real, S>& buffers, Real loss_scale) {
  ST_REQUIRE(!targets_.empty(), "backward needs a forward pass with targets");
  const int B = B_, T = T_, N = B * T, C = C_, Nr = this->local_rows(N);
  const std::size_t rows = static_cast<std::size_t>(N), width = static_cast<std::size_t>(C);
  const bool split = this->rows_split();
  const bool embeds = part_.embeds(), heads = part_.heads(shape_);
  Real* none = nullptr;

  // The embedding (and LM head): the head now, the lookup at the very end. A part that does not
  // end the model finds d(loss)/d(its output) in dres_ (part_grad()) instead.
  Real* GE = nullptr;
  const S* d = nullptr;
  if (heads) {
    buffers.before_backward(0);
    const S* E = buffers.params(0);
    GE = buffers.grads(0);
    // Under tensor parallelism every input gradient of a split layer is a partial sum over the
    // group's slices: summed before the replicated layer below it uses it (with rows split, each
    // rank keeping its rows of the sum). A split layer's input is gathered again for its weights'
    // gradient rather than kept whole. The loss is the mean over N tokens.
    this->lm_head_backward(dtmp_, GE + head_, logits_, this->gather_rows(lnf_, rows_.gathered, rows, width), E + head_,
                           targets_at_, N, C, loss_scale / static_cast<Real>(N));
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    const std::size_t last = this->final_norm_segment();
    buffers.before_backward(last);
    exec_.zero(dres_, static_cast<std::size_t>(Nr) * width * sizeof(S));
    const S* top = blocks_.empty() ? x0_ : block_acts_.back().res3;
    // With rows split, a norm's gradient is this rank's rows' share: summed over the group.
    Real* GF = buffers.grads(last);
    if (split) exec_.zero(rows_.norm_grads, width * sizeof(Real));
    k_.rmsnorm_backward(dres_, split ? rows_.norm_grads : GF + lnf_w_, d, top, buffers.params(last) + lnf_w_, lnf_rstd_,
                        Nr, C);
    if (split) this->add_split_row_gradients(GF, {lnf_w_}, rows_.norm_grads, width);
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
    // What the block did not keep, recomputed by the same kernels from what it kept.
    if (recompute_ == Recompute::full) block_forward(l, P, in, a, false, B, T);
    else if (recompute_ == Recompute::selective) k_.swiglu_forward(a.act, a.gate_up, N, F_);
    // The norms' gradients: the block's own (whole rows), or this rank's rows' share in scratch.
    if (split) exec_.zero(rows_.norm_grads, 2 * width * sizeof(Real));
    // dres holds d(res3); the residual passes it to res2, the MLP adds its part.
    k_.linear_backward(dff_a_, G + o.down, none, this->gather_rows(dres_, rows_.gathered, rows, width), a.act, P + o.down, N,
                       F_, C, false);
    k_.swiglu_backward(dff_b_, a.gate_up, dff_a_, N, F_);
    k_.linear_backward(dtmp_, G + o.gate_up, none, dff_b_, this->gather_rows(a.ln2, rows_.gathered, rows, width),
                       P + o.gate_up, N, C, 2 * F_, false);
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    k_.rmsnorm_backward(dres_, split ? rows_.norm_grads + width : G + o.mlp_norm, d, a.res2, P + o.mlp_norm, a.ln2_rstd, Nr,
                        C);
    // dres now holds d(res2); likewise through attention to the block's input.
    k_.linear_backward(datty_, G + o.proj, none, this->gather_rows(dres_, rows_.gathered, rows, width), a.atty, P + o.proj,
                       N, A_, C, false);
    // dqkv: the gradient of q, and of each key/value head summed over its group of query heads.
    k_.attention_backward(dqkv_, attention_probs(a), datty_, a.qkv, B, T, A_, NH_, NKV_);
    k_.rope(dqkv_, rope_cos_, rope_sin_, B, T, 0, W_, NH_ + NKV_, hs_, true);  // to the unrotated q and k
    k_.linear_backward(dtmp_, G + o.qkv, none, dqkv_, this->gather_rows(a.ln1, rows_.gathered, rows, width), P + o.qkv, N,
                       C, W_, false);
    d = this->sum_rows(dtmp_, rows_.dtmp_rows, rows, width);
    k_.rmsnorm_backward(dres_, split ? rows_.norm_grads : G + o.attn_norm, d, in, P + o.attn_norm, a.ln1_rstd, Nr, C);
    if (split) this->add_split_row_gradients(G, {o.attn_norm, o.mlp_norm}, rows_.norm_grads, width);
    buffers.grad_ready(segment);
  }
  if (embeds) {
    if (!heads) {
      buffers.before_backward(0);
      GE = buffers.grads(0);
    }
    // The embedding's gradient from every row (the rows' shares gathered).
    k_.encoder_backward(GE + wte_, none, this->gather_rows(dres_, rows_.gathered, rows, width), tokens_at_, B, T, C);
  }
  // A part that does not embed leaves d(loss)/d(its input) in dres_ (part_grad()).
  if (part_.holds_embeddings(shape_)) buffers.grad_ready(0);
  targets_.clear();  // logits now hold gradients: a second backward would be wrong
}

template <class Real, class S>
std::span<const Real> Llama<Real, S>::decode_piece(SegmentBuffers<Real, S>& buffers, const int* tokens, int count) {
  const int first = decoded_;
  ST_REQUIRE(part_.whole(shape_), "decode needs the whole model");
  ST_REQUIRE(count >= 1, "decode: no tokens to feed");
  ST_REQUIRE(first + count <= shape_.seq_len,
             "decode: " + std::to_string(first) + " positions cached + " + std::to_string(count) +
                 " new exceed the model's " + std::to_string(shape_.seq_len));
  const std::size_t layer_rows = static_cast<std::size_t>(shape_.seq_len) * W_;
  if (decode_cache_.bytes() == 0) decode_cache_ = exec_.allocate(blocks_.size() * layer_rows * sizeof(S));
  targets_.clear();  // not a training pass
  B_ = 0;
  T_ = 0;
  rows_split_ = false;  // whole rows: a few at a time
  this->upload_slice_tokens(tokens_at_, tokens, count);

  buffers.before_forward(0);
  const S* E = buffers.params(0);
  k_.encoder_forward(x0_, tokens_at_, E + wte_, nullptr, 1, count, C_);
  this->sum_over_tensor_group(x0_, static_cast<std::size_t>(count) * C_);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    buffers.before_forward(l + 1);
    const S* P = buffers.params(l + 1);
    const BlockOffsets& o = blocks_[l];
    const BlockActs& a = block_acts_[l];
    const S* in = l == 0 ? x0_ : block_acts_[l - 1].res3;
    S* cache = decode_cache_.template as<S>().data() + l * layer_rows;
    S* rows = cache + static_cast<std::size_t>(first) * W_;
    k_.rmsnorm_forward(a.ln1, a.ln1_rstd, in, P + o.attn_norm, count, C_, shape_.norm_eps);
    k_.linear_forward(rows, a.ln1, P + o.qkv, static_cast<const S*>(nullptr), count, C_, W_);
    k_.rope(rows, rope_cos_, rope_sin_, 1, count, first, W_, NH_ + NKV_, hs_, false);
    if (first == 0) k_.attention_forward(a.atty, attention_probs(a), cache, 1, count, A_, NH_, NKV_);
    else k_.attention_rows(a.atty, cache, first, count, A_, NH_, NKV_);
    block_after_attention(l, P, in, a, true, count);
    buffers.after_forward(l + 1);
  }
  // Only the last position's next token is wanted: the final norm and the LM head on one row.
  const std::size_t last = layout_.segments().size() - 1;
  buffers.before_forward(last);
  const S* top = (blocks_.empty() ? x0_ : block_acts_.back().res3) + static_cast<std::size_t>(count - 1) * C_;
  k_.rmsnorm_forward(lnf_, lnf_rstd_, top, buffers.params(last) + lnf_w_, 1, C_, shape_.norm_eps);
  buffers.after_forward(last);
  this->lm_head(logits_, lnf_, E + head_, 1, C_);
  buffers.after_forward(0);
  this->cross_entropy(logits_, losses_, nullptr, 1, cross_entropy_scratch_);
  decoded_ = first + count;
  return this->whole_row_on_host(logits_, 0);
}

template <class Real, class S>
std::span<const Real> Llama<Real, S>::probs(int b, int t) const {
  ST_REQUIRE(b < B_ && t < T_, "probs() outside the last forward's batch");
  return this->whole_row_on_host(logits_, static_cast<std::size_t>(b) * T_ + t);
}

template class Llama<float>;
template class Llama<double>;
template class Llama<float, Bf16>;

}  // namespace st
