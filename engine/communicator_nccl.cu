// The NCCL communicator (engine/communicator.h): collectives between GPUs, one rank per GPU.
//
// NCCL runs each collective as kernels on a stream; minfer gives it the CUDA backend's stream, so
// an all-reduce runs after the kernels that wrote its rows and before those that read the sum,
// with no host synchronisation, and a decode step recorded as a CUDA Graph records it too. The
// ranks find each other through an id that rank 0 draws and the host communicator (MPI)
// broadcasts. NCCL has no all-gather of uneven parts: each rank's part is a broadcast from its
// owner into its place, the broadcasts grouped into one launch.
#if MINFER_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "core/error.h"
#include "core/splitmix.h"
#include "engine/backend.h"
#include "engine/communicator.h"

namespace minfer {

namespace {

void nccl_check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) fail("NCCL: ", what, ": ", ncclGetErrorString(result));
}

// NCCL wants a GPU a rank, and its error for two ranks on one does not say which: every rank
// gathers every rank's machine (a digest of its host name) and GPU, and all refuse alike.
void check_a_gpu_a_rank(Communicator& world) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const uint64_t machine = digest_bytes(host, std::strlen(host));
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) fail("NCCL: no current CUDA device");
  int32_t mine[4] = {int32_t(machine & 0xffffffffu), int32_t(machine >> 32), device, 0};
  std::vector<int32_t> all(size_t(4 * world.size()));
  world.all_gather(Tensor::wrap(all.data(), {int64_t(all.size())}, DType::i32, DeviceKind::cpu),
                   Tensor::wrap(mine, {4}, DType::i32, DeviceKind::cpu), std::vector<int64_t>(size_t(world.size()), 4));
  for (int r = 0; r < world.size(); ++r)
    for (int s = r + 1; s < world.size(); ++s)
      MINFER_CHECK(!std::equal(&all[size_t(4 * r)], &all[size_t(4 * r + 3)], &all[size_t(4 * s)]), "NCCL: ranks ", r,
                   " and ", s, " would share GPU ", all[size_t(4 * r + 2)],
                   " of one machine; NCCL needs a GPU a rank (fewer ranks on it, or more GPUs)");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& world, Backend& cuda)
      : rank_(world.rank()), size_(world.size()), stream_(static_cast<cudaStream_t>(cuda_stream_of(cuda))) {
    MINFER_CHECK(world.device() == DeviceKind::cpu, "NCCL is set up through a host communicator, not ", world.name());
    ncclUniqueId id{};
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof(id) % 4 == 0, "the id travels as i32 words");
    world.broadcast(Tensor::wrap(&id, {int64_t(sizeof(id) / 4)}, DType::i32, DeviceKind::cpu), 0);
    check_a_gpu_a_rank(world);
    barrier_ = cuda.empty({1}, DType::f32);  // (before the communicator: nothing to leak if it throws)
    nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  // note: destroying a communicator waits for its collectives; while an error unwinds this rank,
  // the others may wait in one this rank never enqueued, so it is aborted instead, and the CLI's
  // MPI_Abort ends the run (end_all_ranks_after_error).
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "NCCL (" + std::to_string(size_) + (size_ == 1 ? " rank)" : " ranks)"); }
  DeviceKind device() const override { return DeviceKind::cuda; }
  void barrier() override {
    sum_in_place(barrier_.data_as<float>(), 1);
    const cudaError_t error = cudaStreamSynchronize(stream_);
    if (error != cudaSuccess) fail("NCCL: barrier: ", cudaGetErrorString(error));
  }

 protected:
  void sum_in_place(float* data, int64_t count) override {
    nccl_check(ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  void broadcast_bytes(void* data, int64_t bytes, int root) override {
    nccl_check(ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_), "ncclBroadcast");
  }
  void gather_bytes(void* out, const void* part, const std::vector<int64_t>& byte_counts) override {
    auto* place = static_cast<char*>(out);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      const size_t bytes = size_t(byte_counts[size_t(r)]);
      if (bytes > 0)  // (every rank knows every count: all skip alike)
        nccl_check(ncclBroadcast(r == rank_ ? part : place, place, bytes, ncclUint8, r, comm_, stream_), "ncclBroadcast");
      place += bytes;
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  int rank_, size_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  Tensor barrier_;  // one float on the device, summed by barrier()
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world, Backend& cuda) {
  return std::make_unique<NcclCommunicator>(world, cuda);
}

}  // namespace minfer

#endif  // MINFER_HAVE_NCCL
