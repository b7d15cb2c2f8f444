// The ranks of one model run and the collectives tensor parallelism needs between them (issue 54;
// the split itself: model/tensor_split.h).
//
// A run is N processes started together (mpirun -np N), each a rank holding part of every matrix.
// Megatron's split needs two all-reduces a layer, each summing every rank's partial product, and
// the logits split by vocabulary are gathered; every rank runs the same command in step
// (cli/cli_ranks.h), and a seed drawn from the clock is broadcast from rank 0. minfer uses the
// field's library for them, not a protocol of its own:
//   - one process: every collective leaves its tensors as they are (the default, and what a run
//     without mpirun gets);
//   - MPI (OpenMPI from Debian) between processes, on one machine or over a network: host memory;
//   - NCCL between GPUs, one rank per GPU, set up through MPI: device memory, on the CUDA
//     backend's stream (make_nccl_communicator).
// Every rank must call the same collectives in the same order with the same shapes: MPI and NCCL
// leave a mismatch undefined, and it usually hangs. A rank that dies is noticed by mpirun, which
// stops the others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace minfer {

// What the collectives of one rank have moved: for `bench`'s lines beside a step's weight reads.
struct CommunicatorStats {
  uint64_t all_reduces = 0;
  uint64_t all_reduce_bytes = 0;  // the bytes of the tensors reduced, as one rank passes them
  // Wall time in all_reduce_sum: on the host, from entry to the sum being ready; on NCCL, to the
  // sum being enqueued on the stream (it runs there later, in order with the kernels).
  double all_reduce_seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "one process", "MPI (2 ranks)"
  virtual DeviceKind device() const = 0;  // where the tensors it moves live

  // Each collective checks its arguments on this rank (Error naming the collective), then moves
  // the bytes.
  // x = the sum over the ranks of every rank's x, element by element, on every rank
  //                                x f32, contiguous, the same shape on every rank
  void all_reduce_sum(const Tensor& x);
  // x = rank `root`'s x on every rank      x contiguous, any type, the same shape on every rank
  void broadcast(const Tensor& x, int root);
  // out = rank 0's part, then rank 1's, ... (flat, in rank order), on every rank
  //                                part contiguous, counts[rank()] elements; counts (size()), the
  //                                same on every rank; out contiguous, their sum, part's type
  void all_gather(const Tensor& out, const Tensor& part, const std::vector<int64_t>& counts);
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  const CommunicatorStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommunicatorStats(); }

 protected:
  // The transports, on checked arguments: `count` floats, `bytes` bytes, byte_counts (size()).
  virtual void sum_in_place(float* data, int64_t count) = 0;
  virtual void broadcast_bytes(void* data, int64_t bytes, int root) = 0;
  virtual void gather_bytes(void* out, const void* part, const std::vector<int64_t>& byte_counts) = 0;

 private:
  CommunicatorStats stats_;
  std::vector<int64_t> byte_counts_;  // all_gather's, grown once, so a step allocates nothing
};

// One process: size 1; a sum or a broadcast leaves its tensor as it is, all_gather copies part.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(DeviceKind device = DeviceKind::cpu) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "one process"; }
  DeviceKind device() const override { return device_; }
  void barrier() override {}

 protected:
  void sum_in_place(float*, int64_t) override {}
  void broadcast_bytes(void*, int64_t, int) override {}
  void gather_bytes(void* out, const void* part, const std::vector<int64_t>& byte_counts) override;

 private:
  DeviceKind device_;
};

// Whether this process was started by mpirun (or another launcher setting PMI's or PMIx's
// variables, or OpenMPI's OMPI_COMM_WORLD_SIZE), so that it is one rank of several processes.
bool started_by_mpi_launcher();

// The process's ranks among the processes it was started with, for host tensors: MPI's world
// when started by mpirun in a build with MPI, initialised on the first call (MPI allows one
// initialisation a process, so every call returns the same object, finalised at exit); a
// LocalCommunicator otherwise. Throws Error when started by mpirun in a build without MPI.
Communicator& world_communicator();

// NCCL over the ranks of `world` (MPI's, or one process), for tensors on `cuda`'s device: rank
// 0's NCCL id reaches the others through world.broadcast, then every collective is enqueued on
// the backend's stream, in order with its kernels and inside its CUDA Graphs. Each rank's
// backend must have a GPU of its own (BackendOptions::cuda_device). Error in a build without
// CUDA or NCCL. (tests/test_cuda_nccl.cpp; tools/gpu-check.sh runs a model through it at -np 1.)
class Backend;
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world, Backend& cuda);

// After an error on this rank of a run of several: ends every rank now (MPI_Abort with `status`),
// so that none waits in a collective for this one (mpirun then reports which rank called it).
// Returns where MPI is not running or there is one rank.
void end_all_ranks_after_error(int status);

}  // namespace minfer
