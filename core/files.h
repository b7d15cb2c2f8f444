// Files in and out, the careful way.
//
// Reading: an input is opened without blocking (a FIFO given as a model must not hang the
// program in open()), and refused with the reason unless it is a regular file: a directory, a
// FIFO, a device. Missing and unreadable files say which (strerror).
//
// Writing: every file minfer writes is written whole or not at all. AtomicFile writes into a
// temporary file beside the target (same directory, so the rename cannot cross file systems),
// checks every write, flushes and closes with checks, and only then renames it over the target.
// Until commit() the target is untouched; a failure (a full disk, an error thrown by the caller)
// removes the temporary file, and so does SIGINT or SIGTERM once install_signal_cleanup() has
// run. Output paths are checked before any work starts (check_output_path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace minfer {

// An open regular file: its descriptor and size. Closes on destruction.
class InputFile {
 public:
  // Opens `path` read-only; `what` names it in errors ("checkpoint", "tokenizer").
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads the whole file (up to `max_bytes`, else Error naming the limit).
  std::string read_all(uint64_t max_bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A regular file mapped read-only (private), for loaders that hand out views of its bytes.
// drop() gives back the pages of a range once it has been copied elsewhere (madvise), so that a
// loader that copies every tensor peaks near one copy, not the file plus the copy.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void drop(const void* begin, size_t bytes) const;  // the whole pages inside [begin, begin + bytes)

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Throws Error (with strerror) unless a file can be created at `path`: its directory exists and
// is writable, and `path` is not a directory. `what` names the option, e.g. "--save-json".
void check_output_path(const std::string& path, const std::string& what);

class AtomicFile {
 public:
  // `expected_bytes`, when known, is checked against the free space of the target's file system
  // before anything is written.
  explicit AtomicFile(const std::string& path, uint64_t expected_bytes = 0);
  ~AtomicFile();  // not committed: the temporary file is removed, the target stays as it was
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Flushes, syncs, closes and renames over the target; throws Error on any failure.
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_io(const char* step, int error);
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
  int slot_ = -1;  // in the signal handler's list of temporary files
};

// Writes `text` to `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const std::string& text);

// On SIGINT, SIGTERM and SIGHUP: removes the temporary files of AtomicFiles in progress, then
// lets the signal end the process as it would have.
void install_signal_cleanup();

// Test hook: MINFER_FAIL_WRITES_AFTER=N in the environment makes every AtomicFile fail with
// ENOSPC ("No space left on device") once N bytes have been written, as a full disk would.

}  // namespace minfer
