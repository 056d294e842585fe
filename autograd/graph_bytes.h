// Why this file exists: "how much memory does this graph keep alive until backward?" is
// the question the memory lessons are built on (why chunking the loss alone does not
// lower the peak; why the fused loss does). This answers it from the graph itself: the
// storages the live nodes reachable from a tensor have saved for backward.
//
// Note [What graph_retained_bytes counts]:
// - each saved storage once (deduplicated by storage), its full nbytes -- a saved view
//   of a big tensor keeps the whole storage alive, so the whole storage is counted;
// - storage nbytes as requested, NOT the allocator's 512-B-rounded block sizes (those
//   are in rounded_bytes, as CachingAllocator::round_size gives them);
// - NOT the storages of leaves that require grad (parameters): the model holds them
//   anyway. A saved parameter (matmul saves its weight) or a view of one (cg::transpose(W, 0, 1))
//   goes to parameter_bytes instead. Leaves that don't require grad (input batches) are
//   counted: the graph keeps them alive after the caller drops them;
// - nothing for released nodes (backward already ran without retain_graph).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace cg {

struct GraphMemory {
  size_t total_bytes = 0;      // saved storages, each once, parameters excluded
  size_t rounded_bytes = 0;    // the same storages at the allocator's rounded sizes
  size_t parameter_bytes = 0;  // saved storages that belong to parameters (not in total)
  // total_bytes split by the name of the node that saved each storage (the earliest
  // created one, when several nodes saved the same storage).
  std::map<std::string, size_t> bytes_by_node;
  size_t node_count = 0;                        // reachable nodes, AccumulateGrad included
  std::map<std::string, size_t> nodes_by_name;  // how many of each
  std::string str() const;                      // a readable multi-line table
};

// held_elsewhere: tensors the caller keeps alive anyway (a frozen lm_head, the model's
// buffers); their storages are treated like parameters: reported, not counted.
GraphMemory graph_retained_bytes(const Tensor& t, const std::vector<Tensor>& held_elsewhere = {});

}  // namespace cg
