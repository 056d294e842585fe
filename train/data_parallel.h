// Why this file exists: what data-parallel drafter training (docs/data_parallel.md) adds
// to the one-process loop of drafter_trainer.h, apart from the gradient buckets
// (grad_reducer.h): which sequences of a step are this rank's, the per-step agreements
// between ranks (stop, metrics), and the debug checks.
//
// Note [One draw, N slices]: a step's sequences and anchors are drawn from the generator
// of (seed, step) exactly as one process draws them, on every rank (the draw is host work
// of microseconds). With dist.mode same_batch, micro-batch m's batch_size sequences are cut
// into world_size equal slices and rank r trains slice r; with dist.mode weak the step
// draws batch_size x world_size sequences per micro-batch (the step of one process with
// that batch size) and rank r trains the r-th batch_size of them. Every rank also builds
// the whole draw's blocks, so the loss normaliser sum(w) over the step -- and the number
// of label tokens -- is known on every rank without a collective, summed in the same
// order as one process sums it: the same bits. Rank r's micro-batch m then weighs its mean
// loss by sum(w of its slice) / sum(w of the step), the gradients are summed over the
// ranks, and the step equals one process's up to the fp32 rounding of the sums (in f32;
// in bf16 each rank's gradients and the weights are bf16-rounded too: docs/data_parallel.md).
//
// Note [World-size-free checkpoints]: rank 0 writes the checkpoint in the one-process
// format (the parameters and AdamW's state are the same on every rank after each step;
// ZeRO-1 would gather its shards first), every rank reads it on resume, and the number of
// ranks is not part of it: a run saved on 2 ranks resumes on 1 and the other way round,
// and (same_batch) trains the same steps. dist.zero1, bucket_mb and check_every may change
// on resume; dist.mode may not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/communicator.h"
#include "train/train_config.h"

namespace cg::train {

// Rows [begin, end) of a micro-batch of `rows` drawn sequences are this rank's.
struct RankSlice {
  int64_t rows = 0;  // sequences drawn per micro-batch (all ranks)
  int64_t begin = 0, end = 0;
};
// Throws, naming both numbers and what to change, when same_batch cannot be split evenly.
RankSlice rank_slice(const TrainConfig& config, int rank, int world_size);

// Rank 0's parameters on every rank (a broadcast each; nothing without ranks): ranks that
// made the same seeded model have them already, and this makes sure of it. Returns params.
std::vector<Tensor> same_on_every_rank(std::vector<Tensor> params, dist::Communicator* comm);

// Whether any rank passes true (an all-reduce of a flag); `flag` with one rank.
bool any_rank(dist::Communicator* comm, bool flag);

// Sums host values over the ranks (in place; one f64 all-reduce); nothing with one rank.
void sum_over_ranks(dist::Communicator* comm, std::vector<double>& values);

// Rank root's `text` on every rank (its length, then its bytes; what other ranks pass is
// ignored); `text` without ranks. Non-root ranks return only once root has called it.
std::string broadcast_text(dist::Communicator* comm, const std::string& text, int root);

// Note [Failing together]: a check each rank makes on its own (the resume decision reads
// the run directory on every rank) may fail on one rank only; that rank ending the job
// (abort_job) killed rank 0 while it held the run's lock, and the others waited in the
// next collective. So the ranks share the outcome: every rank passes its failure ("" for
// none), and if any failed every rank throws dist::EveryRankError with the first failing
// rank's message ("rank r: ..." past rank 0), so all unwind together (Note [Ending
// together], dist/communicator.h). run_on_every_rank runs `check` that way; without ranks
// it just runs it.
void fail_together(dist::Communicator& comm, const std::string& failure);
template <typename Check>
void run_on_every_rank(dist::Communicator* comm, Check&& check) {
  if (comm == nullptr || comm->world_size() == 1) {
    check();
    return;
  }
  std::string failure;
  try {
    check();
  } catch (const Error& e) { failure = e.message(); } catch (const std::exception& e) {
    failure = e.what();
  }
  fail_together(*comm, failure);
}

// Note [Ranks started alike]: every rank must run the same config from the same step, or
// the job trains something no one asked for (ranks with another lr or seed step apart
// silently) or hangs (another batch_size, grad_accum or steps is another number of
// collectives). mpirun can start ranks with different options (`-np 1 chunkgrad ... :
// -np 1 chunkgrad ... --set ...`) and ranks whose run_dir is not one shared folder resume
// at different steps; so before training every rank hashes its effective config (what
// config.json holds, less `progress`, which rank 0 alone shows, and the device's index,
// which is the local rank's) and its resume step, the hashes are gathered, and on a
// mismatch the first rank that differs from rank 0 and rank 0 broadcast their text: every
// rank then throws the same EveryRankError naming the first field that differs and both
// values. Nothing without ranks. data_fingerprint (JSON text, a run's fingerprint of the
// bytes it reads: corpus, target checkpoint, feature index), when given, must agree too:
// ranks on machines whose files differ at the same paths (or whose relative paths resolve
// to other files) trained on different data without a word, the config being the same.
void check_ranks_started_alike(dist::Communicator* comm, const TrainConfig& config,
                               int64_t resume_step, const std::string& data_fingerprint = "");

// dist.check_every: a hash of every parameter's bytes, gathered from every rank; throws
// naming the step and the ranks whose parameters differ from rank 0's.
void check_parameters_agree(dist::Communicator& comm, const std::vector<Tensor>& params,
                            int64_t step);

// The test hook for a failing rank: CHUNKGRAD_DEBUG_FAIL_RANK=R and
// CHUNKGRAD_DEBUG_FAIL_STEP=S make rank R throw at the start of step S.
void debug_fail_if_asked(int rank, int64_t step);
// The stop test's hook: CHUNKGRAD_DEBUG_SAVE_DELAY_MS=N makes rank 0 sleep N ms before
// it writes each checkpoint, the window in which a rank that did not wait for the save
// would end the job (Note [Saving together], drafter_trainer.h).
void debug_delay_save_if_asked();

}  // namespace cg::train
