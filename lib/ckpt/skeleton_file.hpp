#pragma once
// An HDF5 file written without its bulk data: HDF5's POSIX (sec2) driver underneath, except that
// raw-data writes are dropped while skip_raw_data is on.
//
// Why: HDF5 allocates the chunks of a dataset with a filter (Fletcher32) by writing every chunk
// once, filled with the fill value, before any data can go in; in parallel it does so on every
// dataset creation, whatever the fill time says. The checkpoint's chunks are written right
// after by all ranks (chunk_io.hpp), so that first pass was pure waste: 1.36 GB of zeros and a
// third of the write time for a 113M-parameter model. One rank lays the file out through this
// driver (headers, chunk index, an allocation per chunk) in milliseconds, and the chunks' bytes
// then arrive once. The file records no driver: any HDF5 reader opens it.
#include <hdf5.h>

#include <memory>
#include <string>

#include "ckpt/h5.hpp"

namespace st::h5 {

class SkeletonFile {
 public:
  // Creates (or truncates) the file at `path`.
  explicit SkeletonFile(const std::string& path);
  hid_t get() const { return file_.get(); }
  // While on, raw data (dataset contents, fill values) is not written; metadata always is.
  void skip_raw_data(bool on) { *skip_ = on; }
  void close(const std::string& what) { file_.close(what); }

 private:
  std::unique_ptr<bool> skip_;  // the driver holds its address
  Handle file_;
};

}  // namespace st::h5
