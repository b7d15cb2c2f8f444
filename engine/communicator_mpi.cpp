// MPI's world as a Communicator (engine/communicator.h), and the choice of the process's world.
// Compiled in every build; the MPI half only where CMake found MPI (MINFER_HAVE_MPI).
#include "engine/communicator.h"

#include "core/error.h"

#if MINFER_HAVE_MPI
#include <mpi.h>

#include <climits>
#endif

namespace minfer {

#if MINFER_HAVE_MPI
namespace {

// MPI's counts are int: a larger message is refused, not truncated.
int mpi_count(int64_t n, const char* what) {
  MINFER_CHECK(n >= 0 && n <= INT_MAX, what, ": ", n, " is more than an MPI count holds");
  return static_cast<int>(n);
}

// note: MPI errors return to minfer (MPI_ERRORS_RETURN) and become Error naming the rank, so a
// rank reports what failed in one line as every other error does; a rank that dies is mpirun's to
// notice, and it stops the others.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // note: SERIALIZED, not FUNNELED: the server steps the model on a thread of its own, not on
    // main's. One thread calls MPI at a time.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      fail("MPI_Init_thread failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MINFER_CHECK(provided >= MPI_THREAD_SERIALIZED, "rank ", rank_, ": MPI offers thread level ", provided,
                 ", below MPI_THREAD_SERIALIZED");
    counts_.resize(size_t(size_));
    displacements_.resize(size_t(size_));
    MPI_Type_contiguous(kWord, MPI_BYTE, &word_);
    MPI_Type_commit(&word_);
  }
  ~MpiCommunicator() override {
    MPI_Type_free(&word_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "MPI (" + std::to_string(size_) + (size_ == 1 ? " rank)" : " ranks)"); }
  DeviceKind device() const override { return DeviceKind::cpu; }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 protected:
  void sum_in_place(float* data, int64_t count) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Allreduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
  }
  void broadcast_bytes(void* data, int64_t bytes, int root) override {
    check(MPI_Bcast(data, mpi_count(bytes, "MPI_Bcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  // note: counted in words of 4 bytes where every part is whole words (f32 logits), so a pass's
  // gathered logits may reach 8 GiB before an int count cannot hold them (2 GiB in bytes).
  void gather_bytes(void* out, const void* part, const std::vector<int64_t>& byte_counts) override {
    bool words = true;
    for (int64_t n : byte_counts) words = words && n % kWord == 0;
    const int64_t unit = words ? kWord : 1;
    int64_t at = 0;
    for (size_t r = 0; r < byte_counts.size(); ++r) {
      counts_[r] = mpi_count(byte_counts[r] / unit, "MPI_Allgatherv");
      displacements_[r] = mpi_count(at / unit, "MPI_Allgatherv");
      at += byte_counts[r];
    }
    const MPI_Datatype type = words ? word_ : MPI_BYTE;
    check(MPI_Allgatherv(part, counts_[size_t(rank_)], type, out, counts_.data(), displacements_.data(), type,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }

 private:
  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    fail("rank ", rank_, ": ", what, " failed: ", std::string(text, size_t(length)));
  }

  static constexpr int kWord = 4;
  int rank_ = 0, size_ = 1;
  MPI_Datatype word_ = MPI_DATATYPE_NULL;    // kWord bytes
  std::vector<int> counts_, displacements_;  // (size_): all_gather's, kept so a step allocates nothing
};

}  // namespace

void end_all_ranks_after_error(int status) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, status);
}
#else
void end_all_ranks_after_error(int) {}
#endif

namespace {

std::unique_ptr<Communicator> make_world() {
  if (!started_by_mpi_launcher()) return std::make_unique<LocalCommunicator>();
#if MINFER_HAVE_MPI
  return std::make_unique<MpiCommunicator>();
#else
  fail("started by mpirun, but this minfer was built without MPI (make deps installs OpenMPI; then build again)");
#endif
}

}  // namespace

Communicator& world_communicator() {
  static const std::unique_ptr<Communicator> world = make_world();
  return *world;
}

}  // namespace minfer
