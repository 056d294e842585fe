// Why this file exists: the one public knob of chunkgrad's CPU threads. Kernels split
// large work over a pool of the library's own (cpu/thread_pool.h); its size comes from
// the environment at first use and can be changed here at run time.
//
//   CHUNKGRAD_NUM_THREADS=4 ./train      // chunkgrad only
//   OMP_NUM_THREADS=1 ./train            // honoured too when CHUNKGRAD_NUM_THREADS is unset
//   cg::set_num_threads(1);              // from code, e.g. around a latency-sensitive loop
//
// Without either variable the pool uses every core this process may run on.
#pragma once

namespace cg {

// Threads CPU kernels split large work over (the calling thread included); >= 1.
// Call it from outside any kernel (not from inside a parallel region).
void set_num_threads(int threads);
int get_num_threads();

}  // namespace cg
