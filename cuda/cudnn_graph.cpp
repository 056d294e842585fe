// Why this file exists: the out-of-line part of cuda/cudnn_graph.h (cuDNN's last error
// message, which CG_CUDNN_CHECK puts into every cuDNN failure).
#include "cuda/cudnn_graph.h"

namespace cg::cuda {

std::string last_cudnn_error() {
  char buf[2048] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return buf[0] ? std::string(buf) : std::string("(cuDNN logged no message)");
}

}  // namespace cg::cuda
