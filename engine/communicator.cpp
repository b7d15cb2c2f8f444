#include "engine/communicator.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

namespace {

void check_tensor(const Communicator& comm, const Tensor& t, const char* op, const char* what) {
  MINFER_CHECK(t.device() == comm.device(), op, ": ", what, " is on ", device_name(t.device()), ", the ", comm.name(),
               " communicator moves ", device_name(comm.device()), " memory");
  MINFER_CHECK(t.is_contiguous(), op, ": ", what, " ", t.str(), " is not contiguous");
}

}  // namespace

void Communicator::all_reduce_sum(const Tensor& x) {
  check_tensor(*this, x, "all_reduce_sum", "x");
  MINFER_CHECK(x.dtype() == DType::f32, "all_reduce_sum: x ", x.str(), " is not f32");
  const auto start = std::chrono::steady_clock::now();
  sum_in_place(x.data_as<float>(), x.numel());
  stats_.all_reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.all_reduces;
  stats_.all_reduce_bytes += x.nbytes();
}

void Communicator::broadcast(const Tensor& x, int root) {
  check_tensor(*this, x, "broadcast", "x");
  MINFER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " of ", size(), " ranks");
  broadcast_bytes(x.data(), int64_t(x.nbytes()), root);
}

void Communicator::all_gather(const Tensor& out, const Tensor& part, const std::vector<int64_t>& counts) {
  check_tensor(*this, out, "all_gather", "out");
  check_tensor(*this, part, "all_gather", "part");
  MINFER_CHECK(out.dtype() == part.dtype(), "all_gather: out ", out.str(), " and part ", part.str(), " differ in type");
  MINFER_CHECK(counts.size() == size_t(size()), "all_gather: ", counts.size(), " counts for ", size(), " ranks");
  byte_counts_.resize(counts.size());
  uint64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    MINFER_CHECK(counts[r] >= 0, "all_gather: a count of ", counts[r]);
    byte_counts_[r] = int64_t(dtype_bytes(part.dtype(), uint64_t(counts[r])));
    total = checked_add(total, uint64_t(counts[r]), "all_gather's counts");
  }
  MINFER_CHECK(part.numel() == counts[size_t(rank())], "all_gather: part ", part.str(), " on rank ", rank(),
               ", whose count is ", counts[size_t(rank())]);
  MINFER_CHECK(uint64_t(out.numel()) == total, "all_gather: out ", out.str(), " for counts summing to ", total);
  gather_bytes(out.data(), part.data(), byte_counts_);
}

void LocalCommunicator::gather_bytes(void* out, const void* part, const std::vector<int64_t>& byte_counts) {
  if (byte_counts[0] > 0) copy_bytes(out, device_, part, device_, size_t(byte_counts[0]));
}

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

#if !MINFER_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, Backend&) {
  fail("NCCL between GPUs: this minfer was built without CUDA or without NCCL (nccl.h, libnccl)");
}
#endif

}  // namespace minfer
