// Why this file exists: the walk behind graph_retained_bytes (see graph_bytes.h).
#include "autograd/graph_bytes.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "autograd/node.h"
#include "core/caching_allocator.h"

namespace cg {

GraphMemory graph_retained_bytes(const Tensor& t, const std::vector<Tensor>& held_elsewhere) {
  GraphMemory result;
  if (!t.defined() || !t.grad_fn()) return result;

  // Every node reachable from t.
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack{t.grad_fn().get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    nodes.push_back(node);
    for (const Edge& e : node->next_edges) {
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr() < b->sequence_nr(); });

  // Parameters: storages of the leaves the graph accumulates into.
  std::unordered_set<const StorageImpl*> parameter_storages;
  for (const Tensor& held : held_elsewhere) {
    if (held.defined()) parameter_storages.insert(held.storage().get());
  }
  for (Node* node : nodes) {
    if (auto* acc = dynamic_cast<AccumulateGrad*>(node)) {
      parameter_storages.insert(acc->leaf()->storage.get());
    }
  }

  std::unordered_set<const StorageImpl*> counted;
  for (Node* node : nodes) {
    result.node_count += 1;
    result.nodes_by_name[node->name()] += 1;
    for (const SavedTensor& s : node->saved_tensors()) {
      const StorageImpl* storage = s.storage();
      if (!storage || !counted.insert(storage).second) continue;
      const size_t bytes = storage->nbytes();
      if (parameter_storages.count(storage)) {
        result.parameter_bytes += bytes;
        continue;
      }
      result.total_bytes += bytes;
      result.rounded_bytes += CachingAllocator::round_size(bytes);
      result.bytes_by_node[node->name()] += bytes;
    }
  }
  return result;
}

std::string GraphMemory::str() const {
  std::ostringstream out;
  out << "graph retains " << total_bytes << " B in saved tensors (" << rounded_bytes
      << " B as allocator blocks) over " << node_count
      << " nodes; parameters saved: " << parameter_bytes << " B (not counted)\n";
  for (const auto& [name, bytes] : bytes_by_node) {
    auto count = nodes_by_name.find(name);
    out << "  " << name << " x" << (count == nodes_by_name.end() ? 0 : count->second) << ": "
        << bytes << " B\n";
  }
  return out.str();
}

}  // namespace cg
