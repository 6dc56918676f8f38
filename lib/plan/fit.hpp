#pragma once
// Fitting a deck to the job that runs it: the plan it makes on the machine, the memory check made
// before anything is allocated, parallel.strategy = "auto" resolved into the planner's choice,
// and a trained model's parallel settings adapted to the ranks that use it.
#include <string>
#include <vector>

#include "comm/world.hpp"
#include "deck/config.hpp"
#include "parallel/plan.hpp"
#include "plan/machine.hpp"

namespace st {

// The parallel plan the deck's run would make on the machine's world (its nodes are the
// machine's: hsdp's group is parallel.shard_group, else the node); under a pipeline, its first
// stage's.
ParallelPlan deck_plan(const Config& config, const Machine& machine);

// Refuses (st::Error, every rank alike) a deck whose tensor degree the machine's ranks or the
// model cannot split (naming parallel.tensor), or whose strategy needs more memory per rank than
// the machine has, naming the figure, the limit and the strategies and rank counts that would fit.
void check_memory_fits(const Config& config, const Machine& machine);

// parallel.grad_reduction = "auto": rewrites it as predicted for the deck's strategy on the
// machine (once where the whole-model gradient fits, else every_micro_batch), noting why as its
// origin. Call after resolve_auto_strategy, before check_memory_fits.
void resolve_grad_reduction(Config& config, const Machine& machine);

// parallel.strategy = "auto": plans, rewrites config.parallel.strategy (and shard_group for hsdp)
// with the choice, notes the origin; returns the table and the reason as printed.
std::string resolve_auto_strategy(Config& config, const Machine& machine);


// The parallel settings of a training job that this job's ranks (generate, eval) cannot take:
// its emulated nodes or its hsdp groups when they do not divide this job's ranks (then its real
// nodes and zero3 are used), and "auto", which chose by the training job's machine (here: shard
// when there are several ranks). A value given with --set is this job's own, and is refused
// later instead. Returns what was changed, one note each, for rank 0 to print.
std::vector<std::string> fit_parallel_settings(Config& config, const World& world);
// Tensor parallelism is how the model was trained, not how it must be used: a degree that the
// ranks of `world` (this job, grouped into nodes as the deck says) cannot split by becomes the
// largest of its divisors that they can (1: whole layers on every rank). Returns the note that
// says so, or "".
std::string fit_tensor_degree(Config& config, const World& world);

}  // namespace st
