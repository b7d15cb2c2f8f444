#include "core/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <cstdlib>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace minfer {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The temporary files of AtomicFiles in progress, for the signal handler: fixed storage, no
// allocation and no locks, since a handler may only call async-signal-safe functions.
constexpr int kSlots = 8;
constexpr size_t kPathMax = 4096;
char g_temp_paths[kSlots][kPathMax];
std::atomic<bool> g_slot_used[kSlots];

int claim_slot(const std::string& temp) {
  if (temp.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (g_slot_used[i].compare_exchange_strong(expected, true)) {
      std::memcpy(g_temp_paths[i], temp.c_str(), temp.size() + 1);
      return i;
    }
  }
  return -1;  // more than kSlots files at once: a signal would leave this one's temporary file
}

void release_slot(int slot) {
  if (slot >= 0) g_slot_used[slot].store(false);
}

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_slot_used[i].load()) ::unlink(g_temp_paths[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// MINFER_FAIL_WRITES_AFTER=N: writes fail with ENOSPC after N bytes (tests only).
int64_t injected_write_limit() {
  const char* value = std::getenv("MINFER_FAIL_WRITES_AFTER");
  if (value == nullptr || *value == '\0') return -1;
  return std::strtoll(value, nullptr, 10);
}

int64_t g_bytes_written = 0;  // across AtomicFiles, for the injected limit

}  // namespace

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path) {
  MINFER_CHECK(!path.empty(), "no ", what, " file given");
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(path, ": cannot open the ", what, ": ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail(path, ": cannot stat the ", what, ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(path, ": the ", what, " is ", kind_of(st.st_mode), ", not a regular file");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all(uint64_t max_bytes) const {
  if (size_ > max_bytes) fail(path_, ": ", size_, " bytes exceed the limit of ", max_bytes);
  std::string data(static_cast<size_t>(size_), '\0');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pread(fd_, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path_, ": read failed: ", std::strerror(errno));
    if (n == 0) fail(path_, ": the file shrank while being read (", done, " of ", data.size(), " bytes)");
    done += static_cast<size_t>(n);
  }
  return data;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, const std::string& what) {
  InputFile file(path, what);
  if (file.size() == 0) fail(path, ": the ", what, " is empty");
  if (file.size() > uint64_t(SIZE_MAX)) fail(path, ": ", file.size(), " bytes do not fit in memory");
  void* map = ::mmap(nullptr, static_cast<size_t>(file.size()), PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (map == MAP_FAILED) fail(path, ": cannot map the ", what, ": ", std::strerror(errno));
  std::shared_ptr<MappedFile> mapped(new MappedFile());
  mapped->path_ = path;
  mapped->data_ = static_cast<const uint8_t*>(map);
  mapped->size_ = file.size();
  return mapped;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

void MappedFile::drop(const void* begin, size_t bytes) const {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(begin), hi = lo + bytes;
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_), end = base + size_;
  if (lo < base || hi > end) return;  // not ours
  const uintptr_t first = (lo + page - 1) & ~(page - 1), last = hi & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // advice: may fail
}

void check_output_path(const std::string& path, const std::string& what) {
  MINFER_CHECK(!path.empty(), what, ": the path is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(what, ": ", path, " is ", kind_of(st.st_mode), ", not a file minfer can replace");
  const std::string dir = directory_of(path);
  if (::stat(dir.c_str(), &st) != 0) fail(what, ": cannot write ", path, ": directory ", dir, ": ", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail(what, ": cannot write ", path, ": ", dir, " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(what, ": cannot write into ", dir, ": ", std::strerror(errno));
}

AtomicFile::AtomicFile(const std::string& path, uint64_t expected_bytes) : path_(path) {
  check_output_path(path, path);
  const std::string dir = directory_of(path);
  struct statvfs fs;
  if (expected_bytes > 0 && ::statvfs(dir.c_str(), &fs) == 0) {
    const uint64_t free_bytes = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
    if (expected_bytes > free_bytes)
      fail(path, ": the file needs ", expected_bytes, " bytes, ", free_bytes, " are free on the file system of ", dir);
  }
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  temp_ = dir + "/." + base + ".tmp-XXXXXX";
  // note: the cleanup signals wait while the file is created and registered, so that a SIGINT
  // between the two cannot leave a temporary file the handler does not know of.
  sigset_t cleanup_signals, previous;
  sigemptyset(&cleanup_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&cleanup_signals, sig);
  pthread_sigmask(SIG_BLOCK, &cleanup_signals, &previous);
  const int fd = ::mkstemp(temp_.data());
  const int create_errno = errno;
  if (fd >= 0) slot_ = claim_slot(temp_);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (fd < 0) fail(path, ": cannot create a temporary file in ", dir, ": ", std::strerror(create_errno));
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);  // what a plain fopen would have given; mkstemp makes 0600
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int e = errno;
    ::close(fd);
    ::unlink(temp_.c_str());
    release_slot(slot_);
    fail(path, ": cannot open ", temp_, ": ", std::strerror(e));
  }
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    ::unlink(temp_.c_str());
  }
  release_slot(slot_);
}

void AtomicFile::fail_io(const char* step, int error) {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  ::unlink(temp_.c_str());
  release_slot(slot_);
  slot_ = -1;
  fail(path_, ": ", step, " failed: ", std::strerror(error), " (the file was left as it was)");
}

void AtomicFile::write(const void* data, size_t bytes) {
  MINFER_CHECK(file_ != nullptr, path_, ": write after commit");
  if (bytes == 0) return;
  static const int64_t limit = injected_write_limit();
  if (limit >= 0 && g_bytes_written + int64_t(bytes) > limit) fail_io("write", ENOSPC);
  if (std::fwrite(data, 1, bytes, file_) != bytes) fail_io("write", errno != 0 ? errno : EIO);
  g_bytes_written += int64_t(bytes);
}

void AtomicFile::commit() {
  MINFER_CHECK(file_ != nullptr, path_, ": committed twice");
  if (std::fflush(file_) != 0) fail_io("write", errno);
  if (::fsync(::fileno(file_)) != 0 && errno != EINVAL) fail_io("sync", errno);
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) {
    const int e = errno;
    ::unlink(temp_.c_str());
    release_slot(slot_);
    slot_ = -1;
    fail(path_, ": close failed: ", std::strerror(e), " (the file was left as it was)");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp_.c_str());
    release_slot(slot_);
    slot_ = -1;
    fail(path_, ": cannot rename ", temp_, " over it: ", std::strerror(e));
  }
  release_slot(slot_);
  slot_ = -1;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

void install_signal_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_temporaries_and_reraise);
}

}  // namespace minfer
